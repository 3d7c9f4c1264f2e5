//! Weight ranges of least squared error (recipe `weight_range = "mse"`): each channel of a
//! weight (or the whole weight, per tensor) is quantized over its extremes shrunk by the
//! ratio whose rounding and clipping error, summed over the channel's values, is least.
//!
//! Why: with extremes, one outlier sets the step of every other value of its scale. A
//! trained transformer's feed-forward output projection (MiniLM's first layer) holds one
//! weight of 7.5 among values of 0.03: per tensor, a step of 7.5/63 rounds nearly every
//! weight to zero, and that one layer takes the whole model's output from 28.7 dB to 8 dB
//! (weights alone). Clipping the outlier costs it a little and gives everything else its
//! resolution back. The error is measured with the rewrite's own rounding
//! ([`WeightQuant::quantize`]: round half to even, clamped to the grid the scale is for, so
//! 7-bit weights stay 7-bit).
//!
//! The search is data-free (the weight's values alone), so it is reproducible from the
//! recipe and the same in the rewrite, bias correction and GPTQ's grid, which all take a
//! weight's parameters from [`super::rewrite::weight_params`]. Ratios from 1 down to about
//! 1 % are tried in geometric steps of [`COARSE_FACTOR`] (an outlier 250 times the rest wants
//! about 12 %), then around each channel's best in quarter steps: 27 passes over the weight,
//! all channels at once.

use rayon::prelude::*;

use super::params::WeightQuant;
use super::scale::{ScaleZp, dequantize, scale_zp_for};

/// The first search's ratio between neighbouring candidates.
const COARSE_FACTOR: f32 = 0.8;
/// Candidates of the first search, from 1 down to `COARSE_FACTOR^(COARSE_STEPS - 1)` (1.1 %).
const COARSE_STEPS: i32 = 21;
/// Candidates of the second search on each side of the first one's best, `FINE_STEPS + 1`
/// of them per coarse step.
const FINE_STEPS: i32 = 3;
/// Values per parallel span when the whole weight is one channel.
const SPAN: usize = 1 << 15;

/// How a flat weight divides into channels: element `i` belongs to channel
/// `(i / inner) % channels`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Channels {
    /// Number of channels (1 per tensor).
    pub count: usize,
    /// Consecutive values of one channel (the product of the dimensions after the axis).
    pub inner: usize,
}

impl Channels {
    /// The channels of a weight of `shape` along `axis` (one for all without an axis, or
    /// with one beyond the shape).
    pub fn along(shape: &[usize], axis: Option<usize>) -> Channels {
        match axis.filter(|&a| a < shape.len()) {
            Some(a) => Channels {
                count: shape[a],
                inner: shape[a + 1..].iter().product(),
            },
            None => Channels {
                count: 1,
                inner: shape.iter().product(),
            },
        }
    }

    /// The channel of the element at `flat` (standard layout).
    pub fn of(&self, flat: usize) -> usize {
        (flat / self.inner.max(1)) % self.count.max(1)
    }
}

/// The parameters of each channel of `flat` (laid out as `channels` says, each channel's
/// extremes in `extremes`) over the shrunk range of least squared error.
pub fn least_error_params(
    flat: &[f32],
    channels: Channels,
    extremes: &[(f32, f32)],
    how: &WeightQuant,
) -> Vec<ScaleZp> {
    let params_at = |ratios: &[f32]| -> Vec<ScaleZp> {
        extremes
            .iter()
            .zip(ratios)
            .map(|(&(lo, hi), &r)| {
                scale_zp_for(
                    lo.min(0.0) * r,
                    hi.max(0.0) * r,
                    how.qtype,
                    how.symmetric,
                    how.reduce_range,
                )
            })
            .collect()
    };
    let n = extremes.len();
    let mut best = Best {
        ratio: vec![1.0f32; n],
        error: channel_errors(flat, channels, &params_at(&vec![1.0; n]), how),
    };
    for k in 1..COARSE_STEPS {
        let ratios = vec![COARSE_FACTOR.powi(k); n];
        best.keep_better(
            &ratios,
            channel_errors(flat, channels, &params_at(&ratios), how),
        );
    }
    let centre = best.ratio.clone();
    let fine = |k: i32| COARSE_FACTOR.powf(k as f32 / (FINE_STEPS + 1) as f32);
    for k in (-FINE_STEPS..=FINE_STEPS).filter(|&k| k != 0) {
        let ratios: Vec<f32> = centre.iter().map(|&r| (r * fine(k)).min(1.0)).collect();
        best.keep_better(
            &ratios,
            channel_errors(flat, channels, &params_at(&ratios), how),
        );
    }
    params_at(&best.ratio)
}

/// Each channel's best ratio so far and its error.
struct Best {
    ratio: Vec<f32>,
    error: Vec<f64>,
}

impl Best {
    /// Takes each channel's ratio from `ratios` where its error is strictly less (ties keep
    /// the wider range).
    fn keep_better(&mut self, ratios: &[f32], errors: Vec<f64>) {
        for (c, e) in errors.into_iter().enumerate() {
            if e < self.error[c] {
                self.error[c] = e;
                self.ratio[c] = ratios[c];
            }
        }
    }
}

