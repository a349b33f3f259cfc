/* app_sensor.c - an application that trains a model on the device with zoflash's library form
 * (`zoflash build --data-source app`, zo_app.h): its own main(), samples pushed from a "sensor",
 * one training step whenever enough have come, then the trained model used on fresh readings.
 *
 * The sensor is synthetic, so the example runs anywhere: reading n is one of 10 fixed patterns of
 * 64 int8 values (its class, the label) plus noise, all from a 32-bit integer hash
 * (make_data.py writes the same readings, from other n, as the build's test split).
 *
 *     zoflash build --board mps3-an547 --model tests/fixtures/mlp.tflite --data sensor.npz \
 *         --data-source app --out app_bundle
 *     make -C app_bundle app APP=$PWD/examples/app_sensor/app_sensor.c    # build/app.elf (build/app on the host)
 */
#include <stdint.h>

#include "console.h"
#include "sensor.h"
#include "zo_app.h"
#include "zo_port.h"

#define FRESH 200u          /* readings the trained model classifies at the end */
#define FRESH_FIRST 500000u /* far from the readings trained on */

int main(void)
{
    zo_port_init();
    if (zo_app_input_bytes() != INPUTS || zo_app_init(1) != ZO_APP_OK) {
        zo_port_exit(1);
    }
    int8_t x[INPUTS];
    uint32_t n = 0;
    uint16_t label = sensor_read(n, x);
    for (;;) { /* push until the trainer has what its next step needs, then step */
        if (zo_app_push(x, label, 0) == ZO_APP_OK) {
            label = sensor_read(++n, x);
            continue;
        }
        if (zo_app_step() == ZO_APP_DONE) {
            break;
        }
    }
    uint32_t right = 0;
    for (uint32_t k = 0; k < FRESH; ++k) {
        label = sensor_read(FRESH_FIRST + k, x);
        const int8_t *y = zo_app_forward(x);
        uint32_t best = 0;
        for (uint32_t c = 1; c < CLASSES; ++c) {
            best = y[c] > y[best] ? c : best;
        }
        right += best == label ? 1u : 0u;
    }
    say("\napp_sensor: ");
    say_number(right);
    say(" of ");
    say_number(FRESH);
    say(" fresh readings classified right\n");
    zo_port_exit(0);
}
