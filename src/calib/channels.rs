//! Per-channel activation statistics for activation-aware weight quantization (AWQ): the mean
//! magnitude of every input channel over all tokens, and a fixed-size sample of tokens (rows)
//! the weight search evaluates layer outputs on.
//!
//! Streaming and bounded: a tensor `[.., channels]` is read as rows of `channels` values; the
//! sums take every row, the sample is a reservoir (Algorithm R, seeded, so a run is
//! reproducible) of at most `capacity` rows, whatever the number of batches.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// What to gather per channel, and for which tensors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelSampling {
    /// The activations (MatMul inputs) to observe.
    pub tensors: Vec<String>,
    /// Rows (tokens) kept per tensor for the search.
    pub rows: usize,
}

/// Rows kept per tensor by default: ModelOpt's AWQ-clip evaluates on 64 tokens; twice that
/// keeps the AWQ-lite loss stable at a few hundred KB per layer.
pub const DEFAULT_SAMPLE_ROWS: usize = 128;

/// One tensor's per-channel statistics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelStats {
    /// Channels (the last dimension).
    pub channels: usize,
    /// Rows seen.
    pub rows: u64,
    /// Σ|x| per channel over every finite value.
    pub abs_sum: Vec<f64>,
    /// Smallest finite value per channel (0 before any; SmoothQuant's ranges).
    #[serde(default)]
    pub min: Vec<f32>,
    /// Largest finite value per channel (0 before any).
    #[serde(default)]
    pub max: Vec<f32>,
    /// Sampled rows, `sample_rows × channels`, row-major.
    pub sample: Vec<f32>,
    /// How many rows `sample` holds.
    pub sample_rows: usize,
    /// The most rows `sample` may hold.
    pub capacity: usize,
    #[serde(skip, default = "fresh_rng")]
    rng: SmallRng,
}

fn fresh_rng() -> SmallRng {
    SmallRng::seed_from_u64(0x05ee_da3c)
}

impl ChannelStats {
    /// Empty statistics for `channels` channels, sampling at most `capacity` rows.
    pub fn new(channels: usize, capacity: usize) -> Self {
        ChannelStats {
            channels,
            rows: 0,
            abs_sum: vec![0.0; channels],
            min: vec![0.0; channels],
            max: vec![0.0; channels],
            sample: Vec::with_capacity(capacity.min(1 << 16) * channels),
            sample_rows: 0,
            capacity,
            rng: fresh_rng(),
        }
    }

    /// Folds in a batch; `values` is row-major with `channels` values to a row. A batch
    /// whose last dimension differs is ignored (the first batch fixed the channels).
    pub fn add(&mut self, values: &[f32], last_dim: usize) {
        if last_dim != self.channels || self.channels == 0 {
            return;
        }
        for row in values.chunks_exact(self.channels) {
            for (j, &v) in row.iter().enumerate() {
                if v.is_finite() {
                    self.abs_sum[j] += f64::from(v.abs());
                    self.min[j] = self.min[j].min(v);
                    self.max[j] = self.max[j].max(v);
                }
            }
            self.keep(row);
            self.rows += 1;
        }
    }

    /// Algorithm R: the first `capacity` rows, then row `i` replaces a random one with
    /// probability `capacity / (i + 1)`.
    fn keep(&mut self, row: &[f32]) {
        if self.sample_rows < self.capacity {
            self.sample.extend(row.iter().map(|v| finite_or_zero(*v)));
            self.sample_rows += 1;
            return;
        }
        let slot = self.rng.random_range(0..=self.rows);
        if let Ok(slot) = usize::try_from(slot)
            && slot < self.capacity
        {
            let start = slot * self.channels;
            for (dst, v) in self.sample[start..start + self.channels]
                .iter_mut()
                .zip(row)
            {
                *dst = finite_or_zero(*v);
            }
        }
    }

    /// Mean |x| per channel (AWQ's activation scale).
    pub fn mean_abs(&self) -> Vec<f32> {
        let rows = self.rows.max(1) as f64;
        self.abs_sum.iter().map(|s| (s / rows) as f32).collect()
    }
}

fn finite_or_zero(v: f32) -> f32 {
    if v.is_finite() { v } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn means_take_every_row_and_the_sample_stays_bounded() {
        let mut s = ChannelStats::new(2, 3);
        for i in 0..10 {
            s.add(&[i as f32, -1.0, f32::NAN, 2.0], 2);
        }
        assert_eq!(s.rows, 20);
        let mean = s.mean_abs();
        assert!((mean[0] - 2.25).abs() < 1e-6, "{mean:?}");
        assert!((mean[1] - 1.5).abs() < 1e-6, "{mean:?}");
        assert_eq!(
            (s.min.clone(), s.max.clone()),
            (vec![0.0, -1.0], vec![9.0, 2.0])
        );
        assert_eq!((s.sample_rows, s.sample.len()), (3, 6));
        assert!(s.sample.iter().all(|v| v.is_finite()));
        s.add(&[1.0, 2.0, 3.0], 3);
        assert_eq!(s.rows, 20, "another channel count is ignored");
    }
}
