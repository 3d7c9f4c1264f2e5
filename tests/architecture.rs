//! The engine's layers import only the layers below them, and never the faces: read from the
//! sources, so an upward import (an import loop in the making) fails here.

// Test and measurement code: an unwrap, expect or panic that fires is the report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

/// The engine's modules, lowest first; each may import only modules earlier in the list.
const LAYERS: &[&str] = &[
    "util", "jobs", "atomic", "model", "sample", "runtime", "calib", "recipe", "quant", "eval",
    "report", "workflow",
];

fn sources(path: &Path) -> Vec<PathBuf> {
    if path.is_file() {
        return vec![path.to_path_buf()];
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).unwrap() {
        files.extend(sources(&entry.unwrap().path()));
    }
    files
}

/// The `crate::X` modules the sources of `module` name.
fn imports(module: &str) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let dir = src.join(module);
    let root = if dir.is_dir() {
        dir
    } else {
        src.join(format!("{module}.rs"))
    };
    let mut found = Vec::new();
    for file in sources(&root) {
        let text = std::fs::read_to_string(&file).unwrap();
        for (at, _) in text.match_indices("crate::") {
            let name: String = text[at + 7..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() && name != module && !found.contains(&name) {
                found.push(name);
            }
        }
    }
    found
}

#[test]
fn engine_layers_import_only_the_layers_below_them() {
    let mut upward = Vec::new();
    for (level, module) in LAYERS.iter().enumerate() {
        let imported = imports(module);
        assert!(
            level == 0 || !imported.is_empty() || *module == "jobs",
            "{module}: no sources read"
        );
        for name in imported {
            let allowed = LAYERS[..level].contains(&name.as_str());
            if !allowed {
                upward.push(format!("{module} imports {name}"));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports against the layering: {upward:?}"
    );
}
