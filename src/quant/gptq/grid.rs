//! What GPTQ needs to know about a weight besides the data: each element's quantization
//! parameters, exactly as the rewrite computes them ([`Grid`]), and how the weight splits
//! into `[output channels, inputs]` matrices that each meet one Hessian ([`Problem`]).

use ndarray::ArrayD;

use crate::calib::input_hessians::InputHessian;
use crate::model::DataType;
use crate::quant::int4::blocks::{BlockSpec, block_params, param_at};
use crate::quant::layers::Kind;
use crate::quant::params::WeightQuant;
use crate::quant::rewrite::weight_params;
use crate::quant::scale::{ScaleZp, dequantize, store_scales};
use crate::quant::weight_range::Channels;

/// Which parameter an element (by its index in the weight's standard layout) uses.
#[derive(Debug, Clone, Copy)]
enum ParamIndex {
    /// One per channel (one for the whole tensor).
    Channels(Channels),
    /// Block-wise along axis 0 of a `[k, n]` weight.
    Blocks { spec: BlockSpec, n: usize },
}

/// A weight's quantization grid: the parameters the rewrite will store, per element.
pub struct Grid {
    params: Vec<ScaleZp>,
    index: ParamIndex,
    how: WeightQuant,
}

impl Grid {
    /// The grid of `values` quantized as `how` says, scales stored as `scale_type` (`None`
    /// for a block-wise weight that is not 2-D).
    pub fn new(values: &ArrayD<f32>, how: &WeightQuant, scale_type: DataType) -> Option<Grid> {
        let (mut params, index) = match how.block_size {
            Some(block) => {
                let [k, n] = *values.shape() else {
                    return None;
                };
                let spec = BlockSpec {
                    block,
                    qtype: how.qtype,
                    symmetric: how.symmetric,
                };
                let standard = values.as_standard_layout();
                let params = block_params(standard.as_slice()?, k, n, spec, None);
                (params, ParamIndex::Blocks { spec, n })
            }
            None => (
                weight_params(values, how),
                ParamIndex::Channels(Channels::along(values.shape(), how.axis)),
            ),
        };
        store_scales(&mut params, scale_type, false);
        Some(Grid {
            params,
            index,
            how: *how,
        })
    }

    fn param(&self, flat: usize) -> ScaleZp {
        match self.index {
            ParamIndex::Channels(channels) => self.params[channels.of(flat)],
            ParamIndex::Blocks { spec, n } => {
                param_at(&self.params, spec, n, flat / n.max(1), flat % n.max(1))
            }
        }
    }

    /// `v` quantized and dequantized as the element at `flat` will be.
    pub fn fake(&self, flat: usize, v: f32) -> f32 {
        let p = self.param(flat);
        dequantize(self.how.quantize(v, p), p)
    }

    /// `v` with only its rounding error: a value beyond its grid's span keeps its excess. What
    /// GPTQ compensates: the clipping a clipped range chose (MSE weight ranges) stays as
    /// chosen rather than being spread, on average, over the other inputs (on MiniLM that
    /// spreading took per-tensor MSE weights from 15.4 to 10.0 dB).
    pub fn rounded_within_span(&self, flat: usize, v: f32) -> f32 {
        let p = self.param(flat);
        let inside = self.how.within_span(v, p);
        dequantize(self.how.quantize(inside, p), p) + (v - inside)
    }
}

/// One `[rows, cols]` matrix of a weight: output channels × the inputs one Hessian covers.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// The Hessian group it meets.
    pub group: usize,
    /// Output channels.
    pub rows: usize,
    /// Inputs.
    pub cols: usize,
    base: usize,
    row_stride: usize,
    col_stride: usize,
}

impl Problem {
    /// The index in the weight's standard layout of element `(row, col)`.
    pub fn index(&self, row: usize, col: usize) -> usize {
        self.base + row * self.row_stride + col * self.col_stride
    }

    /// Every element's index, row by row.
    pub fn indices(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.rows).flat_map(move |r| (0..self.cols).map(move |c| self.index(r, c)))
    }
}

