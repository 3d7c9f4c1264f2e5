//! Range methods: from a tensor's statistics to the `[lo, hi]` its quantizer uses.
//!
//! MinMax, Entropy (KL divergence, onnxruntime's search), Percentile, MSE (the clipping range
//! minimising expected quantization error for the target integer grid, as Quark's MinMSE) and
//! power-of-two variants for NPU targets. Each works on the streaming histogram; in parity mode
//! Entropy and Percentile use the onnxruntime-layout histograms of the two-pass run instead.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::histogram::Histogram;
pub use super::range_method::RangeMethod;
use super::stats::TensorStats;

/// The integer grid a range is chosen for (MSE and power-of-two methods depend on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeTarget {
    /// Number of quantization levels minus one (255 for 8-bit, 65535 for 16-bit).
    pub steps: u32,
    /// True when the range will be made symmetric around zero.
    pub symmetric: bool,
}

impl Default for RangeTarget {
    /// 8-bit asymmetric (uint8 activations, onnxruntime's usual choice).
    fn default() -> Self {
        RangeTarget {
            steps: 255,
            symmetric: false,
        }
    }
}

/// A calibrated range.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Range {
    /// Lower end.
    pub lo: f32,
    /// Upper end.
    pub hi: f32,
}

/// Why a range could not be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// The tensor never held a finite value.
    #[error("no finite values were observed (all NaN/Inf, or the tensor was never computed)")]
    NoData,
    /// The method needs a histogram the statistics do not have.
    #[error("{0} needs histograms; calibrate again with histograms enabled")]
    NoHistogram(&'static str),
}

fn clip(lo: f64, hi: f64, stats: &TensorStats) -> Range {
    Range {
        lo: (lo as f32).max(stats.min),
        hi: (hi as f32).min(stats.max),
    }
}

/// Computes `method`'s range for a tensor. `parity` selects onnxruntime's histogram layouts
/// (two-pass statistics) for Entropy and Percentile.
pub fn compute(
    stats: &TensorStats,
    method: &RangeMethod,
    target: RangeTarget,
    parity: bool,
) -> Result<Range, RangeError> {
    if !stats.has_data() {
        return Err(RangeError::NoData);
    }
    let histogram = || {
        stats
            .histogram
            .as_ref()
            .ok_or(RangeError::NoHistogram(method.name()))
    };
    match *method {
        RangeMethod::MinMax { moving_average } => Ok(if moving_average && stats.batches > 0 {
            Range {
                lo: (stats.batch_min_sum / stats.batches as f64) as f32,
                hi: (stats.batch_max_sum / stats.batches as f64) as f32,
            }
        } else {
            Range {
                lo: stats.min,
                hi: stats.max,
            }
        }),
        RangeMethod::Entropy { num_quantized_bins } => {
            let parity_histogram = stats.parity_histogram.as_ref().filter(|_| parity);
            let h = match parity_histogram {
                Some(h) => h,
                None => histogram()?,
            };
            let (lo, hi) = entropy_threshold(&h.counts, &h.edges(), num_quantized_bins, parity);
            Ok(clip(lo, hi, stats))
        }
        RangeMethod::Percentile {
            percentile,
            symmetric,
        } => {
            if parity
                && symmetric
                && let Some(abs) = &stats.abs_histogram
            {
                let idx = search_cdf(&abs.counts, percentile / 100.0);
                let thr = abs.edges()[idx.min(abs.counts.len())];
                return Ok(clip(-thr, thr, stats));
            }
            let h = histogram()?;
            Ok(percentile_range(h, stats, percentile, symmetric))
        }
        RangeMethod::Mse => {
            let h = histogram()?;
            Ok(mse_range(h, stats, target))
        }
        RangeMethod::PowerOfTwoNonOverflow | RangeMethod::PowerOfTwoMse => {
            let h = histogram()?;
            Ok(power_of_two_range(
                h,
                stats,
                target,
                matches!(method, RangeMethod::PowerOfTwoMse),
            ))
        }
    }
}

/// Every method's range for a tensor (methods that fail are left out).
pub fn all_ranges(
    stats: &TensorStats,
    target: RangeTarget,
    parity: bool,
) -> BTreeMap<&'static str, Range> {
    RangeMethod::all()
        .iter()
        .filter_map(|m| {
            compute(stats, m, target, parity)
                .ok()
                .map(|r| (m.name(), r))
        })
        .collect()
}

