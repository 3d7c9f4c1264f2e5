//! The two activation-aware searches, on a sample of a layer's input rows `x` (`t × k`) and
//! its weights (`k × n`):
//!
//! - **AWQ-lite** ([`search_scales`]): per input channel, `s = mean|x|^α / w^(1-α)` (`w` the
//!   channel's weight magnitude relative to its blocks), normalised, for α on a grid; the α
//!   whose `(x / s) · dq(q(s · W))` is closest to `x · W` wins. Plain rounding (no scale) is
//!   a candidate too, so the search is never worse than RTN on its sample.
//! - **AWQ-clip** ([`search_clip`]): per block and column, the ratio of the range to keep
//!   (0.5 … 1) whose block output `x_b · (W_b − dq(W_b))` is smallest.
//!
//! Columns are evaluated in chunks, in parallel (rayon); each chunk is one small matrix
//! product (ndarray's, which runs matrixmultiply's packed kernels).

use ndarray::{Array2, ArrayView2, Axis, s};
use rayon::prelude::*;

use super::blocks::{BlockSpec, block_params, fake_quantize};

/// Columns evaluated together.
const CHUNK: usize = 64;

/// The exponents AWQ-lite tries (ModelOpt's grid: 0, 0.1, …, 1).
const ALPHAS: usize = 11;

/// The clipping ratios AWQ-clip tries (ModelOpt's: 0.5 to 0.95 by 0.05, and 1; and two more).
fn clip_ratios() -> Vec<f32> {
    (0..10)
        .map(|i| 0.5 + 0.05 * i as f32)
        // Beyond ModelOpt's grid: a symmetric range over 8 steps (a negative extreme lands on
        // −8 exactly, what MatMulNBits' symmetric round-to-nearest reaches with a negative
        // scale, which some runtimes refuse) and over 7 (nothing clips).
        .chain([7.5 / 8.0, 1.0, 7.5 / 7.0])
        .collect()
}

/// What AWQ-lite chose for one layer group.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleChoice {
    /// The exponent chosen; `None` when plain rounding was best (no scaling).
    pub alpha: Option<f32>,
    /// The per-input-channel scales (`None` with `alpha`).
    pub scales: Option<Vec<f32>>,
    /// Mean squared output error of plain rounding on the sample.
    pub plain_error: f64,
    /// Mean squared output error of the choice.
    pub error: f64,
}

/// Per input channel: |w| relative to the largest of its block and column, averaged over
/// every column of every weight (AWQ's weight scale).
fn weight_magnitude(weights: &[ArrayView2<'_, f32>], spec: BlockSpec) -> Vec<f32> {
    let k = weights.first().map_or(0, |w| w.nrows());
    let columns: usize = weights.iter().map(|w| w.ncols()).sum();
    let mut sums = vec![0f64; k];
    for w in weights {
        for (b, rows) in w.axis_chunks_iter(Axis(0), spec.block.max(1)).enumerate() {
            let amax: Vec<f32> = rows
                .axis_iter(Axis(1))
                .map(|c| c.iter().fold(0f32, |m, v| m.max(v.abs())))
                .collect();
            for (i, row) in rows.axis_iter(Axis(0)).enumerate() {
                let sum: f64 = row
                    .iter()
                    .zip(&amax)
                    .map(|(v, a)| f64::from(v.abs() / (a + f32::MIN_POSITIVE)))
                    .sum();
                sums[b * spec.block + i] += sum;
            }
        }
    }
    sums.iter()
        .map(|s| (s / columns.max(1) as f64) as f32)
        .collect()
}

/// AWQ's scales for exponent `alpha`: `x^α / w^(1-α)`, kept within [1e-4, 1e4] and divided
/// by the geometric mean of their extremes.
pub fn awq_scales(act: &[f32], weight: &[f32], alpha: f32) -> Vec<f32> {
    let raw: Vec<f32> = act
        .iter()
        .zip(weight)
        .map(|(&a, &w)| {
            (a.powf(alpha) / (w.powf(1.0 - alpha) + f32::MIN_POSITIVE)).clamp(1e-4, 1e4)
        })
        .collect();
    let (lo, hi) = raw
        .iter()
        .fold((f32::INFINITY, 0f32), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let norm = (hi * lo).sqrt();
    if !(norm.is_finite() && norm > 0.0) {
        return vec![1.0; raw.len()];
    }
    raw.iter().map(|v| v / norm).collect()
}

/// Σ (x·W − (x/s)·dq(q(s·W)))² over the sample, columns in parallel chunks.
fn output_error(
    x: ArrayView2<'_, f32>,
    w: ArrayView2<'_, f32>,
    reference: &Array2<f32>,
    spec: BlockSpec,
    scales: Option<&[f32]>,
) -> f64 {
    let n = w.ncols();
    (0..n.div_ceil(CHUNK))
        .into_par_iter()
        .map(|c| {
            let cols = c * CHUNK..((c + 1) * CHUNK).min(n);
            let width = cols.len();
            let mut slab = w.slice(s![.., cols.clone()]).to_owned();
            if let Some(s) = scales {
                for (mut row, &f) in slab.axis_iter_mut(Axis(0)).zip(s) {
                    row *= f;
                }
            }
            let Some(flat) = slab.as_slice_mut() else {
                return 0.0;
            };
            let params = block_params(flat, w.nrows(), width, spec, None);
            fake_quantize(flat, width, spec, &params);
            if let Some(s) = scales {
                for (mut row, &f) in slab.axis_iter_mut(Axis(0)).zip(s) {
                    row /= f;
                }
            }
            let y = x.dot(&slab);
            y.iter()
                .zip(reference.slice(s![.., cols]).iter())
                .map(|(a, b)| f64::from(a - b).powi(2))
                .sum::<f64>()
        })
        .sum()
}

/// The output error of a group of weights (all reading `x`) on the rows of `x`, their float
/// outputs computed once for every candidate measured.
pub struct GroupError<'a> {
    x: ArrayView2<'a, f32>,
    weights: &'a [ArrayView2<'a, f32>],
    references: Vec<Array2<f32>>,
    spec: BlockSpec,
    values: f64,
}

