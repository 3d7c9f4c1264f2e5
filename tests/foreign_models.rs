//! Models shaped like ONNX's own backend-test models (written by other exporters, old
//! opsets, fixed batches, test-data folders): each quantizes, or is refused with its true
//! reason in one line. Built here with the project's model builder; the whole suite of 149 is
//! run on demand by `benches/backend/run.sh`.

mod common;

use std::path::{Path, PathBuf};

use ndarray::{ArrayD, IxDyn};
use prost::Message;
use qdq_studio::model::proto::TensorProto;
use qdq_studio::model::proto::tensor_proto::DataType as ProtoType;
use qdq_studio::model::proto::type_proto::Value;
use qdq_studio::model::{DataType, Model, ModelBuilder, TensorArray};

use common::{cli, write_npz};

fn floats(shape: &[usize], scale: f32) -> TensorArray {
    let n: usize = shape.iter().product();
    let values = (0..n).map(|i| ((i as f32) * 0.7).sin() * scale).collect();
    TensorArray::Float32(ArrayD::from_shape_vec(IxDyn(shape), values).unwrap())
}

fn save(dir: &Path, b: &ModelBuilder) -> PathBuf {
    let path = dir.join("m.onnx");
    b.build().save(&path, &Default::default()).unwrap();
    path
}

/// `quantize` of `model` on `data` (random data when `None`) with `extra` flags: (success,
/// stdout and stderr).
fn quantize(model: &Path, data: Option<&Path>, out: &Path, extra: &[&str]) -> (bool, String) {
    let mut cmd = cli();
    cmd.arg("quantize")
        .arg("--onnx_path")
        .arg(model)
        .arg("-o")
        .arg(out)
        .args(extra);
    if let Some(data) = data {
        cmd.arg("--calibration_data_path").arg(data);
    }
    let done = cmd.output().unwrap();
    let text =
        String::from_utf8_lossy(&done.stdout).into_owned() + &String::from_utf8_lossy(&done.stderr);
    (done.status.success(), text)
}

fn opset_of(path: &Path) -> i64 {
    qdq_studio::quant::opset::default_opset(Model::load(path).unwrap().proto()).unwrap()
}

/// A model whose batch is fixed at 3 calibrates in batches of 3 whatever was asked, saying
/// so, and leaves out the samples that do not fill a batch.
#[test]
fn a_fixed_batch_is_taken_from_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[3, 4]);
    b.initializer("w", floats(&[4, 5], 1.0));
    b.node("MatMul", &["x", "w"], &["y"]).name("mm");
    b.output("y", DataType::Float32, &[3, 5]);
    let model = save(dir.path(), &b);
    let data = dir.path().join("d.npz");
    write_npz(&data, &[("x", floats(&[7, 4], 2.0))]);
    let out = dir.path().join("q.onnx");
    let (ok, text) = quantize(&model, Some(&data), &out, &[]);
    assert!(ok, "{text}");
    assert!(
        text.contains("the model's batch dimension is fixed at 3: running batches of 3 samples"),
        "{text}"
    );
    assert!(
        text.contains("the last 1 samples were left out: they do not fill a batch of 3"),
        "{text}"
    );
    assert!(out.exists());
}

/// Per-tensor output of an opset-9 model is raised to 11 (ONNX Runtime's optimizer adds a
/// Round, opset 11, next to a Conv's bias), or to 10 when a node cannot move to 11.
#[test]
fn old_opsets_are_raised_to_one_onnx_runtime_loads() {
    let dir = tempfile::tempdir().unwrap();
    let conv = |clip: bool| {
        let mut b = ModelBuilder::new(9);
        b.input("x", DataType::Float32, &[1, 2, 6, 6]);
        b.initializer("w", floats(&[4, 2, 3, 3], 0.5));
        b.initializer("b", floats(&[4], 0.1));
        b.node("Conv", &["x", "w", "b"], &["c"]).name("conv");
        if clip {
            b.node("Clip", &["c"], &["y"])
                .name("clip")
                .attr_float("min", -1.0)
                .attr_float("max", 1.0);
        } else {
            b.node("Relu", &["c"], &["y"]).name("relu");
        }
        b.output("y", DataType::Float32, &[1, 4, 4, 4]);
        b
    };
    let out = dir.path().join("q.onnx");
    let (ok, text) = quantize(
        &save(dir.path(), &conv(false)),
        None,
        &out,
        &["--per_tensor"],
    );
    assert!(ok, "{text}");
    assert_eq!(opset_of(&out), 11, "{text}");
    let (ok, text) = quantize(
        &save(dir.path(), &conv(true)),
        None,
        &out,
        &["--per_tensor"],
    );
    assert!(ok, "{text}");
    assert_eq!(opset_of(&out), 10, "Clip keeps its attributes: {text}");
}

/// The last line of a refused `quantize`; asserts it was refused with one error line.
fn refusal(model: &Path, data: Option<&Path>) -> String {
    let out = model.with_file_name("q.onnx");
    let (ok, text) = quantize(model, data, &out, &[]);
    assert!(!ok, "accepted: {text}");
    assert!(!out.exists());
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{text}");
    errors[0].to_owned()
}

/// An op version ONNX Runtime has no kernel for is named with its node and opset; a string
/// input in valid test data is called a string input, not corrupt.
#[test]
fn refusals_state_their_true_reason() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = ModelBuilder::new(6);
    b.input("x", DataType::Float32, &[2, 3]);
    b.initializer("w", floats(&[2, 3], 1.0));
    b.node("Add", &["x", "w"], &["y"]).name("legacy_add");
    b.output("y", DataType::Float32, &[2, 3]);
    let line = refusal(&save(dir.path(), &b), None);
    assert!(
        line.contains("cannot run the float model: node 'legacy_add' is Add from opset 6")
            && line.contains("convert the model to a newer opset"),
        "{line}"
    );

    // A string input `s` (declared float by the builder, then retyped) beside a float one.
    let mut b = ModelBuilder::new(17);
    b.input("s", DataType::Float32, &[1]);
    b.input("x", DataType::Float32, &[1, 3]);
    b.initializer("w", floats(&[3, 3], 1.0));
    b.node("MatMul", &["x", "w"], &["y"]).name("mm");
    b.output("y", DataType::Float32, &[1, 3]);
    let mut built = b.build();
    let input = &mut built.proto_mut().graph.as_mut().unwrap().input[0];
    match input.r#type.as_mut().unwrap().value.as_mut().unwrap() {
        Value::TensorType(t) => t.elem_type = Some(ProtoType::String as i32),
        _ => unreachable!(),
    }
    let model = dir.path().join("m.onnx");
    built.save(&model, &Default::default()).unwrap();
    let set = dir.path().join("data/test_data_set_0");
    std::fs::create_dir_all(&set).unwrap();
    let strings = TensorProto {
        name: Some("s".into()),
        dims: vec![1],
        data_type: Some(ProtoType::String as i32),
        string_data: vec![b"monday".to_vec().into()],
        ..Default::default()
    };
    std::fs::write(set.join("input_0.pb"), strings.encode_to_vec()).unwrap();
    std::fs::write(
        set.join("input_1.pb"),
        floats(&[1, 3], 1.0).to_proto("x").encode_to_vec(),
    )
    .unwrap();
    let line = refusal(&model, Some(&dir.path().join("data")));
    assert_eq!(
        line,
        "error: input 's' is a STRING tensor: qdq-studio calibrates and compares numeric inputs only"
    );
}
