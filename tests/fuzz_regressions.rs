//! Every input a fuzz target ever crashed on (`tests/fuzz_regressions/<target>/`) and every
//! seed it starts from (`fuzz/seeds/<target>/`, the bad-input corpus among them), replayed
//! through the same calls as the target (see `fuzz/fuzz_targets/`): each must give an answer
//! (an error is fine), never a panic. Each target replays at least one file.

use std::path::{Path, PathBuf};

use qdq_studio::calib::BatchSource;
use qdq_studio::calib::data::npy::{read_header, read_samples};
use qdq_studio::calib::data::npz::NpzSource;
use qdq_studio::model::{Graph, Model};
use qdq_studio::recipe::Recipe;
use qdq_studio::workflow::inspect::ModelSummary;

/// The crash inputs and seeds of `target`; never empty (a target with nothing to replay
/// would pass without testing anything).
fn inputs(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let folders = [
        root.join("tests/fuzz_regressions").join(target),
        root.join("fuzz/seeds").join(target),
    ];
    let mut files: Vec<PathBuf> = folders
        .iter()
        .flat_map(|dir| std::fs::read_dir(dir).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "nothing to replay for {target}");
    files
}

#[test]
fn npz_crashes_and_seeds_never_panic() {
    for file in inputs("npz") {
        let data = std::fs::read(&file).unwrap();
        let mut reader = data.as_slice();
        if let Ok(header) = read_header(&mut reader, "fuzz") {
            let _ = read_samples(&mut reader, &header, 2, "fuzz");
        }
        if let Ok(mut source) = NpzSource::open(&file, "x", &["x"]) {
            while let Ok(Some(_)) = source.next_batch(3) {}
        }
    }
}

#[test]
fn model_load_crashes_and_seeds_never_panic() {
    for file in inputs("model_load") {
        let data = std::fs::read(&file).unwrap();
        let folder = file.parent().unwrap().to_path_buf();
        if let Ok(model) = Model::decode(bytes::Bytes::from(data), &file, folder) {
            let graph = Graph::build(&model);
            let _ = graph.check();
            let _ = ModelSummary::of(&model, &graph);
            let _ = model.to_bytes();
        }
    }
}

#[test]
fn recipe_crashes_and_seeds_round_trip() {
    for file in inputs("recipe") {
        let text = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
        if let Ok(recipe) = Recipe::from_toml(&text, "fuzz.toml") {
            let printed = recipe.to_toml();
            let again = Recipe::from_toml(&printed, "printed.toml").unwrap();
            assert_eq!(printed, again.to_toml());
        }
    }
}
