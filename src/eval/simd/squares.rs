//! Σ a² and Σ (a − b)², the two sums every SQNR here is made of, taken fast: the per-tensor
//! comparison and the local-error operator ([`crate::eval::tensor_error::error_sums`]) sum tens of millions of
//! values a sample (PP-OCR rec's quantized activations hold 45 M), where a plain float64
//! running sum is bound by the latency of one addition per value.

use ndarray::ArrayViewD;

/// Independent running sums, so the additions pipeline and vectorize.
const LANES: usize = 8;

/// Values per lane summed in float32 before being added to the float64 totals: every term
/// is a square, so a block's relative rounding stays under 32 × 2⁻²⁴ (2 · 10⁻⁶, a 10⁻⁵ dB
/// change of an SQNR) while the inner loop runs at float32's vector width.
pub(crate) const BLOCK: usize = 32 * LANES;

/// `[Σ float², Σ (float − local)²]` over the values both slices hold, `value` taking each
/// local element to float32; the difference is taken in f32, as the Sub of the float model's
/// type would.
///
/// Each block is summed in three simple loops (squares of the float values; the local values
/// taken to float32 into a buffer; squares of the differences) rather than one: with both
/// sums and the conversion in one loop the compiler packed them into mixed vectors of scalar
/// lanes, 2 to 3 cycles a value (measured). Every lane still adds its values in order, so the
/// sums are bit for bit those of one loop.
///
/// Where the CPU has AVX2 (picked at run time), each block's sums take one 8-lane vector
/// per sum ([`block_sums_avx2`]), the conversion loop compiled for it too; the baseline
/// build (SSE2) takes [`block_sums`]. Both add the same values in the same order with the
/// same float32 operations (no fused multiply-add), so the sums are bit for bit alike
/// (checked by the tests); only their speed differs. PP-OCR rec's local-error model spent
/// 393 ms in `ErrorSums` over 16 samples against 524 ms with the baseline loops (ONNX
/// Runtime's profile); the rest of it waits on memory.
pub fn squared_sums<T: Copy>(float: &[f32], local: &[T], value: impl Fn(T) -> f32) -> [f64; 2] {
    squared_sums_onto([0.0; 2], float, local, value)
}

/// [`squared_sums`] added block by block onto `totals`, the sums of the values before: a
/// slice summed in parts of whole [`BLOCK`]s, each onto the totals of those before it, gives
/// the bits of one call over the whole.
pub fn squared_sums_onto<T: Copy>(
    totals: [f64; 2],
    float: &[f32],
    local: &[T],
    value: impl Fn(T) -> f32,
) -> [f64; 2] {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above; nothing else is required.
        return unsafe { squared_sums_avx2(totals, float, local, value) };
    }
    sums_in_blocks(totals, float, local, value, block_sums)
}

/// [`sums_in_blocks`] compiled for AVX2, with [`block_sums_avx2`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn squared_sums_avx2<T: Copy>(
    totals: [f64; 2],
    float: &[f32],
    local: &[T],
    value: impl Fn(T) -> f32,
) -> [f64; 2] {
    sums_in_blocks(totals, float, local, value, |f, l| block_sums_avx2(f, l))
}

/// The body of [`squared_sums`], inlined into each of its compiled forms: each block's
/// local values taken to float32 into a buffer, then summed by `block`.
#[inline(always)]
fn sums_in_blocks<T: Copy>(
    mut totals: [f64; 2],
    float: &[f32],
    local: &[T],
    value: impl Fn(T) -> f32,
    block: impl Fn(&[f32], &[f32]) -> [[f32; LANES]; 2],
) -> [f64; 2] {
    let mut converted = [0.0_f32; BLOCK];
    for (f, l) in float.chunks(BLOCK).zip(local.chunks(BLOCK)) {
        let converted = &mut converted[..f.len().min(l.len())];
        for (c, &l) in converted.iter_mut().zip(l) {
            *c = value(l);
        }
        let [signal, noise] = block(&f[..converted.len()], converted);
        totals[0] += signal.iter().map(|&v| f64::from(v)).sum::<f64>();
        totals[1] += noise.iter().map(|&v| f64::from(v)).sum::<f64>();
    }
    totals
}

