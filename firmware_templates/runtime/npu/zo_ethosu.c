/* zo_ethosu.c - the frozen prefix on an Arm Ethos-U NPU (see zo_ethosu.h). */
#include "zo_ethosu.h"

#include <stddef.h>
#include <string.h>

#include "ethosu_driver.h"

#define ZO_ETHOSU_REGIONS 3 /* weights, scratch, fast scratch: the order TFLM's ethos-u kernel uses */

#if defined(__arm__)
#define ZO_WFE() __asm volatile("wfe")
#define ZO_SEV() __asm volatile("sev")
#else /* the host build of the glue's test: no interrupt to wait for */
#define ZO_WFE() ((void)0)
#define ZO_SEV() ((void)0)
#endif

static struct ethosu_driver zo_ethosu_drv;
static int zo_ethosu_ready;
volatile uint32_t zo_ethosu_errors;

/* The driver's weak bare-metal semaphores allocate with malloc; the firmware has no heap, so
 * they come from a static pool (the driver makes one per driver instance and one of its own). */
#define ZO_ETHOSU_SEMAPHORES 4
static volatile uint32_t zo_ethosu_sem[ZO_ETHOSU_SEMAPHORES];
static uint32_t zo_ethosu_sem_used;

void *ethosu_semaphore_create(void)
{
    if (zo_ethosu_sem_used == ZO_ETHOSU_SEMAPHORES) {
        return NULL;
    }
    zo_ethosu_sem[zo_ethosu_sem_used] = 0u;
    return (void *)&zo_ethosu_sem[zo_ethosu_sem_used++];
}

void ethosu_semaphore_destroy(void *sem)
{
    (void)sem; /* the pool is static: nothing to free */
}

int ethosu_semaphore_take(void *sem, uint64_t timeout)
{
    (void)timeout; /* no timer: wait for the NPU's interrupt */
    volatile uint32_t *count = sem;
    while (*count == 0u) {
        ZO_WFE();
    }
    (*count)--;
    return 0;
}

int ethosu_semaphore_give(void *sem)
{
    volatile uint32_t *count = sem;
    (*count)++;
    ZO_SEV();
    return 0;
}

void zo_ethosu_irq(void)
{
    ethosu_irq_handler(&zo_ethosu_drv);
}

static void run_prefix(const zo_ethosu_prefix_t *p)
{
    if (!zo_ethosu_ready) {
        /* secure and privileged: the firmware runs in the Secure state, privileged (the reset state) */
        if (ethosu_init(&zo_ethosu_drv, (void *)p->base, NULL, 0u, 1u, 1u) != 0) {
            zo_ethosu_errors++;
            return;
        }
        zo_ethosu_ready = 1;
    }
    uint64_t base[ZO_ETHOSU_REGIONS] = {0u, 0u, 0u};
    size_t size[ZO_ETHOSU_REGIONS] = {0u, 0u, 0u};
    base[p->weights_region] = (uint64_t)(uintptr_t)p->weights;
    size[p->weights_region] = p->weights_bytes;
    base[p->scratch_region] = (uint64_t)(uintptr_t)p->scratch;
    size[p->scratch_region] = p->scratch_bytes;
    if (p->fast_scratch != NULL) {
        base[p->fast_scratch_region] = (uint64_t)(uintptr_t)p->fast_scratch;
        size[p->fast_scratch_region] = p->fast_scratch_bytes;
    } else {
        /* no fast scratch (Shared_Sram: the fast storage is the SRAM): TFLM's third base address
         * then points at the scratch too (not checked on hardware) */
        base[2] = base[p->scratch_region];
        size[2] = size[p->scratch_region];
    }
    memcpy(p->scratch + p->input_offset, p->input, p->input_bytes);
    struct ethosu_driver *drv = ethosu_reserve_driver();
    if (drv == NULL) {
        zo_ethosu_errors++;
        return;
    }
    /* the driver cleans and invalidates the D-cache over the regions through its weak hooks */
    if (ethosu_invoke_v3(drv, p->cmd, (int)p->cmd_bytes, base, size, ZO_ETHOSU_REGIONS, NULL) != 0) {
        zo_ethosu_errors++;
    } else {
        memcpy(p->boundary, p->scratch + p->output_offset, p->output_bytes);
    }
    ethosu_release_driver(drv);
}

void zo_ethosu_run_steps(const zo_ethosu_prefix_t *p, int32_t first, int32_t end)
{
    if (first == 0 && end >= p->split && p->split > 0) {
        run_prefix(p);
        first = p->split;
    }
    if (first < end) {
        p->cpu_run_steps(first, end);
    }
}
