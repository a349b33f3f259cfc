/* console.h - the examples' text output on the port's console (zo_port_write): strings and
 * unsigned decimal numbers, no printf needed. */
#ifndef CONSOLE_H
#define CONSOLE_H

#include <stdint.h>

#include "zo_port.h"

static void say(const char *s)
{
    uint32_t n = 0;
    while (s[n] != '\0') {
        ++n;
    }
    zo_port_write((const uint8_t *)s, n);
}

static void say_number(uint32_t v)
{
    uint8_t digits[10];
    uint32_t n = 0;
    do {
        digits[9u - n++] = (uint8_t)('0' + v % 10u);
        v /= 10u;
    } while (v != 0u);
    zo_port_write(digits + 10u - n, n);
}

#endif
