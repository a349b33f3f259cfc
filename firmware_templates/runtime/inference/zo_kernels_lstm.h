/* zo_kernels_lstm.h - UNIDIRECTIONAL_SEQUENCE_LSTM, int8 with an int16 cell state (zo_kernels_lstm.c). */
#ifndef ZO_KERNELS_LSTM_H
#define ZO_KERNELS_LSTM_H

#include "zo_kernels_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- input int8 [batches][time][input_size] ([time][batches][input_size] when time_major);
 * per gate (input, forget, cell, output) input weights int8 [units][input_size], recurrent
 * weights int8 [units][units] and a bias int32 [units]; hidden int8 and cell int16 [batches][units],
 * variable tensors updated in place; output int8 in the input's layout, every step's hidden state.
 * The per-gate arrays [4] hold the fully connected layers' multipliers to Q3.12; forget_*: the
 * forget gate x cell state, input_gate_*: the input gate x cell gate (both to the cell scale);
 * hidden_*: tanh(cell) x the output gate, to the hidden state's scale. tanh_multiplier/tanh_shift
 * scale the cell state for the int16 tanh; cell_clip applies when use_cell_clip is set. */
typedef struct {
    int32_t batches, time_steps, input_size, units, time_major;
    int32_t input_zp, hidden_zp;
    const int32_t *input_multiplier, *input_shift;         /* [4] */
    const int32_t *recurrent_multiplier, *recurrent_shift; /* [4] */
    int32_t forget_multiplier, forget_shift;
    int32_t input_gate_multiplier, input_gate_shift;
    int32_t hidden_multiplier, hidden_shift;
    int32_t tanh_multiplier, tanh_shift;
    int32_t use_cell_clip, cell_clip;
} zo_lstm_params_t;

void zo_lstm_s8_s16(const zo_lstm_params_t *p, const int8_t *input, const int8_t *w_input, const int8_t *w_forget,
                    const int8_t *w_cell, const int8_t *w_output, const int8_t *r_input, const int8_t *r_forget,
                    const int8_t *r_cell, const int8_t *r_output, const int32_t *b_input, const int32_t *b_forget,
                    const int32_t *b_cell, const int32_t *b_output, int8_t *hidden, int16_t *cell, int8_t *output);

#ifdef __cplusplus
}
#endif

#endif /* ZO_KERNELS_LSTM_H */
