//! Per-tensor streaming statistics and the calibration result that holds them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::histogram::{AbsHistogram, Histogram};

/// How many distinct shapes a tensor's statistics remember.
const MAX_SHAPES: usize = 8;

/// Everything calibration learned about one tensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorStats {
    /// Finite values seen.
    pub count: u64,
    /// NaN values seen (never folded into ranges).
    pub nan: u64,
    /// ±Inf values seen (never folded into ranges).
    pub inf: u64,
    /// Smallest finite value (+inf before any).
    pub min: f32,
    /// Largest finite value (-inf before any).
    pub max: f32,
    /// Smallest |value| (for onnxruntime's Percentile histogram layout).
    pub min_abs: f32,
    /// Sum of per-batch minima (for MinMax with moving average).
    pub batch_min_sum: f64,
    /// Sum of per-batch maxima.
    pub batch_max_sum: f64,
    /// Batches seen.
    pub batches: u64,
    /// Distinct shapes observed (at most a few).
    pub shapes: Vec<Vec<usize>>,
    /// The element type the tensor had in the session.
    #[serde(default)]
    pub dtype: Option<crate::model::DataType>,
    /// Signed histogram (see [`Histogram`]).
    pub histogram: Option<Histogram>,
    /// onnxruntime-parity signed histogram for Entropy (parity mode only).
    #[serde(default)]
    pub parity_histogram: Option<Histogram>,
    /// onnxruntime-parity histogram of |x| for symmetric Percentile (parity mode only).
    #[serde(default)]
    pub abs_histogram: Option<AbsHistogram>,
}

impl Default for TensorStats {
    fn default() -> Self {
        TensorStats {
            count: 0,
            nan: 0,
            inf: 0,
            min: f32::INFINITY,
            max: f32::NEG_INFINITY,
            min_abs: f32::INFINITY,
            batch_min_sum: 0.0,
            batch_max_sum: 0.0,
            batches: 0,
            shapes: Vec::new(),
            dtype: None,
            histogram: None,
            parity_histogram: None,
            abs_histogram: None,
        }
    }
}

/// What a single batch of one tensor looks like (computed once, used by every accumulator).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchSummary {
    /// Finite values.
    pub count: u64,
    /// NaNs.
    pub nan: u64,
    /// Infinities.
    pub inf: u64,
    /// Smallest finite value.
    pub min: f32,
    /// Largest finite value.
    pub max: f32,
    /// Smallest |finite value|.
    pub min_abs: f32,
}

impl BatchSummary {
    /// Scans the values. The common all-finite case is one branch-free pass (`f32::min` and
    /// `max` skip NaN; infinities are counted separately and only then rescanned).
    pub fn of(values: &[f32]) -> Self {
        // Eight independent lanes with compare-and-select let the compiler vectorise the scan
        // (f32::min's NaN rules would not); NaN compares false and is skipped, and any
        // non-finite value sends us to the exact slow path below.
        const LANES: usize = 8;
        let (mut min, mut max, mut min_abs) = (
            [f32::INFINITY; LANES],
            [f32::NEG_INFINITY; LANES],
            [f32::INFINITY; LANES],
        );
        let mut non_finite = [0u32; LANES];
        let chunks = values.chunks_exact(LANES);
        let tail = chunks.remainder();
        for chunk in chunks {
            for i in 0..LANES {
                let v = chunk[i];
                let a = v.abs();
                min[i] = if v < min[i] { v } else { min[i] };
                max[i] = if v > max[i] { v } else { max[i] };
                min_abs[i] = if a < min_abs[i] { a } else { min_abs[i] };
                non_finite[i] += u32::from(a >= f32::INFINITY || a.is_nan());
            }
        }
        for (i, &v) in tail.iter().enumerate() {
            let a = v.abs();
            min[i] = if v < min[i] { v } else { min[i] };
            max[i] = if v > max[i] { v } else { max[i] };
            min_abs[i] = if a < min_abs[i] { a } else { min_abs[i] };
            non_finite[i] += u32::from(a >= f32::INFINITY || a.is_nan());
        }
        if non_finite.iter().all(|&n| n == 0) {
            return BatchSummary {
                count: values.len() as u64,
                nan: 0,
                inf: 0,
                min: min.iter().copied().fold(f32::INFINITY, f32::min),
                max: max.iter().copied().fold(f32::NEG_INFINITY, f32::max),
                min_abs: min_abs.iter().copied().fold(f32::INFINITY, f32::min),
            };
        }
        let mut s = BatchSummary {
            count: 0,
            nan: 0,
            inf: 0,
            min: f32::INFINITY,
            max: f32::NEG_INFINITY,
            min_abs: f32::INFINITY,
        };
        for &v in values {
            if v.is_nan() {
                s.nan += 1;
            } else if v.is_infinite() {
                s.inf += 1;
            } else {
                s.count += 1;
                s.min = s.min.min(v);
                s.max = s.max.max(v);
                s.min_abs = s.min_abs.min(v.abs());
            }
        }
        s
    }

