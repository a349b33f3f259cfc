/* zo_port_host.c - the port contract on a host computer: telemetry to stdout (binary), a
 * monotonic clock, no command input, exit(). Static file of the host port. */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "zo_port.h"

void zo_port_init(void)
{
}

void zo_port_write(const uint8_t *data, uint32_t n)
{
    fwrite(data, 1, n, stdout);
    fflush(stdout); /* the host decodes frames live, as a board streams them */
}

uint64_t zo_port_time_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

int zo_port_read_byte(uint8_t *byte)
{
    (void)byte;
    return 0;
}

void zo_port_exit(int code)
{
    fflush(stdout);
    exit(code);
}
