//! Models shaped like ONNX's own backend-test models (written by other exporters, old
//! opsets, fixed batches, test-data folders): each quantizes, or is refused with its true
//! reason in one line. Built here with the project's model builder; the whole suite of 149 is
//! run on demand by `benches/backend/run.sh`.

use crate::common;

use std::path::{Path, PathBuf};

use ndarray::{ArrayD, IxDyn};
use prost::Message;
use qdq_studio::model::legacy::LegacyOpset;
use qdq_studio::model::proto::TensorProto;
use qdq_studio::model::proto::tensor_proto::DataType as ProtoType;
use qdq_studio::model::proto::type_proto::Value;
use qdq_studio::model::{DataType, Model, ModelBuilder, TensorArray};
use qdq_studio::runtime::{EpSpec, SessionOptions};

use common::{cli, run_text, write_npz};

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
    run_text(&mut cmd)
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
/// Round, opset 11, next to a Conv's bias), or to 10 when a node cannot move to 11. A Clip's
/// bounds move from attributes to inputs of its data's type on the way (per-channel output,
/// opset 13, was refused for any old model with a ReLU6).
#[test]
fn old_opsets_are_raised_to_one_onnx_runtime_loads() {
    let dir = tempfile::tempdir().unwrap();
    let conv = |after: &str| {
        let mut b = ModelBuilder::new(9);
        b.input("x", DataType::Float32, &[1, 2, 6, 6]);
        b.initializer("w", floats(&[4, 2, 3, 3], 0.5));
        b.initializer("b", floats(&[4], 0.1));
        b.node("Conv", &["x", "w", "b"], &["c"]).name("conv");
        let shape: &[i64] = match after {
            "clip" => {
                b.node("Clip", &["c"], &["y"])
                    .name("clip")
                    .attr_float("min", 0.0)
                    .attr_float("max", 6.0);
                &[1, 4, 4, 4]
            }
            "dropout" => {
                b.node("Dropout", &["c"], &["y"])
                    .name("dropout")
                    .attr_float("ratio", 0.3);
                &[1, 4, 4, 4]
            }
            "pad" => {
                b.node("Pad", &["c"], &["y"])
                    .name("pad")
                    .attr_ints("pads", &[0, 0, 1, 1, 0, 0, 1, 1]);
                &[1, 4, 6, 6]
            }
            _ => {
                b.node("Relu", &["c"], &["y"]).name("relu");
                &[1, 4, 4, 4]
            }
        };
        b.output("y", DataType::Float32, shape);
        b
    };
    let out = dir.path().join("q.onnx");
    // Pre-processing would drop the Dropout: without it, its ratio moves to an input at 12.
    let dropout = dir.path().join("dropout.onnx");
    let (ok, text) = quantize(
        &save(dir.path(), &conv("dropout")),
        None,
        &dropout,
        &["--per_channel", "--no_preprocess"],
    );
    assert!(ok, "{text}");
    assert_eq!(opset_of(&dropout), 13, "{text}");
    for (after, flag, opset) in [
        ("relu", "--per_tensor", 11),
        ("pad", "--per_tensor", 10),
        ("clip", "--per_tensor", 11),
        ("clip", "--per_channel", 13),
    ] {
        let (ok, text) = quantize(&save(dir.path(), &conv(after)), None, &out, &[flag]);
        assert!(ok, "{after} {flag}: {text}");
        assert_eq!(opset_of(&out), opset, "{after} {flag}: {text}");
    }
    // The Clip's bounds are float32 scalar inputs now; the model runs (checked by quantize).
    let quantized = Model::load(&out).unwrap();
    let clip = quantized
        .graph()
        .node
        .iter()
        .find(|n| n.op_type() == "Clip");
    if let Some(clip) = clip {
        assert!(clip.attribute.is_empty(), "{clip:?}");
        assert_eq!(clip.input.len(), 3, "{clip:?}");
    }
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
    // An old broadcast along axis 1 of a tensor whose rank is unknown (a Slice's output,
    // declared nowhere) cannot be
    // upgraded to opset 7, so ONNX Runtime refuses the opset-6 Add; the line says both.
    let mut b = ModelBuilder::new(6);
    b.input("x", DataType::Float32, &[2, 3, 4]);
    b.initializer("w", floats(&[3], 1.0));
    b.node("Slice", &["x"], &["r"])
        .name("slice")
        .attr_ints("starts", &[0])
        .attr_ints("ends", &[2])
        .attr_ints("axes", &[0]);
    b.node("Add", &["r", "w"], &["y"])
        .name("legacy_add")
        .attr_int("broadcast", 1)
        .attr_int("axis", 1);
    b.output("y", DataType::Float32, &[2, 3, 4]);
    let line = refusal(&save(dir.path(), &b), None);
    assert!(
        line.contains("cannot run the float model: node 'legacy_add' is Add from opset 6")
            && line.contains("convert the model to a newer opset")
            && line.contains(
                "opset 6 could not be upgraded to 7: node 'legacy_add' (Add): it broadcasts along axis 1 and the ranks of 'r' and 'w' are not declared"
            ),
        "{line}"
    );

    // Float64 tensors: QuantizeLinear takes none, so they stay float, and nothing is left.
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float64, &[2, 3]);
    b.input("z", DataType::Float64, &[2, 3]);
    b.node("Add", &["x", "z"], &["y"]).name("add");
    b.output("y", DataType::Float64, &[2, 3]);
    let line = refusal(&save(dir.path(), &b), None);
    assert_eq!(
        line,
        "error: nothing to quantize: the selected nodes (Add) read and write no float32 or float16 tensor (float64 and integers stay as they are)"
    );
    // Only Tanh, which no default list quantizes.
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[2, 3]);
    b.node("Tanh", &["x"], &["y"]).name("tanh");
    b.output("y", DataType::Float32, &[2, 3]);
    let line = refusal(&save(dir.path(), &b), None);
    assert_eq!(
        line,
        "error: nothing to quantize: the recipe selects none of this model's op types (Tanh)"
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

/// The float model an opset-6 file becomes, run in ONNX Runtime on `x`.
fn run_upgraded(model: &Path, x: &TensorArray) -> ArrayD<f32> {
    let loaded = Model::load(model).unwrap();
    let bytes = loaded.to_bytes().unwrap();
    let mut session = common::runtime()
        .session_from_bytes(&bytes, &[EpSpec::Cpu], SessionOptions::default())
        .unwrap();
    let TensorArray::Float32(x) = x.clone() else {
        panic!("float input expected")
    };
    let value = ort::value::Tensor::from_array(x).unwrap();
    let outputs = session.run(ort::inputs!["x" => value]).unwrap();
    outputs[0].try_extract_array::<f32>().unwrap().to_owned()
}

/// A model of opset 6 (IR 3, weights listed as inputs, as PyTorch once exported) is brought to
/// opset 7 on load: the old axis broadcast and PRelu's per-channel slope compute what they
/// meant (checked against the formula), Gemm and BatchNormalization lose their old
/// attributes, and the model quantizes. The file is untouched.
#[test]
fn models_older_than_opset_7_are_upgraded_on_load_and_quantize() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = ModelBuilder::new(6);
    b.input("x", DataType::Float32, &[2, 3, 4]);
    let (bias, slope) = (floats(&[3], 1.0), floats(&[3], 0.5));
    b.initializer("bias", bias.clone());
    b.initializer("slope", slope.clone());
    b.initializer("w", floats(&[4, 5], 1.0));
    b.initializer("c", floats(&[5], 0.3));
    b.node("Add", &["x", "bias"], &["a"])
        .name("add")
        .attr_int("broadcast", 1)
        .attr_int("axis", 1);
    b.node("PRelu", &["a", "slope"], &["p"]).name("prelu");
    b.node("Reshape", &["p", "shape"], &["flat"])
        .name("reshape");
    b.initializer(
        "shape",
        TensorArray::Int64(ndarray::arr1(&[6i64, 4]).into_dyn()),
    );
    b.node("Gemm", &["flat", "w", "c"], &["y"])
        .name("gemm")
        .attr_int("broadcast", 1);
    b.output("y", DataType::Float32, &[6, 5]);
    let mut built = b.build();
    built.proto_mut().ir_version = Some(3);
    {
        // IR 3: every initializer is a graph input too.
        let g = built.proto_mut().graph.as_mut().unwrap();
        let inits: Vec<_> = g
            .initializer
            .iter()
            .map(|t| (t.name().to_owned(), t.dims.clone()))
            .collect();
        for (name, dims) in inits {
            let dtype = if name == "shape" {
                DataType::Int64
            } else {
                DataType::Float32
            };
            g.input
                .push(qdq_studio::model::builder::value_info(&name, dtype, &dims));
        }
    }
    let model = dir.path().join("m.onnx");
    built.save(&model, &Default::default()).unwrap();
    let before = common::digest(&model);

    let loaded = Model::load(&model).unwrap();
    assert!(
        matches!(
            loaded.legacy_opset(),
            Some(LegacyOpset::Upgraded { from: 6, .. })
        ),
        "{:?}",
        loaded.legacy_opset()
    );
    assert_eq!(
        qdq_studio::quant::opset::default_opset(loaded.proto()),
        Some(7)
    );

    let x = floats(&[2, 3, 4], 2.0);
    let got = run_upgraded(&model, &x);
    let (TensorArray::Float32(xs), TensorArray::Float32(bs), TensorArray::Float32(ss)) =
        (&x, &bias, &slope)
    else {
        unreachable!()
    };
    let TensorArray::Float32(w) = floats(&[4, 5], 1.0) else {
        unreachable!()
    };
    let TensorArray::Float32(c) = floats(&[5], 0.3) else {
        unreachable!()
    };
    let mut p = xs.clone();
    for ((_, ch, _), v) in p.indexed_iter_mut().map(|(i, v)| ((i[0], i[1], i[2]), v)) {
        let a = *v + bs[[ch]];
        *v = if a < 0.0 { a * ss[[ch]] } else { a };
    }
    let flat = p.into_shape_with_order((6, 4)).unwrap();
    let w2 = w.into_dimensionality::<ndarray::Ix2>().unwrap();
    let expected = flat.dot(&w2) + &c.into_dimensionality::<ndarray::Ix1>().unwrap();
    let worst = got
        .iter()
        .zip(expected.iter())
        .map(|(g, e)| (g - e).abs())
        .fold(0.0f32, f32::max);
    assert!(
        worst < 1e-4,
        "upgraded model differs from the formula by {worst}"
    );

    let out = dir.path().join("q.onnx");
    let (ok, text) = quantize(&model, None, &out, &[]);
    assert!(ok, "{text}");
    assert!(opset_of(&out) >= 10, "{text}");
    assert_eq!(common::digest(&model), before, "input touched");
}

