"""TFLM-equivalent quantization helpers (pure Python + numpy).

Each function reproduces, bit for bit, what the TFLite Micro int8 kernels compute at prepare time
(multipliers, shifts, activation ranges, padding) in the default build, i.e. without
TFLITE_SINGLE_ROUNDING.  Scales in TFLite files are float32; callers pass Python floats holding
those float32 values and every helper here first re-reads them as float32, then widens to double
exactly where TFLM does, so that the double arithmetic matches.

Integer conventions (same as TFLM):
  * a quantized multiplier is an int32 in [2^30, 2^31) (or 0) that means multiplier / 2^31;
  * a shift is positive for a left shift and negative for a right shift.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from zoflash.errors import DataError

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT8_MIN = -128
INT8_MAX = 127

# Fused activations the int8 kernels clamp for; TFLM treats anything else as "no clamp".
ACTIVATIONS = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1")


# --------------------------------------------------------------------------- basic helpers

log = logging.getLogger("zoflash")
# The share of user data's values that quantizing clips to the input's range (-128/127 for int8)
# above which a warning says so. A calibrated input range clips only rare outliers; a larger share
# means data in other units than the model's (0..255 pixels for a model trained on [0, 1]), which
# then trains and infers on a few saturated values.
SATURATION_WARNING = 0.05


def f32(x: float) -> float:
    """The float32 value nearest to x, as a Python float (exact if x already is a float32)."""
    return float(np.float32(x))


def round_half_away(x: float) -> float:
    """std::round on a double: halves go away from zero (Python's round() goes to even)."""
    if x != x or math.isinf(x):
        raise ValueError(f"cannot round {x}")
    a = abs(x)
    fl = math.floor(a)
    r = fl + 1.0 if a - fl >= 0.5 else fl  # a - fl is exact for doubles
    return math.copysign(r, x)


def round_half_away_array(x) -> np.ndarray:
    """round_half_away elementwise, on float64 (exact: no x + 0.5 that could round up)."""
    x = np.asarray(x, np.float64)
    a = np.abs(x)
    fl = np.floor(a)
    return np.copysign(np.where(a - fl >= 0.5, fl + 1.0, fl), x)


def round_half_away_f32(x) -> np.float32:
    """std::round on a float (the float overload; the result is a float)."""
    x = np.float32(x)
    a = np.abs(x)
    fl = np.floor(a)
    r = fl + np.float32(1.0) if (a - fl) >= np.float32(0.5) else fl  # a - fl exact in float32
    return np.float32(np.copysign(r, x))


def wrap32(x: int) -> int:
    """Two's-complement wrap of a Python int into int32 (what C int32 arithmetic does)."""
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= (1 << 31) else x


# --------------------------------------------------------------------------- multipliers


def quantize_multiplier(real_multiplier: float) -> tuple[int, int]:
    """TFLM QuantizeMultiplier: real = q / 2^31 * 2^shift with q in [2^30, 2^31).

    Returns (quantized_multiplier, shift).  Zero gives (0, 0); multipliers below ~2^-32
    (shift < -31) are flushed to (0, 0) exactly as TFLM does.
    """
    real_multiplier = float(real_multiplier)
    if real_multiplier == 0.0:
        return 0, 0
    if real_multiplier < 0 or real_multiplier != real_multiplier or math.isinf(real_multiplier):
        raise ValueError(f"quantized multiplier must be finite and non-negative, got {real_multiplier!r}")
    q, shift = math.frexp(real_multiplier)  # same contract as C frexp: q in [0.5, 1)
    q_fixed = int(round_half_away(q * float(1 << 31)))  # q * 2^31 is exact
    assert q_fixed <= (1 << 31)
    if q_fixed == (1 << 31):
        q_fixed //= 2
        shift += 1
    assert q_fixed <= INT32_MAX
    if shift < -31:
        return 0, 0
    return q_fixed, shift


def quantize_multiplier_smaller_than_one_exp(real_multiplier: float) -> tuple[int, int]:
    """TFLM QuantizeMultiplierSmallerThanOneExp (requires 0 < real < 1; shift <= 0)."""
    if not (0.0 < real_multiplier < 1.0):
        raise ValueError(f"multiplier {real_multiplier!r} must be in (0, 1)")
    q, shift = quantize_multiplier(real_multiplier)
    if shift > 0:
        raise ValueError(f"multiplier {real_multiplier!r} rounds up to a left shift")
    return q, shift


def quantize_multiplier_greater_than_one(real_multiplier: float) -> tuple[int, int]:
    """TFLM QuantizeMultiplierGreaterThanOne (requires real > 1; shift >= 0)."""
    if not real_multiplier > 1.0:
        raise ValueError(f"multiplier {real_multiplier!r} must be greater than 1")
    q, shift = quantize_multiplier(real_multiplier)
    if shift < 0:
        raise ValueError(f"multiplier {real_multiplier!r} gave a right shift")
    return q, shift


# --------------------------------------------------------------------------- fixed-point ops (scalar)


def saturating_rounding_doubling_high_mul(a: int, b: int) -> int:
    """gemmlowp SaturatingRoundingDoublingHighMul on int32 (division truncates toward zero)."""
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else (1 - (1 << 30))
    num = ab + nudge
    q = abs(num) >> 31
    return wrap32(q if num >= 0 else -q)


def rounding_divide_by_pot(x: int, exponent: int) -> int:
    """gemmlowp RoundingDivideByPOT: round to nearest, ties away from zero."""
    if not 0 <= exponent <= 31:
        raise ValueError(f"exponent {exponent} out of [0, 31]")
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def multiply_by_quantized_multiplier(x: int, multiplier: int, shift: int) -> int:
    """TFLM MultiplyByQuantizedMultiplier(int32 x, ...) in the double-rounding build.

    The left shift is done as a wrapping int32 multiply, as the compiled C++ does.
    """
    left = shift if shift > 0 else 0
    right = -shift if shift < 0 else 0
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(wrap32(x << left), multiplier), right)


