//! No file a run writes may be one of its inputs or another of its outputs: every side output
//! of every subcommand (statistics, cache exports, recipes, scans, reports) is refused with one
//! line and a non-zero exit before any work, the inputs untouched. Compared by identity, so a
//! hard link to an input is caught too.

use crate::common;

use std::path::{Path, PathBuf};

use common::{asset, cli, digest};

/// The run's inputs in a fresh folder: the sample model, its data, a recipe, statistics (a
/// TensorRT cache), a QDQ model, and a hard link to the model named like a report.
struct Files {
    _dir: tempfile::TempDir,
    model: PathBuf,
    data: PathBuf,
    recipe: PathBuf,
    stats: PathBuf,
    link: PathBuf,
    out: PathBuf,
}

fn files() -> Files {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    std::fs::copy(asset("ppocr_cls.onnx"), path("m.onnx")).unwrap();
    std::fs::copy(asset("calib.npz"), path("calib.npz")).unwrap();
    std::fs::write(
        path("r.toml"),
        qdq_studio::recipe::Recipe::default().to_toml(),
    )
    .unwrap();
    std::fs::write(
        path("stats.cache"),
        "TRT-8600-EntropyCalibration2\nx: 3c000000\n",
    )
    .unwrap();
    std::fs::hard_link(path("m.onnx"), path("report.html")).unwrap();
    Files {
        model: path("m.onnx"),
        data: path("calib.npz"),
        recipe: path("r.toml"),
        stats: path("stats.cache"),
        link: path("report.html"),
        out: path("q.onnx"),
        _dir: dir,
    }
}

fn digests(paths: &[&Path]) -> Vec<String> {
    paths.iter().map(|p| digest(p)).collect()
}

/// Runs the CLI with `args`; asserts it refused with one line naming `clash`, wrote nothing
/// and left every input as it was.
fn refused(f: &Files, args: &[&str], clash: &str) {
    let inputs = [&*f.model, &*f.data, &*f.recipe, &*f.stats];
    let before = digests(&inputs);
    let out = cli().args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted: {args:?}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: refusing to write") && last.contains(clash),
        "{args:?}: {stderr}"
    );
    assert_eq!(digests(&inputs), before, "{args:?}: an input changed");
    assert!(!f.out.exists(), "{args:?}: an output was written");
}

#[test]
fn side_outputs_never_overwrite_inputs_or_each_other() {
    let f = files();
    let text = |p: &Path| p.to_str().unwrap().to_owned();
    let [m, d, r, s, l, o] =
        [&f.model, &f.data, &f.recipe, &f.stats, &f.link, &f.out].map(|p| text(p));
    let (m, d, r, s, l, o) = (&*m, &*d, &*r, &*s, &*l, &*o);
    let calibrate = ["calibrate", "--onnx_path", m, "--calibration_data_path", d];
    let quantize = ["quantize", "--onnx_path", m, "--calibration_data_path", d];
    let from_cache = ["--onnx_path", m, "--calibration_cache_path", s];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        ([&calibrate[..], &["-o", m]].concat(), "the input model"),
        ([&calibrate[..], &["-o", l]].concat(), "the input model"),
        (
            [&calibrate[..], &["-o", o, "--export_ort_cache", d]].concat(),
            "the calibration data",
        ),
        (
            [&calibrate[..], &["-o", o, "--export_trt_cache", o]].concat(),
            "the statistics",
        ),
        ([&quantize[..], &["-o", d]].concat(), "the calibration data"),
        (
            [&quantize[..], &["-o", o, "--save-recipe", m]].concat(),
            "the input model",
        ),
        (
            [&quantize[..], &["-o", o, "--save-recipe", o]].concat(),
            "the quantized model",
        ),
        (
            [&quantize[..], &["--recipe", r, "-o", o, "--save-recipe", r]].concat(),
            "the recipe",
        ),
        (
            [&["quantize"][..], &from_cache, &["-o", s]].concat(),
            "the statistics",
        ),
        (
            vec!["preprocess", "--onnx_path", m, "-o", l],
            "the input model",
        ),
        (
            vec![
                "compare", "--float", m, "--quant", m, "--data", d, "--report", l,
            ],
            "the float model",
        ),
        (
            [
                &["sensitivity"][..],
                &from_cache,
                &["--data", d, "--json", s],
            ]
            .concat(),
            "the statistics",
        ),
        (
            [
                &["sensitivity"][..],
                &from_cache,
                &["--data", d, "--save-recipe", d],
            ]
            .concat(),
            "the evaluation data",
        ),
    ];
    for (args, clash) in &cases {
        refused(&f, args, clash);
    }
}
