/* zo_kernels.h - static int8 kernels, bit-exact with the TFLite Micro reference kernels.
 *
 * Every kernel NAME has a parameter struct zo_NAME_params_t, filled at compile time by the
 * code generator from its op family's params (compiler/ops/<family>_params.py, NAME_params),
 * and a function zo_NAME_s8.
 * All tensors are batch 1, NHWC, int8 unless stated.  Multipliers/shifts follow TFLM:
 * value * multiplier / 2^31 * 2^shift (shift > 0 is a left shift).
 *
 * No heap, no libm, no VLAs: scratch space is small fixed-size stack arrays.
 */
#ifndef ZO_KERNELS_H
#define ZO_KERNELS_H

/* One header per kernel family, beside its zo_kernels_<family>.c (and its Helium variant,
 * zo_kernels_<family>_mve.c); each has its own extern "C" guards. */
#include "zo_kernels_conv.h"
#include "zo_kernels_pool.h"
#include "zo_kernels_elementwise.h"
#include "zo_kernels_misc.h"
#include "zo_kernels_quantize.h"
#include "zo_kernels_movement.h"
#include "zo_kernels_activation.h"
#include "zo_kernels_resize.h"
#include "zo_kernels_sequence.h"
#include "zo_kernels_lstm.h"
#include "zo_kernels_variables.h"
#include "zo_kernels_cast.h"
#include "zo_kernels_int16.h"

#endif /* ZO_KERNELS_H */