# --------------------------------------------------------------------------- activations


def quantize_value_f32(value: float, scale: float, zero_point: int) -> int:
    """TFLM kernel_util Quantize(): zp + (int)round(value / scale), computed in float32."""
    tmp = round_half_away_f32(np.float32(value) / np.float32(scale))
    if not (np.float32(INT32_MIN) <= tmp <= np.float32(INT32_MAX)):
        raise ValueError(f"activation bound {value} / scale {scale} overflows int32")
    return int(zero_point) + int(tmp)


def activation_range(
    activation: str, scale: float, zero_point: int, qmin: int = INT8_MIN, qmax: int = INT8_MAX
) -> tuple[int, int]:
    """TFLM CalculateActivationRangeQuantized for an int8 output."""
    act = str(activation).upper()
    if act == "NONE":
        return qmin, qmax
    if act == "RELU":
        return max(qmin, quantize_value_f32(0.0, scale, zero_point)), qmax
    if act == "RELU6":
        lo = max(qmin, quantize_value_f32(0.0, scale, zero_point))
        hi = min(qmax, quantize_value_f32(6.0, scale, zero_point))
    elif act in ("RELU_N1_TO_1", "RELU1"):
        lo = max(qmin, quantize_value_f32(-1.0, scale, zero_point))
        hi = min(qmax, quantize_value_f32(1.0, scale, zero_point))
    else:
        raise ValueError(f"fused activation {activation!r} is not supported (supported: {', '.join(ACTIVATIONS)})")
    if lo > hi:
        raise ValueError(f"activation {act} range is empty for output scale {scale} zero point {zero_point}")
    return lo, hi


# --------------------------------------------------------------------------- conv/pool geometry


def compute_out_size(padding: str, image_size: int, filter_size: int, stride: int, dilation: int = 1) -> int:
    """TFLM ComputeOutSize (matches TensorFlow's GetWindowedOutputSize)."""
    eff = (filter_size - 1) * dilation + 1
    pad = str(padding).upper()
    if pad == "SAME":
        return (image_size + stride - 1) // stride
    if pad == "VALID":
        return (image_size + stride - eff) // stride
    raise ValueError(f"padding must be SAME or VALID, got {padding!r}")


def compute_padding_with_offset(
    stride: int, dilation: int, in_size: int, filter_size: int, out_size: int
) -> tuple[int, int]:
    """TFLM ComputePaddingWithOffset: (padding before, extra padding after)."""
    eff = (filter_size - 1) * dilation + 1
    total = max((out_size - 1) * stride + eff - in_size, 0)
    return total // 2, total % 2


def compute_padding_hw(stride_hw, dilation_hw, in_hw, filter_hw, padding: str):
    """TFLM ComputePaddingHeightWidth: returns ((out_h, out_w), (pad_h, pad_w))."""
    out_h = compute_out_size(padding, in_hw[0], filter_hw[0], stride_hw[0], dilation_hw[0])
    out_w = compute_out_size(padding, in_hw[1], filter_hw[1], stride_hw[1], dilation_hw[1])
    pad_h, _ = compute_padding_with_offset(stride_hw[0], dilation_hw[0], in_hw[0], filter_hw[0], out_h)
    pad_w, _ = compute_padding_with_offset(stride_hw[1], dilation_hw[1], in_hw[1], filter_hw[1], out_w)
    return (out_h, out_w), (pad_h, pad_w)


# --------------------------------------------------------------------------- softmax / logistic


def preprocess_softmax_scaling(beta: float, input_scale: float, input_integer_bits: int) -> tuple[int, int]:
    """TFLM PreprocessSoftmaxScaling (double-rounding build): (multiplier, left_shift)."""
    max_real = float((1 << 31) - 1)
    real = min(float(beta) * float(input_scale) * float(1 << (31 - input_integer_bits)), max_real)
    return quantize_multiplier_greater_than_one(real)


def calculate_input_radius(input_integer_bits: int, input_left_shift: int, total_signed_bits: int = 31) -> int:
    """TFLM CalculateInputRadius (float build): floor of the largest safe |input| before rescaling."""
    if input_left_shift < 0 or input_left_shift > 62:
        raise ValueError(f"input left shift {input_left_shift} out of range")
    max_input_rescaled = (
        1.0
        * ((1 << input_integer_bits) - 1)
        * float(1 << (total_signed_bits - input_integer_bits))
        / float(1 << input_left_shift)
    )
    return int(math.floor(max_input_rescaled))


