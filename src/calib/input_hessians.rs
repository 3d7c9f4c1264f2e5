//! The input Hessian of a weighted layer, `H = Σ x xᵀ` over every input vector its weights
//! multiply, gathered during calibration for data-aware weight rounding (GPTQ): a layer's
//! output error from a weight error `E` is `tr(E H Eᵀ)`, so `H` is all the rounding needs to
//! know about the data. For a MatMul or Gemm the vectors are the rows of the last axis; for a
//! Conv, every output position's patch (`channels/group × kh × kw` taps, zero padding
//! included), one Hessian per group.
//!
//! The sums are `2 · groups · dim²` f64 values per input whatever the data (all samples, and
//! the held-out ones below); several layers that read the same tensor the same way (a
//! transformer's Q, K and V projections) share one. Files keep each group's upper triangles
//! as f32.
//!
//! Every second sample (an image, a sequence) is also summed apart, as held-out data: GPTQ
//! fits on the other samples and measures on these, so that it can tell a rounding that
//! helps on new inputs from one that only fits the calibration set (a Hessian from fewer
//! vectors than its width has directions the data never visits; see the quantizer's GPTQ
//! module).

use ndarray::{Array2, ArrayViewD, linalg::general_mat_mul};
use serde::{Deserialize, Serialize};

use super::input_means::{ConvTaps, Geometry, conv_layout};

/// Input vectors folded in at once (bounds the patch matrix a batch is copied into).
const CHUNK_ROWS: usize = 2048;

/// One input whose Hessian is gathered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HessianSpec {
    /// The layers (node names) that read it this way.
    pub layers: Vec<String>,
    /// The tensor they read.
    pub tensor: String,
    /// How they read it.
    pub geometry: Geometry,
    /// Conv groups: one Hessian per group of input channels (1 for MatMul and Gemm).
    pub groups: usize,
}

/// Running sums of one input's outer products.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(into = "StoredHessian", from = "StoredHessian")]
pub struct InputHessian {
    /// The layers that read this input.
    pub layers: Vec<String>,
    /// Groups (one Hessian each).
    pub groups: usize,
    /// Size of each group's vectors.
    pub dim: usize,
    /// `groups × dim × dim`, symmetric.
    pub sum: Vec<f64>,
    /// Vectors seen (per group).
    pub count: u64,
    /// The part of `sum` from every second sample (empty before any data).
    pub held_out: Vec<f64>,
    /// Vectors of those samples (per group).
    pub held_out_count: u64,
    /// Samples folded in so far (which of the next ones are held out).
    samples_seen: u64,
}

/// How an [`InputHessian`] is written to a statistics file: each group's upper triangle
/// (row by row) as f32, half the values of the full matrix and half their bytes.
#[derive(Serialize, Deserialize)]
struct StoredHessian {
    layers: Vec<String>,
    groups: usize,
    dim: usize,
    count: u64,
    upper: Vec<f32>,
    /// Statistics written before held-out sums: none (GPTQ then fits on everything).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    held_out_upper: Vec<f32>,
    #[serde(default)]
    held_out_count: u64,
    #[serde(default)]
    samples: u64,
}

/// Each group's upper triangle (row by row) of `groups` symmetric `d × d` matrices, as f32.
fn upper_triangles(full: &[f64], groups: usize, d: usize) -> Vec<f32> {
    let mut upper = Vec::with_capacity(groups * d * (d + 1) / 2);
    if d == 0 {
        return upper;
    }
    for group in full.chunks_exact(d * d).take(groups) {
        for i in 0..d {
            upper.extend(group[i * d + i..(i + 1) * d].iter().map(|&v| v as f32));
        }
    }
    upper
}

/// The symmetric matrices [`upper_triangles`] wrote; `None` when the length does not fit.
fn from_upper_triangles(upper: &[f32], groups: usize, d: usize) -> Option<Vec<f64>> {
    let triangle = d * (d + 1) / 2;
    if d == 0 || upper.len() != groups * triangle {
        return None;
    }
    let mut full = vec![0f64; groups * d * d];
    for (group, values) in full
        .chunks_exact_mut(d * d)
        .zip(upper.chunks_exact(triangle))
    {
        let mut next = values.iter();
        for i in 0..d {
            for j in i..d {
                let v = f64::from(next.next().copied().unwrap_or(0.0));
                group[i * d + j] = v;
                group[j * d + i] = v;
            }
        }
    }
    Some(full)
}

