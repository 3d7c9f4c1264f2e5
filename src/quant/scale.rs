//! Scale and zero-point maths, exactly as onnxruntime's quantizer computes them (f64
//! arithmetic, f32 scale, round half to even), plus value quantization and int32 bias.

use half::{bf16, f16};

use crate::model::DataType;

use crate::recipe::QuantType;

/// The integer range `[qmin, qmax]` a type is quantized to (onnxruntime's
/// `get_qmin_qmax_for_qType`): `reduce_range` first, then `symmetric` for signed types.
pub fn qrange(qtype: QuantType, reduce_range: bool, symmetric: bool) -> (i64, i64) {
    if reduce_range {
        return match qtype {
            QuantType::Uint8 => (0, 127),
            QuantType::Int8 => (-64, 64),
            QuantType::Uint16 => (0, 32767),
            QuantType::Int16 => (-16384, 16384),
            QuantType::Uint4 => (0, 7),
            QuantType::Int4 => (-4, 3),
            QuantType::Float8e4m3fn => (-448, 448),
        };
    }
    match (qtype, symmetric) {
        (QuantType::Int8, true) => (-127, 127),
        (QuantType::Int16, true) => (-32767, 32767),
        (QuantType::Uint8, _) => (0, 255),
        (QuantType::Int8, false) => (-128, 127),
        (QuantType::Uint16, _) => (0, 65535),
        (QuantType::Int16, false) => (-32768, 32767),
        (QuantType::Uint4, _) => (0, 15),
        (QuantType::Int4, _) => (-8, 7),
        (QuantType::Float8e4m3fn, _) => (-448, 448),
    }
}

/// The full storage range of a type, used to clip quantized values.
pub fn storage_range(qtype: QuantType) -> (i64, i64) {
    qrange(qtype, false, false)
}

/// A scale and zero point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScaleZp {
    /// The scale (stored as f32, like onnxruntime).
    pub scale: f32,
    /// The zero point, in the quantized type's range.
    pub zero_point: i64,
}

/// Rounds half to even, as numpy does.
pub fn round_half_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 {
        2.0 * (x / 2.0).round()
    } else {
        r
    }
}

/// onnxruntime's `compute_scale_zp`: includes zero in the range, makes it symmetric when
/// asked, computes the scale in f64 and stores it as f32; a range too small for an f32
/// scale gives scale 1, zero point 0.
pub fn compute_scale_zp(
    rmin: f32,
    rmax: f32,
    qmin: i64,
    qmax: i64,
    symmetric: bool,
    min_real_range: Option<f32>,
) -> ScaleZp {
    let mut rmin = f64::from(rmin.min(0.0));
    let mut rmax = f64::from(rmax.max(0.0));
    if let Some(min_range) = min_real_range {
        rmax = rmax.max(rmin + f64::from(min_range));
    }
    if symmetric {
        let a = rmin.abs().max(rmax.abs());
        rmin = -a;
        rmax = a;
    }
    let scale = (rmax - rmin) / (qmax - qmin) as f64;
    if scale < f64::from(f32::MIN_POSITIVE) {
        return ScaleZp {
            scale: 1.0,
            zero_point: 0,
        };
    }
    let zero_point = if symmetric {
        round_half_even((qmin + qmax) as f64 / 2.0) as i64
    } else {
        round_half_even(qmin as f64 - rmin / scale) as i64
    };
    ScaleZp {
        scale: scale as f32,
        zero_point,
    }
}

/// Scale and zero point of a range for a type.
pub fn scale_zp_for(
    rmin: f32,
    rmax: f32,
    qtype: QuantType,
    symmetric: bool,
    reduce_range: bool,
) -> ScaleZp {
    if qtype == QuantType::Float8e4m3fn {
        // FP8: symmetric, zero point 0, the range's magnitude mapped to 448 (E4M3FN's max).
        let a = f64::from(rmin.abs().max(rmax.abs()));
        let scale = if a > 0.0 { a / 448.0 } else { 1.0 };
        return ScaleZp {
            scale: scale as f32,
            zero_point: 0,
        };
    }
    let (qmin, qmax) = qrange(qtype, reduce_range, symmetric);
    compute_scale_zp(rmin, rmax, qmin, qmax, symmetric, None)
}

