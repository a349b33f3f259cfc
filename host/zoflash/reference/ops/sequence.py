"""Reference kernels of the sequence family: SVDF, and UNIDIRECTIONAL_SEQUENCE_LSTM in NumPy: TFLM's
integer path (lstm_eval.h, int8 activations and weights, int16 cell state), written stage by stage
as TFLM runs it, each stage on whole vectors: the four gates (two fully connected layers to int16
Q3.12 each, a saturating add, an int16 sigmoid or tanh to Q0.15), the cell update (two int16
products, a saturating add, the clip) and the hidden state (the tanh of the cell times the output
gate, to int8). The C kernel computes one unit at a time; this reading shares nothing with it but
the params dict and TFLM's sigmoid table.
"""

from __future__ import annotations

import numpy as np

from zoflash.reference.ops.fixedpoint import mbqm, wrap_int32


def svdf(p, x, wf, wt, b, state) -> np.ndarray:
    """SVDF on one input [batches * input_size]: updates `state` (int8 or int16, flat
    [batches, filters, memory]) in place, as TFLM does, and returns the int8 output."""
    nb, n_in, nf, mem = p["batches"], p["input_size"], p["num_filters"], p["memory_size"]
    dtype = state.dtype
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    s = state.astype(np.int64)
    s[:-1] = s[1:]  # the whole buffer moves one element left
    s = s.reshape(nb, nf, mem)
    xs = np.asarray(x, np.int64).reshape(nb, n_in) - p["input_zp"]
    feat = xs @ np.asarray(wf, np.int64).reshape(nf, n_in).T  # [batches, filters]
    feat = np.clip(mbqm(feat, p["multiplier_1"], p["shift_1"]), lo, hi) + p["state_zp"]
    s[:, :, -1] = feat.astype(dtype).astype(np.int64)  # narrowed as C does: wraps, no saturation
    state[:] = s.reshape(-1).astype(dtype)
    per_filter = ((s - p["state_zp"]) * np.asarray(wt, np.int64).reshape(nf, mem)).sum(axis=2)
    acc = per_filter.reshape(nb, p["num_units"], p["rank"]).sum(axis=2)
    if b is not None:
        acc = acc + np.asarray(b, np.int64).reshape(1, -1)
    y = mbqm(wrap_int32(acc), p["multiplier_2"], p["shift_2"]) + p["output_zp"]
    return np.clip(y, -128, 127).astype(np.int8).reshape(-1)


def requantize_s16_s8(p, x) -> np.ndarray:
    out = mbqm(np.asarray(x).astype(np.int64) - p["input_zp"], p["multiplier"], p["shift"]) + p["output_zp"]
    return np.clip(out, -128, 127).astype(np.int8)


# sigmoid(i / 24) in Q0.16 for i = 0..255: the table TFLM's int16 logistic and tanh interpolate
# (tensorflow/lite/kernels/internal/common.h, Apache-2.0; not reproducible from a formula).
SIGMOID_TABLE = np.array(
    [
        32768,
        33451,
        34133,
        34813,
        35493,
        36169,
        36843,
        37513,
        38180,
        38841,
        39498,
        40149,
        40794,
        41432,
        42064,
        42688,
        43304,
        43912,
        44511,
        45102,
        45683,
        46255,
        46817,
        47369,
        47911,
        48443,
        48964,
        49475,
        49975,
        50464,
        50942,
        51409,
        51865,
        52311,
        52745,
        53169,
        53581,
        53983,
        54374,
        54755,
        55125,
        55485,
        55834,
        56174,
        56503,
        56823,
        57133,
        57433,
        57724,
        58007,
        58280,
        58544,
        58800,
        59048,
        59288,
        59519,
        59743,
        59959,
        60168,
        60370,
        60565,
        60753,
        60935,
        61110,
        61279,
        61441,
        61599,
        61750,
        61896,
        62036,
        62172,
        62302,
        62428,
        62549,
        62666,
        62778,
        62886,
        62990,
        63090,
        63186,
        63279,
        63368,
        63454,
        63536,
        63615,
        63691,
        63765,
        63835,
        63903,
        63968,
        64030,
        64090,
        64148,
        64204,
        64257,
        64308,
        64357,
        64405,
        64450,
        64494,
        64536,
        64576,
        64614,
        64652,
        64687,
        64721,
        64754,
        64786,
        64816,
        64845,
        64873,
        64900,
        64926,
        64950,
        64974,
        64997,
        65019,
        65039,
        65060,
        65079,
        65097,
        65115,
        65132,
        65149,
        65164,
        65179,
        65194,
        65208,
        65221,
        65234,
        65246,
        65258,
        65269,
        65280,
        65291,
        65301,
        65310,
        65319,
        65328,
        65337,
        65345,
        65352,
        65360,
        65367,
        65374,
        65381,
        65387,
        65393,
        65399,
        65404,
        65410,
        65415,
        65420,
        65425,
        65429,
        65433,
        65438,
        65442,
        65445,
        65449,
        65453,
        65456,
        65459,
        65462,
        65465,
        65468,
        65471,
        65474,
        65476,
        65479,
        65481,
        65483,
        65485,
        65488,
        65489,
        65491,
        65493,
        65495,
        65497,
        65498,
        65500,
        65501,
        65503,
        65504,
        65505,
        65507,
        65508,
        65509,
        65510,
        65511,
        65512,
        65513,
        65514,
        65515,
        65516,
        65517,
        65517,
        65518,
        65519,
        65520,
        65520,
        65521,
        65522,
        65522,
        65523,
        65523,
        65524,
        65524,
        65525,
        65525,
        65526,
        65526,
        65526,
        65527,
        65527,
        65528,
        65528,
        65528,
        65529,
        65529,
        65529,
        65529,
        65530,
        65530,
        65530,
        65530,
        65531,
        65531,
        65531,
        65531,
        65531,
        65532,
        65532,
        65532,
        65532,
        65532,
        65532,
        65533,
        65533,
        65533,
        65533,
        65533,
        65533,
        65533,
        65533,
        65534,
        65534,
        65534,
        65534,
        65534,
        65534,
        65534,
        65534,
        65534,
        65534,
        65535,
    ],
    dtype=np.int64,
)


