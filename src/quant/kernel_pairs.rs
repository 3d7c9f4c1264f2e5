//! The pairs of weights ONNX Runtime's x86 u8×s8 kernels add in one signed 16-bit lane, and
//! how many of them can overflow it: what tells a per-tensor weight that saturates like a
//! per-channel one from one that almost never does (see [`super::saturation`]).
//!
//! Which values pair was measured (`benches/saturation`, ONNX Runtime 1.31, AVX2): a MatMul
//! weight's rows `2i` and `2i + 1` of each column, Gemm `transB`'s columns of each row, a Conv
//! weight tap by tap with the input channels innermost (onnxruntime's `ReorderFilter`
//! layout), pairing across taps when a group has an odd channel count. A pair of one sign whose
//! stored magnitudes add up to 128 or less cannot overflow (255 × 128 < 32767); a larger one
//! overflows when both activation codes it meets are near the top of their range.

use std::collections::HashMap;
use std::sync::Mutex;

use ndarray::{ArrayD, ArrayViewD, Axis};

use super::params::WeightQuant;
use super::scale::ScaleZp;
use super::weight_range::Channels;

/// How a kernel lays a weight out along its reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// MatMul, and Gemm without `transB`: the reduction runs along the rows (`[.., K, N]`).
    Rows,
    /// Gemm with `transB`: along each row's columns (`[N, K]`).
    Columns,
    /// Conv: per output channel, tap by tap with the input channels innermost
    /// (`[M, C/g, taps..]`).
    ConvTaps,
}

/// The share (0 to 1) of the pairs a kernel adds that can overflow 16 bits, for `values`
/// stored by `how` with `params` (one per channel along `how.axis`; one for a per-tensor
/// weight). 0 for a weight too small to pair.
pub fn overflowing_share(
    values: &ArrayD<f32>,
    how: &WeightQuant,
    params: &[ScaleZp],
    along: Reduction,
) -> f64 {
    let stored = stored_codes(values, how, params);
    let arranged = in_kernel_order(stored.view(), along);
    let per_lane = match along {
        Reduction::ConvTaps => arranged.len() / arranged.len_of(Axis(0)).max(1),
        Reduction::Rows | Reduction::Columns => arranged.shape().last().copied().unwrap_or(1),
    }
    .max(1);
    let (mut pairs, mut overflowing) = (0usize, 0usize);
    let mut first: Option<i16> = None;
    for (at, &code) in arranged.iter().enumerate() {
        if at % per_lane == 0 {
            // A new reduction: an odd one's last value paired with nothing.
            first = None;
        }
        match first.take() {
            None => first = Some(code),
            Some(a) => {
                pairs += 1;
                overflowing += usize::from(can_overflow(a, code));
            }
        }
    }
    if pairs == 0 {
        0.0
    } else {
        overflowing as f64 / pairs as f64
    }
}

/// The integer codes of `values` as `how` stores them with `params` (8-bit codes fit 16 bits).
fn stored_codes(values: &ArrayD<f32>, how: &WeightQuant, params: &[ScaleZp]) -> ArrayD<i16> {
    let channels = Channels::along(values.shape(), how.axis);
    let standard = values.as_standard_layout();
    let codes = standard.iter().enumerate().map(|(at, &v)| {
        let code = params
            .get(channels.of(at))
            .map_or(0, |&p| how.quantize(v, p));
        code.clamp(i64::from(i16::MIN), i64::from(i16::MAX)) as i16
    });
    ArrayD::from_shape_vec(values.raw_dim(), codes.collect()).unwrap_or_default()
}

/// Shares measured so far, by weight, storage and layout: what
/// [`Prepared::overflowing_share`](super::prepare::Prepared::overflowing_share) keeps so that
/// each is measured once per prepared model.
#[derive(Debug, Default)]
pub struct Measured(Mutex<HashMap<(String, WeightQuant, Reduction), f64>>);

impl Clone for Measured {
    fn clone(&self) -> Self {
        let shares = self.0.lock().map(|m| m.clone()).unwrap_or_default();
        Measured(Mutex::new(shares))
    }
}

