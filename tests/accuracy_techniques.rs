//! Accuracy techniques beyond onnxruntime's quantizer, checked in real ONNX Runtime sessions:
//! cross-layer equalization leaves the float model's outputs as they were and evens out the
//! weights' channel ranges; bias correction removes the mean output error that per-tensor
//! weights cause; GPTQ's rounding lowers a layer's output error against rounding to
//! nearest; statistics gathered without a technique are refused by a recipe that needs it.

use crate::common;

use ndarray::{ArrayD, Axis, IxDyn};
use qdq_studio::calib::data::DataSpec;
use qdq_studio::calib::{CalibrationConfig, CalibrationStats};
use qdq_studio::jobs::JobContext;
use qdq_studio::model::{DataType, Model, ModelBuilder, TensorArray};
use qdq_studio::quant::{self, Prepared, QuantError};
use qdq_studio::recipe::{Preprocessing, QuantType, Recipe};
use qdq_studio::runtime::{EpSpec, SessionOptions};

use common::{asset, runtime, write_npz};

/// Deterministic values in [-1, 1).
fn values(seed: u64, n: usize) -> Vec<f32> {
    common::seeded_values(n, seed, 1.0)
}

/// A weight of `shape` whose output channels (axis `axis`) span ranges from 1/16 to 8.
fn uneven(seed: u64, shape: &[usize], axis: usize) -> TensorArray {
    let mut w = ArrayD::from_shape_vec(IxDyn(shape), values(seed, shape.iter().product())).unwrap();
    let channels = shape[axis];
    for (c, mut lane) in w.axis_iter_mut(Axis(axis)).enumerate() {
        let factor = 2f32.powf(7.0 * c as f32 / (channels - 1).max(1) as f32 - 4.0);
        lane.mapv_inplace(|v| v * factor);
    }
    TensorArray::Float32(w)
}

fn tensor(seed: u64, shape: &[usize]) -> TensorArray {
    TensorArray::Float32(
        ArrayD::from_shape_vec(IxDyn(shape), values(seed, shape.iter().product())).unwrap(),
    )
}

/// Conv → Relu → depthwise Conv → Conv → Clip(0, 6) → Conv → pool → Gemm → Relu → MatMul →
/// Add: four pairs to equalize (through the bounded Clip too).
fn chain_model() -> Model {
    chain_model_bounded_at(6.0)
}

/// [`chain_model`] with the Clip's upper bound at `hi`.
fn chain_model_bounded_at(hi: f32) -> Model {
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[-1, 4, 6, 6]);
    b.initializer("w1", uneven(1, &[8, 4, 3, 3], 0));
    b.initializer("b1", tensor(2, &[8]));
    b.initializer("w2", uneven(3, &[8, 1, 3, 3], 0));
    b.initializer("b2", tensor(4, &[8]));
    b.initializer("w3", uneven(5, &[6, 8, 1, 1], 0));
    b.initializer("b3", tensor(6, &[6]));
    b.initializer("w4", tensor(7, &[6, 6, 1, 1]));
    b.initializer(
        "lo",
        TensorArray::Float32(ArrayD::from_elem(IxDyn(&[]), 0.0)),
    );
    b.initializer(
        "hi",
        TensorArray::Float32(ArrayD::from_elem(IxDyn(&[]), hi)),
    );
    b.initializer("g", uneven(8, &[5, 6], 0));
    b.initializer("c", tensor(9, &[5]));
    b.initializer("m", tensor(10, &[5, 3]));
    b.initializer("mb", tensor(11, &[3]));
    b.node("Conv", &["x", "w1", "b1"], &["c1"])
        .name("conv1")
        .attr_ints("pads", &[1, 1, 1, 1]);
    b.node("Relu", &["c1"], &["r1"]).name("relu1");
    b.node("Conv", &["r1", "w2", "b2"], &["c2"])
        .name("depthwise")
        .attr_int("group", 8)
        .attr_ints("pads", &[1, 1, 1, 1]);
    b.node("Conv", &["c2", "w3", "b3"], &["c3"])
        .name("pointwise");
    b.node("Clip", &["c3", "lo", "hi"], &["r3"]).name("relu6");
    b.node("Conv", &["r3", "w4"], &["c4"]).name("conv4");
    b.node("GlobalAveragePool", &["c4"], &["p"]).name("pool");
    b.node("Flatten", &["p"], &["f"]).name("flatten");
    b.node("Gemm", &["f", "g", "c"], &["gemm_out"])
        .name("gemm")
        .attr_int("transB", 1);
    b.node("Relu", &["gemm_out"], &["r5"]).name("relu5");
    b.node("MatMul", &["r5", "m"], &["mm"]).name("matmul");
    b.node("Add", &["mm", "mb"], &["y"]).name("bias_add");
    b.output("y", DataType::Float32, &[-1, 3]);
    b.build()
}

/// Runs `model` on `x` (input "x"); returns its first output.
fn run(model: &Model, x: &ArrayD<f32>) -> ArrayD<f32> {
    let bytes = model.to_bytes().unwrap();
    let mut session = runtime()
        .session_from_bytes(&bytes, &[EpSpec::Cpu], SessionOptions::default())
        .unwrap();
    let value = ort::value::Tensor::from_array(x.clone()).unwrap();
    let outputs = session.run(ort::inputs!["x" => value]).unwrap();
    outputs[0].try_extract_array::<f32>().unwrap().to_owned()
}

fn relative_error(reference: &ArrayD<f32>, test: &ArrayD<f32>) -> f64 {
    let (mut diff, mut norm) = (0f64, 0f64);
    for (a, b) in reference.iter().zip(test) {
        diff += f64::from(a - b).powi(2);
        norm += f64::from(*a).powi(2);
    }
    (diff / norm).sqrt()
}

fn equalizing() -> Preprocessing {
    Preprocessing {
        equalize: true,
        ..Preprocessing::default()
    }
}