impl From<InputHessian> for StoredHessian {
    fn from(h: InputHessian) -> Self {
        StoredHessian {
            upper: upper_triangles(&h.sum, h.groups, h.dim),
            held_out_upper: upper_triangles(&h.held_out, h.groups, h.dim),
            held_out_count: h.held_out_count,
            samples: h.samples_seen,
            layers: h.layers,
            groups: h.groups,
            dim: h.dim,
            count: h.count,
        }
    }
}

impl From<StoredHessian> for InputHessian {
    /// A file whose triangle has the wrong length reads as no data (GPTQ then skips its
    /// layers, saying so); a damaged held-out triangle as no held-out data.
    fn from(s: StoredHessian) -> Self {
        let Some(sum) = from_upper_triangles(&s.upper, s.groups, s.dim) else {
            return InputHessian {
                layers: s.layers,
                ..InputHessian::default()
            };
        };
        let (held_out, held_out_count) =
            match from_upper_triangles(&s.held_out_upper, s.groups, s.dim) {
                Some(h) if s.held_out_count < s.count => (h, s.held_out_count),
                _ => (Vec::new(), 0),
            };
        InputHessian {
            layers: s.layers,
            groups: s.groups,
            dim: s.dim,
            sum,
            count: s.count,
            held_out,
            held_out_count,
            samples_seen: s.samples,
        }
    }
}

impl InputHessian {
    /// Empty sums for `spec`.
    pub fn new(spec: &HessianSpec) -> Self {
        InputHessian {
            layers: spec.layers.clone(),
            groups: spec.groups.max(1),
            ..InputHessian::default()
        }
    }

    /// Group `g`'s Hessian averaged over the vectors seen (`None` before any data).
    pub fn mean(&self, g: usize) -> Option<Array2<f64>> {
        let d = self.dim;
        if self.count == 0 || g >= self.groups || d == 0 {
            return None;
        }
        let values = self.sum.get(g * d * d..(g + 1) * d * d)?.to_vec();
        let n = self.count as f64;
        Array2::from_shape_vec((d, d), values)
            .ok()
            .map(|h| h.mapv(|v| v / n))
    }

    /// Group `g`'s Hessians of the fitting samples and of the held-out ones, each averaged
    /// over its vectors (`None` without held-out data or without fitting data).
    pub fn split(&self, g: usize) -> Option<(Array2<f64>, Array2<f64>)> {
        let d = self.dim;
        let fit_count = self.count.checked_sub(self.held_out_count)?;
        if self.held_out_count == 0 || fit_count == 0 || g >= self.groups || d == 0 {
            return None;
        }
        let range = g * d * d..(g + 1) * d * d;
        let all = self.sum.get(range.clone())?;
        let held = self.held_out.get(range)?;
        let (n_fit, n_held) = (fit_count as f64, self.held_out_count as f64);
        let fit =
            Array2::from_shape_fn((d, d), |(i, j)| (all[i * d + j] - held[i * d + j]) / n_fit);
        let held = Array2::from_shape_fn((d, d), |(i, j)| held[i * d + j] / n_held);
        Some((fit, held))
    }

    /// Folds in one batch of the input; a batch whose layout differs from the first one's is
    /// ignored (and non-finite values count as 0).
    pub fn add(&mut self, geometry: &Geometry, x: &ArrayViewD<'_, f32>) {
        let x = x.as_standard_layout();
        let Some(values) = x.as_slice() else { return };
        match geometry {
            Geometry::LastAxis => self.add_rows(values, x.shape()),
            Geometry::Conv { .. } => {
                if let Some((layout, conv)) = conv_layout(geometry, x.shape()) {
                    self.add_conv(values, layout, &conv);
                }
            }
        }
    }

    /// Sets the vector size on the first batch; false when a later batch's differs.
    fn fits(&mut self, dim: usize) -> bool {
        if self.dim == 0 {
            self.dim = dim;
            self.sum = vec![0.0; self.groups * dim * dim];
            self.held_out = vec![0.0; self.groups * dim * dim];
            return true;
        }
        self.dim == dim
    }

    /// The rows of a `[samples, .., k]` batch (one sample when rank 1).
    fn add_rows(&mut self, values: &[f32], shape: &[usize]) {
        let Some(&k) = shape.last().filter(|&&k| k > 0) else {
            return;
        };
        if self.groups != 1 || !self.fits(k) {
            return;
        }
        let rows = values.len() / k;
        let samples = if shape.len() >= 2 { shape[0].max(1) } else { 1 };
        let per_sample = rows / samples;
        let mut sums = [Array2::<f32>::zeros((k, k)), Array2::<f32>::zeros((k, k))];
        let mut held_rows = 0;
        for (s, sample) in values[..samples * per_sample * k]
            .chunks(per_sample * k)
            .enumerate()
        {
            let held = self.held_out_sample(s);
            held_rows += if held { per_sample } else { 0 };
            for chunk in sample.chunks(CHUNK_ROWS * k) {
                let x =
                    Array2::from_shape_fn((chunk.len() / k, k), |(r, c)| finite(chunk[r * k + c]));
                general_mat_mul(1.0, &x.t(), &x, 1.0, &mut sums[usize::from(held)]);
            }
        }
        self.fold(0, &sums);
        self.count += (samples * per_sample) as u64;
        self.held_out_count += held_rows as u64;
        self.samples_seen += samples as u64;
    }

