/* app_resume.c - checkpoints in your own firmware (zo_app.h): app_sensor's loop, told by one line
 * on its input (the UART; stdin on the host) where to stop and what to resume from:
 *
 *     <steps> [<checkpoint image as hex>]\n
 *
 * With an image it puts it right after init and prints "put <status>" (0: ZO_APP_OK); then
 * "start at step <t>, pushed <n>" (zo_app_status(): t > 0 after a put, or when the port kept a
 * checkpoint), and it pushes the sensor's readings from n on (the sensor can replay them:
 * reading n is a function of n).  It trains until <steps> steps are done (0: to the end), then
 * gets a checkpoint, prints it as "ckpt <hex>" lines and exits, as a firmware that stores its
 * checkpoint before a reset would (a real one writes it to its flash).
 * tests/test_app_checkpoint.py feeds the printed image to a new process and compares the run
 * with an uninterrupted one.
 *
 *     make -C app_bundle app APP=$PWD/examples/app_sensor/app_resume.c
 */
#include <stdint.h>

#include "console.h"
#include "sensor.h"
#include "zo_app.h"
#include "zo_port.h"

#define IMAGE_CAP 16384u /* the checkpoint of tests/fixtures/mlp.tflite, all layers trained, is 11.4 KiB */
#define HEX_PER_LINE 64u  /* image bytes per "ckpt" line */

static uint8_t g_image[IMAGE_CAP];

static uint8_t next_byte(void)
{
    uint8_t b;
    while (!zo_port_read_byte(&b)) {
    }
    return b;
}

static int hex_value(uint8_t c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The input line: returns <steps>; the image's bytes go to g_image, their count to *len. */
static uint32_t read_line(uint32_t *len)
{
    uint32_t steps = 0, n = 0;
    uint8_t c = next_byte();
    for (; c >= '0' && c <= '9'; c = next_byte()) {
        steps = steps * 10u + (uint32_t)(c - '0');
    }
    for (c = c == ' ' ? next_byte() : c; c != '\n'; c = next_byte()) {
        const int hi = hex_value(c), lo = hex_value(next_byte());
        if (hi < 0 || lo < 0 || n == IMAGE_CAP) {
            zo_port_exit(2); /* not a line of this example's format */
        }
        g_image[n++] = (uint8_t)(hi * 16 + lo);
    }
    *len = n;
    return steps;
}

static void say_hex(const uint8_t *p, uint32_t n)
{
    static const char digits[] = "0123456789abcdef";
    uint8_t two[2];
    for (uint32_t k = 0; k < n; ++k) {
        two[0] = (uint8_t)digits[p[k] >> 4];
        two[1] = (uint8_t)digits[p[k] & 15u];
        zo_port_write(two, 2u);
    }
}

int main(void)
{
    zo_port_init();
    uint32_t len;
    const uint32_t stop = read_line(&len);
    if (zo_app_input_bytes() != INPUTS || zo_app_checkpoint_size() > IMAGE_CAP || zo_app_init(1) != ZO_APP_OK) {
        zo_port_exit(1);
    }
    if (len != 0u) {
        const int status = zo_app_checkpoint_put(g_image, len); /* refused: the run goes on afresh */
        say("\nput ");
        say_number((uint32_t)status);
    }
    zo_app_status_t st;
    zo_app_status(&st);
    say("\nstart at step ");
    say_number(st.steps_done);
    say(", pushed ");
    say_number(st.pushed);
    say("\n");
    int8_t x[INPUTS];
    uint32_t n = st.pushed; /* 0, or t R after a put: the first reading step t trains on */
    uint16_t label = sensor_read(n, x);
    for (;;) {
        zo_app_status(&st);
        if (stop != 0u && st.steps_done >= stop) {
            (void)zo_app_checkpoint_get(g_image, IMAGE_CAP);
            for (uint32_t k = 0; k < zo_app_checkpoint_size(); k += HEX_PER_LINE) {
                const uint32_t left = zo_app_checkpoint_size() - k;
                say("\nckpt ");
                say_hex(g_image + k, left < HEX_PER_LINE ? left : HEX_PER_LINE);
            }
            say("\n");
            zo_port_exit(0); /* the reset */
        }
        if (zo_app_push(x, label, 0) == ZO_APP_OK) {
            label = sensor_read(++n, x);
            continue;
        }
        if (zo_app_step() == ZO_APP_DONE) {
            break;
        }
    }
    zo_port_exit(0);
}
