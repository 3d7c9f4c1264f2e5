//! QuantizeLinear's arithmetic as ONNX Runtime's CPU kernel does it (MLAS), for the operator
//! that quantizes a float tensor while it sums its error ([`crate::eval::tensor_error::error_sums`]): the local
//! model's copies then read the same integers they would read from a QuantizeLinear node,
//! bit for bit (checked against ONNX Runtime's own node by the tests there).
//!
//! Per value: `x / scale` (a true division, as MLAS does, never a product with the
//! reciprocal), clamped to the type's range less the zero point with the comparisons of
//! `maxps` and `minps` (a NaN goes to the lower bound), rounded to nearest with ties to even,
//! plus the zero point.

/// An integer type QuantizeLinear writes.
pub trait QuantizedInt: Copy + Send + Sync {
    /// The type's least value.
    const MIN: f32;
    /// The type's greatest value.
    const MAX: f32;
    /// `value`, which lies in the type's range.
    fn from_i32(value: i32) -> Self;
}

macro_rules! quantized_int {
    ($($t:ty),*) => {$(
        impl QuantizedInt for $t {
            const MIN: f32 = <$t>::MIN as f32;
            const MAX: f32 = <$t>::MAX as f32;
            fn from_i32(value: i32) -> Self {
                value as $t
            }
        }
    )*};
}
quantized_int!(u8, i8, u16, i16);

/// Writes into `out` each value of `float` quantized by `scale` and `zero` (see the module
/// docs); both slices have the same length.
pub fn quantize_linear<T: QuantizedInt>(float: &[f32], out: &mut [T], scale: f32, zero: i32) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above; nothing else is required.
        return unsafe { quantize_avx2(float, out, scale, zero) };
    }
    quantize(float, out, scale, zero);
}

/// [`quantize`] compiled for AVX2: the division, comparisons and rounding take 8 values at
/// once. (Multiplying by the reciprocal instead, dividing only near ties, was tried: no
/// faster on PP-OCR rec's local model, whose operator waits on memory, not on division.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn quantize_avx2<T: QuantizedInt>(float: &[f32], out: &mut [T], scale: f32, zero: i32) {
    quantize(float, out, scale, zero);
}

/// The loop of [`quantize_linear`], inlined into each of its compiled forms.
#[inline(always)]
fn quantize<T: QuantizedInt>(float: &[f32], out: &mut [T], scale: f32, zero: i32) {
    let (low, high) = (T::MIN - zero as f32, T::MAX - zero as f32);
    for (q, &x) in out.iter_mut().zip(float) {
        let v = x / scale;
        let v = if v > low { v } else { low };
        let v = if v < high { v } else { high };
        // SAFETY: `v` lies in [low, high], integers within the range of an i32 (a NaN took
        // `low` above), and so does its rounding. A checked cast would compare each value
        // again and keep the loop from taking 8 at once.
        let rounded = unsafe { v.round_ties_even().to_int_unchecked::<i32>() };
        *q = T::from_i32(rounded + zero);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_half_to_even_and_saturate_at_the_types_bounds() {
        let float = [0.5, 1.5, 2.5, -0.5, -1.5, 1000.0, -1000.0, f32::NAN, 0.26];
        let mut out = [0_u8; 9];
        quantize_linear(&float, &mut out, 1.0, 128);
        assert_eq!(out, [128, 130, 130, 128, 126, 255, 0, 0, 128]);
        let mut out = [0_i8; 9];
        quantize_linear(&float, &mut out, 0.5, 0);
        assert_eq!(out, [1, 3, 5, -1, -3, 127, -128, -128, 1]);
        let mut out = [0_i16; 2];
        quantize_linear(&[1e9, -3.0], &mut out, 0.25, -10);
        assert_eq!(out, [i16::MAX, -22]);
    }
}