#[test]
fn equalization_keeps_float_outputs_and_evens_out_weights() {
    let model = chain_model();
    let prepared = Prepared::new(&model, &equalizing()).unwrap();
    let pairs = &prepared.report.equalized;
    let names: Vec<(String, String)> = pairs
        .iter()
        .map(|p| (p.first.clone(), p.second.clone()))
        .collect();
    assert_eq!(
        names,
        [
            ("conv1".to_owned(), "depthwise".to_owned()),
            ("depthwise".to_owned(), "pointwise".to_owned()),
            ("pointwise".to_owned(), "conv4".to_owned()),
            ("gemm".to_owned(), "matmul".to_owned()),
        ],
    );
    for pair in pairs {
        let gain = pair.first_sqnr_db[1] - pair.first_sqnr_db[0];
        assert!(
            gain > 3.0,
            "{pair:?}: the first weight's per-tensor int8 SQNR should rise by > 3 dB"
        );
    }
    // The ReLU6's bound follows each channel's scale: a Min per channel after a Clip(0).
    let bound = prepared
        .model
        .graph()
        .node
        .iter()
        .find(|n| n.op_type() == "Min")
        .expect("a Min carries the Clip's bound per channel");
    assert_eq!(bound.output, ["r3"]);
    let x = ArrayD::from_shape_vec(IxDyn(&[3, 4, 6, 6]), values(42, 3 * 4 * 36)).unwrap();
    // Large inputs drive the pointwise Conv past 6, where the bound decides the output.
    let large = x.mapv(|v| v * 40.0);
    let unbounded = chain_model_bounded_at(1e9);
    assert!(relative_error(&run(&model, &large), &run(&unbounded, &large)) > 1e-2);
    for x in [x, large] {
        let error = relative_error(&run(&model, &x), &run(&prepared.model, &x));
        assert!(error <= 1e-4, "equalization changed the outputs: {error:e}");
    }
}

#[test]
fn equalization_keeps_the_sample_models_outputs() {
    let model = Model::load(&asset("ppocr_cls.onnx")).unwrap();
    let plain = Prepared::new(&model, &Preprocessing::default()).unwrap();
    let equalized = Prepared::new(&model, &equalizing()).unwrap();
    assert!(
        equalized.report.equalized.len() >= 4,
        "{:?}",
        equalized.report.equalized
    );
    let x = ArrayD::from_shape_vec(
        IxDyn(&[2, 3, 48, 192]),
        values(7, 2 * 3 * 48 * 192)
            .iter()
            .map(|v| v.abs())
            .collect(),
    )
    .unwrap();
    // Softmax saturates: compare the logits' path through the scores of a run each.
    let error = relative_error(&run(&plain.model, &x), &run(&equalized.model, &x));
    assert!(error <= 1e-4, "equalization changed the outputs: {error:e}");
}

/// x (positive, like a Relu's output) → Conv without bias (output channels of very different
/// ranges, so one per-tensor scale rounds the small ones coarsely) → y.
fn biased_model() -> Model {
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[-1, 4, 8, 8]);
    b.initializer("w", uneven(21, &[8, 4, 3, 3], 0));
    b.node("Conv", &["x", "w"], &["y"])
        .name("conv")
        .attr_ints("pads", &[1, 1, 1, 1]);
    b.output("y", DataType::Float32, &[-1, 8, 8, 8]);
    b.build()
}

fn positive_data(seed: u64, n: usize) -> ArrayD<f32> {
    let v: Vec<f32> = values(seed, n * 4 * 64)
        .iter()
        .map(|v| (v + 1.0) * 0.5)
        .collect();
    ArrayD::from_shape_vec(IxDyn(&[n, 4, 8, 8]), v).unwrap()
}

fn calibrate(model: &Model, recipe: &Recipe, data: &std::path::Path) -> CalibrationStats {
    qdq_studio::workflow::calibrate::calibrate_for_recipe(
        model,
        recipe,
        &DataSpec::Npz {
            path: data.to_path_buf(),
        },
        &CalibrationConfig {
            batch_size: 8,
            ..CalibrationConfig::default()
        },
        &runtime(),
        &JobContext::silent(),
        qdq_studio::workflow::calibrate::Observed::Every,
    )
    .unwrap()
}

/// The mean over channels of |mean error| of channel c (over batch and positions).
fn mean_channel_bias(float: &ArrayD<f32>, quant: &ArrayD<f32>) -> f64 {
    let error = quant - float;
    let channels = error.shape()[1];
    (0..channels)
        .map(|c| {
            let lane = error.index_axis(Axis(1), c);
            f64::from(lane.sum() / lane.len() as f32).abs()
        })
        .sum::<f64>()
        / channels as f64
}

#[test]
fn bias_correction_removes_the_mean_output_error() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("calib.npz");
    write_npz(&data, &[("x", TensorArray::Float32(positive_data(5, 64)))]);
    let model = biased_model();
    // 7-bit weights: ONNX Runtime's fused u8×s8 kernels cannot saturate on them, so the runs
    // follow the Q/DQ arithmetic the correction is measured in on every CPU.
    let plain = Recipe {
        per_channel: false,
        reduce_range: true,
        ..Recipe::default()
    };
    let corrected = Recipe {
        bias_correction: true,
        ..plain.clone()
    };
    let stats = calibrate(&model, &corrected, &data);
    assert!(stats.input_means.contains_key("conv"));
    let without = quant::quantize(&model, Some(&stats), &plain).unwrap();
    let with = quant::quantize(&model, Some(&stats), &corrected).unwrap();
    let report = with.bias_correction.as_ref().unwrap();
    assert_eq!(report.corrected.len(), 1, "{report:?}");
    assert!(report.corrected[0].added_bias, "the Conv had no bias");

    let x = positive_data(99, 32);
    let float = run(&model, &x);
    let before = mean_channel_bias(&float, &run(&without.model, &x));
    let after = mean_channel_bias(&float, &run(&with.model, &x));
    assert!(
        after < 0.3 * before,
        "mean error per channel: {before:e} without, {after:e} with bias correction"
    );
}

