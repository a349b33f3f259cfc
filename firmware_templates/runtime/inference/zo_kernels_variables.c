/* zo_kernels_variables.c - resource variables: READ_VARIABLE and ASSIGN_VARIABLE copy a variable's
 * bytes between the model's state array and the arena, as TFLM's MicroResourceVariables do
 * (memcpy of the whole variable).
 */
#include "zo_kernels.h"

/* A loop, not memmove: the kernels need no C library.  An ASSIGN_VARIABLE of a value read from
 * the same variable may copy onto itself (or overlap it): copy in the direction that is safe. */
void zo_copy_s8(const zo_copy_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t n = p->size;
    if (output < input) {
        for (int32_t i = 0; i < n; ++i) {
            output[i] = input[i];
        }
    } else if (output > input) {
        for (int32_t i = n - 1; i >= 0; --i) {
            output[i] = input[i];
        }
    }
}