/// First index where the cumulative distribution reaches `q` (numpy `searchsorted`, left).
fn search_cdf(counts: &[u64], q: f64) -> usize {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return 0;
    }
    let mut cumulative = 0.0;
    for (i, &c) in counts.iter().enumerate() {
        cumulative += c as f64 / total as f64;
        if cumulative >= q {
            return i;
        }
    }
    counts.len()
}

fn percentile_range(h: &Histogram, stats: &TensorStats, percentile: f64, symmetric: bool) -> Range {
    let t = f64::from(h.half_range);
    if symmetric {
        let folded = h.folded();
        let n = folded.len();
        let idx = search_cdf(&folded, percentile / 100.0);
        // Upper edge of the bin that reaches the percentile: never cut inside the bin.
        let thr = t * (idx + 1).min(n) as f64 / n as f64;
        clip(-thr, thr, stats)
    } else {
        let edges = h.edges();
        let cut = (100.0 - percentile) / 200.0;
        let left = search_cdf(&h.counts, cut);
        let right = search_cdf(&h.counts, 1.0 - cut);
        clip(
            edges[left.min(h.bins())],
            edges[(right + 1).min(h.bins())],
            stats,
        )
    }
}

/// onnxruntime's KL threshold search (`get_entropy_threshold`), over a signed histogram.
/// `parity` keeps its truncation of the expanded distribution to integers.
pub fn entropy_threshold(
    hist: &[u64],
    edges: &[f64],
    num_quantized_bins: usize,
    parity: bool,
) -> (f64, f64) {
    let n = hist.len();
    let zero = n / 2;
    let half = (num_quantized_bins / 2).max(1);
    let q_bins = num_quantized_bins.max(1);
    let mut best = (f64::INFINITY, (edges[0], edges[n]));
    if half > zero {
        return best.1;
    }
    let prefix: Vec<u64> = std::iter::once(0)
        .chain(hist.iter().scan(0u64, |acc, &c| {
            *acc += c;
            Some(*acc)
        }))
        .collect();
    // onnxruntime tries every candidate; outside parity mode at most ~256 evenly spaced ones
    // are tried (thresholds a few bins apart on a 2048-bin histogram), 4x to 8x faster.
    let stride = if parity {
        1
    } else {
        ((zero - half) / 256).max(1)
    };
    for i in (half..=zero).step_by(stride) {
        let start = zero - i;
        let end = (zero + i + 1).min(n);
        let slice = &hist[start..end];
        let mut p: Vec<f64> = slice.iter().map(|&c| c as f64).collect();
        let last = p.len() - 1;
        p[0] += prefix[start] as f64;
        p[last] += (prefix[n] - prefix[end]) as f64;
        let merged = slice.len() / q_bins;
        let mut q = vec![0.0f64; p.len()];
        if merged > 0 {
            for j in 0..q_bins {
                let (s, e) = (j * merged, (j + 1) * merged);
                let mut sum: u64 = slice[s..e].iter().sum();
                if j == q_bins - 1 {
                    sum += slice[q_bins * merged..].iter().sum::<u64>();
                }
                let nonzero = p[s..e].iter().filter(|&&v| v != 0.0).count();
                if nonzero > 0 {
                    let value = sum as f64 / nonzero as f64;
                    let value = if parity { value.trunc() } else { value };
                    q[s..e].iter_mut().for_each(|v| *v = value);
                }
            }
        }
        let kl = match (smooth(&p), smooth(&q)) {
            (Some(p), Some(q)) => kl_divergence(&p, &q),
            _ => f64::INFINITY,
        };
        if kl < best.0 {
            best = (kl, (edges[start], edges[end]));
        }
    }
    best.1
}

/// onnxruntime's `smooth_distribution`: zeros become eps, taken from the non-zeros.
fn smooth(p: &[f64]) -> Option<Vec<f64>> {
    let eps = 1e-4;
    let zeros = p.iter().filter(|&&v| v == 0.0).count();
    let nonzeros = p.len() - zeros;
    if nonzeros == 0 {
        return None;
    }
    let eps1 = eps * zeros as f64 / nonzeros as f64;
    Some(
        p.iter()
            .map(|&v| if v == 0.0 { eps } else { v - eps1 })
            .collect(),
    )
}