#[test]
fn statistics_without_the_techniques_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("calib.npz");
    write_npz(&data, &[("x", TensorArray::Float32(positive_data(5, 16)))]);
    let model = biased_model();
    let stats = calibrate(&model, &Recipe::default(), &data);
    let mut cle = Recipe::default();
    cle.preprocessing.equalize = true;
    let needing = [
        (
            Recipe {
                bias_correction: true,
                ..Recipe::default()
            },
            "bias correction",
        ),
        (cle.clone(), "cle"),
        (
            Recipe {
                gptq: true,
                ..Recipe::default()
            },
            "gptq",
        ),
        (
            Recipe {
                layerwise_range: true,
                ..Recipe::default()
            },
            "layerwise_range",
        ),
    ];
    for (recipe, named) in &needing {
        let err = quant::quantize(&model, Some(&stats), recipe).unwrap_err();
        assert!(
            matches!(err, QuantError::StatsMismatch(ref m) if m.contains(named)),
            "{named}: {err}"
        );
    }
    // Calibrated with equalization, quantized without: refused too.
    let equalized = calibrate(&model, &cle, &data);
    let err = quant::quantize(&model, Some(&equalized), &Recipe::default()).unwrap_err();
    assert!(matches!(err, QuantError::StatsMismatch(_)), "{err}");
}

#[test]
fn cli_quantize_equalizes_and_corrects() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cls.qdq.onnx");
    let text = common::run_ok(common::cli().args([
        "quantize",
        "--onnx_path",
        asset("ppocr_cls.onnx").to_str().unwrap(),
        "--calibration_data_path",
        asset("calib.npz").to_str().unwrap(),
        "--per_tensor",
        "--cle",
        "--bias_correction",
        "--output_path",
        out.to_str().unwrap(),
    ]));
    assert!(text.contains("layer pair(s) equalized"), "{text}");
    assert!(text.contains("equalized pair"), "{text}");
    assert!(text.contains("bias correction:"), "{text}");
    let recipe = common::stamped_recipe(&Model::load(&out).unwrap());
    assert!(recipe.preprocessing.equalize && recipe.bias_correction);
}

/// x `[n, 16, 32]` whose 32 features mix 4 latent factors (correlated inputs, as real
/// activations are) → MatMul by a `[32, 24]` weight → y.
fn matmul_model() -> Model {
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[-1, 16, 32]);
    b.initializer("w", tensor(31, &[32, 24]));
    b.node("MatMul", &["x", "w"], &["y"]).name("matmul");
    b.output("y", DataType::Float32, &[-1, 16, 24]);
    b.build()
}

fn correlated_data(seed: u64, n: usize) -> ArrayD<f32> {
    let latent = values(seed, n * 16 * 4);
    let mixing = values(77, 4 * 32);
    let noise = values(seed + 1, n * 16 * 32);
    ArrayD::from_shape_fn(IxDyn(&[n, 16, 32]), |i| {
        let row = i[0] * 16 + i[1];
        let mixed: f32 = (0..4)
            .map(|f| latent[row * 4 + f] * mixing[f * 32 + i[2]])
            .sum();
        mixed + 0.05 * noise[row * 32 + i[2]]
    })
}

fn mean_squared_error(a: &ArrayD<f32>, b: &ArrayD<f32>) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from(x - y).powi(2))
        .sum::<f64>()
        / a.len() as f64
}

/// The output MSE of two quantized models of `model` against its float output on `x`, in
/// ONNX Runtime.
fn output_mses(model: &Model, x: &ArrayD<f32>, a: &Model, b: &Model) -> (f64, f64) {
    let float = run(model, x);
    (
        mean_squared_error(&float, &run(a, x)),
        mean_squared_error(&float, &run(b, x)),
    )
}

/// The layer's output MSE on held-out data, in ONNX Runtime, with and without GPTQ.
fn output_errors(
    model: &Model,
    base: &Recipe,
    data: &std::path::Path,
    x: &ArrayD<f32>,
) -> (f64, f64) {
    let gptq = Recipe {
        gptq: true,
        ..base.clone()
    };
    let stats = calibrate(model, &gptq, data);
    assert!(!stats.input_hessians.is_empty());
    let nearest = quant::quantize(model, Some(&stats), base).unwrap();
    let rounded = quant::quantize(model, Some(&stats), &gptq).unwrap();
    let report = rounded.gptq.as_ref().unwrap();
    assert_eq!(report.rounded.len(), 1, "{report:?}");
    assert!(report.rounded[0].gptq_sqnr_db > report.rounded[0].rtn_sqnr_db);
    // The same scales: only the integers differ.
    let scale = |q: &quant::Quantized| q.params.get("w").unwrap().params.clone();
    assert_eq!(scale(&nearest), scale(&rounded));
    let errors = output_mses(model, x, &nearest.model, &rounded.model);
    eprintln!("output MSE: nearest {:e}, gptq {:e}", errors.0, errors.1);
    errors
}

#[test]
fn gptq_lowers_a_layers_output_error_against_rounding_to_nearest() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("calib.npz");
    write_npz(
        &data,
        &[("x", TensorArray::Float32(correlated_data(3, 64)))],
    );
    let model = matmul_model();
    let held_out = correlated_data(1000, 32);
    // 16-bit activations: the weights' rounding is what the output error is made of.
    for (per_channel, weight_type) in [
        (false, QuantType::Int8),
        (true, QuantType::Int8),
        (true, QuantType::Int4),
    ] {
        let base = Recipe {
            per_channel,
            weight_type,
            activation_type: QuantType::Uint16,
            ..Recipe::default()
        };
        let (nearest, gptq) = output_errors(&model, &base, &data, &held_out);
        assert!(
            gptq < 0.7 * nearest,
            "{weight_type:?} per-channel {per_channel}: output MSE {nearest:e} nearest, {gptq:e} gptq"
        );
    }
    // A Conv (its patches' Hessian, zero padding included).
    let data = dir.path().join("positive.npz");
    write_npz(&data, &[("x", TensorArray::Float32(positive_data(5, 64)))]);
    let base = Recipe {
        per_channel: false,
        activation_type: QuantType::Uint16,
        ..Recipe::default()
    };
    let (nearest, gptq) = output_errors(&biased_model(), &base, &data, &positive_data(99, 32));
    assert!(
        gptq < 0.7 * nearest,
        "Conv output MSE {nearest:e} nearest, {gptq:e} gptq"
    );
}

