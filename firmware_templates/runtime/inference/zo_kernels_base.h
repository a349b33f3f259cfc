/* zo_kernels_base.h - what every kernel header shares: the integer types and the switch between the
 * portable and the Helium (MVE) kernels.
 *
 * On targets with integer MVE (the Cortex-M55), unless ZO_NO_MVE is defined, the
 * zo_kernels_<family>_mve.c files define their family's public entry points with Helium kernels,
 * bit-exact with the portable C; the portable kernels then keep a _portable name (the MVE ones call
 * them for shapes they do not take, and the tests compare the two on the emulated M55). Elsewhere
 * ZO_PORTABLE(name) is just name and ZO_FALLBACK nothing.
 */
#ifndef ZO_KERNELS_BASE_H
#define ZO_KERNELS_BASE_H

#include <stdint.h>

#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1) && !defined(ZO_NO_MVE)
#define ZO_KERNELS_MVE 1
/* A portable kernel is then a fallback for shapes the Helium ones do not take: compiled for size
 * (gcc's cold), out of the hot code. */
#define ZO_FALLBACK __attribute__((cold))
#define ZO_PORTABLE(name) ZO_FALLBACK name##_portable
#else
#define ZO_FALLBACK
#define ZO_PORTABLE(name) name
#endif

#endif /* ZO_KERNELS_BASE_H */
