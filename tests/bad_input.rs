//! Bad models and bad runtime libraries: each gives one clear error, nothing panics, and no
//! input file is touched.

use crate::common;

use std::path::Path;

use bytes::Bytes;
use ndarray::{ArrayD, IxDyn};
use qdq_studio::model::proto::{StringStringEntryProto, tensor_proto::DataLocation};
use qdq_studio::model::{
    DataType, Graph, Model, ModelBuilder, ModelError, SaveOptions, TensorArray,
};

use common::{PPOCR_CLS, cli, digest, ppocr};

fn weights(n: usize) -> TensorArray {
    TensorArray::Float32(
        ArrayD::from_shape_vec(IxDyn(&[n]), (0..n).map(|i| i as f32).collect()).unwrap(),
    )
}

/// A model `y = x + w` whose weight `w` (64 floats) is stored in `location` at `offset`.
fn external_model(
    dir: &Path,
    location: &str,
    offset: u64,
    length: Option<u64>,
) -> std::path::PathBuf {
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[64]);
    b.initializer("w", weights(64));
    b.node("Add", &["x", "w"], &["y"]).name("add");
    b.output("y", DataType::Float32, &[64]);
    let mut model = b.build();
    let init = &mut model.proto_mut().graph.as_mut().unwrap().initializer[0];
    init.raw_data = None;
    init.data_location = Some(DataLocation::External as i32);
    let entry = |k: &str, v: String| StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v),
    };
    init.external_data = vec![
        entry("location", location.into()),
        entry("offset", offset.to_string()),
    ];
    if let Some(length) = length {
        init.external_data.push(entry("length", length.to_string()));
    }
    let path = dir.join("m.onnx");
    std::fs::write(&path, prost::Message::encode_to_vec(model.proto())).unwrap();
    path
}

fn load_err(path: &Path) -> ModelError {
    let before = digest(path);
    let err = Model::load(path).unwrap_err();
    assert_eq!(digest(path), before, "input touched");
    err
}

#[test]
fn truncated_model_is_a_decode_error() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(ppocr(PPOCR_CLS)).unwrap();
    let path = dir.path().join("truncated.onnx");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let err = load_err(&path);
    assert!(matches!(err, ModelError::Decode { .. }), "{err}");
    assert!(err.to_string().contains("truncated.onnx"), "{err}");
}

#[test]
fn a_text_file_is_not_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.onnx");
    std::fs::write(&path, "this is not protobuf at all, just some words\n").unwrap();
    let err = load_err(&path);
    assert!(
        matches!(err, ModelError::Decode { .. } | ModelError::NoGraph { .. }),
        "{err}"
    );
}

#[test]
fn a_model_without_a_graph_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.onnx");
    std::fs::write(&path, []).unwrap();
    assert!(matches!(load_err(&path), ModelError::NoGraph { .. }));
}

#[test]
fn an_unknown_dtype_is_named() {
    let mut b = ModelBuilder::new(17);
    b.initializer("w", weights(4));
    let mut model = b.build();
    model.proto_mut().graph.as_mut().unwrap().initializer[0].data_type = Some(999);
    let tensor = model.graph().initializer[0].clone();
    let err = model.tensor_array(&tensor).unwrap_err();
    assert!(
        err.to_string().contains("'w'") && err.to_string().contains("999"),
        "{err}"
    );
}

#[test]
fn external_data_missing_short_outside_or_absolute() {
    let dir = tempfile::tempdir().unwrap();
    // Missing file.
    let path = external_model(dir.path(), "w.bin", 0, None);
    let err = load_err(&path);
    assert!(matches!(err, ModelError::ExternalMissing { .. }), "{err}");
    assert!(
        err.to_string().contains("'w'") && err.to_string().contains("w.bin"),
        "{err}"
    );
    // Too short: the file holds 100 bytes, the tensor needs 256 at offset 0.
    std::fs::write(dir.path().join("w.bin"), [0u8; 100]).unwrap();
    let err = load_err(&path);
    assert!(
        matches!(
            err,
            ModelError::ExternalShort {
                file_len: 100,
                length: 256,
                ..
            }
        ),
        "{err}"
    );
    // Offset past the end.
    std::fs::write(dir.path().join("w.bin"), [0u8; 300]).unwrap();
    let path = external_model(dir.path(), "w.bin", 100, Some(256));
    let err = load_err(&path);
    assert!(
        err.to_string().contains("offset 100") && err.to_string().contains("length 256"),
        "{err}"
    );
    // A stated length that disagrees with the shape.
    let path = external_model(dir.path(), "w.bin", 0, Some(12));
    assert!(matches!(load_err(&path), ModelError::DataLength { .. }));
    // Outside the folder and absolute.
    let path = external_model(dir.path(), "../w.bin", 0, None);
    assert!(matches!(
        load_err(&path),
        ModelError::ExternalOutside { .. }
    ));
    let path = external_model(dir.path(), "/etc/hostname", 0, None);
    assert!(matches!(
        load_err(&path),
        ModelError::ExternalAbsolute { .. }
    ));
    // A good one loads and reads back the right values.
    std::fs::write(
        dir.path().join("w.bin"),
        weights(64).to_proto("w").raw_data.unwrap(),
    )
    .unwrap();
    let path = external_model(dir.path(), "w.bin", 0, None);
    let model = Model::load(&path).unwrap();
    let tensor = model.graph().initializer[0].clone();
    assert_eq!(model.tensor_array(&tensor).unwrap(), weights(64));
}