INPUT, FORGET, CELL, OUTPUT = range(4)  # the gate order of the params' arrays


def _lookup(a, bits: int):
    """The table's value at |a| / 2^bits, interpolated linearly in `bits` fractional bits; None
    where |a| is past the table (the caller saturates)."""
    a = np.abs(a)
    whole = a >> bits
    k = np.minimum(whole, 254)
    lo, hi = SIGMOID_TABLE[k], SIGMOID_TABLE[k + 1]
    return whole >= 255, (lo << bits) + (a & ((1 << bits) - 1)) * (hi - lo)


def sigmoid_s16(v) -> np.ndarray:
    """TFLM's int16 Logistic with a scaled input v (Q3.12 times 3): Q0.15, in [0, 32767]."""
    v = np.asarray(v, np.int64)
    past, r = _lookup(v, 9)
    r = np.where(past, 0x7FFF << 10, r)
    r = np.where(v >= 0, r + (1 << 9), (1 << 25) - r + (1 << 9) - 1)
    return r >> 10


def tanh_s16(v) -> np.ndarray:
    """TFLM's int16 Tanh with a scaled input v (tanh(x) = 2 sigmoid(2x) - 1): Q0.15."""
    v = np.asarray(v, np.int64)
    past, r = _lookup(v, 8)
    r = np.where(past, 0xFFFF << 8, r)
    r = np.where(v >= 0, r - (1 << 23) + (1 << 7), -r + (1 << 23) + (1 << 7) - 1)
    return r >> 8


def _int16(x) -> np.ndarray:
    return np.clip(x, -32768, 32767)


def _fc_q3_12(x, zp, w, bias, multiplier, shift) -> np.ndarray:
    """A gate's fully connected layer, [rows, depth] x [units, depth]^T, to int16 Q3.12."""
    acc = (x - zp) @ np.asarray(w, np.int64).T
    if bias is not None:
        acc = wrap_int32(acc + np.asarray(bias, np.int64))
    return _int16(mbqm(acc, multiplier, shift))


def lstm(p, x, input_weights, recurrent_weights, biases, hidden, cell) -> np.ndarray:
    """One invoke on the whole input (flat, [batches, time, features], or [time, batches, features]
    when time-major). `hidden` (int8) and `cell` (int16), flat [batches, units], are updated in
    place, as TFLM's variable tensors are; returns the int8 output, every step's hidden state, in
    the input's layout."""
    nb, nt, n_in, n = p["batches"], p["time_steps"], p["input_size"], p["units"]
    x = np.asarray(x, np.int64)
    xs = x.reshape(nt, nb, n_in) if p["time_major"] else x.reshape(nb, nt, n_in).transpose(1, 0, 2)
    h = hidden.astype(np.int64).reshape(nb, n)
    c = cell.astype(np.int64).reshape(nb, n)
    out = np.zeros((nt, nb, n), np.int64)
    for t in range(nt):  # every batch row at once: the rows never mix
        gates = []
        for g in range(4):
            a = _fc_q3_12(
                xs[t], p["input_zp"], input_weights[g], biases[g], p["input_multiplier"][g], p["input_shift"][g]
            )
            r = _fc_q3_12(
                h, p["hidden_zp"], recurrent_weights[g], None, p["recurrent_multiplier"][g], p["recurrent_shift"][g]
            )
            s = _int16(a + r) * 3  # the activations' input scaling (Q3.12 with scale power -12)
            gates.append(tanh_s16(s) if g == CELL else sigmoid_s16(s))
        forget_cell = _int16(mbqm(gates[FORGET] * c, p["forget_multiplier"], p["forget_shift"]))
        input_cell = _int16(mbqm(gates[INPUT] * gates[CELL], p["input_gate_multiplier"], p["input_gate_shift"]))
        c = _int16(forget_cell + input_cell)
        if p["use_cell_clip"]:
            c = np.clip(c, -p["cell_clip"], p["cell_clip"])
        shift = p["tanh_shift"]
        scaled = (c * p["tanh_multiplier"] + ((1 << shift) >> 1)) >> shift
        y = mbqm(tanh_s16(scaled) * gates[OUTPUT], p["hidden_multiplier"], p["hidden_shift"]) + p["hidden_zp"]
        h = np.clip(y, -128, 127)
        out[t] = h
    hidden[:] = h.reshape(-1).astype(np.int8)
    cell[:] = c.reshape(-1).astype(np.int16)
    return (out if p["time_major"] else out.transpose(1, 0, 2)).reshape(-1).astype(np.int8)
