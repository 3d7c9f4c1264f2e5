//! Which channel each element of a weight belongs to, as cross-layer equalization sees it:
//! the output channel of the first layer of a pair, the input channel of the second.

use ndarray::ArrayD;

/// Maps a weight's flat (row-major) element index to a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelMap {
    /// The channel is the index along one axis: `(i / inner) % len`.
    Axis {
        /// The axis's length (the number of channels).
        len: usize,
        /// Elements after that axis (the product of the later dims).
        inner: usize,
    },
    /// A grouped Conv's input channel: the weight is `[O, C/g, k…]`, output `o` belongs to
    /// group `o / (O/g)`, and element `[o, j, …]` reads input channel `group · C/g + j`.
    GroupedInput {
        /// Output channels per group (`O/g`).
        outputs_per_group: usize,
        /// Input channels per group (`C/g`).
        inputs_per_group: usize,
        /// Elements per `[o, j]` (the kernel's size).
        kernel: usize,
    },
}

impl ChannelMap {
    /// The channels along `axis` of a weight of `shape`.
    pub fn axis(shape: &[usize], axis: usize) -> Option<ChannelMap> {
        let len = *shape.get(axis)?;
        Some(ChannelMap::Axis {
            len,
            inner: shape[axis + 1..].iter().product(),
        })
    }

    /// The input channels of a Conv weight `[O, C/g, k…]` with `group` groups.
    pub fn conv_input(shape: &[usize], group: usize) -> Option<ChannelMap> {
        let outputs = *shape.first()?;
        let inputs_per_group = *shape.get(1)?;
        if group == 0 || outputs % group != 0 {
            return None;
        }
        Some(ChannelMap::GroupedInput {
            outputs_per_group: outputs / group,
            inputs_per_group,
            kernel: shape[2..].iter().product(),
        })
    }

    /// How many channels there are, for a weight of `elements` values.
    pub fn channels(&self, elements: usize) -> usize {
        match *self {
            ChannelMap::Axis { len, .. } => len,
            ChannelMap::GroupedInput {
                outputs_per_group,
                inputs_per_group,
                kernel,
            } => {
                let outputs = elements / (inputs_per_group * kernel).max(1);
                outputs / outputs_per_group.max(1) * inputs_per_group
            }
        }
    }

    /// The channel of flat element `i`.
    pub fn channel(&self, i: usize) -> usize {
        match *self {
            ChannelMap::Axis { len, inner } => (i / inner.max(1)) % len.max(1),
            ChannelMap::GroupedInput {
                outputs_per_group,
                inputs_per_group,
                kernel,
            } => {
                let kernel = kernel.max(1);
                let output = i / (inputs_per_group * kernel).max(1);
                let j = (i / kernel) % inputs_per_group.max(1);
                output / outputs_per_group.max(1) * inputs_per_group + j
            }
        }
    }

    /// The largest |value| of each channel.
    pub fn ranges(&self, weight: &ArrayD<f32>) -> Vec<f32> {
        let mut ranges = vec![0f32; self.channels(weight.len())];
        for (i, v) in weight.iter().enumerate() {
            let r = &mut ranges[self.channel(i)];
            *r = r.max(v.abs());
        }
        ranges
    }

    /// Multiplies each channel's values by `factors[channel]`.
    pub fn scale(&self, weight: &mut ArrayD<f32>, factors: &[f32]) {
        for (i, v) in weight.iter_mut().enumerate() {
            *v *= factors[self.channel(i)];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouped_input_channels_follow_the_groups() {
        // 4 outputs, 2 groups, 2 inputs per group, 1×1 kernel: outputs 0-1 read inputs 0-1,
        // outputs 2-3 read inputs 2-3.
        let map = ChannelMap::conv_input(&[4, 2, 1, 1], 2).unwrap();
        let channels: Vec<usize> = (0..8).map(|i| map.channel(i)).collect();
        assert_eq!(channels, [0, 1, 0, 1, 2, 3, 2, 3]);
        assert_eq!(map.channels(8), 4);
        // Depthwise: one input per group.
        let dw = ChannelMap::conv_input(&[3, 1, 2, 2], 3).unwrap();
        assert_eq!(dw.channel(5), 1);
        assert_eq!(dw.channels(12), 3);
    }

    #[test]
    fn axis_channels_of_a_matrix() {
        let rows = ChannelMap::axis(&[2, 3], 0).unwrap();
        let cols = ChannelMap::axis(&[2, 3], 1).unwrap();
        assert_eq!(
            (0..6).map(|i| rows.channel(i)).collect::<Vec<_>>(),
            [0, 0, 0, 1, 1, 1]
        );
        assert_eq!(
            (0..6).map(|i| cols.channel(i)).collect::<Vec<_>>(),
            [0, 1, 2, 0, 1, 2]
        );
    }
}