    /// Whether sample `s` of the current batch is held out (every second one overall).
    fn held_out_sample(&self, s: usize) -> bool {
        (self.samples_seen + s as u64) % 2 == 1
    }

    fn add_conv(&mut self, values: &[f32], [n, c, h, w]: [usize; 4], conv: &ConvTaps) {
        let [kh, kw] = conv.kernel;
        let groups = self.groups;
        let (Some(oh), Some(ow)) = (conv.outputs(0, h), conv.outputs(1, w)) else {
            return;
        };
        if !c.is_multiple_of(groups) {
            return;
        }
        let per_group = c / groups;
        let dim = per_group * kh * kw;
        if dim == 0 || !self.fits(dim) {
            return;
        }
        let positions = oh * ow;
        let images = values.chunks_exact(c * h * w).take(n).count();
        for g in 0..groups {
            let mut sums = [
                Array2::<f32>::zeros((dim, dim)),
                Array2::<f32>::zeros((dim, dim)),
            ];
            for (s, image) in values.chunks_exact(c * h * w).take(n).enumerate() {
                let held = usize::from(self.held_out_sample(s));
                let planes = &image[g * per_group * h * w..(g + 1) * per_group * h * w];
                for start in (0..positions).step_by(CHUNK_ROWS) {
                    let end = (start + CHUNK_ROWS).min(positions);
                    let patches = Array2::from_shape_fn((end - start, dim), |(p, tap)| {
                        let at = start + p;
                        let (channel, i, j) = (tap / (kh * kw), tap / kw % kh, tap % kw);
                        let row = conv.source(0, at / ow, i, h);
                        let col = conv.source(1, at % ow, j, w);
                        match (row, col) {
                            (Some(r), Some(q)) => finite(planes[(channel * h + r) * w + q]),
                            _ => 0.0,
                        }
                    });
                    general_mat_mul(1.0, &patches.t(), &patches, 1.0, &mut sums[held]);
                }
            }
            self.fold(g, &sums);
        }
        let held = (0..images).filter(|&s| self.held_out_sample(s)).count();
        self.count += (images * positions) as u64;
        self.held_out_count += (held * positions) as u64;
        self.samples_seen += images as u64;
    }

    /// Adds one batch's f32 sums for group `g` (of the fitting samples, then of the
    /// held-out ones) into the f64 totals.
    fn fold(&mut self, g: usize, [fitting, held]: &[Array2<f32>; 2]) {
        let d = self.dim;
        let range = g * d * d..(g + 1) * d * d;
        let (Some(total), Some(held_total)) = (
            self.sum.get_mut(range.clone()),
            self.held_out.get_mut(range),
        ) else {
            return;
        };
        for (((t, h), a), b) in total
            .iter_mut()
            .zip(held_total.iter_mut())
            .zip(fitting.iter())
            .zip(held.iter())
        {
            *t += f64::from(*a) + f64::from(*b);
            *h += f64::from(*b);
        }
    }
}

