/* sensor.h - the examples' synthetic sensor: reading n is one of 10 fixed patterns of 64 int8
 * values (its class, the label) plus noise, all from a 32-bit integer hash (make_data.py writes
 * the same readings, from other n, as the build's test split). */
#ifndef SENSOR_H
#define SENSOR_H

#include <stdint.h>

#define INPUTS 64u
#define CLASSES 10u

static uint32_t mix(uint32_t v)
{
    v ^= v >> 16;
    v *= 0x7feb352du;
    v ^= v >> 15;
    v *= 0x846ca68bu;
    v ^= v >> 16;
    return v;
}

/* Reading n into x; returns its class. */
static uint16_t sensor_read(uint32_t n, int8_t *x)
{
    const uint32_t c = mix(2u * n + 1u) % CLASSES;
    for (uint32_t i = 0; i < INPUTS; ++i) {
        const int32_t pattern = (int32_t)(mix(0x10000u + c * INPUTS + i) & 0xFFu) - 128;
        const int32_t noise = (int32_t)(mix(0x9E3779B9u + n * INPUTS + i) & 0x3Fu) - 32;
        x[i] = (int8_t)(pattern / 2 + noise);
    }
    return (uint16_t)c;
}

#endif /* SENSOR_H */