/// The matrices a weight of `shape` splits into for a layer of `kind` (one per Conv group;
/// `[K, N]` weights are read transposed), when they fit `hessian`.
pub fn problems(kind: Kind, shape: &[usize], hessian: &InputHessian) -> Option<Vec<Problem>> {
    let problems = match kind {
        Kind::MatMul | Kind::Gemm { trans_b: false, .. } => {
            let [k, n] = *shape else { return None };
            vec![Problem {
                group: 0,
                rows: n,
                cols: k,
                base: 0,
                row_stride: 1,
                col_stride: n,
            }]
        }
        Kind::Gemm { trans_b: true, .. } => {
            let [n, k] = *shape else { return None };
            vec![Problem {
                group: 0,
                rows: n,
                cols: k,
                base: 0,
                row_stride: k,
                col_stride: 1,
            }]
        }
        Kind::Conv { group } => {
            let outputs = *shape.first()?;
            let per_output: usize = shape.get(1..)?.iter().product();
            if shape.len() < 3 || group == 0 || !outputs.is_multiple_of(group) {
                return None;
            }
            let rows = outputs / group;
            (0..group)
                .map(|g| Problem {
                    group: g,
                    rows,
                    cols: per_output,
                    base: g * rows * per_output,
                    row_stride: per_output,
                    col_stride: 1,
                })
                .collect()
        }
    };
    let fits = problems
        .iter()
        .all(|p| p.cols == hessian.dim && p.group < hessian.groups);
    (fits && problems.len() == hessian.groups).then_some(problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::QuantType;

    fn hessian(groups: usize, dim: usize) -> InputHessian {
        let mut h = InputHessian::default();
        h.groups = groups;
        h.dim = dim;
        h.sum = vec![0.0; groups * dim * dim];
        h.count = 1;
        h
    }

    #[test]
    fn matmul_rows_are_its_columns() {
        let p = problems(Kind::MatMul, &[3, 2], &hessian(1, 3)).unwrap();
        assert_eq!(p[0].indices().collect::<Vec<_>>(), [0, 2, 4, 1, 3, 5]);
        assert!(problems(Kind::MatMul, &[3, 2], &hessian(1, 2)).is_none());
    }

    #[test]
    fn grouped_conv_splits_by_group() {
        // 4 outputs, 2 groups of 1 input channel, 1×2 kernel.
        let p = problems(Kind::Conv { group: 2 }, &[4, 1, 1, 2], &hessian(2, 2)).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[1].indices().collect::<Vec<_>>(), [4, 5, 6, 7]);
        assert!(problems(Kind::Conv { group: 2 }, &[4, 1, 1, 2], &hessian(1, 2)).is_none());
    }

    #[test]
    fn beyond_the_span_only_the_rounding_counts() {
        // Many small values and one outlier 250 times their size: MSE ranges clip it.
        let mut flat: Vec<f32> = (0..200_000)
            .map(|i| (i as f32 * 0.37).sin() * 0.03)
            .collect();
        flat[3] = 7.5;
        let values = ArrayD::from_shape_vec(vec![1, flat.len()], flat).unwrap();
        let how = WeightQuant {
            qtype: QuantType::Int8,
            symmetric: true,
            reduce_range: false,
            axis: None,
            block_size: None,
            range: crate::recipe::WeightRange::Mse,
        };
        let grid = Grid::new(&values, &how, DataType::Float32).unwrap();
        let (_, hi) = how.grid_span(grid.param(0));
        assert!(hi < 7.5, "the outlier is clipped: span to {hi}");
        // Its error as GPTQ spreads it: the rounding of the span's end, not 7.5 - hi.
        let spread = 7.5 - grid.rounded_within_span(3, 7.5);
        assert!(spread.abs() <= grid.param(3).scale / 2.0 + 1e-6, "{spread}");
        assert!((7.5 - grid.fake(3, 7.5) - (7.5 - hi)).abs() < 1e-4);
        // Inside the span both agree.
        assert_eq!(grid.rounded_within_span(0, 0.01), grid.fake(0, 0.01));
    }

    #[test]
    fn per_channel_grid_matches_the_rewrite() {
        let values = ArrayD::from_shape_vec(vec![2, 2], vec![1.0, -0.5, 0.25, 2.0]).unwrap();
        let how = WeightQuant {
            qtype: QuantType::Int8,
            symmetric: true,
            reduce_range: false,
            axis: Some(1),
            block_size: None,
            range: crate::recipe::WeightRange::Minmax,
        };
        let grid = Grid::new(&values, &how, DataType::Float32).unwrap();
        let dequantized = crate::quant::rewrite::dequantized_weight(&values, None, &how).unwrap();
        for (i, (v, d)) in values.iter().zip(dequantized.iter()).enumerate() {
            assert_eq!(grid.fake(i, *v), *d);
        }
    }
}
