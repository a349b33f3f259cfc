/* zo_train_main.c - the training firmware's entry point, the same on every port.
 * Static file; <prefix>_train.c (generated) defines the model wiring and the options. */
#include "zo_bundle.h"
#include "zo_port.h"
#include "zo_trainer.h"

extern const zo_train_model_t zo_train_model;
extern const zo_train_config_t zo_train_config;

int main(void)
{
    zo_port_init();
    ZO_MODEL_INIT();
    zo_port_exit(zo_train_run(&zo_train_model, &zo_train_config));
    return 0;
}
