/* COMPILE-CHECK STAND-IN, written for zoflash's tests: NOT ST's ll_aton header and no part of it.
 * It declares only the types, names and prototypes zo_neuralart.c and the generated wiring use,
 * in the shape ST's public examples show, so the glue can be compiled (-Werror) where no ST
 * install exists.  A real build uses the user's ll_aton_runtime.h; where that differs, the
 * user's compiler says so.  Nothing compiled against this file can run. */
#ifndef LL_ATON_RUNTIME_H
#define LL_ATON_RUNTIME_H

#include <stdint.h>

typedef enum { CHPos_First = 0, CHPos_Last = 1 } LL_Buffer_ChPos_t;

typedef struct {
    const char *name;
    uint8_t *addr_base;
    uint32_t offset_start;
    uint32_t offset_end;
    const uint32_t *mem_shape;
    uint32_t mem_ndims;
    uint8_t chpos;
    uint8_t nbits;
    const float *scale;
    const int16_t *offset;
} LL_Buffer_InfoTypeDef;

typedef struct NN_Instance NN_Instance_TypeDef;
struct NN_Instance {
    const void *network;
    int32_t state;
};

typedef enum { LL_ATON_RT_NO_WFE = 0, LL_ATON_RT_WFE = 1, LL_ATON_RT_DONE = 2 } LL_ATON_RT_RetValues_t;

uint8_t *LL_Buffer_addr_start(const LL_Buffer_InfoTypeDef *buf);
uint32_t LL_Buffer_len(const LL_Buffer_InfoTypeDef *buf);
void LL_ATON_RT_RuntimeInit(void);
void LL_ATON_RT_Init_Network(NN_Instance_TypeDef *instance);
void LL_ATON_RT_Reset_Network(NN_Instance_TypeDef *instance);
LL_ATON_RT_RetValues_t LL_ATON_RT_RunEpochBlock(NN_Instance_TypeDef *instance);

/* the instance and the generated network's buffer tables of a network named `name` */
#define LL_ATON_DECLARE_NAMED_NN_INSTANCE_AND_INTERFACE(name)                  \
    const LL_Buffer_InfoTypeDef *LL_ATON_Input_Buffers_Info_##name(void);     \
    const LL_Buffer_InfoTypeDef *LL_ATON_Output_Buffers_Info_##name(void);    \
    NN_Instance_TypeDef NN_Instance_##name = {0, 0}

#endif /* LL_ATON_RUNTIME_H */
