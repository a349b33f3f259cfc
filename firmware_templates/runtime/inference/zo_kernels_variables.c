/* zo_kernels_variables.c - resource variables: READ_VARIABLE and ASSIGN_VARIABLE copy a variable's
 * bytes between the model's state array and the arena, as TFLM's MicroResourceVariables do
 * (memcpy of the whole variable).
 */
#include "zo_kernels.h"

#include <string.h>

/* memmove (which a freestanding C compiler requires, as memcpy): an ASSIGN_VARIABLE of a value read
 * from the same variable may copy onto itself or overlap it. */
void zo_copy_s8(const zo_copy_params_t *p, const int8_t *input, int8_t *output)
{
    if (output != input) {
        memmove(output, input, (size_t)p->size);
    }
}
