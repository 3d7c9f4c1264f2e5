//! Crash safety: a quantize run killed (SIGKILL) in the middle of saving a model with external
//! data leaves the previous output pair intact and the input untouched; the next start of the
//! program removes the temporary files the killed run left.
#![cfg(unix)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ndarray::{ArrayD, IxDyn};
use qdq_studio::model::{DataType, Model, ModelBuilder, SaveOptions, TensorArray};

/// Width of each MatMul: 12 weights of 2048² floats (192 MiB), so the save takes a while.
const WIDTH: usize = 2048;
const LAYERS: usize = 12;

/// x: [1, WIDTH] through LAYERS MatMuls; `seed` varies the weights.
fn big_model(seed: u32) -> Model {
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[1, WIDTH as i64]);
    let mut previous = "x".to_owned();
    for layer in 0..LAYERS {
        let values: Vec<f32> = (0..WIDTH * WIDTH)
            .map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 1000) as f32)
            .map(|v| (v - 500.0) / 50_000.0)
            .collect();
        let weight = format!("w{layer}");
        b.initializer(
            &weight,
            TensorArray::Float32(ArrayD::from_shape_vec(IxDyn(&[WIDTH, WIDTH]), values).unwrap()),
        );
        let out = format!("h{layer}");
        b.node("MatMul", &[&previous, &weight], &[&out])
            .name(&format!("matmul{layer}"));
        previous = out;
    }
    b.output(&previous, DataType::Float32, &[1, WIDTH as i64]);
    b.build()
}

fn temp_files(folder: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(folder)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".tmp"))
        .collect()
}

/// The CLI with its own cache (so its journals are this test's), using the shared runtime.
fn cli(cache: &Path, runtime: &Path) -> std::process::Command {
    let mut command = common::cli();
    command
        .env("QDQ_STUDIO_CACHE_DIR", cache)
        .env("ORT_DYLIB_PATH", runtime);
    command
}

fn quantize(cache: &Path, runtime: &Path, input: &Path, output: &Path) -> std::process::Command {
    let mut command = cli(cache, runtime);
    command.args(["quantize", "--onnx_path"]).arg(input);
    command.arg("--output_path").arg(output);
    command.args([
        "--use_external_data_format",
        "--random_samples",
        "1",
        "--no_preprocess",
    ]);
    command
}

#[test]
fn a_save_killed_midway_leaves_the_old_output_and_the_next_start_cleans_up() {
    let runtime = common::runtime().info().path.clone();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let (input_a, input_b) = (dir.path().join("a.onnx"), dir.path().join("b.onnx"));
    let external = SaveOptions {
        external_data: true,
        ..SaveOptions::default()
    };
    big_model(1).save(&input_a, &external).unwrap();
    big_model(2).save(&input_b, &external).unwrap();
    let input_digest = common::digest(&input_b.with_extension("onnx.data"));
    let out_folder = dir.path().join("out");
    std::fs::create_dir(&out_folder).unwrap();
    let output = out_folder.join("q.onnx");
    let output_data = out_folder.join("q.onnx.data");

    // A complete first save: the pair the killed run must not damage.
    let status = quantize(&cache, &runtime, &input_a, &output)
        .status()
        .unwrap();
    assert!(status.success());
    let old = (common::digest(&output), common::digest(&output_data));

    // Overwrite it from another model and kill the run as soon as its temporary data file
    // appears (the save has started). Retried if the run finished before the kill landed.
    let mut killed_midway = false;
    for _attempt in 0..3 {
        let mut child = quantize(&cache, &runtime, &input_b, &output)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(300);
        while temp_files(&out_folder).is_empty()
            && child.try_wait().unwrap().is_none()
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_micros(200));
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        if !temp_files(&out_folder).is_empty() {
            killed_midway = true;
            break;
        }
        // Finished first: put the old pair back and try again.
        quantize(&cache, &runtime, &input_a, &output)
            .status()
            .unwrap();
    }
    assert!(killed_midway, "the run was never caught while saving");
    assert_eq!(
        (common::digest(&output), common::digest(&output_data)),
        old,
        "the previous output pair is intact"
    );
    assert_eq!(
        common::digest(&input_b.with_extension("onnx.data")),
        input_digest
    );
    let journals = cache.join(qdq_studio::atomic::JOURNAL_FOLDER);
    assert!(
        std::fs::read_dir(&journals).unwrap().count() > 0,
        "the killed run's journal remains"
    );

    // The next start (any command) finishes the interrupted save: the temporary files go.
    let status = cli(&cache, &runtime)
        .args(["inspect"])
        .arg(&output)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    assert!(
        temp_files(&out_folder).is_empty(),
        "{:?}",
        temp_files(&out_folder)
    );
    assert_eq!(std::fs::read_dir(&journals).unwrap().count(), 0);
    let mut names: Vec<String> = std::fs::read_dir(&out_folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["q.onnx", "q.onnx.data"]);
    Model::load(&output).expect("the surviving output loads");
    assert_eq!((common::digest(&output), common::digest(&output_data)), old);
}
