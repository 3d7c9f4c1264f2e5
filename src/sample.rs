//! The bundled sample: PP-OCR's text-direction classifier (Apache-2.0, see
//! `assets/sample/NOTICE.md`), embedded in the binary so the studio always has a model to open.

use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::model::{Model, ModelError};

/// The sample model's bytes.
pub const SAMPLE_MODEL: &[u8] = include_bytes!("../assets/sample/ppocr_cls.onnx");

/// The name the sample is shown under.
pub const SAMPLE_NAME: &str = "ppocr_cls.onnx (bundled sample)";

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
}