def logistic_input_params(input_scale: float) -> tuple[int, int, int]:
    """TFLM int8 LOGISTIC prepare: (input_multiplier, input_left_shift, input_range_radius).

    Note TFLM uses a bare frexp here (no QuantizeMultiplier), so the multiplier is not
    renormalised; for float32 scales q * 2^31 is always an exact integer below 2^31.
    """
    k_input_integer_bits = 4
    real = f32(input_scale) * float(1 << (31 - k_input_integer_bits))
    if not real > 0:
        raise ValueError(f"logistic input scale must be positive, got {input_scale!r}")
    q, left_shift = math.frexp(real)
    mult = int(round_half_away(q * float(1 << 31)))
    if mult > INT32_MAX:
        raise ValueError(f"logistic input scale {input_scale!r} gives an unrepresentable multiplier")
    if left_shift < 0 or left_shift > 62:
        raise ValueError(
            f"logistic input scale {input_scale!r} is out of the supported range "
            f"(left shift {left_shift} not in [0, 62])"
        )
    radius = calculate_input_radius(k_input_integer_bits, left_shift, 31)
    return mult, left_shift, radius


# ------------------------------------------------------------------------------ user data


def as_samples(
    x: np.ndarray,
    shape: tuple[int, ...],
    scale: float | None,
    zero_point: int | None,
    what: str = "inputs",
    dtype: str = "int8",
) -> np.ndarray:
    """Bring user data to the model input's type `dtype` (int8, uint8 or float32) as [N, *shape]: the
    model's leading batch dim of 1 is optional.  For an integer input, float data is quantized with
    the input's scale and zero point (round half away from zero, as TFLite); a float input takes
    float data as float32, left to the model's own QUANTIZE.  Warns (the zoflash logger) when more
    than SATURATION_WARNING of the values saturate."""
    samples, saturated = samples_and_saturation(x, shape, scale, zero_point, what, dtype)
    if saturated > SATURATION_WARNING:  # e.g. 0..255 pixels for a model trained on [0, 1]
        log.warning(
            "%s: %.1f%% of the values fall outside the input's range [%.4g, %.4g] and saturate; "
            "are they in the model's units?",
            what,
            100 * saturated,
            *input_real_range(scale, zero_point, dtype),
        )
    return samples


def input_real_range(scale: float | None, zero_point: int | None, dtype: str) -> tuple[float, float]:
    """The real values an integer input of this type, scale and zero point can hold."""
    lo, hi = _INPUT_RANGES.get(dtype, (INT8_MIN, INT8_MAX))
    return (lo - (zero_point or 0)) * (scale or 0.0), (hi - (zero_point or 0)) * (scale or 0.0)


_INPUT_RANGES = {"uint8": (0, 255), "int16": (-32768, 32767)}  # else int8


def samples_and_saturation(
    x: np.ndarray,
    shape: tuple[int, ...],
    scale: float | None,
    zero_point: int | None,
    what: str = "inputs",
    dtype: str = "int8",
) -> tuple[np.ndarray, float]:
    """as_samples without the warning, and the share of the values quantizing clipped to the input's
    range (0.0 unless float data were quantized)."""
    x = np.asarray(x)
    shape = tuple(shape)
    if x.shape[1:] == shape:
        pass
    elif shape and shape[0] == 1 and x.shape[1:] == shape[1:]:
        x = x.reshape((x.shape[0],) + shape)
    elif x.shape == shape or (shape and shape[0] == 1 and x.shape == shape[1:]):
        x = x.reshape((1,) + shape)
    else:
        raise DataError(
            f"{what} have shape {list(x.shape)}; expected [N, {', '.join(map(str, shape))}]"
            + (f" or [N, {', '.join(map(str, shape[1:]))}]" if shape and shape[0] == 1 else "")
        )
    if x.dtype.kind == "f" and not np.all(np.isfinite(x)):
        bad = int(np.count_nonzero(~np.isfinite(x)))
        raise DataError(f"{what} hold {bad} NaN or infinite value(s); give finite numbers")
    if dtype == "float32":
        if x.dtype.kind != "f":
            raise DataError(f"{what} are {x.dtype}; the model takes float32 input: give float data in its real units")
        return np.ascontiguousarray(x, np.float32), 0.0
    if x.dtype == np.dtype(dtype):
        return np.ascontiguousarray(x), 0.0
    if x.dtype.kind == "f":
        if scale is None:
            raise DataError(f"{what} are float but the model input has no quantization")
        lo, hi = _INPUT_RANGES.get(dtype, (INT8_MIN, INT8_MAX))
        q = round_half_away_array(np.asarray(x, np.float64) / scale) + zero_point
        saturated = float(np.mean((q < lo) | (q > hi))) if q.size else 0.0
        return np.clip(q, lo, hi).astype(dtype), saturated
    raise DataError(
        f"{what} are {x.dtype}; give {dtype} data (the model's input type) or float32 in the model's real units"
    )
