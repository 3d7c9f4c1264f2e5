//! ONNX Runtime's `com.microsoft.MatMulNBits` layout for a block-quantized `[k, n]` weight:
//! `B` is `uint8 [n, blocks, block/2]`, two 4-bit codes to a byte along `k`, low nibble
//! first, codes unsigned (a signed value `q` is stored as `q + 8`); `scales` is `[n · blocks]`
//! column-major by block; zero points, when any differs from the default (8), are packed the
//! same way, `[n · ⌈blocks/2⌉]`. A last partial block is padded with the zero point's code.

use crate::quant::scale::ScaleZp;
use crate::recipe::QuantType;

/// The default zero point MatMulNBits assumes for 4-bit codes.
const DEFAULT_ZERO_POINT: u8 = 8;

/// A weight in MatMulNBits form.
#[derive(Debug, Clone, PartialEq)]
pub struct Packed {
    /// `B`, `[n, blocks, block / 2]`.
    pub b: Vec<u8>,
    /// Scales in MatMulNBits order (`column * blocks + block`).
    pub scales: Vec<ScaleZp>,
    /// Packed unsigned zero points, when they are not all 8.
    pub zero_points: Option<Vec<u8>>,
    /// Blocks along `k`.
    pub blocks: usize,
}

/// The unsigned 4-bit code of a stored value.
fn code(q: i64, qtype: QuantType) -> u8 {
    // Stored values and zero points of 4-bit types lie in [-8, 15].
    let unsigned = if qtype == QuantType::Int4 { q + 8 } else { q };
    unsigned.clamp(0, 15) as u8
}

/// Packs `values` (`k × n` quantized 4-bit values, row-major, one byte each) whose block
/// parameters are indexed `block * n + column`.
pub fn pack(
    values: &[i8],
    k: usize,
    n: usize,
    block: usize,
    params: &[ScaleZp],
    qtype: QuantType,
) -> Packed {
    let blocks = k.div_ceil(block);
    let blob = block / 2;
    let zero_code = |b: usize, col: usize| code(params[b * n + col].zero_point, qtype);
    let mut b_bytes = vec![0u8; n * blocks * blob];
    for col in 0..n {
        for b in 0..blocks {
            let out = &mut b_bytes[(col * blocks + b) * blob..(col * blocks + b + 1) * blob];
            for (i, byte) in out.iter_mut().enumerate() {
                let at = |row: usize| {
                    if row < k {
                        code(i64::from(values[row * n + col]), qtype)
                    } else {
                        zero_code(b, col)
                    }
                };
                let row = b * block + 2 * i;
                *byte = at(row) | (at(row + 1) << 4);
            }
        }
    }
    let scales: Vec<ScaleZp> = (0..n)
        .flat_map(|col| (0..blocks).map(move |b| (b, col)))
        .map(|(b, col)| params[b * n + col])
        .collect();
    let all_default =
        (0..n).all(|col| (0..blocks).all(|b| zero_code(b, col) == DEFAULT_ZERO_POINT));
    let zero_points = (!all_default).then(|| {
        let per_column = blocks.div_ceil(2);
        let mut packed = vec![0u8; n * per_column];
        for col in 0..n {
            for b in 0..blocks {
                let shift = if b % 2 == 0 { 0 } else { 4 };
                packed[col * per_column + b / 2] |= zero_code(b, col) << shift;
            }
        }
        packed
    });
    Packed {
        b: b_bytes,
        scales,
        zero_points,
        blocks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_pack_low_nibble_first_down_each_column_and_pad_the_last_block() {
        // k = 3, n = 2, block 16: one block per column, rows 3..16 padded with code 8.
        let values = [1, -8, 7, 0, -1, 3];
        let p = ScaleZp {
            scale: 0.5,
            zero_point: 0,
        };
        let packed = pack(&values, 3, 2, 16, &[p, p], QuantType::Int4);
        assert_eq!(packed.blocks, 1);
        assert_eq!(packed.b.len(), 2 * 8);
        // Column 0: rows 1, 7, -1 → codes 9, 15, 7, then padding 8.
        assert_eq!(packed.b[0], 9 | (15 << 4));
        assert_eq!(packed.b[1], 7 | (8 << 4));
        assert_eq!(packed.b[2], 8 | (8 << 4));
        // Column 1: -8, 0, 3 → 0, 8, 11.
        assert_eq!(packed.b[8], 8 << 4);
        assert_eq!(packed.zero_points, None);
        let asym = ScaleZp {
            scale: 0.5,
            zero_point: 3,
        };
        let packed = pack(&[0, 1, 2, 3, 4, 5], 3, 2, 16, &[asym, p], QuantType::Uint4);
        assert_eq!(packed.zero_points, Some(vec![3, 0]));
    }
}
