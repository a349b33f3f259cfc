/* zo_kernels_cast.c - CAST between int8, int16, int32 and float32, as TFLM's cast.cc: each element
 * converted with a C cast (static_cast there). A narrowing integer cast keeps the low bits (GCC's
 * and Clang's definition, as TFLM's builds get); an integer to float32 rounds to nearest. Float32
 * to an integer type is not offered: out of range, C and C++ leave it undefined.
 */
#include "zo_kernels.h"

#define ZO_CAST_LOOP(IN_T, OUT_T)                                                                  \
    do {                                                                                           \
        const IN_T *in = (const IN_T *)input;                                                      \
        OUT_T *out = (OUT_T *)output;                                                              \
        for (int32_t i = 0; i < p->size; ++i) {                                                    \
            out[i] = (OUT_T)in[i];                                                                 \
        }                                                                                          \
    } while (0)

/* From an integer type to any output type. */
#define ZO_CAST_FROM_INT(IN_T)                                                                     \
    switch (p->output_type) {                                                                      \
    case ZO_CAST_S8: ZO_CAST_LOOP(IN_T, int8_t); break;                                            \
    case ZO_CAST_S16: ZO_CAST_LOOP(IN_T, int16_t); break;                                          \
    case ZO_CAST_S32: ZO_CAST_LOOP(IN_T, int32_t); break;                                          \
    case ZO_CAST_F32: ZO_CAST_LOOP(IN_T, float); break;                                            \
    default: break;                                                                                \
    }

void zo_cast(const zo_cast_params_t *p, const void *input, void *output)
{
    switch (p->input_type) {
    case ZO_CAST_S8: ZO_CAST_FROM_INT(int8_t); break;
    case ZO_CAST_S16: ZO_CAST_FROM_INT(int16_t); break;
    case ZO_CAST_S32: ZO_CAST_FROM_INT(int32_t); break;
    case ZO_CAST_F32:
        if (p->output_type == ZO_CAST_F32) {
            ZO_CAST_LOOP(float, float);
        }
        break;
    default:
        break;
    }
}