/// KL(p || q) with both normalised to sum 1 (scipy's `entropy`).
fn kl_divergence(p: &[f64], q: &[f64]) -> f64 {
    let (sp, sq): (f64, f64) = (p.iter().sum(), q.iter().sum());
    p.iter()
        .zip(q)
        .map(|(&a, &b)| {
            let (a, b) = (a / sp, b / sq);
            if a > 0.0 && b > 0.0 {
                a * (a / b).ln()
            } else if a == 0.0 {
                0.0
            } else {
                f64::INFINITY
            }
        })
        .sum()
}

/// Expected squared error of quantizing the histogram's values on `steps` levels over
/// `[lo, hi]`: rounding noise (step²/12) inside, squared distance to the end outside.
fn expected_error(h: &Histogram, lo: f64, hi: f64, steps: u32) -> f64 {
    let edges = h.edges();
    let step = ((hi - lo) / f64::from(steps)).max(f64::MIN_POSITIVE);
    let rounding = step * step / 12.0;
    h.counts
        .iter()
        .enumerate()
        .filter(|&(_, &c)| c > 0)
        .map(|(i, &c)| {
            let center = (edges[i] + edges[i + 1]) / 2.0;
            let error = if center < lo {
                (lo - center).powi(2)
            } else if center > hi {
                (center - hi).powi(2)
            } else {
                rounding
            };
            c as f64 * error
        })
        .sum()
}

fn mse_range(h: &Histogram, stats: &TensorStats, target: RangeTarget) -> Range {
    let (min, max) = (f64::from(stats.min.min(0.0)), f64::from(stats.max.max(0.0)));
    let absmax = min.abs().max(max);
    let mut best = (
        f64::INFINITY,
        Range {
            lo: stats.min,
            hi: stats.max,
        },
    );
    for k in 1..=200 {
        let alpha = k as f64 / 200.0;
        let (lo, hi) = if target.symmetric {
            (-absmax * alpha, absmax * alpha)
        } else {
            (min * alpha, max * alpha)
        };
        if hi - lo <= 0.0 {
            continue;
        }
        let error = expected_error(h, lo, hi, target.steps);
        if error < best.0 {
            best = (error, clip(lo, hi, stats));
        }
    }
    best.1
}

fn power_of_two_range(
    h: &Histogram,
    stats: &TensorStats,
    target: RangeTarget,
    minimise_error: bool,
) -> Range {
    let absmax = f64::from(stats.abs_max()).max(f64::MIN_POSITIVE);
    // A symmetric grid of `steps` levels has `steps / 2` on each side of zero.
    let half_steps = f64::from(target.steps / 2).max(1.0);
    let exponent = power_of_two_exponent(absmax, half_steps);
    let range_for = |e: f64| {
        let a = 2f64.powf(e) * half_steps;
        (-a, a)
    };
    let chosen = if minimise_error {
        (0..4)
            .map(|d| exponent - f64::from(d))
            .map(|e| {
                let (lo, hi) = range_for(e);
                (expected_error(h, lo, hi, target.steps), e)
            })
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map_or(exponent, |(_, e)| e)
    } else {
        exponent
    };
    let (lo, hi) = range_for(chosen);
    Range {
        lo: lo as f32,
        hi: hi as f32,
    }
}

/// The least exponent `e` whose grid of step `2^e`, `half_steps` steps on each side of zero,
/// holds `absmax`.
fn power_of_two_exponent(absmax: f64, half_steps: f64) -> f64 {
    (absmax / half_steps).log2().ceil()
}

