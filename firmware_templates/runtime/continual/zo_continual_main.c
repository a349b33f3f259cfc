/* zo_continual_main.c - the continual firmware's entry point (--mode continual), the same on every
 * port: samples arrive over the serial link as with --data-source stream (zo_stream.h, one sample
 * at a time, its label with it; label 0xFFFF: none), each is served with the deployed weights and
 * fed back (zo_continual.h); the stop command ends the stream (weights and done are sent). */
#include <string.h>

#include "zo_bundle.h"
#include "zo_command.h"
#include "zo_continual.h"
#include "zo_port.h"
#include "zo_telemetry.h"

extern const zo_train_model_t zo_train_model;

/* Serve the commands that arrived while waiting for a sample; 1 on stop. */
static int serve_commands(zo_stream_t *s)
{
    zo_cmd_t c;
    while (zo_cmd_poll(&c)) {
        if (c.type < ZO_CMD_FIRST) {
            continue; /* a telemetry frame echoed back (a loopback) */
        }
        if (c.type == ZO_CMD_SAMPLE) {
            zo_stream_accept(s, &c);
            continue;
        }
        zo_cl_status_t st;
        zo_cl_status(&st);
        zo_tm_ack_t ack = { st.samples, c.seq, c.type, c.type == ZO_CMD_STOP ? ZO_TM_ACK_OK : ZO_TM_ACK_UNKNOWN };
        zo_tm_ack(&ack);
        if (c.type == ZO_CMD_STOP) {
            return 1;
        }
    }
    return 0;
}

int main(void)
{
    zo_port_init();
    zo_stream_t *s = zo_train_model.stream;
    if (zo_cl_start()) { /* the model's init, the slots, zo_cl_init */
        zo_port_exit(1);
        return 1;
    }
    for (uint32_t k = 0;; ++k) {
        int stop = 0;
        while (!stop && zo_stream_ask(s, k + 1u, zo_port_time_us())) {
            stop = serve_commands(s);
            if (!stop && zo_stream_late(s, zo_port_time_us())) {
                zo_port_idle();
            }
        }
        if (stop) {
            break;
        }
        const uint32_t slot = k % s->slots;
        (void)zo_cl_serve(s->x + (size_t)slot * s->input_bytes, s->y != NULL ? s->y[slot] : ZO_CL_NO_LABEL);
    }
    zo_cl_end();
    zo_port_exit(0);
    return 0;
}
