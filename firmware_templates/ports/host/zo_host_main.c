/* Host runner: runs the bundle's model on a file of raw input samples.
 *
 *   model_run INPUTS.bin OUTPUTS.bin    reads N samples of input 0 back to back, writes N outputs
 *   model_run --info                    prints the input and output descriptors
 *   model_run --bench N                 times N invokes in a native loop, prints ns per invoke
 *
 * Static file, copied into host bundles; the model is reached through zo_bundle.h. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime under -std=c11 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zo_bundle.h"

static void print_desc(const char *what, const zo_io_desc_t *d)
{
    printf("%s %s dtype=%d bytes=%ld scale=%.9g zero_point=%ld shape=", what, d->name, (int)d->dtype,
           (long)d->bytes, (double)d->scale, (long)d->zero_point);
    for (int32_t i = 0; i < d->rank; i++) {
        printf("%s%ld", i ? "x" : "", (long)d->shape[i]);
    }
    printf("\n");
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--info") == 0) {
        for (int32_t i = 0; i < ZO_MODEL_NUM_INPUTS; i++) print_desc("input", &ZO_MODEL_INPUTS[i]);
        for (int32_t i = 0; i < ZO_MODEL_NUM_OUTPUTS; i++) print_desc("output", &ZO_MODEL_OUTPUTS[i]);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "--bench") == 0) {
        const long n = strtol(argv[2], NULL, 10);
        struct timespec t0, t1;
        ZO_MODEL_INIT();
        ZO_MODEL_INVOKE(); /* warm caches */
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (long i = 0; i < n; i++) {
            ZO_MODEL_INVOKE();
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        const double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
        printf("%.1f\n", n > 0 ? ns / (double)n : 0.0);
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: %s INPUTS.bin OUTPUTS.bin | --info | --bench N\n", argv[0]);
        return 2;
    }
    FILE *in = fopen(argv[1], "rb");
    FILE *out = fopen(argv[2], "wb");
    if (!in || !out) {
        fprintf(stderr, "cannot open %s or %s\n", argv[1], argv[2]);
        return 2;
    }
    ZO_MODEL_INIT();
    const size_t in_bytes = (size_t)ZO_MODEL_INPUTS[0].bytes;
    const size_t out_bytes = (size_t)ZO_MODEL_OUTPUTS[0].bytes;
    long samples = 0;
    while (fread(ZO_MODEL_INPUT(0), 1, in_bytes, in) == in_bytes) {
        ZO_MODEL_INVOKE();
        if (fwrite(ZO_MODEL_OUTPUT(0), 1, out_bytes, out) != out_bytes) {
            fprintf(stderr, "write failed\n");
            return 1;
        }
        samples++;
    }
    fclose(in);
    fclose(out);
    fprintf(stderr, "%ld samples\n", samples);
    return 0;
}
