"""The sequence family's params (SVDF, UNIDIRECTIONAL_SEQUENCE_LSTM with its int16 cell state):
what TFLM computes at prepare time (conventions: compiler/ops/params_common.py)."""

from __future__ import annotations

import numpy as np

from zoflash.compiler import quant
from zoflash.compiler.ops.params_common import MAX_ACCUM_DEPTH, check_shift, checked_int, checked_scale, checked_zp


def svdf_params(
    *,
    batches,
    input_size,
    num_filters,
    rank,
    memory_size,
    input_scale,
    input_zp,
    feature_scale,
    state_scale,
    state_zp,
    time_scale,
    output_scale,
    output_zp,
    state_dtype,
) -> dict:
    """SVDF, TFLM's integer path (PrepareSvdf): both effective scales are products and quotients
    of the float32 scales, rounded to float32, then widened to double for QuantizeMultiplier."""
    batches, input_size = checked_int("batches", batches, 1), checked_int("input_size", input_size, 1)
    num_filters, rank = checked_int("num_filters", num_filters, 1), checked_int("rank", rank, 1)
    memory_size = checked_int("memory_size", memory_size, 1)
    if num_filters % rank:
        raise ValueError(f"svdf: {num_filters} filters are not a multiple of rank {rank}")
    if max(input_size, memory_size * rank) > MAX_ACCUM_DEPTH:
        raise ValueError(f"svdf: accumulation depth exceeds {MAX_ACCUM_DEPTH}")
    if state_dtype not in ("int8", "int16"):
        raise ValueError(f"svdf: the state must be int8 or int16, not {state_dtype}")
    in_s, f_s = checked_scale("input_scale", input_scale), checked_scale("feature_scale", feature_scale)
    st_s, t_s = checked_scale("state_scale", state_scale), checked_scale("time_scale", time_scale)
    out_s = checked_scale("output_scale", output_scale)
    lo, hi = (-128, 127) if state_dtype == "int8" else (-32768, 32767)
    st_zp = checked_int("state_zp", state_zp, lo, hi)
    m1, s1 = quant.quantize_multiplier(quant.f32(quant.f32(in_s * f_s) / st_s))
    m2, s2 = quant.quantize_multiplier(quant.f32(quant.f32(st_s * t_s) / out_s))
    return dict(
        batches=batches,
        input_size=input_size,
        num_filters=num_filters,
        num_units=num_filters // rank,
        rank=rank,
        memory_size=memory_size,
        input_zp=checked_zp("input_zp", input_zp),
        state_zp=st_zp,
        output_zp=checked_zp("output_zp", output_zp),
        multiplier_1=m1,
        shift_1=check_shift("svdf feature", s1),
        multiplier_2=m2,
        shift_2=check_shift("svdf time", s2),
    )


_LSTM_GATES = ("input", "forget", "cell", "output")  # the order of every per-gate array


_Q3_12, _Q0_15 = 2.0**-12, 2.0**-15  # TFLM's scales of a gate's pre-activation and of its output


def _checked_log2(x: float) -> int:
    """TFLM's CheckedLog2 in float32 (log(x) * (1 / log 2), rounded half away); TFLM ignores whether
    x is an exact power of two."""
    x_log2 = np.float32(np.log(np.float32(x))) * (np.float32(1.0) / np.float32(np.log(np.float32(2.0))))
    return int(quant.round_half_away_f32(x_log2))


def lstm_params(
    *,
    batches,
    time_steps,
    input_size,
    units,
    time_major,
    input_scale,
    input_zp,
    input_weight_scales,
    recurrent_weight_scales,
    hidden_scale,
    hidden_zp,
    cell_scale,
    cell_clip,
) -> dict:
    """UNIDIRECTIONAL_SEQUENCE_LSTM, TFLM's integer path (PrepareGateParametersInteger): each gate's
    two fully connected layers go to int16 Q3.12, input_scale (or hidden_scale) x weight scale / 2^-12
    in double; the gates' outputs are Q0.15; the element-wise products' multipliers are
    (2^-15 x cell_scale or 2^-15) / cell_scale and 2^-30 / hidden_scale, in double. The cell state's
    tanh takes the rounded log2 of cell_scale; the cell clip, when > 0, is cell_clip / cell_scale
    truncated to int16. Weight scales are per gate, in the order input, forget, cell, output."""
    batches, time_steps = checked_int("batches", batches, 1), checked_int("time_steps", time_steps, 1)
    input_size, units = checked_int("input_size", input_size, 1), checked_int("units", units, 1)
    if max(input_size, units) > MAX_ACCUM_DEPTH:
        raise ValueError(f"lstm: accumulation depth exceeds {MAX_ACCUM_DEPTH}")
    in_s, h_s = checked_scale("input_scale", input_scale), checked_scale("hidden_scale", hidden_scale)
    c_s = checked_scale("cell_scale", cell_scale)
    mults = {}
    for what, scales, act_s in (("input", input_weight_scales, in_s), ("recurrent", recurrent_weight_scales, h_s)):
        if len(scales) != 4:
            raise ValueError(f"lstm: {len(scales)} {what} weight scales, one per gate (4) expected")
        ms = [
            quant.quantize_multiplier(act_s * checked_scale(f"{what}_weight_scales[{g}]", s) / _Q3_12)
            for g, s in enumerate(scales)
        ]
        mults[f"{what}_multiplier"] = np.array([m for m, _ in ms], np.int32)
        mults[f"{what}_shift"] = np.array(
            [check_shift(f"lstm {what} {_LSTM_GATES[g]} gate", s) for g, (_, s) in enumerate(ms)], np.int32
        )
    forget_m, forget_s = quant.quantize_multiplier(_Q0_15 * c_s / c_s)
    input_m, input_s = quant.quantize_multiplier(_Q0_15 * _Q0_15 / c_s)
    hidden_m, hidden_s = quant.quantize_multiplier(_Q0_15 * _Q0_15 / h_s)
    # Tanh of the cell state: TFLM's int16 tanh reads Q3.12 times 3 (its table spans +-10.7), so a
    # cell scale of 2^power needs the input scaled by 3 x 2^(power + 12).
    shift = 15 + _checked_log2(c_s) - 3
    if not -30 <= shift <= 14:  # beyond, the int32 products of TFLM's tanh overflow or shift out
        raise ValueError(f"lstm: cell scale {c_s:.6g} is outside what the int16 tanh reads")
    tanh_multiplier, tanh_shift = (3 << shift, 0) if shift >= 0 else (3, -shift)
    clip = quant.f32(float(cell_clip))  # a float32 option
    quantized_clip = int(min(max(clip / c_s, -32768.0), 32767.0)) if clip > 0 else 0  # truncated, as C
    return dict(
        batches=batches,
        time_steps=time_steps,
        input_size=input_size,
        units=units,
        time_major=1 if time_major else 0,
        input_zp=checked_zp("input_zp", input_zp),
        hidden_zp=checked_zp("hidden_zp", hidden_zp),
        **mults,
        forget_multiplier=forget_m,
        forget_shift=check_shift("lstm forget x cell", forget_s),
        input_gate_multiplier=input_m,
        input_gate_shift=check_shift("lstm input x cell gate", input_s),
        hidden_multiplier=hidden_m,
        hidden_shift=check_shift("lstm output x tanh", hidden_s),
        tanh_multiplier=tanh_multiplier,
        tanh_shift=tanh_shift,
        use_cell_clip=1 if clip > 0 else 0,
        cell_clip=quantized_clip,
    )