/// [`block_sums`] with the [`LANES`] lanes of each sum in one AVX2 vector: per group of
/// eight values a multiply and an add into the signal, a subtract, multiply and add into the
/// noise, the operations [`block_sums`] does lane by lane.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn block_sums_avx2(f: &[f32], l: &[f32]) -> [[f32; LANES]; 2] {
    use std::arch::x86_64::{
        _mm256_add_ps, _mm256_loadu_ps, _mm256_mul_ps, _mm256_setzero_ps, _mm256_storeu_ps,
        _mm256_sub_ps,
    };
    const _: () = assert!(LANES == 8, "an AVX2 vector holds eight float32 lanes");
    let (fs, f_rest) = f.as_chunks::<LANES>();
    let (ls, l_rest) = l.as_chunks::<LANES>();
    let (mut signal, mut noise) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for (f, l) in fs.iter().zip(ls) {
        // SAFETY: each chunk holds eight float32 values, the eight the loads read.
        let (f, l) = unsafe { (_mm256_loadu_ps(f.as_ptr()), _mm256_loadu_ps(l.as_ptr())) };
        signal = _mm256_add_ps(signal, _mm256_mul_ps(f, f));
        let d = _mm256_sub_ps(f, l);
        noise = _mm256_add_ps(noise, _mm256_mul_ps(d, d));
    }
    let mut sums = [[0.0_f32; LANES]; 2];
    // SAFETY: each array holds eight float32 values, the eight the stores write.
    unsafe {
        _mm256_storeu_ps(sums[0].as_mut_ptr(), signal);
        _mm256_storeu_ps(sums[1].as_mut_ptr(), noise);
    }
    let [signal, noise] = &mut sums;
    for (lane, (&f, &l)) in f_rest.iter().zip(l_rest).enumerate() {
        let d = f - l;
        signal[lane] += f * f;
        noise[lane] += d * d;
    }
    sums
}

/// One block's per-lane `[Σ f², Σ (f − l)²]` of two float slices of the same length.
#[inline(always)]
fn block_sums(f: &[f32], l: &[f32]) -> [[f32; LANES]; 2] {
    let (mut signal, mut noise) = ([0.0_f32; LANES], [0.0_f32; LANES]);
    let (fs, f_rest) = f.as_chunks::<LANES>();
    let (ls, l_rest) = l.as_chunks::<LANES>();
    for f in fs {
        for lane in 0..LANES {
            signal[lane] += f[lane] * f[lane];
        }
    }
    for (f, l) in fs.iter().zip(ls) {
        let mut d = [0.0_f32; LANES];
        for lane in 0..LANES {
            d[lane] = f[lane] - l[lane];
        }
        for lane in 0..LANES {
            noise[lane] += d[lane] * d[lane];
        }
    }
    for (lane, (&f, &l)) in f_rest.iter().zip(l_rest).enumerate() {
        let d = f - l;
        signal[lane] += f * f;
        noise[lane] += d * d;
    }
    [signal, noise]
}

