//! The model loader on arbitrary bytes: protobuf decode, external-data resolution (against a
//! folder holding one small data file and a symlink out of it), the graph index and its checks,
//! the summary, every tensor's decoding, and re-encoding. Any outcome but a panic, a hang or an
//! unbounded allocation is fine: errors are the expected answer to most inputs.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use qdq_studio::workflow::inspect::ModelSummary;
use qdq_studio::model::{Graph, Model};

/// The model's folder: `weights.bin` (4 KiB) and `escape.bin`, a symlink leaving the folder.
fn folder() -> &'static Path {
    static FOLDER: OnceLock<PathBuf> = OnceLock::new();
    FOLDER.get_or_init(|| {
        let root = tempfile::tempdir().expect("temp dir").keep();
        let folder = root.join("model");
        std::fs::create_dir(&folder).expect("model folder");
        std::fs::write(folder.join("weights.bin"), vec![7u8; 4096]).expect("weights");
        std::fs::write(root.join("secret.bin"), vec![1u8; 4096]).expect("secret");
        #[cfg(unix)]
        std::os::unix::fs::symlink("../secret.bin", folder.join("escape.bin")).expect("symlink");
        folder
    })
}

fuzz_target!(|data: &[u8]| {
    let folder = folder();
    let Ok(model) = Model::decode(
        bytes::Bytes::copy_from_slice(data),
        &folder.join("fuzz.onnx"),
        folder.to_path_buf(),
    ) else {
        return;
    };
    for file in model.external_files() {
        assert!(
            file.starts_with(folder),
            "external data resolved outside the model's folder: {}",
            file.display()
        );
    }
    let graph = Graph::build(&model);
    let _ = graph.check();
    let _ = ModelSummary::of(&model, &graph);
    for tensor in &model.graph().initializer {
        let _ = model.tensor_array(tensor);
    }
    let _ = model.to_bytes();
});