#[test]
fn gptq_chooses_its_dampening_on_held_out_samples() {
    // Two calibration samples of independent inputs: 32 vectors for a 32-wide Hessian, half
    // of them to fit on. GPTQ with the reference dampening fits those vectors and moves the
    // output on new ones more than rounding to nearest; measured on the held-out sample, the
    // dampening it takes does not.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("few.npz");
    let independent = |seed: u64, n: usize| {
        ArrayD::from_shape_vec(IxDyn(&[n, 16, 32]), values(seed, n * 16 * 32)).unwrap()
    };
    write_npz(&data, &[("x", TensorArray::Float32(independent(5, 2)))]);
    let model = matmul_model();
    let base = Recipe {
        activation_type: QuantType::Uint16,
        weight_type: QuantType::Int4,
        ..Recipe::default()
    };
    let gptq = Recipe {
        gptq: true,
        ..base.clone()
    };
    let stats = calibrate(&model, &gptq, &data);
    let hessian = stats.input_hessians.values().next().unwrap();
    assert_eq!((hessian.count, hessian.held_out_count), (32, 16));
    let nearest = quant::quantize(&model, Some(&stats), &base).unwrap();
    let rounded = quant::quantize(&model, Some(&stats), &gptq).unwrap();
    let layer = &rounded.gptq.as_ref().unwrap().rounded[0];
    let x = independent(1000, 32);
    let (nearest, gptq) = output_mses(&model, &x, &nearest.model, &rounded.model);
    eprintln!("few samples, held-out output MSE: nearest {nearest:e}, gptq {gptq:e}, {layer:?}");
    assert!(
        gptq <= 1.02 * nearest,
        "gptq {gptq:e} against nearest {nearest:e}"
    );
    assert!(layer.held_out, "{layer:?}");
    assert_ne!(layer.dampening, Some(0.01), "{layer:?}");
}

#[test]
fn cli_gptq_and_layerwise_ranges_from_a_statistics_file() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let text = common::run_ok(common::cli().args([
        "calibrate",
        "--onnx_path",
        asset("ppocr_cls.onnx").to_str().unwrap(),
        "--calibration_data_path",
        asset("calib.npz").to_str().unwrap(),
        "--gptq",
        "--layerwise_range",
        "--output_path",
        stats.to_str().unwrap(),
    ]));
    assert!(text.contains("layer-wise ranges: "), "{text}");
    let out = dir.path().join("cls.qdq.onnx");
    let text = common::run_ok(common::cli().args([
        "quantize",
        "--onnx_path",
        asset("ppocr_cls.onnx").to_str().unwrap(),
        "--calibration_cache_path",
        stats.to_str().unwrap(),
        "--per_tensor",
        "--gptq",
        "--layerwise_range",
        "--output_path",
        out.to_str().unwrap(),
    ]));
    // Every one of the 54 layers is rounded by GPTQ or, where its held-out samples preferred
    // it, kept rounded to nearest.
    let line = text.lines().find(|l| l.starts_with("gptq: ")).unwrap_or("");
    let number_before = |marker: &str| -> usize {
        line.split(marker)
            .next()
            .and_then(|head| head.split(' ').next_back())
            .map_or(0, |n| n.parse().unwrap_or(0))
    };
    let (rounded, kept) = (
        number_before(" layer(s) rounded"),
        number_before(" kept rounding"),
    );
    assert_eq!(rounded + kept, 54, "{line}");
    assert!(rounded >= 50, "{line}");
    assert!(text.contains("gptq-rounded layer"), "{text}");
    let recipe = common::stamped_recipe(&Model::load(&out).unwrap());
    assert!(recipe.gptq && recipe.layerwise_range);
}

/// Two inputs with one rare spike each: `a` (a spike of √40) is squared (a Mul: the Clip must
/// read a quantized tensor, as a Clip reading a float one stays float, in onnxruntime too),
/// and its square feeds a Clip(-1, 1), which throws the spike of 40 away, then a MatMul; `b`
/// feeds a MatMul, for which the spike counts.
fn spiked_model() -> Model {
    let mut b = ModelBuilder::new(17);
    b.input("a", DataType::Float32, &[-1, 8, 64]);
    b.input("b", DataType::Float32, &[-1, 8, 64]);
    b.initializer(
        "lo",
        TensorArray::Float32(ArrayD::from_elem(IxDyn(&[]), -1.0)),
    );
    b.initializer(
        "hi",
        TensorArray::Float32(ArrayD::from_elem(IxDyn(&[]), 1.0)),
    );
    b.initializer("w1", tensor(41, &[64, 16]));
    b.initializer("w2", tensor(42, &[64, 16]));
    b.node("Mul", &["a", "a"], &["squared"]).name("square");
    b.node("Clip", &["squared", "lo", "hi"], &["clipped"])
        .name("clip");
    b.node("MatMul", &["clipped", "w1"], &["y1"])
        .name("matmul_a");
    b.node("MatMul", &["b", "w2"], &["y2"]).name("matmul_b");
    b.output("y1", DataType::Float32, &[-1, 8, 16]);
    b.output("y2", DataType::Float32, &[-1, 8, 16]);
    b.build()
}

/// `n` samples in [-1, 1) with one value of 40 in the whole set.
fn spiked(seed: u64, n: usize) -> ArrayD<f32> {
    let mut v = values(seed, n * 8 * 64);
    v[n * 8 * 64 / 3] = 40.0;
    ArrayD::from_shape_vec(IxDyn(&[n, 8, 64]), v).unwrap()
}

/// Runs the two-input `model`; returns both outputs.
fn run_two(model: &Model, a: &ArrayD<f32>, b: &ArrayD<f32>) -> (ArrayD<f32>, ArrayD<f32>) {
    let bytes = model.to_bytes().unwrap();
    let mut session = runtime()
        .session_from_bytes(&bytes, &[EpSpec::Cpu], SessionOptions::default())
        .unwrap();
    let value = |x: &ArrayD<f32>| ort::value::Tensor::from_array(x.clone()).unwrap();
    let outputs = session
        .run(ort::inputs!["a" => value(a), "b" => value(b)])
        .unwrap();
    let take = |name: &str| outputs[name].try_extract_array::<f32>().unwrap().to_owned();
    (take("y1"), take("y2"))
}