fn finite(v: f32) -> f32 {
    if v.is_finite() { v } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calib::input_means::Padding;
    use ndarray::{ArrayD, IxDyn};

    fn spec(geometry: Geometry, groups: usize) -> HessianSpec {
        HessianSpec {
            layers: vec!["layer".into()],
            tensor: "x".into(),
            geometry,
            groups,
        }
    }

    #[test]
    fn rows_give_x_transpose_x() {
        let x =
            ArrayD::from_shape_vec(IxDyn(&[1, 3, 2]), vec![1.0, 2.0, 0.0, -1.0, 3.0, 1.0]).unwrap();
        let s = spec(Geometry::LastAxis, 1);
        let mut h = InputHessian::new(&s);
        h.add(&s.geometry, &x.view());
        assert_eq!(h.count, 3);
        assert_eq!(h.sum, vec![10.0, 5.0, 5.0, 6.0]);
        let mean = h.mean(0).unwrap();
        assert!((mean[[0, 1]] - 5.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn every_second_sample_is_summed_apart_across_batches() {
        let s = spec(Geometry::LastAxis, 1);
        let mut h = InputHessian::new(&s);
        // Three batches: samples 0-1, 2, 3 (two rows of two values each); odd ones held out.
        let sample = |v: f32| vec![v, 0.0, 0.0, v];
        let batch = |samples: &[f32]| {
            let values: Vec<f32> = samples.iter().flat_map(|&v| sample(v)).collect();
            ArrayD::from_shape_vec(IxDyn(&[samples.len(), 2, 2]), values).unwrap()
        };
        for b in [batch(&[1.0, 2.0]), batch(&[3.0]), batch(&[4.0])] {
            h.add(&s.geometry, &b.view());
        }
        assert_eq!((h.count, h.held_out_count), (8, 4));
        let (fit, held) = h.split(0).unwrap();
        // Fitting samples 1 and 3: diagonal (1 + 9) / 4 rows; held out 2 and 4: (4 + 16) / 4.
        assert_eq!((fit[[0, 0]], fit[[1, 1]], fit[[0, 1]]), (2.5, 2.5, 0.0));
        assert_eq!((held[[0, 0]], held[[1, 1]]), (5.0, 5.0));
        assert_eq!(h.mean(0).unwrap()[[0, 0]], 30.0 / 8.0);
        // Kept in files, and statistics without them read as having none.
        let text = serde_json::to_string(&h).unwrap();
        let back: InputHessian = serde_json::from_str(&text).unwrap();
        assert_eq!(back, h);
        let old: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut old = old.as_object().unwrap().clone();
        old.remove("held_out_upper");
        old.remove("held_out_count");
        let back: InputHessian = serde_json::from_value(old.into()).unwrap();
        assert_eq!((back.split(0), back.count), (None, 8));
    }

    #[test]
    fn conv_patches_by_brute_force_with_groups_and_padding() {
        // [1, 4, 3, 3], 2 groups, 2×2 kernel, pad 1, stride 2.
        let values: Vec<f32> = (0..36).map(|i| (i as f32 * 0.37).sin()).collect();
        let x = ArrayD::from_shape_vec(IxDyn(&[1, 4, 3, 3]), values.clone()).unwrap();
        let geometry = Geometry::Conv {
            kernel: [2, 2],
            strides: [2, 2],
            dilations: [1, 1],
            pads: Padding::Explicit([1, 1, 1, 1]),
        };
        let s = spec(geometry.clone(), 2);
        let mut h = InputHessian::new(&s);
        h.add(&geometry, &x.view());
        // Output 2×2; patch of group g: channels 2g, 2g+1 × 2×2 taps.
        assert_eq!((h.dim, h.count), (8, 4));
        for g in 0..2 {
            let mut brute = vec![0f64; 64];
            for (oy, ox) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                let mut patch = [0f64; 8];
                for ch in 0..2 {
                    for i in 0..2 {
                        for j in 0..2 {
                            let (r, q) = (oy * 2 + i, ox * 2 + j);
                            if (1..4).contains(&r) && (1..4).contains(&q) {
                                let c = 2 * g + ch;
                                patch[ch * 4 + i * 2 + j] =
                                    f64::from(values[c * 9 + (r - 1) * 3 + (q - 1)]);
                            }
                        }
                    }
                }
                for a in 0..8 {
                    for b in 0..8 {
                        brute[a * 8 + b] += patch[a] * patch[b];
                    }
                }
            }
            let got = &h.sum[g * 64..(g + 1) * 64];
            for (x, y) in got.iter().zip(&brute) {
                assert!((x - y).abs() < 1e-5, "group {g}: {x} vs {y}");
            }
        }
    }

    #[test]
    fn files_keep_the_upper_triangle_and_read_back_symmetric() {
        let s = spec(Geometry::LastAxis, 1);
        let mut h = InputHessian::new(&s);
        let x =
            ArrayD::from_shape_vec(IxDyn(&[2, 3]), vec![1.0, 2.0, 3.0, -1.0, 0.5, 2.0]).unwrap();
        h.add(&s.geometry, &x.view());
        let text = serde_json::to_string(&h).unwrap();
        assert!(text.contains("\"upper\":["), "{text}");
        let back: InputHessian = serde_json::from_str(&text).unwrap();
        assert_eq!(back, h);
        // A damaged triangle reads as no data rather than as wrong numbers.
        let damaged = text.replace("\"upper\":[", "\"upper\":[1.0,");
        let back: InputHessian = serde_json::from_str(&damaged).unwrap();
        assert_eq!((back.count, back.mean(0)), (0, None));
    }
}
