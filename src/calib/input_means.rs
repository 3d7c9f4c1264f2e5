//! The mean input a weighted layer's weights multiply, gathered during calibration for bias
//! correction: for a MatMul or Gemm, the mean of each input channel over every row; for a
//! Conv, the mean of every `(channel, kernel row, kernel column)` tap over every output
//! position, zero padding included. With it, a layer's mean output error from its quantized
//! weights is exact: `E[(Ŵ − W) x] = Σ (Ŵ − W) · E[x]` over the taps each output channel
//! reads.
//!
//! Streaming and small: the sums are `channels` (or `channels · kh · kw`) f64 values per
//! layer, whatever the data.

use ndarray::ArrayViewD;
use serde::{Deserialize, Serialize};

/// How a layer reads its input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Geometry {
    /// Rows of the last axis (MatMul, Gemm without transA).
    LastAxis,
    /// A 2-D (or 1-D, height 1) convolution over `[N, C, H, W]` (or `[N, C, W]`).
    Conv {
        /// Kernel height and width.
        kernel: [usize; 2],
        /// Strides.
        strides: [usize; 2],
        /// Dilations.
        dilations: [usize; 2],
        /// Padding: top, left, bottom, right (explicit `pads`, or computed for `auto_pad`).
        pads: Padding,
    },
}

/// A Conv's padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Padding {
    /// Explicit pads: top, left, bottom, right.
    Explicit([usize; 4]),
    /// `SAME_UPPER` (extra padding at the end) or `SAME_LOWER` (at the start).
    Same {
        /// True for `SAME_UPPER`.
        upper: bool,
    },
}

/// One layer whose input means are gathered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeanSpec {
    /// The layer (node name).
    pub layer: String,
    /// The tensor it reads.
    pub tensor: String,
    /// How it reads it.
    pub geometry: Geometry,
}

/// Running sums of one layer's input taps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InputMean {
    /// `[channels]` or `[channels, kh, kw]`.
    pub shape: Vec<usize>,
    /// Sum of each tap over every output position seen.
    pub sum: Vec<f64>,
    /// Output positions seen.
    pub count: u64,
}

impl InputMean {
    /// The mean of each tap (0 before any data).
    pub fn mean(&self) -> Vec<f64> {
        let n = self.count.max(1) as f64;
        self.sum.iter().map(|s| s / n).collect()
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

    fn fits(&mut self, shape: Vec<usize>) -> bool {
        if self.shape.is_empty() {
            self.sum = vec![0.0; shape.iter().product()];
            self.shape = shape;
            return true;
        }
        self.shape == shape
    }

    fn add_rows(&mut self, values: &[f32], shape: &[usize]) {
        let Some(&k) = shape.last().filter(|&&k| k > 0) else {
            return;
        };
        if !self.fits(vec![k]) {
            return;
        }
        for row in values.chunks_exact(k) {
            for (s, v) in self.sum.iter_mut().zip(row) {
                *s += finite(*v);
            }
        }
        self.count += (values.len() / k) as u64;
    }

    fn add_conv(&mut self, values: &[f32], [n, c, h, w]: [usize; 4], conv: &ConvTaps) {
        let [kh, kw] = conv.kernel;
        let (Some(oh), Some(ow)) = (conv.outputs(0, h), conv.outputs(1, w)) else {
            return;
        };
        if !self.fits(vec![c, kh, kw]) {
            return;
        }
        // The input rows (columns) tap i (j) reads over all output rows (columns).
        let rows: Vec<Vec<usize>> = (0..kh).map(|i| conv.taps(0, i, oh, h)).collect();
        let cols: Vec<Vec<usize>> = (0..kw).map(|j| conv.taps(1, j, ow, w)).collect();
        let mut row_sum = vec![0f64; w];
        for image in values.chunks_exact(c * h * w).take(n) {
            for (channel, plane) in image.chunks_exact(h * w).enumerate() {
                for (i, tapped_rows) in rows.iter().enumerate() {
                    row_sum.iter_mut().for_each(|s| *s = 0.0);
                    for &r in tapped_rows {
                        for (s, v) in row_sum.iter_mut().zip(&plane[r * w..(r + 1) * w]) {
                            *s += finite(*v);
                        }
                    }
                    for (j, tapped_cols) in cols.iter().enumerate() {
                        let total: f64 = tapped_cols.iter().map(|&q| row_sum[q]).sum();
                        self.sum[(channel * kh + i) * kw + j] += total;
                    }
                }
            }
        }
        self.count += (n * oh * ow) as u64;
    }
}

/// The layout `[n, c, h, w]` of a Conv's input of `shape` and the Conv's taps over it
/// (`None` for `LastAxis`, a malformed kernel with a zero size, or an input that is not 3-D
/// or 4-D).
pub(super) fn conv_layout(geometry: &Geometry, shape: &[usize]) -> Option<([usize; 4], ConvTaps)> {
    let Geometry::Conv {
        kernel,
        strides,
        dilations,
        pads,
    } = geometry
    else {
        return None;
    };
    if kernel.contains(&0) {
        return None;
    }
    let (n, c, h, w) = match *shape {
        [n, c, h, w] => (n, c, h, w),
        [n, c, w] => (n, c, 1, w),
        _ => return None,
    };
    let conv = ConvTaps {
        kernel: *kernel,
        strides: *strides,
        dilations: *dilations,
        pads: pads.resolve([h, w], *kernel, *strides, *dilations),
    };
    Some(([n, c, h, w], conv))
}

fn finite(v: f32) -> f64 {
    if v.is_finite() { f64::from(v) } else { 0.0 }
}

/// A convolution's geometry with its padding resolved for one input size.
pub(super) struct ConvTaps {
    pub(super) kernel: [usize; 2],
    strides: [usize; 2],
    dilations: [usize; 2],
    /// Top, left, bottom, right.
    pads: [usize; 4],
}

impl ConvTaps {
    /// Output positions along `dim` (0: height, 1: width) for an input of `size`.
    pub(super) fn outputs(&self, dim: usize, size: usize) -> Option<usize> {
        let span = (self.kernel[dim] - 1) * self.dilations[dim] + 1;
        let padded = size + self.pads[dim] + self.pads[dim + 2];
        (padded >= span).then(|| (padded - span) / self.strides[dim].max(1) + 1)
    }

