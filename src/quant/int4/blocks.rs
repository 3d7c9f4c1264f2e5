//! Block-wise weight quantization of a `[k, n]` MatMul weight (row-major, blocks of `block`
//! rows per column): the parameters of each block, optionally clipped, and the dequantized
//! values the searches measure. The rewrite stores weights with the same functions, so what
//! a search measured is what the model gets.

use rayon::prelude::*;

use crate::quant::scale::{ScaleZp, dequantize, quantize_value, scale_zp_for};
use crate::recipe::QuantType;

/// The quantized type and symmetry of the blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSpec {
    /// Rows per block.
    pub block: usize,
    /// int4 or uint4.
    pub qtype: QuantType,
    /// Symmetric ranges.
    pub symmetric: bool,
}

impl BlockSpec {
    /// Blocks along `k` rows (the last one may be shorter).
    pub fn blocks(&self, k: usize) -> usize {
        k.div_ceil(self.block.max(1))
    }
}

/// The parameters of every block of `w` (`k × n`), indexed `block * n + column`; `clip`
/// (same indexing) shrinks each block's range by its ratio. Ranges always hold zero.
pub fn block_params(
    w: &[f32],
    k: usize,
    n: usize,
    spec: BlockSpec,
    clip: Option<&[f32]>,
) -> Vec<ScaleZp> {
    if n == 0 || k == 0 {
        return Vec::new();
    }
    let rows_per_block = spec.block.max(1) * n;
    w[..k * n]
        .par_chunks(rows_per_block)
        .enumerate()
        .flat_map_iter(|(b, rows)| {
            let (mut lo, mut hi) = (vec![0f32; n], vec![0f32; n]);
            for row in rows.chunks(n) {
                for (col, &v) in row.iter().enumerate() {
                    lo[col] = lo[col].min(v);
                    hi[col] = hi[col].max(v);
                }
            }
            lo.into_iter()
                .zip(hi)
                .enumerate()
                .map(move |(col, (lo, hi))| {
                    let ratio = clip.map_or(1.0, |c| c[b * n + col]);
                    scale_zp_for(lo * ratio, hi * ratio, spec.qtype, spec.symmetric, false)
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The parameter of element (`row`, `col`).
pub fn param_at(params: &[ScaleZp], spec: BlockSpec, n: usize, row: usize, col: usize) -> ScaleZp {
    params[(row / spec.block.max(1)) * n + col]
}

/// `w` quantized and dequantized in place with `params` (what the stored weight stands for).
pub fn fake_quantize(w: &mut [f32], n: usize, spec: BlockSpec, params: &[ScaleZp]) {
    if n == 0 {
        return;
    }
    for (row, values) in w.chunks_mut(n).enumerate() {
        for (col, v) in values.iter_mut().enumerate() {
            let p = param_at(params, spec, n, row, col);
            *v = dequantize(quantize_value(*v, p, spec.qtype), p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_run_down_the_rows_of_each_column_and_clipping_shrinks_the_range() {
        let spec = BlockSpec {
            block: 2,
            qtype: QuantType::Int4,
            symmetric: true,
        };
        // k = 3 rows, n = 2 columns: blocks rows {0, 1} and {2}.
        let w = [1.0, -4.0, 3.0, 2.0, -7.5, 0.5];
        let params = block_params(&w, 3, 2, spec, None);
        assert_eq!(params.len(), 4);
        assert!((params[0].scale - 3.0 * 2.0 / 15.0).abs() < 1e-6);
        assert!((params[1].scale - 4.0 * 2.0 / 15.0).abs() < 1e-6);
        assert!((params[2].scale - 7.5 * 2.0 / 15.0).abs() < 1e-6);
        let clipped = block_params(&w, 3, 2, spec, Some(&[0.5, 1.0, 1.0, 1.0]));
        assert!((clipped[0].scale - params[0].scale / 2.0).abs() < 1e-6);
        let mut dq = w;
        fake_quantize(&mut dq, 2, spec, &params);
        for (a, b) in dq.iter().zip(w) {
            assert!(
                (a - b).abs() <= params[0].scale.max(params[2].scale),
                "{dq:?}"
            );
        }
    }
}