/// The power-of-two range (symmetric, `2^e` per step) that holds `range`: how a range the
/// data did not choose (fixed by the recipe, a Softmax's [0, 1]) gets a power-of-two scale.
pub fn power_of_two_cover(range: Range, target: RangeTarget) -> Range {
    let absmax = f64::from(range.lo.abs().max(range.hi.abs())).max(f64::MIN_POSITIVE);
    let half_steps = f64::from(target.steps / 2).max(1.0);
    let a = 2f64.powf(power_of_two_exponent(absmax, half_steps)) * half_steps;
    Range {
        lo: -a as f32,
        hi: a as f32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats_of(values: &[f32], bins: usize) -> TensorStats {
        let mut s = TensorStats::default();
        s.add_batch(values, &[values.len()], Some(bins));
        s
    }

    #[test]
    fn minmax_and_moving_average() {
        let mut s = TensorStats::default();
        s.add_batch(&[-1.0, 2.0], &[2], None);
        s.add_batch(&[-3.0, 4.0], &[2], None);
        let t = RangeTarget::default();
        assert_eq!(
            compute(
                &s,
                &RangeMethod::MinMax {
                    moving_average: false
                },
                t,
                false
            )
            .unwrap(),
            Range { lo: -3.0, hi: 4.0 }
        );
        assert_eq!(
            compute(
                &s,
                &RangeMethod::MinMax {
                    moving_average: true
                },
                t,
                false
            )
            .unwrap(),
            Range { lo: -2.0, hi: 3.0 }
        );
    }

    #[test]
    fn clipping_methods_cut_a_long_tail() {
        // 10,000 values in [-1, 1] and one outlier at 50.
        let mut values: Vec<f32> = (0..10_000).map(|i| (i as f32 / 5_000.0) - 1.0).collect();
        values.push(50.0);
        let s = stats_of(&values, 2048);
        let t = RangeTarget::default();
        for method in [
            RangeMethod::Entropy {
                num_quantized_bins: 128,
            },
            RangeMethod::Percentile {
                percentile: 99.9,
                symmetric: true,
            },
        ] {
            let r = compute(&s, &method, t, false).unwrap();
            assert!(r.hi < 10.0 && r.hi >= 0.9, "{}: {r:?}", method.name());
            assert!(r.lo <= -0.9, "{}: {r:?}", method.name());
        }
        let minmax = compute(
            &s,
            &RangeMethod::MinMax {
                moving_average: false,
            },
            t,
            false,
        )
        .unwrap();
        assert_eq!(minmax.hi, 50.0);
    }

    #[test]
    fn mse_clips_a_heavy_tail_on_a_coarse_grid() {
        // Laplace-distributed values (|x| = -ln u), deterministic; 4-bit grid (15 steps).
        let mut state = 12345u64;
        let values: Vec<f32> = (0..100_000)
            .map(|i| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let u = ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
                let magnitude = -u.ln() as f32;
                if i % 2 == 0 { magnitude } else { -magnitude }
            })
            .collect();
        let s = stats_of(&values, 2048);
        let t = RangeTarget {
            steps: 15,
            symmetric: true,
        };
        let r = compute(&s, &RangeMethod::Mse, t, false).unwrap();
        assert!(
            r.hi < 0.6 * s.abs_max() && r.hi > 1.0,
            "{r:?} of {}",
            s.abs_max()
        );
        // With 16-bit precision clipping does not pay: the range stays near the extremes.
        let wide = compute(
            &s,
            &RangeMethod::Mse,
            RangeTarget {
                steps: 65535,
                symmetric: true,
            },
            false,
        )
        .unwrap();
        assert!(wide.hi > 0.9 * s.abs_max(), "{wide:?}");
    }

    #[test]
    fn power_of_two_ranges_are_powers_of_two_times_half_the_grid() {
        let s = stats_of(&[-3.0, 5.0], 64);
        let t = RangeTarget {
            steps: 254,
            symmetric: true,
        };
        let r = compute(&s, &RangeMethod::PowerOfTwoNonOverflow, t, false).unwrap();
        let scale = f64::from(r.hi) / 127.0;
        assert_eq!(scale.log2().fract(), 0.0, "{r:?}");
        assert!(r.hi >= 5.0);
    }

    #[test]
    fn no_data_is_an_error_and_histogram_methods_need_histograms() {
        let t = RangeTarget::default();
        assert_eq!(
            compute(&TensorStats::default(), &RangeMethod::Mse, t, false),
            Err(RangeError::NoData)
        );
        let mut s = TensorStats::default();
        s.add_batch(&[1.0], &[1], None);
        assert!(matches!(
            compute(&s, &RangeMethod::Mse, t, false),
            Err(RangeError::NoHistogram(_))
        ));
    }

    #[test]
    fn ort_entropy_with_as_many_bins_as_quantized_bins_is_minmax() {
        // onnxruntime's default (128 bins, 128 quantized bins) has a single candidate.
        let s = stats_of(&[-2.0, 0.5, 3.0], 128);
        let entropy = compute(
            &s,
            &RangeMethod::Entropy {
                num_quantized_bins: 128,
            },
            RangeTarget::default(),
            true,
        )
        .unwrap();
        assert_eq!(entropy, Range { lo: -2.0, hi: 3.0 });
    }
}
