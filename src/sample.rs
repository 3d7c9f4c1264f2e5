//! The bundled sample: PP-OCR's text-direction classifier (Apache-2.0, see
//! `assets/sample/NOTICE.md`), embedded in the binary so the studio always has a model to open.

use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::model::{Model, ModelError};

/// The sample model's bytes.
pub const SAMPLE_MODEL: &[u8] = include_bytes!("../assets/sample/ppocr_cls.onnx");

/// The name the sample is shown under.
pub const SAMPLE_NAME: &str = "ppocr_cls.onnx (bundled sample)";

/// The stem files derived from the sample are named after (`ppocr_cls.qdq.onnx`, ...).
pub const SAMPLE_STEM: &str = "ppocr_cls";

/// The sample's calibration data (32 text-line crops, `.npz` keyed by the input name).
pub const SAMPLE_CALIBRATION: &[u8] = include_bytes!("../assets/sample/calib.npz");

/// The sample's evaluation data (16 other crops).
pub const SAMPLE_EVALUATION: &[u8] = include_bytes!("../assets/sample/eval.npz");

/// The sample's data files on disk: `(calibration, evaluation)` under `folder`, written there
/// (atomically) the first time and whenever they differ from the embedded copies. The data
/// sources read files, and a packaged build has no checkout to read them from.
pub fn sample_data_files(folder: &Path) -> std::io::Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(folder)?;
    let mut paths = Vec::new();
    for (name, bytes) in [
        ("ppocr_cls.calib.npz", SAMPLE_CALIBRATION),
        ("ppocr_cls.eval.npz", SAMPLE_EVALUATION),
    ] {
        let path = folder.join(name);
        let current = std::fs::metadata(&path).map(|m| m.len()).ok();
        if current != Some(bytes.len() as u64) || std::fs::read(&path)? != bytes {
            crate::atomic::write(&path, bytes)?;
        }
        paths.push(path);
    }
    Ok((paths[0].clone(), paths[1].clone()))
}

/// Decodes the bundled sample.
pub fn sample_model() -> Result<Model, ModelError> {
    Model::decode(
        Bytes::from_static(SAMPLE_MODEL),
        Path::new(SAMPLE_NAME),
        PathBuf::from("."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Graph;

    #[test]
    fn the_bundled_sample_loads_and_indexes_cleanly() {
        let model = sample_model().unwrap();
        let graph = Graph::build(&model);
        graph.check().unwrap();
        assert_eq!(graph.inputs(), ["x"]);
        assert_eq!(graph.nodes().len(), 566);
    }

    #[test]
    fn the_sample_data_is_written_once_and_repaired_when_damaged() {
        let dir = tempfile::tempdir().unwrap();
        let (calib, eval) = sample_data_files(dir.path()).unwrap();
        assert_eq!(std::fs::read(&calib).unwrap(), SAMPLE_CALIBRATION);
        assert_eq!(std::fs::read(&eval).unwrap(), SAMPLE_EVALUATION);
        std::fs::write(&eval, b"damaged").unwrap();
        sample_data_files(dir.path()).unwrap();
        assert_eq!(std::fs::read(&eval).unwrap(), SAMPLE_EVALUATION);
    }
}