/// onnxruntime's `quantize_nparray`: `clip(round_half_even(f32(x) / scale) + zp)` over the
/// type's full range (even when the scale came from a reduced or symmetric range).
pub fn quantize_value(x: f32, p: ScaleZp, qtype: QuantType) -> i64 {
    let (lo, hi) = storage_range(qtype);
    // numpy divides and rounds in float32.
    let q = round_ties_even_f32(x / p.scale) as i64 + p.zero_point;
    q.clamp(lo, hi)
}

/// `x.round_ties_even()` without a libm call (x86-64 before SSE 4.1 has no rounding
/// instruction, and this runs once per weight): beyond ±2^22 every quantized value clips, so
/// `x` is clamped there, and adding then subtracting 1.5·2^23 rounds it to an integer, ties to
/// even, in the default rounding mode. NaN stays NaN.
fn round_ties_even_f32(x: f32) -> f32 {
    const LIMIT: f32 = 4_194_304.0;
    const MAGIC: f32 = 12_582_912.0;
    let x = x.clamp(-LIMIT, LIMIT);
    (x + MAGIC) - MAGIC
}

/// FP8 E4M3FN bits of `x / scale` (round to nearest even, saturating at ±448).
pub fn quantize_fp8(x: f32, scale: f32) -> u8 {
    float8::F8E4M3::from_f32(x / scale).to_bits()
}

/// The value a quantized integer stands for.
pub fn dequantize(q: i64, p: ScaleZp) -> f32 {
    ((q - p.zero_point) as f32) * p.scale
}

/// int32 bias quantization: `round_half_even(f64(b) / f64(scale))` clipped to int32.
pub fn quantize_bias(b: f32, scale: f32) -> i32 {
    let q = round_half_even(f64::from(b) / f64::from(scale));
    q.clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32
}

/// onnxruntime's int32-bias weight-scale adjustment: if `input_scale · weight_scale` is so
/// small that the bias would overflow int32, raise the weight scale (f64 maths, f32 result).
/// `bias_magnitude` is the channel's |bias| when per-channel, else the whole bias's absmax;
/// onnxruntime computes `1.0001 · 2·|b|` in float32 in the per-channel case, and that
/// rounding is reproduced.
pub fn adjust_weight_scale_for_bias(
    weight_scale: f32,
    input_scale: f32,
    bias_magnitude: f32,
    per_channel: bool,
) -> f32 {
    let qrange = f64::from(i32::MAX) - f64::from(i32::MIN + 1);
    let numerator = if per_channel {
        f64::from(1.0001f32 * (2.0 * bias_magnitude.max(0.0)))
    } else {
        1.0001 * (2.0 * f64::from(bias_magnitude.max(0.0)))
    };
    let smallest = numerator / qrange;
    let product = f64::from(input_scale) * f64::from(weight_scale);
    if product > 0.0 && product < smallest {
        (f64::from(weight_scale) * (smallest / product)) as f32
    } else {
        weight_scale
    }
}

/// `scale` as the scale tensor stores it: float32 as it is; for a float16 or bfloat16 tensor
/// (whose Q/DQ scale must be of its own type, opset 19) the nearest value of that type, or
/// the next one up when `at_least` (a scale raised for an int32 bias must not drop back).
/// Never zero or infinite: a scale below the type's smallest step becomes that step, one
/// above its largest value becomes that value.
pub fn stored_scale(scale: f32, float_type: DataType, at_least: bool) -> f32 {
    match float_type {
        DataType::Float16 => {
            let mut h = f16::from_f32(scale);
            if at_least && h.to_f32() < scale && h < f16::MAX {
                h = f16::from_bits(h.to_bits() + 1);
            }
            h.clamp(f16::from_bits(1), f16::MAX).to_f32()
        }
        DataType::BFloat16 => {
            let mut h = bf16::from_f32(scale);
            if at_least && h.to_f32() < scale && h < bf16::MAX {
                h = bf16::from_bits(h.to_bits() + 1);
            }
            h.clamp(bf16::from_bits(1), bf16::MAX).to_f32()
        }
        _ => scale,
    }
}

/// `value` rounded to the nearest value of `float_type` (float16 or bfloat16; any other type
/// leaves it as it is). Unlike [`stored_scale`], zero and infinity can come out.
pub fn rounded_to(value: f32, float_type: DataType) -> f32 {
    match float_type {
        DataType::Float16 => f16::from_f32(value).to_f32(),
        DataType::BFloat16 => bf16::from_f32(value).to_f32(),
        _ => value,
    }
}