#[cfg(unix)]
#[test]
fn external_data_through_an_escaping_symlink_is_refused() {
    let outside = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("w.bin"), [0u8; 256]).unwrap();
    std::os::unix::fs::symlink(outside.path().join("w.bin"), dir.path().join("w.bin")).unwrap();
    let path = external_model(dir.path(), "w.bin", 0, None);
    assert!(matches!(
        load_err(&path),
        ModelError::ExternalOutside { .. }
    ));
}

#[test]
fn a_dangling_input_and_a_cycle_are_reported() {
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[1]);
    b.node("Add", &["x", "ghost"], &["y"]).name("add");
    b.output("y", DataType::Float32, &[1]);
    let graph = Graph::build(&b.build());
    let err = graph.check().unwrap_err();
    assert!(
        err.to_string().contains("'add'") && err.to_string().contains("'ghost'"),
        "{err}"
    );

    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[1]);
    b.node("Add", &["x", "c"], &["a"]).name("first");
    b.node("Relu", &["a"], &["b"]).name("second");
    b.node("Relu", &["b"], &["c"]).name("third");
    b.output("b", DataType::Float32, &[1]);
    let graph = Graph::build(&b.build());
    assert_eq!(
        graph.topological_order().len(),
        3,
        "cyclic nodes are still listed"
    );
    let err = graph.check().unwrap_err();
    assert!(matches!(err, ModelError::Cycle { count: 3, .. }), "{err}");
}

#[test]
fn cli_inspect_of_bad_files_fails_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.onnx");
    std::fs::write(&bad, b"\x08\x07\x12garbage that is not a model").unwrap();
    let missing = dir.path().join("missing.onnx");
    for path in [&bad, &missing] {
        let out = cli().arg("inspect").arg(path).output().unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with("error: ")
                && stderr.contains(&path.file_name().unwrap().to_string_lossy().to_string()),
            "{stderr}"
        );
    }
}

#[test]
fn a_dangling_input_makes_inspect_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[1]);
    b.node("Add", &["x", "ghost"], &["y"]);
    b.output("y", DataType::Float32, &[1]);
    let path = dir.path().join("dangling.onnx");
    b.build().save(&path, &SaveOptions::default()).unwrap();
    let out = cli().arg("inspect").arg(&path).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("'Add_0'") && stderr.contains("'ghost'"),
        "{stderr}"
    );
}

#[test]
fn wrong_raw_data_length_is_an_error_not_a_panic() {
    let mut b = ModelBuilder::new(17);
    b.initializer("w", weights(4));
    let mut model = b.build();
    let init = &mut model.proto_mut().graph.as_mut().unwrap().initializer[0];
    init.raw_data = Some(Bytes::from_static(&[1, 2, 3]));
    let tensor = init.clone();
    let err = model.tensor_array(&tensor).unwrap_err();
    assert!(
        err.to_string().contains("needs 16 bytes") && err.to_string().contains("holds 3"),
        "{err}"
    );
}

#[cfg(unix)]
#[test]
fn a_closed_output_pipe_ends_the_cli_quietly() {
    use std::os::unix::process::ExitStatusExt;
    // `qdq-studio inspect m.onnx | head -1`: the reader goes away before the table is printed.
    let mut child = cli()
        .arg("inspect")
        .arg(ppocr(PPOCR_CLS))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        out.status.signal(),
        Some(13),
        "ended by SIGPIPE: {:?}",
        out.status
    );
}

