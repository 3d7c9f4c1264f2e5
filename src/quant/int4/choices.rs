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
    /// Activation groups searched (AWQ-lite scales each group's activation).
    pub groups: usize,
    /// Activation groups where plain rounding was best (left unscaled).
    pub unscaled: usize,
    /// Of the groups left unscaled, those the held-out rows decided: plain rounding did better
    /// there than AWQ-lite's scales fitted on the other rows.
    pub held_out_rounding: usize,
    /// Weights AWQ-clip left unclipped: their clipping ratios, fitted on the fit rows, did no
    /// better on the held-out rows.
    pub unclipped: usize,
    /// Rows of calibration activations each search fitted on (the smallest).
    pub sample_rows: usize,
    /// Rows each search's choice was checked on (the smallest; 0: none held out).
    pub held_out_rows: usize,
}

impl Int4Report {
    /// Counts a searched group of `weights` on `rows`.
    pub fn count_rows(&mut self, rows: &super::held_out::SplitRows, weights: usize) {
        let (fit, held) = (rows.fit.nrows(), rows.held_rows());
        if self.groups == 0 {
            (self.sample_rows, self.held_out_rows) = (fit, held);
        } else {
            self.sample_rows = self.sample_rows.min(fit);
            self.held_out_rows = self.held_out_rows.min(held);
        }
        self.groups += 1;
        self.searched += weights;
    }

    /// One line for the faces, `None` when no search ran.
    pub fn summary(&self) -> Option<String> {
        let method = self.method?;
        let mut line = format!(
            "{}: {} weight(s) searched on {} calibration row(s)",
            method.name(),
            self.searched,
            self.sample_rows
        );
        if self.held_out_rows > 0 {
            line.push_str(&format!(
                ", checked against plain rounding on {} held-out row(s)",
                self.held_out_rows
            ));
        }
        if matches!(method, Int4Method::AwqLite | Int4Method::AwqFull) {
            let sites: Vec<String> = self
                .sites
                .iter()
                .map(|(site, n)| format!("{n} {site}"))
                .collect();
            line.push_str(&format!(
                "; activation scales: {}; {} of {} group(s) kept plain rounding ({} on the held-out rows)",
                if sites.is_empty() {
                    "none".to_owned()
                } else {
                    sites.join(", ")
                },
                self.unscaled,
                self.groups,
                self.held_out_rounding
            ));
        }
        if matches!(method, Int4Method::AwqClip | Int4Method::AwqFull) {
            line.push_str(&format!(
                "; {} of {} weight(s) left unclipped (clipping did no better on the held-out rows)",
                self.unclipped, self.searched
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