impl Measured {
    /// The share measured for `key`, if it was.
    pub fn get(&self, key: &(String, WeightQuant, Reduction)) -> Option<f64> {
        self.0.lock().ok()?.get(key).copied()
    }

    /// Keeps `share` for `key`.
    pub fn insert(&self, key: (String, WeightQuant, Reduction), share: f64) {
        if let Ok(mut shares) = self.0.lock() {
            shares.insert(key, share);
        }
    }

    /// Forgets every share (the model changed).
    pub fn clear(&self) {
        if let Ok(mut shares) = self.0.lock() {
            shares.clear();
        }
    }
}

/// Whether `a·x + b·y` can leave a signed 16-bit lane for codes `x, y` in 0..=255: only
/// when `a` and `b` share a sign and their magnitudes add up to more than 128.
fn can_overflow(a: i16, b: i16) -> bool {
    a.signum() == b.signum() && a != 0 && i32::from(a).abs() + i32::from(b).abs() > 128
}

/// `stored` viewed with each reduction the kernel computes (one output's) contiguous in
/// logical order, its values in the order the kernel pairs them.
fn in_kernel_order(stored: ArrayViewD<'_, i16>, along: Reduction) -> ArrayViewD<'_, i16> {
    let rank = stored.ndim();
    match along {
        Reduction::Rows if rank >= 2 => {
            let mut a = stored;
            a.swap_axes(rank - 2, rank - 1);
            a
        }
        Reduction::ConvTaps if rank >= 3 => {
            let order: Vec<usize> = std::iter::once(0).chain(2..rank).chain([1]).collect();
            stored.permuted_axes(order)
        }
        _ => stored,
    }
}

#[cfg(test)]
mod tests {
    use ndarray::IxDyn;

    use super::*;
    use crate::recipe::{QuantType, WeightRange};

    fn how() -> WeightQuant {
        WeightQuant {
            qtype: QuantType::Int8,
            symmetric: true,
            reduce_range: false,
            axis: None,
            block_size: None,
            range: WeightRange::Minmax,
        }
    }

    /// Scale 1: the values are their own codes.
    fn one() -> ScaleZp {
        ScaleZp {
            scale: 1.0,
            zero_point: 0,
        }
    }

    #[test]
    fn only_pairs_of_one_sign_past_128_can_overflow() {
        assert!(can_overflow(127, 2));
        assert!(can_overflow(-64, -65));
        assert!(!can_overflow(64, 64));
        assert!(!can_overflow(127, -127));
        assert!(!can_overflow(0, 127));
    }

    #[test]
    fn a_matmul_pairs_rows_and_a_gemm_with_trans_b_columns() {
        // [K = 4, N = 2]: column 0 pairs (100, 100) and (1, 1); column 1 (1, -100), (1, 1).
        let w = ArrayD::from_shape_vec(
            IxDyn(&[4, 2]),
            vec![100.0, 1.0, 100.0, -100.0, 1.0, 1.0, 1.0, 1.0],
        )
        .unwrap();
        assert_eq!(
            overflowing_share(&w, &how(), &[one()], Reduction::Rows),
            0.25
        );
        // Read as [N = 4, K = 2]: rows (100, 1), (100, -100), (1, 1), (1, 1).
        assert_eq!(
            overflowing_share(&w, &how(), &[one()], Reduction::Columns),
            0.0
        );
    }

    #[test]
    fn a_conv_pairs_input_channels_tap_by_tap() {
        // [M = 1, C = 2, 1, 2]: tap 0 reads channels (100, 100), tap 1 (1, 1); along the taps
        // of one channel the pairs would be (100, 1) twice and nothing could overflow.
        let w = ArrayD::from_shape_vec(IxDyn(&[1, 2, 1, 2]), vec![100.0, 1.0, 100.0, 1.0]).unwrap();
        assert_eq!(
            overflowing_share(&w, &how(), &[one()], Reduction::ConvTaps),
            0.5
        );
    }
}