    /// Largest |finite value|.
    pub fn abs_max(&self) -> f32 {
        if self.count == 0 {
            0.0
        } else {
            self.min.abs().max(self.max.abs())
        }
    }
}

impl TensorStats {
    /// The shape calibration observed: each dim that was the same in every batch, `?` for one
    /// that varied (the batch dim of a short last batch, a sequence length); `None` when no
    /// shape was recorded.
    pub fn observed_shape(&self) -> Option<Vec<crate::model::Dim>> {
        let (first, rest) = self.shapes.split_first()?;
        Some(
            first
                .iter()
                .enumerate()
                .map(|(i, &d)| match rest.iter().all(|s| s.get(i) == Some(&d)) {
                    true => crate::model::Dim::Fixed(i64::try_from(d).unwrap_or(i64::MAX)),
                    false => crate::model::Dim::Unknown,
                })
                .collect(),
        )
    }

    /// Folds one batch in: counts, extremes, shapes, and (when enabled) the histogram.
    pub fn add_batch(&mut self, values: &[f32], shape: &[usize], histogram_bins: Option<usize>) {
        let summary = BatchSummary::of(values);
        self.add_summary(&summary, shape);
        if let Some(bins) = histogram_bins {
            let histogram = self.histogram.get_or_insert_with(|| Histogram::new(bins));
            histogram.add_summarized(values, summary.abs_max(), summary.nan + summary.inf == 0);
        }
    }

    /// Folds a batch's summary in (no histogram).
    pub fn add_summary(&mut self, summary: &BatchSummary, shape: &[usize]) {
        self.count += summary.count;
        self.nan += summary.nan;
        self.inf += summary.inf;
        if summary.count > 0 {
            self.min = self.min.min(summary.min);
            self.max = self.max.max(summary.max);
            self.min_abs = self.min_abs.min(summary.min_abs);
            self.batch_min_sum += f64::from(summary.min);
            self.batch_max_sum += f64::from(summary.max);
            self.batches += 1;
        }
        if self.shapes.len() < MAX_SHAPES && !self.shapes.iter().any(|s| s == shape) {
            self.shapes.push(shape.to_vec());
        }
    }

    /// Largest |finite value| seen.
    pub fn abs_max(&self) -> f32 {
        if self.count == 0 {
            0.0
        } else {
            self.min.abs().max(self.max.abs())
        }
    }

    /// True when at least one finite value was seen.
    pub fn has_data(&self) -> bool {
        self.count > 0
    }
}

/// How the statistics were gathered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct CalibrationInfo {
    /// The model's graph name and node count, to catch statistics used with another model.
    pub model: String,
    /// Node count of the model.
    pub model_nodes: usize,
    /// The execution providers the session registered, in priority order.
    pub execution_providers: Vec<String>,
    /// The ONNX Runtime version used.
    pub runtime_version: String,
    /// Samples per batch.
    pub batch_size: usize,
    /// Samples seen.
    pub samples: usize,
    /// Batches run.
    pub batches: usize,
    /// The data source.
    pub source: String,
    /// Histogram bins of the streaming histograms.
    pub histogram_bins: usize,
    /// True when gathered in two passes with onnxruntime-parity histograms.
    pub ort_parity: bool,
    /// Seconds the calibration took.
    pub seconds: f64,
    /// Of which ONNX Runtime ran the model.
    #[serde(default)]
    pub run_seconds: f64,
    /// Of which statistics were folded in.
    #[serde(default)]
    pub stats_seconds: f64,
    /// What the run changed or noticed on its own (a batch size lowered to fit in memory).
    #[serde(default)]
    pub notes: Vec<String>,
    /// True when the model was calibrated with cross-layer equalization (its equalized
    /// activations differ from the original's; see the quantizer's `equalize` module).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub equalized: bool,
    /// True when each activation's range method was chosen layer-wise
    /// ([`CalibrationStats::range_choices`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub layerwise_ranges: bool,
    /// True when only the tensors one recipe's plan quantizes were observed (a one-shot
    /// quantize, see the workflow's `planned_tensors`): a tensor missing from these
    /// statistics is not thereby shown to be of another type than float.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub planned_only: bool,
}

