/* zo_ethosu.h - the frozen prefix on an Arm Ethos-U NPU, through Arm's Ethos-U core driver.
 *
 * Vela compiled the prefix (`--output-format raw`): a command stream, its encoded weights, and a
 * scratch area holding the prefix's input and output at fixed offsets.  zo_ethosu_run_steps
 * stands in for the model's run_steps: a pass over the prefix copies the model input into the
 * scratch, runs the command stream, and copies the NPU's output into the arena where the suffix
 * (and the trainer's feature cache) reads the boundary tensor; every other step runs on the CPU.
 * Not executed here (no NPU is emulated): the NPU's rounding may differ from TFLM's reference
 * kernels, which the CPU path and the host simulation follow bit for bit.
 */
#ifndef ZO_ETHOSU_H
#define ZO_ETHOSU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uintptr_t base;              /* the NPU's registers ([npu] base of the board file) */
    const uint8_t *cmd;          /* command stream ("COP1" payload), 16-byte aligned */
    uint32_t cmd_bytes;
    const uint8_t *weights;      /* Vela's encoded weights */
    uint32_t weights_bytes;
    uint8_t *scratch;            /* activations of the prefix, in memory the NPU reaches */
    uint32_t scratch_bytes;
    uint8_t *fast_scratch;       /* NULL when Vela uses none (Shared_Sram: the scratch serves) */
    uint32_t fast_scratch_bytes;
    int32_t weights_region;      /* base address index of each area in the command stream */
    int32_t scratch_region;
    int32_t fast_scratch_region;
    uint32_t input_offset;       /* the prefix's input and output inside the scratch */
    uint32_t input_bytes;
    uint32_t output_offset;
    uint32_t output_bytes;
    const int8_t *input;         /* the model input in the arena */
    int8_t *boundary;            /* the boundary tensor in the arena */
    int32_t split;               /* kernel calls [0, split) are the prefix */
    void (*cpu_run_steps)(int32_t first, int32_t end);
} zo_ethosu_prefix_t;

/* Run kernel calls [first, end): the prefix on the NPU when [first, end) covers it (the driver is
 * initialised at the first such pass). */
void zo_ethosu_run_steps(const zo_ethosu_prefix_t *p, int32_t first, int32_t end);

/* The NPU's interrupt: the port calls this for the board's NPU IRQ. */
void zo_ethosu_irq(void);

/* Failed NPU initialisations and invocations so far (such a pass leaves the boundary as it was). */
extern volatile uint32_t zo_ethosu_errors;

#ifdef __cplusplus
}
#endif

#endif /* ZO_ETHOSU_H */
