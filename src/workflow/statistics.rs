//! Calibration statistics on disk, in every format users bring: qdq-studio's own (every range
//! method's inputs, histograms included), onnxruntime's calibration cache and TensorRT's
//! (ranges only: they quantize with MinMax over the ranges they hold). Also the ranges a
//! method gives, for exporting those caches.

use std::collections::BTreeMap;
use std::path::Path;

use super::WorkflowError;
use crate::calib::file;
use crate::calib::range::{self, Range, RangeMethod, RangeTarget};
use crate::calib::stats::{CalibrationInfo, CalibrationStats, TensorStats};
use crate::model::Graph;

/// Which format a statistics file was in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatisticsFormat {
    /// qdq-studio's statistics file.
    QdqStudio,
    /// onnxruntime's calibration cache (JSON).
    OrtCache,
    /// TensorRT's calibration cache.
    TensorrtCache,
}

impl StatisticsFormat {
    /// The format's name, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            StatisticsFormat::QdqStudio => "qdq-studio statistics",
            StatisticsFormat::OrtCache => "an onnxruntime calibration cache",
            StatisticsFormat::TensorrtCache => "a TensorRT calibration cache",
        }
    }
}

/// Statistics holding only ranges (what the caches give): each tensor's extremes.
fn from_ranges(ranges: BTreeMap<String, Range>, path: &Path) -> CalibrationStats {
    let tensors = ranges
        .into_iter()
        .map(|(name, r)| {
            let mut s = TensorStats::default();
            s.add_batch(&[r.lo, r.hi], &[2], None);
            (name, s)
        })
        .collect();
    CalibrationStats {
        info: CalibrationInfo {
            source: path.display().to_string(),
            ..CalibrationInfo::default()
        },
        tensors,
        channels: BTreeMap::new(),
        smoothing: BTreeMap::new(),
        input_means: BTreeMap::new(),
        input_hessians: BTreeMap::new(),
        range_choices: BTreeMap::new(),
    }
}

/// Reads statistics from a file of any supported format, and says which it was.
pub fn load(path: &Path) -> Result<(CalibrationStats, StatisticsFormat), WorkflowError> {
    let ours = match file::load(path) {
        Ok(stats) => return Ok((stats, StatisticsFormat::QdqStudio)),
        Err(e) => e,
    };
    if let Ok(ranges) = file::read_ort_cache(path) {
        return Ok((from_ranges(ranges, path), StatisticsFormat::OrtCache));
    }
    if let Ok(ranges) = file::read_trt_cache(path) {
        return Ok((from_ranges(ranges, path), StatisticsFormat::TensorrtCache));
    }
    Err(WorkflowError::Statistics {
        path: path.to_path_buf(),
        reason: format!(
            "neither a qdq-studio statistics file, an onnxruntime calibration cache nor a TensorRT cache ({ours})"
        ),
    })
}

/// Saves statistics in qdq-studio's format.
pub fn save(stats: &CalibrationStats, path: &Path) -> Result<(), WorkflowError> {
    Ok(file::save(stats, path)?)
}

/// An error when none of the statistics' tensors exists in `graph` (statistics of another
/// model); statistics of a subset are fine.
pub fn check_for(
    stats: &CalibrationStats,
    graph: &Graph,
    path: &Path,
) -> Result<(), WorkflowError> {
    let known = stats
        .tensors
        .keys()
        .filter(|t| graph.tensor(t).is_some())
        .count();
    if known == 0 && !stats.tensors.is_empty() {
        return Err(WorkflowError::Statistics {
            path: path.to_path_buf(),
            reason: format!(
                "these statistics are for another model: none of their {} tensors exists in this one",
                stats.tensors.len()
            ),
        });
    }
    Ok(())
}

/// Each calibrated tensor's range under `method` (for 8-bit asymmetric targets, as the
/// caches hold them); tensors the method cannot serve are left out.
pub fn ranges(stats: &CalibrationStats, method: &RangeMethod) -> BTreeMap<String, Range> {
    let target = RangeTarget::default();
    stats
        .tensors
        .iter()
        .filter_map(|(name, s)| {
            range::compute(s, method, target, stats.info.ort_parity)
                .ok()
                .map(|r| (name.clone(), r))
        })
        .collect()
}

/// Writes onnxruntime's calibration cache of `method`'s ranges.
pub fn export_ort_cache(
    stats: &CalibrationStats,
    method: &RangeMethod,
    path: &Path,
) -> Result<(), WorkflowError> {
    let json = file::ort_cache_json(&ranges(stats, method), method.name());
    Ok(file::write_atomic(path, json.to_string().as_bytes())?)
}

/// Writes TensorRT's calibration cache of `method`'s ranges.
pub fn export_trt_cache(
    stats: &CalibrationStats,
    method: &RangeMethod,
    path: &Path,
) -> Result<(), WorkflowError> {
    Ok(file::write_atomic(
        path,
        file::trt_cache_text(&ranges(stats, method)).as_bytes(),
    )?)
}

/// Warnings about the statistics both faces show: tensors that never held a finite value,
/// and tensors with NaN or Inf left out of their range.
pub fn warnings(stats: &CalibrationStats) -> Vec<String> {
    let empty: Vec<&str> = stats
        .tensors
        .iter()
        .filter(|(_, s)| !s.has_data())
        .map(|(n, _)| n.as_str())
        .collect();
    let mut out = Vec::new();
    if !empty.is_empty() {
        out.push(format!(
            "{} tensor(s) never held a finite value: {}",
            empty.len(),
            empty.join(", ")
        ));
    }
    for (name, s) in stats.tensors.iter().filter(|(_, s)| s.nan + s.inf > 0) {
        out.push(format!(
            "'{name}' had {} NaN and {} Inf values (left out of its range)",
            s.nan, s.inf
        ));
    }
    out
}
