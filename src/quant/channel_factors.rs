//! What a rescaled activation holds against the float model's, channel by channel: written
//! by the rewrites that rescale (equalization, activation scaling), recorded in the model
//! ([`super::rescaled`]) and applied by the comparison.

use serde::{Deserialize, Serialize};

/// What a rescaled activation holds against the float model's, channel by channel: the QDQ
/// model's tensor is the float tensor times `values`, laid out in `shape` (`[C]` for channels
/// on the last axis, `[C, 1, 1]` for a 2-D convolution's: broadcast from the last axis).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelFactors {
    /// The layout the values broadcast in.
    pub shape: Vec<usize>,
    /// One positive factor per channel.
    pub values: Vec<f32>,
}

impl ChannelFactors {
    /// `values` for channels followed by `trailing` axes (a convolution's spatial dims; 0
    /// for channels on the last axis).
    pub fn new(values: Vec<f32>, trailing: usize) -> Self {
        let mut shape = vec![values.len()];
        shape.extend(std::iter::repeat_n(1, trailing));
        ChannelFactors { shape, values }
    }

    /// Whether the record can be used: as many values as the layout holds, each positive
    /// and finite.
    pub(crate) fn is_valid(&self) -> bool {
        self.shape.first() == Some(&self.values.len())
            && self.shape.iter().skip(1).all(|d| *d == 1)
            && self.values.iter().all(|v| v.is_finite() && *v > 0.0)
    }

    /// Both rescalings one after the other (`None` when their layouts differ).
    pub(crate) fn then(&self, other: &ChannelFactors) -> Option<ChannelFactors> {
        (self.shape == other.shape).then(|| ChannelFactors {
            shape: self.shape.clone(),
            values: self
                .values
                .iter()
                .zip(&other.values)
                .map(|(a, b)| a * b)
                .collect(),
        })
    }

    /// `tensor` (a float activation) at the QDQ model's scale: times the factors, channel by
    /// channel (`None` when the layout does not broadcast against it).
    pub fn apply(&self, tensor: &ndarray::ArrayViewD<f32>) -> Option<ndarray::ArrayD<f32>> {
        let factors = self.array();
        let factors = factors.broadcast(tensor.raw_dim())?;
        Some(
            ndarray::Zip::from(tensor)
                .and(&factors)
                .map_collect(|x, f| x * f),
        )
    }

    /// The values as an array of [`ChannelFactors::shape`].
    pub fn array(&self) -> ndarray::ArrayD<f32> {
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&self.shape), self.values.clone())
            .unwrap_or_else(|_| ndarray::ArrayD::from_elem(ndarray::IxDyn(&[1]), 1.0))
    }
}
