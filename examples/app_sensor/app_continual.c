/* app_continual.c - continual adaptation in your own firmware (`zoflash build --mode continual
 * --data-source app`, zo_continual.h): its own main(), every reading of a "sensor" served with the
 * deployed weights as it comes (zo_cl_serve), the labels fed back, drift detected and adapted to in
 * the background by the library.
 *
 * The sensor is app_sensor's synthetic one (sensor.h).  Halfway it is remounted: from reading
 * REMOUNT on its 64 values arrive in reverse order.  The firmware knows when it was remounted (a
 * button, a mounting switch) and says so with ZO_CL_SHIFT: an episode starts at once, without
 * waiting for the detector.  Every 4th reading comes without its label (served, not fed back).
 * At the end zo_cl_end() sends the deployed weights and done, and one text line says how many
 * readings were served right.  tests/test_app_continual.py feeds the same readings as a stream
 * (`zoflash simulate --mode continual --data-source stream`) and compares the records.
 *
 *     zoflash build --board mps3-an547 --model tests/fixtures/mlp.tflite --data sensor.npz \
 *         --mode continual --data-source app --out cl_bundle
 *     make -C cl_bundle app APP=$PWD/examples/app_sensor/app_continual.c    # build/app.elf (build/app on the host)
 */
#include <stdint.h>

#include "console.h"
#include "sensor.h"
#include "zo_continual.h"
#include "zo_port.h"

#define READINGS 2400u
#define REMOUNT 1200u

/* Reading n as the sensor delivers it: remounted from REMOUNT on (the values reversed). */
static uint16_t mounted_read(uint32_t n, int8_t *x)
{
    int8_t raw[INPUTS];
    const uint16_t label = sensor_read(n, raw);
    for (uint32_t i = 0; i < INPUTS; ++i) {
        x[i] = n >= REMOUNT ? raw[INPUTS - 1u - i] : raw[i];
    }
    return label;
}

int main(void)
{
    zo_port_init();
    if (zo_cl_start() != 0) {
        zo_port_exit(1);
    }
    int8_t x[INPUTS];
    uint32_t right = 0;
    for (uint32_t n = 0; n < READINGS; ++n) {
        const uint16_t label = mounted_read(n, x);
        if (n == REMOUNT) {
            (void)zo_cl_serve(x, ZO_CL_SHIFT); /* the conditions changed here: adapt now */
        }
        const int32_t answer = zo_cl_serve(x, n % 4u == 3u ? ZO_CL_NO_LABEL : label);
        right += answer == (int32_t)label ? 1u : 0u;
    }
    zo_cl_end();
    say("\napp_continual: ");
    say_number(right);
    say(" of ");
    say_number(READINGS);
    say(" readings served right\n");
    zo_port_exit(0);
}
