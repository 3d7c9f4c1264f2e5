//! Calibration: data sources, runs on a chosen execution provider, streaming statistics and
//! range methods, and the statistics file.
//!
//! Memory is bounded by one batch's activations plus a fixed-size histogram per tensor,
//! whatever the number of batches (onnxruntime's histogram methods keep every activation of
//! every batch until the end).

pub mod channels;
pub mod data;
pub mod file;
pub mod histogram;
pub mod input_hessians;
pub mod input_means;
pub mod memory;
pub mod range;
pub mod range_method;
pub mod runner;
pub mod stats;

use serde::{Deserialize, Serialize};

pub use data::{BatchSource, DataError, DataSpec};
pub use range::{Range, RangeMethod, RangeTarget};
pub use runner::calibrate;
pub use stats::{CalibrationStats, TensorStats};

use crate::model::ModelError;
use crate::runtime::{EpSpec, RuntimeError};

/// onnxruntime-parity histogram sizes (its defaults: Entropy 128 bins, Percentile 2048).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParityBins {
    /// Bins of the Entropy histogram.
    pub entropy_bins: usize,
    /// Bins of the symmetric Percentile |x| histogram.
    pub percentile_bins: usize,
}

impl Default for ParityBins {
    fn default() -> Self {
        ParityBins {
            entropy_bins: 128,
            percentile_bins: 2048,
        }
    }
}

/// The most histogram bins a tensor may have: each observed tensor keeps one histogram of this
/// many 8-byte counts for the whole run (onnxruntime uses 2048; 65536 is far past any gain).
pub const MAX_HISTOGRAM_BINS: usize = 1 << 16;

/// How to run calibration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationConfig {
    /// Execution providers in priority order; each must register.
    pub execution_providers: Vec<EpSpec>,
    /// Samples per batch.
    pub batch_size: usize,
    /// Use at most this many samples.
    pub max_samples: Option<usize>,
    /// Bins of the streaming histograms (a multiple of 4); 0 collects no histograms (MinMax
    /// only).
    pub histogram_bins: usize,
    /// Let ONNX Runtime optimise the graph (off by default, as onnxruntime's calibrator: fused
    /// nodes would hide the tensors being observed).
    pub optimize: bool,
    /// Reproduce onnxruntime's `quantize_static` ranges: two passes, its histogram layouts.
    pub ort_parity: Option<ParityBins>,
    /// Calibrate only these tensors (default: every float activation).
    pub tensors: Option<Vec<String>>,
    /// Bytes a batch may take (default: half the memory available; see [`memory`]). The batch
    /// size is lowered to fit, and a sample that does not fit is refused.
    #[serde(default)]
    pub memory_budget: Option<u64>,
    /// Also gather per-channel statistics of these tensors (activation-aware int4 weights).
    #[serde(default)]
    pub channels: Option<channels::ChannelSampling>,
    /// Also gather the mean inputs of these layers (bias correction).
    #[serde(default)]
    pub input_means: Vec<input_means::MeanSpec>,
    /// Also gather the input Hessians of these layers (data-aware weight rounding).
    #[serde(default)]
    pub input_hessians: Vec<input_hessians::HessianSpec>,
}

impl Default for CalibrationConfig {
    fn default() -> Self {
        CalibrationConfig {
            execution_providers: vec![EpSpec::Cpu],
            batch_size: 1,
            max_samples: None,
            histogram_bins: 2048,
            optimize: false,
            ort_parity: None,
            tensors: None,
            memory_budget: None,
            channels: None,
            input_means: Vec::new(),
            input_hessians: Vec::new(),
        }
    }
}

/// Anything that can stop a calibration.
#[derive(Debug, thiserror::Error)]
pub enum CalibError {
    /// The model could not be read or is structurally broken.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The data could not be read or does not fit the model.
    #[error(transparent)]
    Data(#[from] DataError),
    /// ONNX Runtime or an execution provider failed to start.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// ONNX Runtime cannot load the float model (an op version it has no kernel for, an op
    /// it does not know): the model itself must change before it can be calibrated.
    #[error("ONNX Runtime cannot run the float model: {reason}")]
    FloatModel {
        /// ONNX Runtime's reason, explained where it is known.
        reason: String,
    },
    /// A batch failed to run.
    #[error("batch {batch} (samples from {first_sample}) failed to run: {reason}")]
    Run {
        /// The batch number (0-based).
        batch: usize,
        /// Its first sample.
        first_sample: usize,
        /// ONNX Runtime's message.
        reason: String,
    },
    /// The model has no float tensors to calibrate.
    #[error("the model has no float activations to calibrate")]
    NoTensors,
    /// More histogram bins than the engine allows.
    #[error("{bins} histogram bins is more than the {max} allowed")]
    TooManyBins {
        /// Bins asked for.
        bins: usize,
        /// The limit.
        max: usize,
    },
    /// Even one sample needs more memory than this machine has for a batch.
    #[error(
        "one calibration sample needs about {} for its {tensors} observed tensors, but only {} is available to a batch; calibrate fewer tensors (op types or nodes to quantize) or free memory",
        crate::util::format_bytes(*.needed),
        crate::util::format_bytes(*.budget)
    )]
    OutOfMemory {
        /// Bytes one sample needs.
        needed: u64,
        /// Bytes available to a batch.
        budget: u64,
        /// Tensors observed.
        tensors: usize,
    },
    /// The run was cancelled; nothing was written.
    #[error("calibration was cancelled")]
    Cancelled,
    /// A statistics file could not be read or written.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong.
        reason: String,
    },
}