#[test]
fn layerwise_ranges_clip_where_the_reader_discards_and_keep_where_it_counts() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("calib.npz");
    // `a`'s square is `spiked`'s magnitude: values in [0, 1), one of 40.
    let a = spiked(1, 64).mapv(|v| v.signum() * v.abs().sqrt());
    let b = spiked(2, 64);
    write_npz(
        &data,
        &[
            ("a", TensorArray::Float32(a.clone())),
            ("b", TensorArray::Float32(b.clone())),
        ],
    );
    let model = spiked_model();
    let layerwise = Recipe {
        layerwise_range: true,
        ..Recipe::default()
    };
    let stats = calibrate(&model, &layerwise, &data);
    assert!(stats.info.layerwise_ranges);
    let method = |t: &str| stats.range_choices.get(t).map(|c| c.method.label());
    assert_eq!(
        method("squared").as_deref(),
        Some("percentile 99.99"),
        "{:?}",
        stats.range_choices
    );
    assert_eq!(
        method("b").as_deref(),
        Some("minmax"),
        "{:?}",
        stats.range_choices
    );
    // Measured on the calibration data, each choice beats every uniform method on the output
    // its activation reaches.
    let errors = |recipe: &Recipe| {
        let q = quant::quantize(&model, Some(&stats), recipe).unwrap();
        let (f1, f2) = run_two(&model, &a, &b);
        let (q1, q2) = run_two(&q.model, &a, &b);
        (mean_squared_error(&f1, &q1), mean_squared_error(&f2, &q2))
    };
    let chosen = errors(&layerwise);
    let minmax = errors(&Recipe::default());
    let percentile = errors(&Recipe {
        calibration_method: qdq_studio::calib::range::RangeMethod::Percentile {
            percentile: 99.99,
            symmetric: true,
        },
        ..Recipe::default()
    });
    assert!(
        chosen.0 < 0.5 * minmax.0,
        "y1: {chosen:?} vs minmax {minmax:?}"
    );
    assert!(
        chosen.1 < 0.5 * percentile.1,
        "y2: {chosen:?} vs percentile {percentile:?}"
    );
}

/// An opset-9 model (ONNX's old model zoo: SqueezeNet ends so) whose Softmax takes its
/// default axis 1 over a 4-d input: the probe that measures layer-wise ranges must not need
/// opset 13, where that Softmax would mean another thing; Q/DQ needs only 10.
#[test]
fn layerwise_ranges_are_measured_on_an_opset_9_model() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("calib.npz");
    let mut b = ModelBuilder::new(9);
    b.input_any_shape("x", DataType::Float32);
    b.initializer("w", tensor(43, &[64, 16]));
    b.node("MatMul", &["x", "w"], &["h"]).name("mm");
    b.node("Softmax", &["h"], &["y"]).name("sm");
    b.output("y", DataType::Float32, &[-1, 1, 1, 16]);
    let model = b.build();
    let mut x = values(44, 512 * 64);
    x[100] = 40.0;
    let x = ArrayD::from_shape_vec(IxDyn(&[512, 1, 1, 64]), x).unwrap();
    write_npz(&data, &[("x", TensorArray::Float32(x))]);
    let recipe = Recipe {
        layerwise_range: true,
        per_channel: false,
        ..Recipe::default()
    };
    let stats = calibrate(&model, &recipe, &data);
    assert!(stats.info.layerwise_ranges);
    assert!(
        stats.range_choices.contains_key("x"),
        "{:?}",
        stats.range_choices
    );
    let q = quant::quantize(&model, Some(&stats), &recipe).unwrap();
    assert!(q.quantized_nodes.iter().any(|n| n == "mm"));
}

/// Quantizes the sample with `flags` into `dir/name`.
fn quantize_sample(dir: &std::path::Path, name: &str, flags: &[&str]) -> std::path::PathBuf {
    let out = dir.join(name);
    common::quantize_calibrated(&asset("ppocr_cls.onnx"), &asset("calib.npz"), flags, &out);
    out
}

#[test]
fn compare_against_a_baseline_shows_each_layers_gain() {
    let dir = tempfile::tempdir().unwrap();
    // Both with 7-bit weights: the fused u8×s8 kernels cannot saturate on either (the
    // saturation guard gives per-channel weights 7 bits, not per-tensor ones).
    let before = quantize_sample(
        dir.path(),
        "per_tensor.onnx",
        &["--per_tensor", "--reduce_range"],
    );
    let after = quantize_sample(
        dir.path(),
        "per_channel.onnx",
        &["--per_channel", "--reduce_range"],
    );
    let report = dir.path().join("report.md");
    let value = common::run_json(
        common::compare_cmd(&after, &asset("eval.npz"))
            .arg("--baseline")
            .arg(&before)
            .args(["--latency_runs", "0", "--json", "--report"])
            .arg(&report),
    );
    let layers = value["baseline"]["layers"].as_array().unwrap();
    assert!(layers.len() > 20, "{} layers joined", layers.len());
    // Per-channel weights help the own (local) error of the layers with weights (the other
    // tensors' local errors stay as they were: the activations' ranges are the same
    // statistics'), and hardly any loses.
    let gains: Vec<f64> = layers
        .iter()
        .filter_map(|l| Some(l["local_after_db"].as_f64()? - l["local_before_db"].as_f64()?))
        .collect();
    assert!(gains.len() > 20, "local errors measured in both");
    let gained = gains.iter().filter(|&&g| g > 0.05).count();
    let lost = gains.iter().filter(|&&g| g < -0.05).count();
    assert!(
        gained >= 30 && lost * 10 < gained,
        "{gained} gained, {lost} lost"
    );
    let out_before = value["baseline"]["outputs"][0]["sqnr_db"].as_f64().unwrap();
    let out_after = value["outputs"][0]["sqnr_db"].as_f64().unwrap();
    assert!(out_before.is_finite() && out_after.is_finite());
    let page = std::fs::read_to_string(&report).unwrap();
    assert!(page.contains("## Against the baseline"), "{page}");
    assert!(page.contains("layers that gained most"), "{page}");
    // The table the CLI prints, from the same report.
    let text = common::run_ok(
        common::compare_cmd(&after, &asset("eval.npz"))
            .arg("--baseline")
            .arg(&before)
            .args(["--latency_runs", "0", "--per_tensor"]),
    );
    assert!(text.contains("baseline SQNR dB"), "{text}");
    assert!(text.contains("layers compared"), "{text}");
}