/// `params` with every scale as [`stored_scale`] gives it.
pub fn store_scales(params: &mut [ScaleZp], float_type: DataType, at_least: bool) {
    for p in params {
        p.scale = stored_scale(p.scale, float_type, at_least);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values onnxruntime 1.31.1 prints for these ranges (reference §2.8).
    #[test]
    fn scales_and_zero_points_match_onnxruntime() {
        let u8a = scale_zp_for(-1.0, 3.0, QuantType::Uint8, false, false);
        assert_eq!((u8a.scale, u8a.zero_point), (0.015_686_275, 64));
        let s8a = scale_zp_for(-1.0, 3.0, QuantType::Int8, false, false);
        assert_eq!((s8a.scale, s8a.zero_point), (0.015_686_275, -64));
        let s8s = scale_zp_for(-1.0, 3.0, QuantType::Int8, true, false);
        assert_eq!((s8s.scale, s8s.zero_point), (0.023_622_047, 0));
        let u8s = scale_zp_for(-1.0, 3.0, QuantType::Uint8, true, false);
        assert_eq!((u8s.scale, u8s.zero_point), (0.023_529_412, 128));
        let s8r = scale_zp_for(-1.0, 3.0, QuantType::Int8, true, true);
        assert_eq!(s8r.scale, 0.046_875);
        let u8r = scale_zp_for(-1.0, 3.0, QuantType::Uint8, false, true);
        assert_eq!((u8r.scale, u8r.zero_point), (0.031_496_063, 32));
        let zero = scale_zp_for(0.0, 0.0, QuantType::Uint8, false, false);
        assert_eq!((zero.scale, zero.zero_point), (1.0, 0));
        let u16s = scale_zp_for(-1.0, 1.0, QuantType::Uint16, true, false);
        assert_eq!(u16s.zero_point, 32768);
    }

    #[test]
    fn rounding_is_half_to_even_and_values_clip_to_the_full_range() {
        assert_eq!(round_half_even(2.5), 2.0);
        assert_eq!(round_half_even(3.5), 4.0);
        assert_eq!(round_half_even(-2.5), -2.0);
        let p = ScaleZp {
            scale: 1.0,
            zero_point: 0,
        };
        assert_eq!(quantize_value(300.0, p, QuantType::Int8), 127);
        assert_eq!(quantize_value(-300.0, p, QuantType::Int8), -128);
        assert_eq!(quantize_value(0.5, p, QuantType::Int8), 0);
        assert_eq!(quantize_bias(1e12, 1.0), i32::MAX);
    }

    #[test]
    fn fast_rounding_is_round_ties_even_wherever_values_do_not_clip() {
        for x in [
            0.5f32, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 126.5, -127.5, 3.7, -3.7,
        ] {
            assert_eq!(round_ties_even_f32(x), x.round_ties_even(), "{x}");
        }
        let mut x = -70_000.0f32;
        while x < 70_000.0 {
            assert_eq!(round_ties_even_f32(x), x.round_ties_even(), "{x}");
            x += 0.25 + x.abs() * 1e-4;
        }
        assert!(round_ties_even_f32(f32::NAN).is_nan());
        assert_eq!(round_ties_even_f32(f32::INFINITY), 4_194_304.0);
    }

    #[test]
    fn tiny_weight_scales_are_raised_for_int32_bias() {
        let adjusted = adjust_weight_scale_for_bias(1e-10, 1e-3, 100.0, false);
        assert!(adjusted > 1e-10);
        assert!(quantize_bias(100.0, 1e-3 * adjusted).abs() < i32::MAX);
        assert_eq!(adjust_weight_scale_for_bias(0.01, 0.01, 1.0, true), 0.01);
    }

    #[test]
    fn half_scales_are_representable_never_zero_and_raised_ones_stay_raised() {
        assert_eq!(stored_scale(0.1, DataType::Float32, false), 0.1);
        let h = stored_scale(0.1, DataType::Float16, false);
        assert_eq!(h, f16::from_f32(0.1).to_f32());
        assert!(h != 0.1 && (h - 0.1).abs() < 1e-4);
        assert!(stored_scale(0.1, DataType::Float16, true) >= 0.1);
        assert!(stored_scale(0.1, DataType::BFloat16, true) >= 0.1);
        assert_eq!(
            stored_scale(1e-12, DataType::Float16, false),
            f16::from_bits(1).to_f32()
        );
        assert_eq!(stored_scale(1e9, DataType::Float16, false), 65504.0);
        assert_eq!(
            stored_scale(1e-12, DataType::BFloat16, false),
            bf16::from_f32(1e-12).to_f32()
        );
    }
}
