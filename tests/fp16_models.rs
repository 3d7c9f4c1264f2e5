//! FP16 base models (what ModelOpt-Windows and ONNX Runtime GenAI exports bring): calibrated
//! in float16, quantized with Q/DQ whose scales are float16 (opset 19; int4 at 21), the
//! model's float16 kept everywhere else, and outputs close to the float model's in ONNX
//! Runtime. Calibration and evaluation data may be float32: it is converted.

use crate::common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use half::f16;
use ndarray::{ArrayD, IxDyn};
use qdq_studio::model::{DataType, Model, ModelBuilder, TensorArray};
use qdq_studio::quant::opset::default_opset;
use qdq_studio::runtime::{EpSpec, SessionOptions, value};
use serde_json::Value;

use common::{cli, run_ok, run_text, runtime, write_npz};

/// Names of `model`'s initializers of element type `dtype`.
fn initializers_of(model: &Model, dtype: DataType) -> Vec<&str> {
    model
        .graph()
        .initializer
        .iter()
        .filter(|t| t.data_type() == dtype.to_onnx())
        .map(|t| t.name())
        .collect()
}

fn half(shape: &[usize], seed: u64, scale: f32) -> TensorArray {
    let n = shape.iter().product();
    let v = common::seeded_values(n, seed, scale)
        .into_iter()
        .map(f16::from_f32)
        .collect();
    TensorArray::Float16(ArrayD::from_shape_vec(IxDyn(shape), v).unwrap())
}

fn single(shape: &[usize], seed: u64, scale: f32) -> TensorArray {
    let n = shape.iter().product();
    TensorArray::Float32(
        ArrayD::from_shape_vec(IxDyn(shape), common::seeded_values(n, seed, scale)).unwrap(),
    )
}

/// A float16 transformer-style block and a convolution branch, every tensor float16:
/// `y = LayerNorm(x + W2·Relu(W1·x + b1))`, `attn = Softmax(y·yᵀ)`, `p = Relu(Conv(img) + b)`
/// pooled. `conv_weight_scale` sizes the conv's weights (tiny weights on tiny images make its
/// int32 bias scale underflow float16).
fn fp16_model(conv_weight_scale: f32) -> Model {
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float16, &[-1, 8, 32]);
    b.input("img", DataType::Float16, &[-1, 3, 12, 12]);
    b.initializer("w1", half(&[32, 64], 1, 0.25));
    b.initializer("b1", half(&[64], 2, 0.1));
    b.initializer("w2", half(&[64, 32], 3, 0.2));
    b.initializer("gamma", half(&[32], 4, 1.0));
    b.initializer("beta", half(&[32], 5, 0.1));
    b.initializer("cw", half(&[8, 3, 3, 3], 6, conv_weight_scale));
    b.initializer("cb", half(&[8], 7, 0.05));
    b.node("MatMul", &["x", "w1"], &["h"]).name("fc1");
    b.node("Add", &["h", "b1"], &["hb"]).name("fc1_bias");
    b.node("Relu", &["hb"], &["hr"]).name("act");
    b.node("MatMul", &["hr", "w2"], &["h2"]).name("fc2");
    b.node("Add", &["x", "h2"], &["res"]).name("residual");
    b.node("LayerNormalization", &["res", "gamma", "beta"], &["y"])
        .name("norm")
        .attr_int("axis", -1);
    b.node("Transpose", &["y"], &["yt"])
        .name("transpose")
        .attr_ints("perm", &[0, 2, 1]);
    b.node("MatMul", &["y", "yt"], &["scores"]).name("scores");
    b.node("Softmax", &["scores"], &["attn"])
        .name("softmax")
        .attr_int("axis", -1);
    b.node("Conv", &["img", "cw", "cb"], &["c"])
        .name("conv")
        .attr_ints("pads", &[1, 1, 1, 1]);
    b.node("Relu", &["c"], &["cr"]).name("conv_act");
    b.node("GlobalAveragePool", &["cr"], &["p"]).name("pool");
    b.output("y", DataType::Float16, &[-1, 8, 32]);
    b.output("attn", DataType::Float16, &[-1, 8, 8]);
    b.output("p", DataType::Float16, &[-1, 8, 1, 1]);
    b.build()
}