    /// The input position along `dim` (of `size`) that output `o`'s tap `t` reads, `None`
    /// in the padding.
    pub(super) fn source(&self, dim: usize, o: usize, t: usize, size: usize) -> Option<usize> {
        let at = o * self.strides[dim] + t * self.dilations[dim];
        at.checked_sub(self.pads[dim]).filter(|&p| p < size)
    }

    /// The input positions along `dim` that tap `t` reads, one per output position inside the
    /// input (the others read padding, zero).
    fn taps(&self, dim: usize, t: usize, outputs: usize, size: usize) -> Vec<usize> {
        (0..outputs)
            .filter_map(|o| self.source(dim, o, t, size))
            .collect()
    }
}

impl Padding {
    /// Top, left, bottom, right pads for an input of `size` (height, width).
    fn resolve(
        self,
        size: [usize; 2],
        kernel: [usize; 2],
        strides: [usize; 2],
        dilations: [usize; 2],
    ) -> [usize; 4] {
        match self {
            Padding::Explicit(pads) => pads,
            Padding::Same { upper } => {
                let mut pads = [0; 4];
                for d in 0..2 {
                    let stride = strides[d].max(1);
                    let out = size[d].div_ceil(stride);
                    let span = (kernel[d] - 1) * dilations[d] + 1;
                    let total = ((out.saturating_sub(1)) * stride + span).saturating_sub(size[d]);
                    let (before, after) = if upper {
                        (total / 2, total - total / 2)
                    } else {
                        (total - total / 2, total / 2)
                    };
                    pads[d] = before;
                    pads[d + 2] = after;
                }
                pads
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{ArrayD, IxDyn};

    /// The tap means by brute force over a zero-padded input.
    fn brute(x: &ArrayD<f32>, k: usize, stride: usize, pad: usize) -> Vec<f64> {
        let (n, c, h, w) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
        let oh = (h + 2 * pad - k) / stride + 1;
        let ow = (w + 2 * pad - k) / stride + 1;
        let mut sums = vec![0f64; c * k * k];
        for b in 0..n {
            for ch in 0..c {
                for o1 in 0..oh {
                    for o2 in 0..ow {
                        for i in 0..k {
                            for j in 0..k {
                                let (r, q) = (o1 * stride + i, o2 * stride + j);
                                if r >= pad && q >= pad && r - pad < h && q - pad < w {
                                    sums[(ch * k + i) * k + j] +=
                                        f64::from(x[[b, ch, r - pad, q - pad]]);
                                }
                            }
                        }
                    }
                }
            }
        }
        sums.iter().map(|s| s / (n * oh * ow) as f64).collect()
    }

    #[test]
    fn conv_tap_means_match_brute_force() {
        let x = ArrayD::from_shape_fn(IxDyn(&[2, 3, 5, 6]), |i| {
            (i[0] * 7 + i[1] * 5 + i[2] * 3 + i[3]) as f32 * 0.1 - 1.0
        });
        for (stride, pad) in [(1, 1), (2, 1), (2, 0), (1, 0)] {
            let geometry = Geometry::Conv {
                kernel: [3, 3],
                strides: [stride, stride],
                dilations: [1, 1],
                pads: Padding::Explicit([pad; 4]),
            };
            let mut mean = InputMean::default();
            mean.add(&geometry, &x.view());
            let want = brute(&x, 3, stride, pad);
            for (a, b) in mean.mean().iter().zip(&want) {
                assert!(
                    (a - b).abs() < 1e-9,
                    "stride {stride} pad {pad}: {a} vs {b}"
                );
            }
        }
    }

    #[test]
    fn row_means_over_the_last_axis() {
        let x = ArrayD::from_shape_vec(IxDyn(&[2, 2, 2]), vec![1., 2., 3., 4., 5., 6., 7., 8.])
            .unwrap();
        let mut mean = InputMean::default();
        mean.add(&Geometry::LastAxis, &x.view());
        assert_eq!(mean.mean(), [4.0, 5.0]);
    }

    #[test]
    fn a_malformed_kernel_reads_nothing() {
        let x = ArrayD::from_elem(IxDyn(&[1, 2, 4, 4]), 1.0f32);
        let geometry = Geometry::Conv {
            kernel: [0, 3],
            strides: [1, 1],
            dilations: [1, 1],
            pads: Padding::Same { upper: true },
        };
        let mut mean = InputMean::default();
        mean.add(&geometry, &x.view());
        assert_eq!(mean.count, 0);
    }

    #[test]
    fn same_padding_splits_like_onnx() {
        let upper = Padding::Same { upper: true }.resolve([5, 5], [4, 4], [1, 1], [1, 1]);
        assert_eq!(upper, [1, 1, 2, 2]);
        let lower = Padding::Same { upper: false }.resolve([5, 5], [4, 4], [1, 1], [1, 1]);
        assert_eq!(lower, [2, 2, 1, 1]);
    }
}