/// [`squared_sums`] of two float arrays of the same length, through their slices when both
/// are contiguous (arrays a session hands back are), else value by value.
pub fn array_sums(float: &ArrayViewD<f32>, local: &ArrayViewD<f32>) -> [f64; 2] {
    match (float.as_slice(), local.as_slice()) {
        (Some(f), Some(l)) => squared_sums(f, l, |l| l),
        _ => float.iter().zip(local).fold([0.0; 2], |[s, n], (&f, &l)| {
            let d = f64::from(f - l);
            [s + f64::from(f) * f64::from(f), n + d * d]
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_of_squares_cover_every_value_lanes_and_remainder_alike() {
        let float = [3.0_f32, -1.0, 0.5];
        let local = [2.0_f32, -1.0, 0.25];
        assert_eq!(
            squared_sums(&float, &local, |l| l),
            [9.0 + 1.0 + 0.25, 1.0 + 0.0 + 0.0625]
        );
        // More values than lanes: the remainder is summed too.
        let float: Vec<f32> = (0..19).map(|i| i as f32).collect();
        let q: Vec<u8> = (0..19).map(|i| i as u8 + 1).collect();
        let [signal, noise] = squared_sums(&float, &q, |q| (i32::from(q) - 1) as f32 * 0.5);
        let expected_noise: f64 = (0..19).map(|i| (i as f64 * 0.5).powi(2)).sum();
        assert_eq!(signal, (0..19).map(|i| (i * i) as f64).sum::<f64>());
        assert_eq!(noise, expected_noise);
        // An array read across its strides sums the same values.
        let a = ndarray::Array2::from_shape_fn((3, 5), |(i, j)| (i * 5 + j) as f32).into_dyn();
        let b = a.mapv(|v| v - 0.5);
        let transposed = (a.t().to_owned(), b.t().to_owned());
        let strided = (a.t(), b.t());
        let sums = array_sums(&transposed.0.view(), &transposed.1.view());
        assert_eq!(sums, array_sums(&a.view(), &b.view()));
        assert_eq!(sums, array_sums(&strided.0, &strided.1));
        assert_eq!(sums[1], 15.0 * 0.25);
    }

    /// The per-lane order the sums are defined by, one value at a time: lane `i % LANES` of
    /// each block adds its values in order, in f32, and the lanes go to f64 per block.
    fn reference_sums(float: &[f32], local: &[u8], zero: i32, scale: f32) -> [f64; 2] {
        let mut totals = [0.0_f64; 2];
        for (f, l) in float.chunks(BLOCK).zip(local.chunks(BLOCK)) {
            let (mut signal, mut noise) = ([0.0_f32; LANES], [0.0_f32; LANES]);
            for (i, (&f, &l)) in f.iter().zip(l).enumerate() {
                let d = f - (i32::from(l) - zero) as f32 * scale;
                signal[i % LANES] += f * f;
                noise[i % LANES] += d * d;
            }
            totals[0] += signal.iter().map(|&v| f64::from(v)).sum::<f64>();
            totals[1] += noise.iter().map(|&v| f64::from(v)).sum::<f64>();
        }
        totals
    }

    #[test]
    fn sums_taken_in_parts_of_whole_blocks_equal_one_sum_over_the_whole() {
        let len = 5 * BLOCK + 77;
        let float: Vec<f32> = (0..len).map(|i| (i as f32 * 0.61).cos() * 2.3).collect();
        let q: Vec<i8> = (0..len).map(|i| (i * 13 % 255) as i8).collect();
        let dequantized = |q: i8| f32::from(q) * 0.019;
        let whole = squared_sums(&float, &q, dequantized);
        let parts = float
            .chunks(2 * BLOCK)
            .zip(q.chunks(2 * BLOCK))
            .fold([0.0; 2], |totals, (f, l)| {
                squared_sums_onto(totals, f, l, dequantized)
            });
        assert_eq!(parts, whole);
        // Parts cut inside a block sum in another order: the check above can tell.
        let uneven = float
            .chunks(BLOCK + 3)
            .zip(q.chunks(BLOCK + 3))
            .fold([0.0; 2], |totals, (f, l)| {
                squared_sums_onto(totals, f, l, dequantized)
            });
        assert_ne!(uneven, whole);
    }

    #[test]
    fn block_loops_sum_bit_for_bit_as_one_value_at_a_time() {
        // Lengths past whole blocks and lanes, values whose f32 sums round.
        for len in [0, 7, 8, 255, 256, 257, 1000, 4099] {
            let float: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin() * 3.1).collect();
            let q: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            let (zero, scale) = (131, 0.0247_f32);
            let dequantized = |q: u8| (i32::from(q) - zero) as f32 * scale;
            let expected = reference_sums(&float, &q, zero, scale);
            // The form this CPU picks (AVX2 where it has it), and the baseline one.
            let fast = squared_sums(&float, &q, dequantized);
            assert_eq!(fast, expected, "{len} values");
            let baseline = sums_in_blocks([0.0; 2], &float, &q, dequantized, block_sums);
            assert_eq!(baseline, expected, "{len} values, baseline loops");
        }
    }
}