#[test]
fn a_baseline_of_another_model_is_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let after = quantize_sample(dir.path(), "cls.onnx", &["--per_tensor"]);
    let other = dir.path().join("other.onnx");
    matmul_model()
        .save(&other, &qdq_studio::model::SaveOptions::default())
        .unwrap();
    let out = common::compare_cmd(&after, &asset("eval.npz"))
        .arg("--baseline")
        .arg(&other)
        .args(["--latency_runs", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("other.onnx"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// The names under `key` of a `compare --per_tensor --json`'s tensors, with `field`.
fn figures(tensors: &serde_json::Value, key: &str, field: &str) -> Vec<(String, f64)> {
    tensors[key]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|t| {
            let name = t["tensor"].as_str().or(t["weight"].as_str()).unwrap();
            (name.to_owned(), t[field].as_f64().unwrap_or(f64::INFINITY))
        })
        .collect()
}

#[test]
fn compare_measures_the_activations_equalization_rescaled_at_their_recorded_scale() {
    let dir = tempfile::tempdir().unwrap();
    let equalized = quantize_sample(dir.path(), "cle.onnx", &["--per_tensor", "--cle"]);
    let per_tensor = |model: &std::path::Path| {
        let mut compare = common::compare_cmd(model, &asset("eval.npz"));
        common::run_json(compare.args(["--latency_runs", "0", "--per_tensor", "--json"]))["tensors"]
            .clone()
    };
    let worst =
        |figures: &[(String, f64)]| figures.iter().map(|f| f.1).fold(f64::INFINITY, f64::min);
    let model = Model::load(&equalized).unwrap();
    let factors = quant::rescaled::factors_in(&model);
    assert!(factors.len() >= 6, "{:?}", factors.keys());

    // Each rescaled activation is measured against the float one times its factors, so it
    // reads like its neighbours; compared by name with the float model, a rescaled channel
    // read as an error of the whole tensor (-1 dB here).
    let tensors = per_tensor(&equalized);
    assert!(tensors["rescaled"].as_array().is_none_or(Vec::is_empty));
    let (activations, local) = (
        figures(&tensors, "activations", "xmodel_sqnr_db"),
        figures(&tensors, "local", "sqnr_db"),
    );
    for measured in [&activations, &local] {
        let rescaled = measured.iter().filter(|(t, _)| factors.contains_key(t));
        assert!(rescaled.count() >= 6);
    }
    assert!(worst(&activations) > 10.0, "{activations:?}");
    assert!(worst(&local) > 15.0, "{local:?}");
    // Their weights too: the recorded rescaling is taken out (compared raw, equalized
    // weights and biases read -2 to 3 dB).
    let weights = figures(&tensors, "weights", "sqnr_db");
    assert!(weights.len() > 50 && worst(&weights) > 20.0, "{weights:?}");

    // A QDQ model that records the rescaled activations without their factors (an older
    // one) has them set aside, not measured.
    let tensors = per_tensor(&common::without_rescale_factors(&equalized));
    let set_aside: Vec<&str> = tensors["rescaled"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(set_aside.len() >= 6, "{set_aside:?}");
    for key in ["activations", "local"] {
        for (name, _) in figures(&tensors, key, "sqnr_db") {
            assert!(!set_aside.contains(&name.as_str()), "{name} is rescaled");
        }
    }
}

/// A pre-LN attention input: x `[n, 16, 64]` → LayerNorm (γ spanning 1/8 to 8, a few channels
/// large, as trained norms have) → q, k, v projections summed → y.
fn pre_norm_model() -> Model {
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[-1, 16, 64]);
    let gamma: Vec<f32> = (0..64)
        .map(|c| {
            if c % 16 == 3 {
                8.0
            } else {
                2f32.powf((c % 7) as f32 / 2.0 - 3.0)
            }
        })
        .collect();
    b.initializer(
        "gamma",
        TensorArray::Float32(ArrayD::from_shape_vec(IxDyn(&[64]), gamma).unwrap()),
    );
    b.initializer("beta", tensor(50, &[64]));
    for (i, p) in ["q", "k", "v"].iter().enumerate() {
        b.initializer(&format!("w{p}"), tensor(51 + i as u64, &[64, 64]));
    }
    b.node("LayerNormalization", &["x", "gamma", "beta"], &["n"])
        .name("ln")
        .attr_int("axis", -1);
    for p in ["q", "k", "v"] {
        b.node("MatMul", &["n", &format!("w{p}")], &[&format!("{p}_out")])
            .name(&format!("{p}_proj"));
    }
    b.node("Add", &["q_out", "k_out"], &["qk"]).name("add_qk");
    b.node("Add", &["qk", "v_out"], &["y"]).name("add_v");
    b.output("y", DataType::Float32, &[-1, 16, 64]);
    b.build()
}

/// SmoothQuant divides the norm's γ and β per channel by scales spanning orders of
/// magnitude; quantized per tensor like any norm scale, the small channels rounded away (a
/// synthetic pre-LN transformer fell from 27 to 8 dB). They now stay float, and smoothing
/// beats plain int8 here (measured 0.13 against 0.22 output MSE; 5.9 when they were quantized).
#[test]
fn smoothquant_keeps_the_norm_constants_it_divides_in_float() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("calib.npz");
    let sample = |seed: u64, n: usize| {
        ArrayD::from_shape_vec(IxDyn(&[n, 16, 64]), values(seed, n * 16 * 64)).unwrap()
    };
    write_npz(&data, &[("x", TensorArray::Float32(sample(60, 64)))]);
    let model = pre_norm_model();
    let plain = Recipe::default();
    let smooth = Recipe {
        smoothquant: true,
        ..Recipe::default()
    };
    let x = sample(61, 16);
    let float = run(&model, &x);
    let error = |recipe: &Recipe| {
        let stats = calibrate(&model, recipe, &data);
        let q = quant::quantize(&model, Some(&stats), recipe).unwrap();
        (mean_squared_error(&float, &run(&q.model, &x)), q)
    };
    let (plain_error, _) = error(&plain);
    let (smooth_error, smoothed) = error(&smooth);
    assert!(!smoothed.smoothing.as_deref().unwrap_or("").is_empty());
    for constant in ["gamma", "beta"] {
        assert!(
            !smoothed.params.contains_key(constant),
            "{constant} was quantized after smoothing"
        );
    }
    assert!(
        smooth_error < plain_error,
        "smoothquant {smooth_error:e} against plain {plain_error:e}"
    );
}

/// Conv → Relu → MaxPool → Conv → AveragePool → Clip(0, 6) → Conv: pooling passes a
/// per-channel scale through (`pool(x / s) = pool(x) / s`), so both pairs equalize.
fn pooled_chain() -> Model {
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[-1, 4, 8, 8]);
    b.initializer("w1", uneven(71, &[8, 4, 3, 3], 0));
    b.initializer("b1", tensor(72, &[8]));
    b.initializer("w2", tensor(73, &[8, 8, 3, 3]));
    b.initializer("w3", tensor(74, &[6, 8, 1, 1]));
    b.initializer(
        "lo",
        TensorArray::Float32(ArrayD::from_elem(IxDyn(&[]), 0.0)),
    );
    b.initializer(
        "hi",
        TensorArray::Float32(ArrayD::from_elem(IxDyn(&[]), 6.0)),
    );
    b.node("Conv", &["x", "w1", "b1"], &["c1"])
        .name("conv1")
        .attr_ints("pads", &[1, 1, 1, 1]);
    b.node("Relu", &["c1"], &["r1"]).name("relu");
    b.node("MaxPool", &["r1"], &["p1"])
        .name("maxpool")
        .attr_ints("kernel_shape", &[2, 2])
        .attr_ints("strides", &[2, 2]);
    b.node("Conv", &["p1", "w2"], &["c2"])
        .name("conv2")
        .attr_ints("pads", &[1, 1, 1, 1]);
    b.node("AveragePool", &["c2"], &["p2"])
        .name("avgpool")
        .attr_ints("kernel_shape", &[2, 2])
        .attr_ints("strides", &[2, 2]);
    b.node("Clip", &["p2", "lo", "hi"], &["r2"]).name("relu6");
    b.node("Conv", &["r2", "w3"], &["y"]).name("conv3");
    b.output("y", DataType::Float32, &[-1, 6, 2, 2]);
    b.build()
}

