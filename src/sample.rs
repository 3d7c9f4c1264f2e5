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

/// The sample's evaluation data (16 other crops, with their `labels`: 0 upright, 1 upside
/// down).
pub const SAMPLE_EVALUATION: &[u8] = include_bytes!("../assets/sample/eval.npz");

/// The sample's files on disk: the float model and its data, as the data sources and the
/// float-model choice read files and a packaged build has no checkout to read them from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleFiles {
    /// The float model (`ppocr_cls.onnx`).
    pub model: PathBuf,
    /// The calibration data.
    pub calibration: PathBuf,
    /// The labelled evaluation data.
    pub evaluation: PathBuf,
}

/// Writes the sample's files under `folder` (atomically) the first time and whenever they
/// differ from the embedded copies, and says where they are.
pub fn sample_files(folder: &Path) -> std::io::Result<SampleFiles> {
    std::fs::create_dir_all(folder)?;
    let write = |name: &str, bytes: &[u8]| -> std::io::Result<PathBuf> {
        let path = folder.join(name);
        let current = std::fs::metadata(&path).map(|m| m.len()).ok();
        if current != Some(bytes.len() as u64) || std::fs::read(&path)? != bytes {
            crate::atomic::write(&path, bytes)?;
        }
        Ok(path)
    };
    Ok(SampleFiles {
        model: write("ppocr_cls.onnx", SAMPLE_MODEL)?,
        calibration: write("ppocr_cls.calib.npz", SAMPLE_CALIBRATION)?,
        evaluation: write("ppocr_cls.eval.npz", SAMPLE_EVALUATION)?,
    })
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
    fn the_sample_files_are_written_once_and_repaired_when_damaged() {
        let dir = tempfile::tempdir().unwrap();
        let files = sample_files(dir.path()).unwrap();
        assert_eq!(std::fs::read(&files.model).unwrap(), SAMPLE_MODEL);
        assert_eq!(
            std::fs::read(&files.calibration).unwrap(),
            SAMPLE_CALIBRATION
        );
        assert_eq!(std::fs::read(&files.evaluation).unwrap(), SAMPLE_EVALUATION);
        std::fs::write(&files.evaluation, b"damaged").unwrap();
        assert_eq!(sample_files(dir.path()).unwrap(), files);
        assert_eq!(std::fs::read(&files.evaluation).unwrap(), SAMPLE_EVALUATION);
        crate::model::Model::load(&files.model).unwrap();
    }
}
