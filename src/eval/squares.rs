//! Σ a² and Σ (a − b)², the two sums every SQNR here is made of, taken fast: the per-tensor
//! comparison and the local-error operator ([`super::error_sums`]) sum tens of millions of
//! values a sample (PP-OCR rec's quantized activations hold 45 M), where a plain float64
//! running sum is bound by the latency of one addition per value.

use ndarray::ArrayD;

/// Independent running sums, so the additions pipeline and vectorize.
const LANES: usize = 8;

/// Values per lane summed in float32 before being added to the float64 totals: every term
/// is a square, so a block's relative rounding stays under 32 × 2⁻²⁴ (2 · 10⁻⁶, a 10⁻⁵ dB
/// change of an SQNR) while the inner loop runs at float32's vector width.
const BLOCK: usize = 32 * LANES;

/// `[Σ float², Σ (float − local)²]` over the values both slices hold, `value` taking each
/// local element to float32; the difference is taken in f32, as the Sub of the float model's
/// type would.
pub fn squared_sums<T: Copy>(float: &[f32], local: &[T], value: impl Fn(T) -> f32) -> [f64; 2] {
    let mut totals = [0.0_f64; 2];
    for (f, l) in float.chunks(BLOCK).zip(local.chunks(BLOCK)) {
        let (mut signal, mut noise) = ([0.0_f32; LANES], [0.0_f32; LANES]);
        let (fs, ls) = (f.chunks_exact(LANES), l.chunks_exact(LANES));
        let (f_rest, l_rest) = (fs.remainder(), ls.remainder());
        for (f, l) in fs.zip(ls) {
            for lane in 0..LANES {
                let d = f[lane] - value(l[lane]);
                signal[lane] += f[lane] * f[lane];
                noise[lane] += d * d;
            }
        }
        for (lane, (&f, &l)) in f_rest.iter().zip(l_rest).enumerate() {
            let d = f - value(l);
            signal[lane] += f * f;
            noise[lane] += d * d;
        }
        totals[0] += signal.iter().map(|&v| f64::from(v)).sum::<f64>();
        totals[1] += noise.iter().map(|&v| f64::from(v)).sum::<f64>();
    }
    totals
}

/// [`squared_sums`] of two float arrays of the same length, through their slices when both
/// are contiguous (arrays a session hands back are), else value by value.
pub fn array_sums(float: &ArrayD<f32>, local: &ArrayD<f32>) -> [f64; 2] {
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
        let sums = array_sums(&transposed.0, &transposed.1);
        assert_eq!(sums, array_sums(&a, &b));
        assert_eq!(
            sums,
            array_sums(&strided.0.to_owned(), &strided.1.to_owned())
        );
        assert_eq!(sums[1], 15.0 * 0.25);
    }
}