/// Float32 data for the float16 model (converted on the way in).
fn write_data(path: &Path, samples: usize, img_scale: f32) {
    write_npz(
        path,
        &[
            ("x", single(&[samples, 8, 32], 11, 1.5)),
            ("img", single(&[samples, 3, 12, 12], 12, img_scale)),
        ],
    );
}

fn save(model: &Model, dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, model.to_bytes().unwrap()).unwrap();
    path
}

fn run(args: &[&OsStr]) -> String {
    run_ok(cli().args(args))
}

/// `quantize --onnx_path float <options> -o quant`.
fn quantize(float: &Path, quant: &Path, options: &[&OsStr]) -> std::process::Command {
    let mut cmd = cli();
    cmd.arg("quantize").arg("--onnx_path").arg(float);
    cmd.args(options).arg("-o").arg(quant);
    cmd
}

/// The element types of the quantized model's Q/DQ scale initializers.
fn scale_types(model: &Model) -> Vec<(String, i32)> {
    let scales: std::collections::HashSet<&str> = model
        .graph()
        .node
        .iter()
        .filter(|n| matches!(n.op_type(), "QuantizeLinear" | "DequantizeLinear"))
        .filter_map(|n| n.input.get(1).map(String::as_str))
        .collect();
    model
        .graph()
        .initializer
        .iter()
        .filter(|t| scales.contains(t.name()))
        .map(|t| (t.name().to_owned(), t.data_type()))
        .collect()
}

/// A CPU session of `model`.
fn cpu_session(model: &Model) -> ort::session::Session {
    runtime()
        .session_from_model(
            &model.to_session_model().unwrap(),
            &[EpSpec::Cpu],
            SessionOptions::default(),
        )
        .unwrap()
}

/// Runs `model` on one float16 batch and returns each output's element type.
fn output_types(model: &Model) -> Vec<DataType> {
    let mut session = cpu_session(model);
    let inputs = vec![
        ("x".to_owned(), half(&[2, 8, 32], 21, 1.0)),
        ("img".to_owned(), half(&[2, 3, 12, 12], 22, 1.0)),
    ];
    let owned = value::owned_inputs(inputs).unwrap();
    let outputs = session.run(owned).unwrap();
    outputs
        .values()
        .map(|v| value::float_output(&v).unwrap().0)
        .collect()
}