#[test]
fn equalization_passes_through_pooling() {
    let model = pooled_chain();
    let prepared = Prepared::new(&model, &equalizing()).unwrap();
    let pairs: Vec<(String, Option<String>, String)> = prepared
        .report
        .equalized
        .iter()
        .map(|p| (p.first.clone(), p.between.clone(), p.second.clone()))
        .collect();
    assert_eq!(
        pairs,
        [
            ("conv1".into(), Some("Relu, MaxPool".into()), "conv2".into()),
            (
                "conv2".into(),
                Some("AveragePool, Clip(0, 6), bound per channel".into()),
                "conv3".into()
            ),
        ]
    );
    let gain = |p: &quant::equalize::EqualizedPair| p.first_sqnr_db[1] - p.first_sqnr_db[0];
    assert!(
        gain(&prepared.report.equalized[0]) > 3.0,
        "{:?}",
        prepared.report.equalized
    );
    let x = ArrayD::from_shape_vec(IxDyn(&[3, 4, 8, 8]), values(75, 3 * 4 * 64)).unwrap();
    let large = x.mapv(|v| v * 20.0);
    for x in [x, large] {
        let error = relative_error(&run(&model, &x), &run(&prepared.model, &x));
        assert!(error <= 1e-4, "equalization changed the outputs: {error:e}");
    }
    // Every tensor rescaled on the way is recorded, so comparisons do not match it against
    // the float model's unscaled one.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("calib.npz");
    write_npz(
        &data,
        &[(
            "x",
            TensorArray::Float32(
                ArrayD::from_shape_vec(IxDyn(&[16, 4, 8, 8]), values(76, 16 * 4 * 64)).unwrap(),
            ),
        )],
    );
    let recipe = Recipe {
        preprocessing: equalizing(),
        ..Recipe::default()
    };
    let stats = calibrate(&model, &recipe, &data);
    let q = quant::quantize(&model, Some(&stats), &recipe).unwrap();
    let rescaled = quant::rescaled::rescaled_in(&q.model);
    for tensor in ["c1", "r1", "p1", "c2", "p2", "r2", "r2_unbounded"] {
        assert!(rescaled.contains(tensor), "{tensor} not in {rescaled:?}");
    }
}

/// Equalizing two dense layers rescales the activation between them; the second layer's local
/// error (here a graph output, whose Q/DQ pair the DequantizeLinear writes) reads that
/// activation at the QDQ model's scale: the float tensor divided by the factors fitted from
/// the layer's 8-bit weight. It had been measured on the float activation as it was, reading
/// about 0 dB.
#[test]
fn equalized_dense_layers_keep_their_local_errors() {
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[-1, 32]);
    b.initializer("w1", uneven(1, &[48, 32], 0));
    b.initializer("b1", tensor(2, &[48]));
    b.initializer("w2", tensor(3, &[16, 48]));
    b.node("Gemm", &["x", "w1", "b1"], &["h"])
        .name("first")
        .attr_int("transB", 1);
    b.node("Relu", &["h"], &["r"]).name("relu");
    b.node("Gemm", &["r", "w2"], &["y"])
        .name("second")
        .attr_int("transB", 1);
    b.output("y", DataType::Float32, &[-1, 16]);
    let dir = tempfile::tempdir().unwrap();
    let (model, data, quant) = (
        dir.path().join("dense.onnx"),
        dir.path().join("data.npz"),
        dir.path().join("dense.qdq.onnx"),
    );
    b.build().save(&model, &Default::default()).unwrap();
    write_npz(&data, &[("x", tensor(4, &[64, 32]))]);
    let flags = ["--cle", "--per_tensor"];
    let text = common::quantize_calibrated(&model, &data, &flags, &quant);
    assert!(text.contains("1 layer pair(s) equalized"), "{text}");
    // With the factors the quantizer records, and (a model of an older version) without
    // them: then the factors are fitted from the second layer's 8-bit weights.
    for quant in [quant.clone(), common::without_rescale_factors(&quant)] {
        let tensors = &common::per_tensor_json(&model, &quant, &data);
        let figure = |list: &str, key: &str| {
            tensors[list]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["tensor"] == "y")
                .and_then(|t| t[key].as_f64())
                .unwrap_or(f64::NAN)
        };
        let local = figure("local", "sqnr_db");
        let cumulative = figure("activations", "xmodel_sqnr_db");
        // The second layer alone loses less than both layers together.
        assert!(
            local.is_finite() && local > 20.0 && local > cumulative - 0.5,
            "y: local {local} dB, cumulative {cumulative} dB in {tensors}"
        );
    }
}

