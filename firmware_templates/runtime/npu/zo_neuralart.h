/* zo_neuralart.h - the frozen prefix on the STM32N6's Neural-ART NPU, through ST's ll_aton runtime.
 *
 * ST Edge AI Core (`stedgeai generate`) compiled the prefix into network.c: its epochs, and its
 * input and output buffers inside the NPU's memory pools.  zo_neuralart_run_steps stands in for
 * the model's run_steps: a pass over the prefix copies the model input into the network's input
 * buffer, runs the epochs, and copies the output buffer into the arena where the suffix (and the
 * trainer's feature cache) reads the boundary tensor; every other step runs on the CPU.
 * At the first pass the output buffer's layout and quantization are checked against the boundary
 * tensor: a mismatch is logged once and the prefix then runs on the CPU (right features, slower).
 * Not executed here (no NPU is emulated; the runtime was never linked): check on hardware.
 */
#ifndef ZO_NEURALART_H
#define ZO_NEURALART_H

#include <stdint.h>

#include "ll_aton_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    NN_Instance_TypeDef *instance;                      /* LL_ATON_DECLARE_NAMED_NN_INSTANCE_AND_INTERFACE */
    const LL_Buffer_InfoTypeDef *(*inputs)(void);       /* LL_ATON_Input_Buffers_Info_<name> */
    const LL_Buffer_InfoTypeDef *(*outputs)(void);
    const int8_t *input;       /* the model input in the arena */
    uint32_t input_bytes;
    int8_t *boundary;          /* the boundary tensor in the arena */
    uint32_t boundary_bytes;
    float boundary_scale;      /* its quantization: the output buffer must carry the same */
    int32_t boundary_zero_point;
    int32_t split;             /* kernel calls [0, split) are the prefix */
    void (*cpu_run_steps)(int32_t first, int32_t end);
} zo_neuralart_prefix_t;

/* Run kernel calls [first, end): the prefix on the NPU when [first, end) covers it (the NPU is
 * brought up and the output buffer checked at the first such pass). */
void zo_neuralart_run_steps(const zo_neuralart_prefix_t *p, int32_t first, int32_t end);

/* 0 before the first pass, 1 when the NPU runs the prefix, -1 when the output buffer did not match
 * the boundary tensor (the prefix then runs on the CPU). */
extern volatile int32_t zo_neuralart_state;

#ifdef __cplusplus
}
#endif

#endif /* ZO_NEURALART_H */