impl<'a> GroupError<'a> {
    /// The group of `weights` on the rows of `x`.
    pub fn new(
        x: ArrayView2<'a, f32>,
        weights: &'a [ArrayView2<'a, f32>],
        spec: BlockSpec,
    ) -> Self {
        GroupError {
            references: weights.iter().map(|w| x.dot(w)).collect(),
            values: (x.nrows() * weights.iter().map(|w| w.ncols()).sum::<usize>()).max(1) as f64,
            x,
            weights,
            spec,
        }
    }

    /// Mean squared output error with AWQ-lite's `scales` (`None`: plain rounding).
    pub fn of(&self, scales: Option<&[f32]>) -> f64 {
        self.weights
            .iter()
            .zip(&self.references)
            .map(|(w, r)| output_error(self.x, *w, r, self.spec, scales))
            .sum::<f64>()
            / self.values
    }
}

/// AWQ-lite for the weights that read one activation: the scales (shared by all of them,
/// since they divide the one activation) that minimise their summed output error on `x`.
pub fn search_scales(
    x: ArrayView2<'_, f32>,
    mean_abs: &[f32],
    weights: &[ArrayView2<'_, f32>],
    spec: BlockSpec,
) -> ScaleChoice {
    let group = GroupError::new(x, weights, spec);
    let error = |scales: Option<&[f32]>| group.of(scales);
    let plain_error = error(None);
    let magnitude = weight_magnitude(weights, spec);
    let mut best = ScaleChoice {
        alpha: None,
        scales: None,
        plain_error,
        error: plain_error,
    };
    for step in 0..ALPHAS {
        let alpha = step as f32 / (ALPHAS - 1) as f32;
        let scales = awq_scales(mean_abs, &magnitude, alpha);
        let e = error(Some(&scales));
        if e < best.error {
            best.alpha = Some(alpha);
            best.scales = Some(scales);
            best.error = e;
        }
    }
    best
}

/// `W − dq(q(W))` of a `k × width` slab (row-major `flat`), its blocks' ranges shrunk by
/// `clip` (per block and column of the slab).
fn rounding_error(
    flat: &[f32],
    k: usize,
    width: usize,
    spec: BlockSpec,
    clip: Option<&[f32]>,
) -> Array2<f32> {
    let params = block_params(flat, k, width, spec, clip);
    let mut dq = flat.to_vec();
    fake_quantize(&mut dq, width, spec, &params);
    Array2::from_shape_fn((k, width), |(i, j)| flat[i * width + j] - dq[i * width + j])
}

/// Σ (x·W − x·dq(W))² over the rows of `x`, `W` quantized with `clip` (AWQ-clip's ratios,
/// `None`: plain rounding), columns in parallel chunks.
pub fn clipped_error(
    x: ArrayView2<'_, f32>,
    w: ArrayView2<'_, f32>,
    spec: BlockSpec,
    clip: Option<&[f32]>,
) -> f64 {
    let (k, n) = w.dim();
    let blocks = spec.blocks(k);
    (0..n.div_ceil(CHUNK))
        .into_par_iter()
        .map(|c| {
            let cols = c * CHUNK..((c + 1) * CHUNK).min(n);
            let width = cols.len();
            let slab = w.slice(s![.., cols.clone()]).to_owned();
            let flat = slab.as_slice().unwrap_or(&[]);
            let ratios = clip.map(|clip| {
                (0..blocks * width)
                    .map(|i| clip[(i / width) * n + cols.start + i % width])
                    .collect::<Vec<f32>>()
            });
            x.dot(&rounding_error(flat, k, width, spec, ratios.as_deref()))
                .iter()
                .map(|v| f64::from(*v).powi(2))
                .sum::<f64>()
        })
        .sum()
}

/// AWQ-clip for one weight: the best clipping ratio of every block and column (indexed
/// `block * n + column`), measured on the block's share of the layer output.
pub fn search_clip(x: ArrayView2<'_, f32>, w: ArrayView2<'_, f32>, spec: BlockSpec) -> Vec<f32> {
    let (k, n) = w.dim();
    let blocks = spec.blocks(k);
    let ratios = clip_ratios();
    let chunks: Vec<Vec<f32>> = (0..n.div_ceil(CHUNK))
        .into_par_iter()
        .map(|c| {
            let cols = c * CHUNK..((c + 1) * CHUNK).min(n);
            let width = cols.len();
            let slab = w.slice(s![.., cols]).to_owned();
            let flat = slab.as_slice().unwrap_or(&[]);
            let mut best = vec![(f64::INFINITY, 1f32); blocks * width];
            for &ratio in &ratios {
                let clip = vec![ratio; blocks * width];
                let diff = rounding_error(flat, k, width, spec, Some(&clip));
                for b in 0..blocks {
                    let rows = b * spec.block..((b + 1) * spec.block).min(k);
                    let y = x.slice(s![.., rows.clone()]).dot(&diff.slice(s![rows, ..]));
                    for (j, column) in y.axis_iter(Axis(1)).enumerate() {
                        let e: f64 = column.iter().map(|v| f64::from(*v).powi(2)).sum();
                        let slot = &mut best[b * width + j];
                        if e < slot.0 {
                            *slot = (e, ratio);
                        }
                    }
                }
            }
            best.into_iter().map(|(_, r)| r).collect()
        })
        .collect();
    // Reassemble block-major: chunk c holds columns c·CHUNK.. for every block.
    let mut out = vec![1f32; blocks * n];
    for (c, chunk) in chunks.iter().enumerate() {
        let width = chunk.len() / blocks.max(1);
        for b in 0..blocks {
            for j in 0..width {
                out[b * n + c * CHUNK + j] = chunk[b * width + j];
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::QuantType;

    const SPEC: BlockSpec = BlockSpec {
        block: 16,
        qtype: QuantType::Int4,
        symmetric: true,
    };

    /// A sample whose channel 3 is 50× the others, and a weight with one large value per
    /// block (what makes plain rounding coarse for the small ones).
    fn outlier_layer() -> (Array2<f32>, Array2<f32>) {
        let mut seed = 7u64;
        let mut next = || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            ((seed >> 33) as f32 / (1u64 << 31) as f32) - 0.5
        };
        let x = Array2::from_shape_fn((64, 32), |(_, c)| next() * if c == 3 { 50.0 } else { 1.0 });
        let w = Array2::from_shape_fn((32, 24), |(r, _)| {
            next() * if r % 16 == 9 { 8.0 } else { 1.0 }
        });
        (x, w)
    }

    fn mean_abs(x: &Array2<f32>) -> Vec<f32> {
        x.axis_iter(Axis(1))
            .map(|c| c.iter().map(|v| v.abs()).sum::<f32>() / c.len() as f32)
            .collect()
    }

    #[test]
    fn awq_lite_scales_protect_the_salient_channel_and_beat_plain_rounding() {
        let (x, w) = outlier_layer();
        let choice = search_scales(x.view(), &mean_abs(&x), &[w.view()], SPEC);
        let scales = choice.scales.as_ref().expect("scaling helps here");
        assert!(choice.error < choice.plain_error * 0.8, "{choice:?}");
        let others = scales.iter().enumerate().filter(|(i, _)| *i != 3);
        assert!(others.clone().all(|(_, s)| scales[3] > *s), "{scales:?}");
    }

    #[test]
    fn scales_are_normalised_and_plain_rounding_wins_when_nothing_stands_out() {
        let s = awq_scales(&[1.0, 4.0, 16.0], &[1.0, 1.0, 1.0], 1.0);
        assert!((s[0] * s[2] - 1.0).abs() < 1e-5, "{s:?}");
        let x = Array2::from_elem((8, 16), 1.0f32);
        let w = Array2::from_shape_fn((16, 4), |(r, c)| (r * 4 + c) as f32 / 64.0);
        let choice = search_scales(x.view(), &mean_abs(&x), &[w.view()], SPEC);
        assert!(choice.error <= choice.plain_error);
    }

    #[test]
    fn clipping_is_chosen_per_block_and_never_raises_the_block_error() {
        let (x, w) = outlier_layer();
        let ratios = search_clip(x.view(), w.view(), SPEC);
        assert_eq!(ratios.len(), 2 * 24);
        assert!(ratios.iter().all(|r| (0.5..=7.5 / 7.0).contains(r)));
        let error = |clip: Option<&[f32]>| {
            let flat = w.as_slice().unwrap();
            let params = block_params(flat, 32, 24, SPEC, clip);
            let mut dq = flat.to_vec();
            fake_quantize(&mut dq, 24, SPEC, &params);
            let d = Array2::from_shape_vec((32, 24), dq).unwrap();
            (x.dot(&w) - x.dot(&d)).iter().map(|v| v * v).sum::<f32>()
        };
        assert!(error(Some(&ratios)) <= error(None) * 1.001);
    }
}