/// x `[n, 16, 256]` → MatMul by a `[256, 24]` weight whose rows 7 and 200 are 20 and 12
/// times the others (a transformer's outlier rows) → y.
fn outlier_row_model() -> Model {
    let mut w = ArrayD::from_shape_vec(IxDyn(&[256, 24]), values(41, 256 * 24)).unwrap();
    w.index_axis_mut(Axis(0), 7).mapv_inplace(|v| v * 20.0);
    w.index_axis_mut(Axis(0), 200).mapv_inplace(|v| v * 12.0);
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[-1, 16, 256]);
    b.initializer("w", TensorArray::Float32(w));
    b.node("MatMul", &["x", "w"], &["y"]).name("matmul");
    b.output("y", DataType::Float32, &[-1, 16, 24]);
    b.build()
}

fn feature_data(seed: u64, n: usize) -> ArrayD<f32> {
    ArrayD::from_shape_vec(IxDyn(&[n, 16, 256]), values(seed, n * 16 * 256)).unwrap()
}

#[test]
fn outlier_rows_in_float_keep_the_float_outputs_and_free_the_other_rows_step() {
    let model = outlier_row_model();
    let x = feature_data(8, 8);
    let split = Recipe {
        per_channel: false,
        reduce_range: true,
        ..Recipe::default()
    };
    let prepared = Prepared::new(&model, &split.prepared_options()).unwrap();
    let report = &prepared.report.outlier_rows;
    assert_eq!(report.len(), 1, "{report:?}");
    assert_eq!(report[0].rows, [7, 200], "the larger first");
    assert!(report[0].range[0] > 10.0 * report[0].range[1], "{report:?}");
    assert!(relative_error(&run(&model, &x), &run(&prepared.model, &x)) < 1e-5);

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("calib.npz");
    write_npz(&data, &[("x", TensorArray::Float32(feature_data(3, 32)))]);
    let stats = calibrate(&model, &split, &data);
    let whole = Recipe {
        preprocessing: Preprocessing {
            outlier_rows: false,
            ..Preprocessing::default()
        },
        ..split.clone()
    };
    let with = quant::quantize(&model, Some(&stats), &split).unwrap();
    let without = quant::quantize(&model, Some(&stats), &whole).unwrap();
    // The float path reads the float input and a float weight, and adds in float: nothing on
    // it is quantized.
    let graph = qdq_studio::model::Graph::build(&with.model);
    let path: Vec<_> = graph
        .nodes()
        .iter()
        .filter(|n| report[0].float_nodes.contains(&n.name))
        .collect();
    assert_eq!(path.len(), 3);
    assert_eq!(path[0].inputs[0], "x");
    assert!(
        path.iter().flat_map(|n| &n.inputs).all(|t| {
            graph
                .producer_of(t)
                .is_none_or(|p| p.op_type != "DequantizeLinear")
        }),
        "{path:?}"
    );
    let x = feature_data(9, 16);
    let (split_mse, whole_mse) = output_mses(&model, &x, &with.model, &without.model);
    eprintln!("output MSE: outlier rows in float {split_mse:e}, quantized {whole_mse:e}");
    assert!(
        split_mse < 0.1 * whole_mse,
        "{split_mse:e} vs {whole_mse:e}"
    );
    // onnxruntime's placement quantizes the whole weight.
    let exact = Recipe {
        auto_precision: false,
        ..split
    };
    let prepared = Prepared::new(&model, &exact.prepared_options()).unwrap();
    assert!(prepared.report.outlier_rows.is_empty());
    // And a recipe that quantizes no MatMul leaves them whole.
    let convs = Recipe {
        op_types_to_quantize: vec!["Conv".into()],
        ..Recipe::default()
    };
    let prepared = Prepared::new(&model, &convs.prepared_options()).unwrap();
    assert!(prepared.report.outlier_rows.is_empty());
}

#[test]
fn outlier_rows_of_a_gemm_with_trans_b_are_its_weights_columns() {
    // y = 0.5 · x · Bᵀ + c, B stored [N, K] with columns 7 and 200 (inputs) 20 and 12 times
    // the others.
    let mut w = ArrayD::from_shape_vec(IxDyn(&[24, 256]), values(43, 24 * 256)).unwrap();
    w.index_axis_mut(Axis(1), 7).mapv_inplace(|v| v * 20.0);
    w.index_axis_mut(Axis(1), 200).mapv_inplace(|v| v * 12.0);
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[-1, 256]);
    b.initializer("w", TensorArray::Float32(w));
    b.initializer("c", tensor(44, &[24]));
    b.node("Gemm", &["x", "w", "c"], &["y"])
        .name("gemm")
        .attr_int("transB", 1)
        .attr_float("alpha", 0.5);
    b.output("y", DataType::Float32, &[-1, 24]);
    let model = b.build();
    let prepared = Prepared::new(&model, &Recipe::default().prepared_options()).unwrap();
    let report = &prepared.report.outlier_rows;
    assert_eq!(report.len(), 1, "{report:?}");
    assert_eq!(
        (report[0].rows.as_slice(), report[0].row_count),
        ([7, 200].as_slice(), 256)
    );
    let x = ArrayD::from_shape_vec(IxDyn(&[16, 256]), values(45, 16 * 256)).unwrap();
    assert!(relative_error(&run(&model, &x), &run(&prepared.model, &x)) < 1e-5);
}