/// An initializer that is also a graph input (IR 4 on) is a default a caller may override:
/// the quantized model keeps it as an input (quantized as an activation), and feeding it
/// still changes the result. Before IR 4 every initializer was listed as an input, and it is
/// a weight like any other.
#[test]
fn an_initializer_a_caller_may_override_stays_an_input() {
    let dir = tempfile::tempdir().unwrap();
    let build = |ir: i64| {
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[2, 4]);
        b.input("w", DataType::Float32, &[4, 3]);
        b.initializer("w", floats(&[4, 3], 1.0));
        b.node("MatMul", &["x", "w"], &["y"]).name("mm");
        b.output("y", DataType::Float32, &[2, 3]);
        let mut m = b.build();
        m.proto_mut().ir_version = Some(ir);
        let path = dir.path().join(format!("ir{ir}.onnx"));
        m.save(&path, &Default::default()).unwrap();
        path
    };
    let out = dir.path().join("q.onnx");
    let (ok, text) = quantize(&build(8), None, &out, &[]);
    assert!(ok, "{text}");
    let quantized = Model::load(&out).unwrap();
    let g = quantized.graph();
    let inputs: Vec<&str> = g.input.iter().map(|i| i.name()).collect();
    assert_eq!(inputs, ["x", "w"], "the overridable input was dropped");
    assert!(
        g.initializer.iter().any(|t| t.name() == "w"),
        "its default value is gone"
    );
    let mut session = common::runtime()
        .session_from_bytes(
            &quantized.to_bytes().unwrap(),
            &[EpSpec::Cpu],
            SessionOptions::default(),
        )
        .unwrap();
    // Inside the calibrated range of x (random data in [0, 1)). With the default w the outputs
    // would be 0.0, 0.33 and 0.5; with the fed one they are all 1.0.
    let x = ndarray::Array2::<f32>::from_elem((2, 4), 0.5);
    let w = ndarray::Array2::<f32>::from_elem((4, 3), 0.5);
    let outputs = session
        .run(ort::inputs![
            "x" => ort::value::Tensor::from_array(x).unwrap(),
            "w" => ort::value::Tensor::from_array(w).unwrap()
        ])
        .unwrap();
    let y = outputs[0].try_extract_array::<f32>().unwrap();
    for v in y.iter() {
        assert!((v - 1.0).abs() < 0.05, "the fed w was not used: {y:?}");
    }

    let (ok, text) = quantize(&build(3), None, &out, &[]);
    assert!(ok, "{text}");
    let quantized = Model::load(&out).unwrap();
    let inputs: Vec<&str> = quantized.graph().input.iter().map(|i| i.name()).collect();
    assert_eq!(
        inputs,
        ["x"],
        "an IR-3 weight is a constant and is quantized in place"
    );
    assert!(
        quantized
            .graph()
            .initializer
            .iter()
            .any(|t| t.name() == "w_quantized")
    );
}