#[test]
fn version_names_the_app_the_runtime_and_the_providers() {
    common::runtime();
    let out = cli().arg("--version").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with(&format!("qdq-studio {}\n", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    assert!(text.contains("\nONNX Runtime 1."), "{text}");
    assert!(text.contains("execution providers: cpu (ready)"), "{text}");
}

/// Runs the CLI with `args`, killing it after 60 s (a read that blocks on a pipe would hang
/// forever); returns its exit success and its last stderr line.
#[cfg(unix)]
fn run_bounded(args: &[&std::ffi::OsStr]) -> (bool, String) {
    use std::time::{Duration, Instant};
    let mut child = cli()
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("{args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let last = stderr.lines().last().unwrap_or_default().to_owned();
    (out.status.success(), last)
}

#[cfg(unix)]
fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo").arg(path).status();
    assert!(made.unwrap().success(), "mkfifo {}", path.display());
}

/// A named pipe, a device or a folder where a file is read (the model, its external data, the
/// calibration data, a test-data folder's tensor, a recipe, statistics) is refused at once
/// with one line saying what it is: nothing blocks on the pipe or reads `/dev/zero` forever.
#[cfg(unix)]
#[test]
fn only_regular_files_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let at = |name: &str| dir.path().join(name);
    let good = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bad_inputs/good.onnx");
    for name in ["pipe.onnx", "pipe.npz", "pipe.toml", "pipe.json"] {
        mkfifo(&at(name));
    }
    std::fs::create_dir(at("folder.onnx")).unwrap();
    std::fs::create_dir_all(at("pb/test_data_set_0")).unwrap();
    mkfifo(&at("pb/test_data_set_0/input_0.pb"));
    // Models whose weight lives in a pipe and in a folder.
    let ext_pipe = tempfile::tempdir().unwrap();
    mkfifo(&ext_pipe.path().join("w.bin"));
    let ext_pipe = external_model(ext_pipe.path(), "w.bin", 0, None);
    let ext_dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(ext_dir.path().join("w.bin")).unwrap();
    let ext_dir = external_model(ext_dir.path(), "w.bin", 0, None);

    let os = |p: &Path| p.as_os_str().to_owned();
    let quantize = |flag: &str, value: &Path| {
        vec![
            "quantize".into(),
            "--onnx_path".into(),
            os(&good),
            flag.into(),
            os(value),
            "-o".into(),
            os(&at("q.onnx")),
        ]
    };
    let inspect = |p: &Path| vec!["inspect".into(), os(p)];
    let cases: Vec<(Vec<std::ffi::OsString>, &str)> = vec![
        (inspect(&at("pipe.onnx")), "it is a named pipe"),
        (inspect(Path::new("/dev/zero")), "it is a device"),
        (inspect(&at("folder.onnx")), "it is a folder"),
        (inspect(&ext_pipe), "external data file"),
        (inspect(&ext_dir), "external data file"),
        (
            quantize("--calibration_data_path", &at("pipe.npz")),
            "it is a named pipe",
        ),
        (
            quantize("--calibration_data_path", &at("pb")),
            "it is a named pipe",
        ),
        (quantize("--recipe", &at("pipe.toml")), "it is a named pipe"),
        (
            quantize("--calibration_cache_path", &at("pipe.json")),
            "it is a named pipe",
        ),
    ];
    for (args, reason) in &cases {
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let (ok, last) = run_bounded(&args);
        assert!(!ok, "{args:?} succeeded");
        assert!(
            last.starts_with("error: ") && last.contains(reason),
            "{args:?}: {last}"
        );
    }
    assert!(!at("q.onnx").exists());
}

/// `--batch_size 0` is refused by every subcommand that batches, with the reason.
#[test]
fn a_batch_size_of_zero_is_refused() {
    let good = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bad_inputs/good.onnx");
    for command in ["calibrate", "quantize", "sensitivity"] {
        let out = cli()
            .args([command, "--onnx_path"])
            .arg(&good)
            .args(["--batch_size", "0"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{command}: {stderr}");
        assert!(
            stderr
                .contains("invalid value '0' for '--batch_size <BATCH_SIZE>': must be at least 1"),
            "{command}: {stderr}"
        );
    }
}

/// An initializer that sets no element type (data_type 0) is refused at load with one line
/// naming it, before ONNX Runtime sees it.
#[test]
fn an_initializer_without_an_element_type_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[4]);
    b.initializer("w", weights(4));
    b.node("Add", &["x", "w"], &["y"]).name("add");
    b.output("y", DataType::Float32, &[4]);
    let mut model = b.build();
    model.proto_mut().graph.as_mut().unwrap().initializer[0].data_type = Some(0);
    let path = dir.path().join("m.onnx");
    std::fs::write(&path, prost::Message::encode_to_vec(model.proto())).unwrap();
    let err = load_err(&path);
    assert!(
        matches!(err, ModelError::UnknownElementType { code: 0, .. }),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "tensor 'w': element type 0 is not an ONNX element type (0 means none was set)"
    );
}
