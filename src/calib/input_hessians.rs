//! The input Hessian of a weighted layer, `H = Σ x xᵀ` over every input vector its weights
//! multiply, gathered during calibration for data-aware weight rounding (GPTQ): a layer's
//! output error from a weight error `E` is `tr(E H Eᵀ)`, so `H` is all the rounding needs to
//! know about the data. For a MatMul or Gemm the vectors are the rows of the last axis; for a
//! Conv, every output position's patch (`channels/group × kh × kw` taps, zero padding
//! included), one Hessian per group.
//!
//! The sums are `groups · dim²` f64 values per input whatever the data; several layers that
//! read the same tensor the same way (a transformer's Q, K and V projections) share one.
//! Files keep each group's upper triangle as f32.

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
}

impl From<InputHessian> for StoredHessian {
    fn from(h: InputHessian) -> Self {
        let d = h.dim;
        let mut upper = Vec::with_capacity(h.groups * d * (d + 1) / 2);
        let groups = if d == 0 {
            [].chunks_exact(1)
        } else {
            h.sum.chunks_exact(d * d)
        };
        for group in groups.take(h.groups) {
            for i in 0..d {
                upper.extend(group[i * d + i..(i + 1) * d].iter().map(|&v| v as f32));
            }
        }
        StoredHessian {
            layers: h.layers,
            groups: h.groups,
            dim: h.dim,
            count: h.count,
            upper,
        }
    }
}

impl From<StoredHessian> for InputHessian {
    /// A file whose triangle has the wrong length reads as no data (GPTQ then skips its
    /// layers, saying so).
    fn from(s: StoredHessian) -> Self {
        let d = s.dim;
        let triangle = d * (d + 1) / 2;
        if d == 0 || s.upper.len() != s.groups * triangle {
            return InputHessian {
                layers: s.layers,
                ..InputHessian::default()
            };
        }
        let mut sum = vec![0f64; s.groups * d * d];
        for (group, values) in sum
            .chunks_exact_mut(d * d)
            .zip(s.upper.chunks_exact(triangle))
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
        InputHessian {
            layers: s.layers,
            groups: s.groups,
            dim: d,
            sum,
            count: s.count,
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
            return true;
        }
        self.dim == dim
    }

    fn add_rows(&mut self, values: &[f32], shape: &[usize]) {
        let Some(&k) = shape.last().filter(|&&k| k > 0) else {
            return;
        };
        if self.groups != 1 || !self.fits(k) {
            return;
        }
        let rows = values.len() / k;
        let mut batch = Array2::<f32>::zeros((k, k));
        for chunk in values[..rows * k].chunks(CHUNK_ROWS * k) {
            let x = Array2::from_shape_fn((chunk.len() / k, k), |(r, c)| finite(chunk[r * k + c]));
            general_mat_mul(1.0, &x.t(), &x, 1.0, &mut batch);
        }
        self.fold(0, &batch);
        self.count += rows as u64;
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
        for g in 0..groups {
            let mut batch = Array2::<f32>::zeros((dim, dim));
            for image in values.chunks_exact(c * h * w).take(n) {
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
                    general_mat_mul(1.0, &patches.t(), &patches, 1.0, &mut batch);
                }
            }
            self.fold(g, &batch);
        }
        self.count += (n * positions) as u64;
    }

    /// Adds one batch's f32 sums for group `g` into the f64 totals.
    fn fold(&mut self, g: usize, batch: &Array2<f32>) {
        let d = self.dim;
        let Some(total) = self.sum.get_mut(g * d * d..(g + 1) * d * d) else {
            return;
        };
        for (t, v) in total.iter_mut().zip(batch.iter()) {
            *t += f64::from(*v);
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
