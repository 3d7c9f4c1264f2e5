//! What the int4 searches decide, before the rewrite applies it: a transform per weight,
//! the activations divided by AWQ-lite's scales, and a summary for the faces.

use std::collections::{BTreeMap, HashMap};

use super::fold::ScaleSite;
use crate::model::NodeId;
use crate::recipe::Int4Method;

/// What the rewrite does to one weight's float values before quantizing them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WeightTransform {
    /// Multiply row `i` (input channel) by this (AWQ-lite's `s`).
    pub row_scale: Option<Vec<f32>>,
    /// Divide column `j` by this (a following layer's `s` folded into this weight).
    pub column_divisor: Option<Vec<f32>>,
    /// Clipping ratio per block and column (AWQ-clip), `block * n + column`.
    pub clip: Option<Vec<f32>>,
}

/// One activation divided by AWQ-lite's scales, and where the division goes.
#[derive(Debug, Clone, PartialEq)]
pub struct ActivationScale {
    /// The activation (input 0 of the MatMuls).
    pub activation: String,
    /// The MatMul/Gemm nodes whose weights were scaled.
    pub readers: Vec<NodeId>,
    /// The scales, one per channel.
    pub scales: Vec<f32>,
    /// The exponent the search chose.
    pub alpha: f32,
    /// Where the division goes.
    pub site: ScaleSite,
}

/// What the int4 searches decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Int4Choices {
    /// Weight name → its transform.
    pub transforms: HashMap<String, WeightTransform>,
    /// Activations divided by AWQ-lite's scales.
    pub scales: Vec<ActivationScale>,
    /// What was searched, for the faces.
    pub report: Int4Report,
    /// Weight name → GPTQ's values, quantized with the original weight's parameters (see
    /// [`crate::quant::gptq`]; empty otherwise).
    pub rounding: HashMap<String, ndarray::ArrayD<f32>>,
}

/// A summary of the searches.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Int4Report {
    /// The method.
    pub method: Option<Int4Method>,
    /// Weights searched.
    pub searched: usize,
    /// Weights rounded plainly (shared, transposed or not a MatMul's right-hand side).
    pub plain: usize,
    /// Activations scaled, per site description.
    pub sites: BTreeMap<String, usize>,
    /// Activation groups where plain rounding was best (left unscaled).
    pub unscaled: usize,
    /// Rows of calibration activations each search used (the smallest).
    pub sample_rows: usize,
}

impl Int4Report {
    /// One line for the faces, `None` when no search ran.
    pub fn summary(&self) -> Option<String> {
        let method = self.method?;
        let mut line = format!(
            "{}: {} weight(s) searched on {} calibration row(s)",
            method.name(),
            self.searched,
            self.sample_rows
        );
        if method == Int4Method::AwqLite {
            let sites: Vec<String> = self
                .sites
                .iter()
                .map(|(site, n)| format!("{n} {site}"))
                .collect();
            line.push_str(&format!(
                "; activation scales: {}; {} group(s) left unscaled (plain rounding was best)",
                if sites.is_empty() {
                    "none".to_owned()
                } else {
                    sites.join(", ")
                },
                self.unscaled
            ));
        }
        if self.plain > 0 {
            line.push_str(&format!(
                "; {} weight(s) rounded plainly (shared or transposed)",
                self.plain
            ));
        }
        Some(line)
    }
}