/// Squared error of quantizing each channel of `flat` with its parameters.
fn channel_errors(
    flat: &[f32],
    channels: Channels,
    params: &[ScaleZp],
    how: &WeightQuant,
) -> Vec<f64> {
    let n = channels.count.max(1);
    let inner = channels.inner.max(1);
    let error = |v: f32, p: ScaleZp| {
        let d = f64::from(v) - f64::from(dequantize(how.quantize(v, p), p));
        d * d
    };
    let empty = vec![0f64; n];
    let add = |mut a: Vec<f64>, b: Vec<f64>| {
        for (x, y) in a.iter_mut().zip(b) {
            *x += y;
        }
        a
    };
    if n == 1 {
        let total = flat
            .par_chunks(SPAN)
            .map(|span| span.iter().map(|&v| error(v, params[0])).sum::<f64>())
            .sum();
        return vec![total];
    }
    flat.par_chunks(n * inner)
        .fold(
            || empty.clone(),
            |mut acc, span| {
                if inner == 1 {
                    // A MatMul's channels are its columns: one value of each per row.
                    for ((a, &v), &p) in acc.iter_mut().zip(span).zip(params) {
                        *a += error(v, p);
                    }
                    return acc;
                }
                for (c, lane) in span.chunks(inner).enumerate() {
                    acc[c] += lane.iter().map(|&v| error(v, params[c])).sum::<f64>();
                }
                acc
            },
        )
        .reduce(|| empty.clone(), add)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::{QuantType, WeightRange};

    fn how(reduce_range: bool) -> WeightQuant {
        WeightQuant {
            qtype: QuantType::Int8,
            symmetric: true,
            reduce_range,
            axis: None,
            block_size: None,
            range: WeightRange::Mse,
        }
    }

    /// The squared error `how` quantizes `flat` with (clamped to its grid).
    fn squared_error(flat: &[f32], p: ScaleZp, how: &WeightQuant) -> f64 {
        flat.iter()
            .map(|&v| {
                let d = v - dequantize(how.quantize(v, p), p);
                f64::from(d * d)
            })
            .sum()
    }

    /// Many small values with one outlier 250 times their size (MiniLM's first feed-forward
    /// output projection): at the extremes' step the small values all round to zero.
    fn outlier_weight() -> Vec<f32> {
        let mut flat: Vec<f32> = (0..200_000)
            .map(|i| ((i as f32) * 0.37).sin() * 0.03)
            .collect();
        flat[17] = 7.5;
        flat
    }

    #[test]
    fn an_outlier_is_clipped_and_the_error_falls() {
        let flat = outlier_weight();
        let one = Channels {
            count: 1,
            inner: flat.len(),
        };
        for reduce_range in [false, true] {
            let how = how(reduce_range);
            let minmax = scale_zp_for(-0.03, 7.5, how.qtype, true, reduce_range);
            let mse = least_error_params(&flat, one, &[(-0.03, 7.5)], &how)[0];
            assert!(mse.scale < 0.8 * minmax.scale, "{mse:?} vs {minmax:?}");
            assert!(
                squared_error(&flat, mse, &how) < 0.5 * squared_error(&flat, minmax, &how),
                "reduce_range {reduce_range}"
            );
        }
    }

    #[test]
    fn an_even_weight_keeps_its_extremes_or_close() {
        // Uniform values: clipping gains little; the range stays within the fine steps.
        let flat: Vec<f32> = (0..2001).map(|i| i as f32 / 1000.0 - 1.0).collect();
        let one = Channels {
            count: 1,
            inner: flat.len(),
        };
        let p = least_error_params(&flat, one, &[(-1.0, 1.0)], &how(false))[0];
        let minmax = scale_zp_for(-1.0, 1.0, QuantType::Int8, true, false);
        assert!(p.scale > 0.95 * minmax.scale, "{p:?} vs {minmax:?}");
        let how = how(false);
        assert!(squared_error(&flat, p, &how) <= squared_error(&flat, minmax, &how));
    }

    #[test]
    fn each_channel_is_searched_on_its_own_values() {
        // Two channels interleaved (inner 1): column 0 has an outlier, column 1 none.
        let outlier = outlier_weight();
        let even: Vec<f32> = (0..outlier.len())
            .map(|i| (i as f32 * 0.11).cos() * 0.03)
            .collect();
        let flat: Vec<f32> = outlier
            .iter()
            .zip(&even)
            .flat_map(|(a, b)| [*a, *b])
            .collect();
        let two = Channels { count: 2, inner: 1 };
        let p = least_error_params(&flat, two, &[(-0.03, 7.5), (-0.03, 0.03)], &how(false));
        let minmax = |hi: f32| scale_zp_for(-hi, hi, QuantType::Int8, true, false);
        assert!(p[0].scale < 0.8 * minmax(7.5).scale);
        assert!(p[1].scale > 0.75 * minmax(0.03).scale);
    }
}
