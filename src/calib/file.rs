//! Statistics files: our own (versioned JSON, with histograms), onnxruntime's calibration cache
//! (`TensorsData` JSON) and TensorRT's calibration cache, so users can re-quantize without
//! calibrating again and move ranges between tools.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::CalibError;
use super::range::Range;
use super::stats::CalibrationStats;

/// Format marker and version of our statistics files.
const FORMAT: &str = "qdq-studio-calibration-stats";
/// Current version; readers refuse newer ones.
pub const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Envelope {
    format: String,
    version: u32,
    #[serde(flatten)]
    stats: CalibrationStats,
}

fn file_error(path: &Path, reason: impl ToString) -> CalibError {
    CalibError::File {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// Writes `bytes` to `path` atomically (see [`crate::atomic`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CalibError> {
    crate::atomic::write(path, bytes)
        .map(|_| ())
        .map_err(|e| file_error(path, e))
}

/// Saves statistics in qdq-studio's format.
pub fn save(stats: &CalibrationStats, path: &Path) -> Result<(), CalibError> {
    let envelope = Envelope {
        format: FORMAT.to_owned(),
        version: VERSION,
        stats: stats.clone(),
    };
    let bytes = serde_json::to_vec(&envelope).map_err(|e| file_error(path, e))?;
    write_atomic(path, &bytes)
}

/// Loads statistics saved by [`save`].
pub fn load(path: &Path) -> Result<CalibrationStats, CalibError> {
    let bytes = crate::util::read_regular(path).map_err(|e| file_error(path, e))?;
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| file_error(path, format!("not a statistics file: {e}")))?;
    if value.get("format").and_then(Value::as_str) != Some(FORMAT) {
        return Err(file_error(path, "not a qdq-studio statistics file"));
    }
    let version = value.get("version").and_then(Value::as_u64).unwrap_or(0);
    if version > u64::from(VERSION) {
        return Err(file_error(
            path,
            format!("written by a newer qdq-studio (format version {version})"),
        ));
    }
    let envelope: Envelope = serde_json::from_value(value).map_err(|e| file_error(path, e))?;
    Ok(envelope.stats)
}

fn numpy_scalar(v: f32) -> Value {
    json!({ "data": f64::from(v), "dtype": "float32", "CLS": "numpy.array" })
}

/// onnxruntime's calibration cache (`quantize_static(calibration_cache_path=...)`) for these
/// ranges, labelled with the method that produced them.
pub fn ort_cache_json(ranges: &BTreeMap<String, Range>, method: &str) -> Value {
    let method = match method {
        "entropy" => "Entropy",
        "percentile" => "Percentile",
        "distribution" => "Distribution",
        _ => "MinMax",
    };
    let data: serde_json::Map<String, Value> = ranges
        .iter()
        .map(|(name, r)| {
            (
                name.clone(),
                json!({ "lowest": numpy_scalar(r.lo), "highest": numpy_scalar(r.hi), "CLS": "TensorData" }),
            )
        })
        .collect();
    json!({
        "CLS": "TensorsData",
        "data": data,
        "calibration_method": { "CLS": "CalibrationMethod", "value": format!("CalibrationMethod.{method}") },
        "smooth_quant": false,
    })
}

fn json_number(value: &Value) -> Option<f32> {
    match value {
        Value::Number(n) => n.as_f64().map(|v| v as f32),
        Value::Object(o) => o.get("data").and_then(json_number),
        Value::Array(a) if a.len() == 1 => json_number(&a[0]),
        _ => None,
    }
}

/// Reads ranges from onnxruntime's calibration cache JSON.
pub fn read_ort_cache(path: &Path) -> Result<BTreeMap<String, Range>, CalibError> {
    let bytes = crate::util::read_regular(path).map_err(|e| file_error(path, e))?;
    let value: Value =
        serde_json::from_slice(&bytes).map_err(|e| file_error(path, format!("not JSON: {e}")))?;
    let data = value
        .get("data")
        .and_then(Value::as_object)
        .ok_or_else(|| file_error(path, "not an onnxruntime calibration cache (no 'data')"))?;
    data.iter()
        .map(|(name, entry)| {
            let lo = entry.get("lowest").and_then(json_number);
            let hi = entry.get("highest").and_then(json_number);
            match (lo, hi) {
                (Some(lo), Some(hi)) => Ok((name.clone(), Range { lo, hi })),
                _ => Err(file_error(
                    path,
                    format!("tensor '{name}' has no lowest/highest"),
                )),
            }
        })
        .collect()
}

/// TensorRT's calibration cache text: a header line, then `name: <scale as big-endian f32
/// hex>` per tensor, with scale = max(|lo|, |hi|) / 127 (symmetric int8).
pub fn trt_cache_text(ranges: &BTreeMap<String, Range>) -> String {
    let mut out = String::from("TRT-8600-EntropyCalibration2\n");
    for (name, r) in ranges {
        let scale = r.lo.abs().max(r.hi.abs()) / 127.0;
        out += &format!("{name}: {:08x}\n", scale.to_bits());
    }
    out
}

/// Reads a TensorRT calibration cache into symmetric ranges (`±scale·127`).
pub fn read_trt_cache(path: &Path) -> Result<BTreeMap<String, Range>, CalibError> {
    let text = crate::util::read_regular_text(path).map_err(|e| file_error(path, e))?;
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    if !header.starts_with("TRT-") {
        return Err(file_error(
            path,
            "not a TensorRT calibration cache (no TRT- header)",
        ));
    }
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let (name, hex) = line
                .rsplit_once(':')
                .ok_or_else(|| file_error(path, format!("bad line '{line}'")))?;
            let bits = u32::from_str_radix(hex.trim(), 16)
                .map_err(|_| file_error(path, format!("bad scale in '{line}'")))?;
            let a = f32::from_bits(bits) * 127.0;
            Ok((name.trim().to_owned(), Range { lo: -a, hi: a }))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ort_cache_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let ranges: BTreeMap<String, Range> =
            [("a".to_owned(), Range { lo: -1.5, hi: 2.25 })].into();
        let path = dir.path().join("cache.json");
        write_atomic(
            &path,
            ort_cache_json(&ranges, "minmax").to_string().as_bytes(),
        )
        .unwrap();
        assert_eq!(read_ort_cache(&path).unwrap(), ranges);
    }

    #[test]
    fn trt_cache_round_trips_symmetric_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let ranges: BTreeMap<String, Range> =
            [("t".to_owned(), Range { lo: -2.0, hi: 1.0 })].into();
        let path = dir.path().join("calib.cache");
        std::fs::write(&path, trt_cache_text(&ranges)).unwrap();
        let back = read_trt_cache(&path).unwrap();
        assert!(
            (back["t"].hi - 2.0).abs() < 1e-6 && (back["t"].lo + 2.0).abs() < 1e-6,
            "{back:?}"
        );
    }

    #[test]
    fn foreign_and_newer_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.json");
        std::fs::write(
            &path,
            r#"{"format": "qdq-studio-calibration-stats", "version": 99}"#,
        )
        .unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("newer"));
        std::fs::write(&path, "[1, 2]").unwrap();
        assert!(load(&path).is_err());
        assert!(read_ort_cache(&path).is_err());
        std::fs::write(&path, "hello").unwrap();
        assert!(read_trt_cache(&path).is_err());
    }
}
