//! The range methods a tensor's range can be chosen by, as recipes, statistics files and the
//! faces name them; [`super::range`] computes each.

use serde::{Deserialize, Serialize};

/// How a tensor's range is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "method", rename_all = "snake_case")]
pub enum RangeMethod {
    /// The observed extremes (optionally the mean of per-batch extremes).
    MinMax {
        /// Average per-batch minima and maxima instead of taking the extremes.
        #[serde(default)]
        moving_average: bool,
    },
    /// The threshold minimising KL divergence between float and quantized distributions.
    Entropy {
        /// Target bins of the quantized distribution (128 for 8-bit).
        #[serde(default = "default_quantized_bins")]
        num_quantized_bins: usize,
    },
    /// A percentile of the values (of |x| when symmetric).
    Percentile {
        /// The percentile, e.g. 99.999.
        #[serde(default = "default_percentile")]
        percentile: f64,
        /// Cut |x| at the percentile (symmetric range), or each tail separately.
        #[serde(default = "default_true")]
        symmetric: bool,
    },
    /// The range minimising the expected squared quantization error on the target grid.
    Mse,
    /// Power-of-two scale that never clips.
    PowerOfTwoNonOverflow,
    /// Power-of-two scale minimising expected squared error.
    PowerOfTwoMse,
}

fn default_quantized_bins() -> usize {
    128
}
fn default_percentile() -> f64 {
    99.999
}
fn default_true() -> bool {
    true
}

impl RangeMethod {
    /// What is wrong with the method's parameters, if anything (a percentile outside
    /// (0, 100], an entropy search with fewer than 2 target bins).
    pub fn problem(&self) -> Option<String> {
        match *self {
            RangeMethod::Percentile { percentile, .. }
                if !(percentile > 0.0 && percentile <= 100.0) =>
            {
                Some(format!(
                    "percentile must be above 0 and at most 100, got {percentile}"
                ))
            }
            RangeMethod::Entropy { num_quantized_bins }
                if !(2..=super::MAX_HISTOGRAM_BINS).contains(&num_quantized_bins) =>
            {
                Some(format!(
                    "num_quantized_bins must be between 2 and {}, got {num_quantized_bins}",
                    super::MAX_HISTOGRAM_BINS
                ))
            }
            _ => None,
        }
    }

    /// Whether the method reads a histogram (every method but MinMax, which reads the
    /// extremes and their moving averages).
    pub fn needs_histogram(&self) -> bool {
        !matches!(self, RangeMethod::MinMax { .. })
    }

    /// The method's short name (`minmax`, `entropy`, `percentile`, `mse`, `pow2`, `pow2_mse`).
    pub fn name(&self) -> &'static str {
        match self {
            RangeMethod::MinMax { .. } => "minmax",
            RangeMethod::Entropy { .. } => "entropy",
            RangeMethod::Percentile { .. } => "percentile",
            RangeMethod::Mse => "mse",
            RangeMethod::PowerOfTwoNonOverflow => "pow2",
            RangeMethod::PowerOfTwoMse => "pow2_mse",
        }
    }

    /// Parses a method name (ModelOpt's `max` means MinMax).
    pub fn parse(name: &str) -> Option<RangeMethod> {
        Some(match name.to_ascii_lowercase().as_str() {
            "max" | "minmax" => RangeMethod::MinMax {
                moving_average: false,
            },
            "entropy" | "kl" => RangeMethod::Entropy {
                num_quantized_bins: default_quantized_bins(),
            },
            "percentile" => RangeMethod::Percentile {
                percentile: default_percentile(),
                symmetric: true,
            },
            "mse" | "minmse" => RangeMethod::Mse,
            "pow2" | "power_of_two" => RangeMethod::PowerOfTwoNonOverflow,
            "pow2_mse" => RangeMethod::PowerOfTwoMse,
            _ => return None,
        })
    }

    /// The name with the parameter that tells two of a kind apart (`percentile 99.99`,
    /// `entropy 128`), for reports.
    pub fn label(&self) -> String {
        match *self {
            RangeMethod::Percentile { percentile, .. } => format!("percentile {percentile}"),
            RangeMethod::Entropy { num_quantized_bins } => format!("entropy {num_quantized_bins}"),
            _ => self.name().to_owned(),
        }
    }

    /// Every method with default parameters (what the studio draws on a histogram).
    pub fn all() -> [RangeMethod; 6] {
        [
            RangeMethod::MinMax {
                moving_average: false,
            },
            RangeMethod::Entropy {
                num_quantized_bins: default_quantized_bins(),
            },
            RangeMethod::Percentile {
                percentile: default_percentile(),
                symmetric: true,
            },
            RangeMethod::Mse,
            RangeMethod::PowerOfTwoNonOverflow,
            RangeMethod::PowerOfTwoMse,
        ]
    }
}