/// Each output's cosine similarity, float against quantized, from `compare --json`.
fn cosines(float: &Path, quant: &Path, data: &Path) -> Vec<(String, f64)> {
    let text = run(&[
        "compare".as_ref(),
        "--float".as_ref(),
        float.as_os_str(),
        "--quant".as_ref(),
        quant.as_os_str(),
        "--data".as_ref(),
        data.as_os_str(),
        "--json".as_ref(),
    ]);
    let json: Value = serde_json::from_str(&text[text.find('{').unwrap()..]).unwrap();
    json["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["name"].as_str().unwrap().to_owned(),
                o["cosine"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn an_fp16_model_quantizes_to_int8_with_fp16_scales_and_stays_close() {
    let dir = tempfile::tempdir().unwrap();
    let float = save(&fp16_model(0.3), dir.path(), "block.onnx");
    let data = dir.path().join("calib.npz");
    write_data(&data, 16, 1.0);
    let stats = dir.path().join("stats.json");
    let quant = dir.path().join("block.qdq.onnx");
    let calibrated = run(&[
        "calibrate".as_ref(),
        "--onnx_path".as_ref(),
        float.as_os_str(),
        "--calibration_data_path".as_ref(),
        data.as_os_str(),
        "-o".as_ref(),
        stats.as_os_str(),
    ]);
    assert!(
        calibrated.contains("'x': float32 data converted to the model's float16"),
        "{calibrated}"
    );
    let stats_json: Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    assert_eq!(
        stats_json["tensors"]["hb"]["dtype"], "float16",
        "{stats_json}"
    );
    run_ok(&mut quantize(
        &float,
        &quant,
        &["--calibration_cache_path".as_ref(), stats.as_os_str()],
    ));

    let model = Model::load(&quant).unwrap();
    assert_eq!(default_opset(model.proto()), Some(19));
    let scales = scale_types(&model);
    // A transformer under its target: the inputs of the three MatMuls and the Conv (its
    // weight and bias too), each with its scale.
    assert!(scales.len() >= 9, "{scales:?}");
    // Every scale is float16 but the conv bias's, which is float16 too unless it underflows.
    let not_half: Vec<_> = scales
        .iter()
        .filter(|(_, t)| *t != DataType::Float16.to_onnx())
        .collect();
    assert!(not_half.is_empty(), "{not_half:?}");
    let float32_tensors: Vec<&str> = initializers_of(&model, DataType::Float32);
    assert!(float32_tensors.is_empty(), "{float32_tensors:?}");
    assert!(
        model.graph().node.iter().all(|n| n.op_type() != "Cast"),
        "no float32 detour"
    );
    assert_eq!(output_types(&model), vec![DataType::Float16; 3]);
    for (name, cosine) in cosines(&float, &quant, &data) {
        assert!(cosine > 0.99, "{name}: cosine {cosine}");
    }
}

#[test]
fn an_fp16_model_quantizes_to_int4_weight_only_with_fp16_block_scales() {
    let dir = tempfile::tempdir().unwrap();
    let float = save(&fp16_model(0.3), dir.path(), "block.onnx");
    let data = dir.path().join("eval.npz");
    write_data(&data, 8, 1.0);
    let quant = dir.path().join("block.int4.onnx");
    // The DQ form (the CPU target's default is MatMulNBits): its block scales are readable.
    run_ok(&mut quantize(
        &float,
        &quant,
        &[
            "--quantize_mode".as_ref(),
            "int4".as_ref(),
            "--int4_output".as_ref(),
            "dq".as_ref(),
        ],
    ));
    let model = Model::load(&quant).unwrap();
    assert_eq!(default_opset(model.proto()), Some(21));
    let int4: Vec<&str> = initializers_of(&model, DataType::Int4);
    assert!(
        int4.contains(&"w1_quantized") && int4.contains(&"w2_quantized"),
        "{int4:?}"
    );
    let scales = scale_types(&model);
    assert!(!scales.is_empty());
    assert!(
        scales
            .iter()
            .all(|(_, t)| *t == DataType::Float16.to_onnx()),
        "{scales:?}"
    );
    assert_eq!(output_types(&model), vec![DataType::Float16; 3]);
    for (name, cosine) in cosines(&float, &quant, &data) {
        assert!(cosine > 0.98, "{name}: cosine {cosine}");
    }
}

/// A conv whose input and weight scales multiply to less than float16's smallest step: its
/// int32 bias keeps a float32 scale and is cast back to float16 (as onnxruntime does), so the
/// bias is not lost.
#[test]
fn an_fp16_bias_whose_scale_underflows_keeps_a_float32_scale_and_a_cast() {
    let dir = tempfile::tempdir().unwrap();
    let float = save(&fp16_model(1e-3), dir.path(), "tiny.onnx");
    let data = dir.path().join("calib.npz");
    write_data(&data, 8, 1e-3);
    let quant = dir.path().join("tiny.qdq.onnx");
    run_ok(&mut quantize(
        &float,
        &quant,
        &["--calibration_data_path".as_ref(), data.as_os_str()],
    ));
    let model = Model::load(&quant).unwrap();
    let cast = model
        .graph()
        .node
        .iter()
        .find(|n| n.op_type() == "Cast")
        .expect("a Cast after the bias's float32 DequantizeLinear");
    assert_eq!(cast.output, vec!["cb".to_owned()]);
    let bias_scale = model
        .graph()
        .initializer
        .iter()
        .find(|t| t.name() == "cb_quantized_scale")
        .unwrap();
    assert_eq!(bias_scale.data_type(), DataType::Float32.to_onnx());
    assert_eq!(output_types(&model), vec![DataType::Float16; 3]);
    let cosine = cosines(&float, &quant, &data)
        .into_iter()
        .find(|(name, _)| name == "p")
        .unwrap()
        .1;
    assert!(cosine > 0.99, "p: cosine {cosine}");
}

/// Int4 needs opset 21, where GroupNormalization's scale and bias changed meaning: the raise
/// is refused naming the node, and nothing is written.
#[test]
fn a_raise_that_would_change_group_normalization_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = ModelBuilder::new(18);
    b.input("x", DataType::Float16, &[1, 4, 8]);
    b.initializer("w", half(&[8, 8], 1, 0.3));
    b.initializer("scale", half(&[2], 2, 1.0));
    b.initializer("bias", half(&[2], 3, 0.1));
    b.node("MatMul", &["x", "w"], &["h"]).name("fc");
    b.node("GroupNormalization", &["h", "scale", "bias"], &["y"])
        .name("gn")
        .attr_int("num_groups", 2);
    b.output("y", DataType::Float16, &[1, 4, 8]);
    let float = save(&b.build(), dir.path(), "gn.onnx");
    let quant = dir.path().join("gn.int4.onnx");
    let (ok, text) = run_text(&mut quantize(
        &float,
        &quant,
        &["--quantize_mode".as_ref(), "int4".as_ref()],
    ));
    assert!(!ok);
    assert!(
        text.contains("needs opset 21 (the model has 18)")
            && text.contains("'gn' (GroupNormalization"),
        "{text}"
    );
    assert!(!quant.exists());
}

/// A float16 MobileNet-style block: Conv → BatchNormalization → Clip(0, 6) → depthwise Conv →
/// BatchNormalization → Clip(0, 6) → Conv, every tensor float16.
fn fp16_mobile_block() -> Model {
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float16, &[-1, 4, 8, 8]);
    let positive = |shape: &[usize], seed: u64| match half(shape, seed, 1.0) {
        TensorArray::Float16(a) => {
            TensorArray::Float16(a.mapv(|v| f16::from_f32(0.5 + v.to_f32().abs())))
        }
        other => other,
    };
    b.initializer("w1", half(&[16, 4, 1, 1], 31, 1.0));
    b.initializer("w2", half(&[16, 1, 3, 3], 32, 1.0));
    b.initializer("w3", half(&[8, 16, 1, 1], 33, 0.5));
    for (i, bn) in ["bn1", "bn2"].iter().enumerate() {
        let seed = 40 + 4 * i as u64;
        b.initializer(&format!("{bn}_scale"), positive(&[16], seed));
        b.initializer(&format!("{bn}_bias"), half(&[16], seed + 1, 0.5));
        b.initializer(&format!("{bn}_mean"), half(&[16], seed + 2, 0.2));
        b.initializer(&format!("{bn}_var"), positive(&[16], seed + 3));
    }
    b.initializer(
        "lo",
        TensorArray::Float16(ArrayD::from_elem(IxDyn(&[]), f16::ZERO)),
    );
    b.initializer(
        "hi",
        TensorArray::Float16(ArrayD::from_elem(IxDyn(&[]), f16::from_f32(6.0))),
    );
    // Batch norm `i` and its ReLU6 after `c{i}`, writing `r{i}`.
    let norm_and_clip = |b: &mut ModelBuilder, i: usize| {
        let p = |s: &str| format!("bn{i}_{s}");
        let (c, n, r) = (format!("c{i}"), format!("n{i}"), format!("r{i}"));
        let inputs = [c, p("scale"), p("bias"), p("mean"), p("var")];
        let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        b.node("BatchNormalization", &inputs, &[&n])
            .name(&format!("bn{i}"));
        b.node("Clip", &[&n, "lo", "hi"], &[&r])
            .name(&format!("relu6_{i}"));
    };
    b.node("Conv", &["x", "w1"], &["c1"]).name("expand");
    norm_and_clip(&mut b, 1);
    b.node("Conv", &["r1", "w2"], &["c2"])
        .name("depthwise")
        .attr_int("group", 16)
        .attr_ints("pads", &[1, 1, 1, 1]);
    norm_and_clip(&mut b, 2);
    b.node("Conv", &["r2", "w3"], &["y"]).name("project");
    b.output("y", DataType::Float16, &[-1, 8, 8, 8]);
    b.build()
}

/// Runs the block on `x`; returns its output as f32.
fn run_block(model: &Model, x: &TensorArray) -> Vec<f32> {
    let mut session = cpu_session(model);
    let owned = value::owned_inputs(vec![("x".to_owned(), x.clone())]).unwrap();
    let outputs = session.run(owned).unwrap();
    let (_, y) = value::float_output(&outputs[0]).unwrap();
    y.iter().copied().collect()
}

/// Batch norms fold, layers equalize (through the ReLU6s) and biases are corrected in a
/// float16 model as in a float32 one, each result stored back as float16. Before, all three
/// took float32 weights only: the batch norms stayed and were quantized on their own
/// (a MobileNetV2-style model: 15.6 dB against 25.4 once folded), equalization and bias
/// correction did nothing.
#[test]
fn an_fp16_cnn_folds_batch_norms_equalizes_and_corrects_biases() {
    use qdq_studio::quant::Prepared;
    use qdq_studio::recipe::Preprocessing;
    let model = fp16_mobile_block();
    let prepared = Prepared::new(
        &model,
        &Preprocessing {
            equalize: true,
            ..Preprocessing::default()
        },
    )
    .unwrap();
    assert_eq!(prepared.report.folded_batchnorms.len(), 2);
    assert_eq!(
        prepared.report.equalized.len(),
        2,
        "{:?}",
        prepared.report.equalized
    );
    assert!(
        initializers_of(&prepared.model, DataType::Float32).is_empty(),
        "{:?}",
        initializers_of(&prepared.model, DataType::Float32)
    );
    // Large inputs make the Clips bind; the folded, equalized block computes the same.
    let x = match half(&[2, 4, 8, 8], 50, 4.0) {
        TensorArray::Float16(a) => {
            TensorArray::Float16(a.mapv(|v| f16::from_f32(v.to_f32().abs())))
        }
        other => other,
    };
    let (before, after) = (run_block(&model, &x), run_block(&prepared.model, &x));
    let norm: f32 = before.iter().map(|v| v * v).sum::<f32>().sqrt();
    let diff: f32 = before
        .iter()
        .zip(&after)
        .map(|(a, b)| (a - b) * (a - b))
        .sum::<f32>()
        .sqrt();
    assert!(diff / norm < 5e-3, "relative error {}", diff / norm);

    let dir = tempfile::tempdir().unwrap();
    let float = save(&model, dir.path(), "block.onnx");
    let data = dir.path().join("calib.npz");
    write_npz(&data, &[("x", single(&[16, 4, 8, 8], 51, 4.0))]);
    let quant = dir.path().join("block.qdq.onnx");
    let said = run(&[
        OsStr::new("quantize"),
        OsStr::new("--onnx_path"),
        float.as_os_str(),
        OsStr::new("--calibration_data_path"),
        data.as_os_str(),
        OsStr::new("--per_tensor"),
        OsStr::new("--bias_correction"),
        OsStr::new("-o"),
        quant.as_os_str(),
    ]);
    assert!(
        said.contains("bias correction: 3 layer(s) corrected"),
        "{said}"
    );
}

/// A float16 MatMul's outlier rows go to a float16 path: the prepared model keeps its type
/// and its outputs.
#[test]
fn an_fp16_matmuls_outlier_rows_split_off_in_float16() {
    let mut w = half(&[256, 16], 31, 0.5);
    if let TensorArray::Float16(a) = &mut w {
        a.index_axis_mut(ndarray::Axis(0), 9)
            .mapv_inplace(|v| v * f16::from_f32(16.0));
    }
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float16, &[-1, 8, 256]);
    b.initializer("w", w);
    b.node("MatMul", &["x", "w"], &["y"]).name("dense");
    b.output("y", DataType::Float16, &[-1, 8, 16]);
    let model = b.build();
    let prepared = qdq_studio::quant::Prepared::new(
        &model,
        &qdq_studio::recipe::Recipe::default().prepared_options(),
    )
    .unwrap();
    assert_eq!(prepared.report.outlier_rows.len(), 1);
    assert_eq!(prepared.report.outlier_rows[0].rows, [9]);
    assert!(initializers_of(&prepared.model, DataType::Float32).is_empty());
    let x = half(&[2, 8, 256], 32, 1.0);
    let (before, after) = (run_block(&model, &x), run_block(&prepared.model, &x));
    let scale = before.iter().fold(0f32, |m, v| m.max(v.abs()));
    let worst = before
        .iter()
        .zip(&after)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(worst <= 2e-3 * scale, "worst difference {worst} of {scale}");
}