/// The statistics of every calibrated tensor, as saved to and loaded from disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct CalibrationStats {
    /// How they were gathered.
    pub info: CalibrationInfo,
    /// Tensor name → statistics.
    pub tensors: BTreeMap<String, TensorStats>,
    /// Tensor name → per-channel statistics (gathered for activation-aware int4 weights).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub channels: BTreeMap<String, super::channels::ChannelStats>,
    /// Activation name → the SmoothQuant scales it was calibrated with (its statistics above
    /// are of the smoothed values).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub smoothing: BTreeMap<String, Smoothing>,
    /// Layer (node name) → the mean of the inputs its weights multiply (bias correction).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub input_means: BTreeMap<String, super::input_means::InputMean>,
    /// Input tensor (as the first layer reading it names it) → the Hessian of the inputs
    /// its layers' weights multiply (GPTQ); [`CalibrationStats::hessian_of`] finds a layer's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub input_hessians: BTreeMap<String, super::input_hessians::InputHessian>,
    /// Activation → the range method chosen for it layer-wise (the one whose quantization
    /// of it disturbed the outputs of the nodes reading it least, measured).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub range_choices: BTreeMap<String, RangeChoice>,
}

/// One activation's layer-wise range choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RangeChoice {
    /// The method chosen.
    pub method: super::range_method::RangeMethod,
    /// Each method tried and the squared error its quantization of the activation caused in
    /// the outputs of the nodes reading it, summed over the calibration data (the recipe's
    /// method first).
    pub errors: Vec<(super::range_method::RangeMethod, f64)>,
}

impl RangeChoice {
    /// How much lower the chosen method's error is than the first (the recipe's), in dB.
    pub fn gain_db(&self) -> f64 {
        let first = self.errors.first().map_or(0.0, |e| e.1);
        let chosen = self
            .errors
            .iter()
            .find(|e| e.0 == self.method)
            .map_or(first, |e| e.1);
        if chosen <= 0.0 || first <= 0.0 {
            0.0
        } else {
            10.0 * (first / chosen).log10()
        }
    }
}

impl CalibrationStats {
    /// The input Hessian gathered for `layer` (node name), if any.
    pub fn hessian_of(&self, layer: &str) -> Option<&super::input_hessians::InputHessian> {
        self.input_hessians
            .values()
            .find(|h| h.layers.iter().any(|l| l == layer))
    }

    /// The tensors in which calibration met NaN or ±Inf (never folded into ranges), by name.
    pub fn non_finite_tensors(&self) -> Vec<&str> {
        self.tensors
            .iter()
            .filter(|(_, t)| t.nan > 0 || t.inf > 0)
            .map(|(name, _)| name.as_str())
            .collect()
    }
}

/// One activation's SmoothQuant smoothing (see the quantizer's `smooth` module): the scales it is divided by and the α that made them.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Smoothing {
    /// `s` per channel.
    pub scales: Vec<f32>,
    /// The exponent chosen.
    pub alpha: f32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_and_inf_are_counted_not_folded_into_ranges() {
        let mut s = TensorStats::default();
        s.add_batch(&[1.0, f32::NAN, -2.0, f32::INFINITY], &[4], Some(16));
        assert_eq!((s.count, s.nan, s.inf, s.min, s.max), (2, 1, 1, -2.0, 1.0));
        assert_eq!(s.histogram.as_ref().unwrap().total(), 2);
    }

    #[test]
    fn shapes_are_remembered_once() {
        let mut s = TensorStats::default();
        s.add_batch(&[1.0], &[1, 1], None);
        s.add_batch(&[1.0], &[1, 1], None);
        s.add_batch(&[1.0, 2.0], &[2, 1], None);
        assert_eq!(s.shapes, [vec![1, 1], vec![2, 1]]);
        assert_eq!(s.batches, 3);
    }
}
