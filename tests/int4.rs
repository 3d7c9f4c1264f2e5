//! Int4 weight-only methods on an LLM-shaped decoder built with the project's model builder:
//! token embedding, two pre-norm layers (RMSNorm written out in standard ops, single-head
//! attention, a SwiGLU MLP), a final norm and an LM head, with Gaussian weights. Three
//! channels of every norm's γ are 25× the rest, and the value and up projections have three
//! output channels 10× the rest, so every MatMul input carries the few large activation
//! channels AWQ exists for.
//! Everything runs through the CLI and real ONNX Runtime sessions.

use crate::common;

use std::path::{Path, PathBuf};

use ndarray::{ArrayD, IxDyn};
use qdq_studio::model::{DataType, Model, ModelBuilder, TensorArray};
use qdq_studio::runtime::{EpSpec, Optimization, SessionOptions};

use common::{cli, compared_output, quantize_calibrated, run_ok, run_text, write_npz};

const HIDDEN: usize = 256;
const FFN: usize = 512;
const VOCAB: usize = 1000;
const SEQUENCE: usize = 32;
const LAYERS: usize = 2;
/// Channels whose norm weight is large (the outliers).
const OUTLIERS: [usize; 3] = [7, 100, 201];

/// A deterministic value in [-0.5, 0.5) from a seed and an index.
fn noise(seed: u64, i: usize) -> f32 {
    let mut k =
        seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    k ^= k >> 31;
    k = k.wrapping_mul(0x94D0_49BB_1331_11EB);
    k ^= k >> 29;
    (k >> 40) as f32 / (1u64 << 24) as f32 - 0.5
}

/// A standard normal value (Box-Muller): trained weights are bell-shaped, so most of a
/// block lies well inside its largest value.
fn gaussian(seed: u64, i: usize) -> f32 {
    let u1 = noise(seed, 2 * i) + 0.5 + 1e-7;
    let u2 = noise(seed, 2 * i + 1) + 0.5;
    (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
}

fn weight(seed: u64, shape: &[usize], scale: f32) -> TensorArray {
    let len: usize = shape.iter().product();
    let values: Vec<f32> = (0..len).map(|i| gaussian(seed, i) * scale).collect();
    TensorArray::Float32(ArrayD::from_shape_vec(IxDyn(shape), values).unwrap())
}

fn scalar(value: f32) -> TensorArray {
    TensorArray::Float32(ArrayD::from_elem(IxDyn(&[]), value))
}

/// γ of a norm: about 1, 25 on the outlier channels.
fn gamma(seed: u64) -> TensorArray {
    let values: Vec<f32> = (0..HIDDEN)
        .map(|c| {
            if OUTLIERS.contains(&c) {
                25.0
            } else {
                1.0 + noise(seed, c) * 0.2
            }
        })
        .collect();
    TensorArray::Float32(ArrayD::from_shape_vec(IxDyn(&[HIDDEN]), values).unwrap())
}

/// RMSNorm of `x` in standard ops, named `{p}`, writing `{p}_out`.
fn rms_norm(b: &mut ModelBuilder, p: &str, x: &str, seed: u64) -> String {
    let g = format!("{p}_gamma");
    b.initializer(&g, gamma(seed));
    let t = |s: &str| format!("{p}_{s}");
    b.node("Mul", &[x, x], &[&t("sq")]).name(&t("sq"));
    b.node("ReduceMean", &[&t("sq")], &[&t("mean")])
        .name(&t("mean"))
        .attr_ints("axes", &[-1])
        .attr_int("keepdims", 1);
    b.node("Add", &[&t("mean"), "eps"], &[&t("var")])
        .name(&t("var"));
    b.node("Sqrt", &[&t("var")], &[&t("rms")]).name(&t("rms"));
    b.node("Div", &[x, &t("rms")], &[&t("normed")])
        .name(&t("normed"));
    b.node("Mul", &[&t("normed"), &g], &[&t("out")])
        .name(&t("gamma_mul"));
    t("out")
}

/// A MatMul by a new weight `{name}_w` of N(0, gain²/k).
fn linear(
    b: &mut ModelBuilder,
    name: &str,
    x: &str,
    (k, n): (usize, usize),
    (gain, outlier_columns): (f32, bool),
    seed: u64,
) -> String {
    let w = format!("{name}_w");
    let mut values = weight(seed, &[k, n], gain / (k as f32).sqrt());
    if outlier_columns {
        // A few output channels much larger than the rest: the next MatMul's input gets
        // outlier channels, as LLMs' attention outputs and MLP products have.
        if let TensorArray::Float32(a) = &mut values {
            for mut row in a.rows_mut() {
                for &c in &OUTLIERS {
                    row[c] *= 10.0;
                }
            }
        }
    }
    b.initializer(&w, values);
    let out = format!("{name}_out");
    b.node("MatMul", &[x, &w], &[&out]).name(name);
    out
}

/// One pre-norm decoder layer over the residual stream `x`; returns the new stream.
fn layer(b: &mut ModelBuilder, l: usize, x: &str) -> String {
    let seed = 100 * l as u64;
    let p = |s: &str| format!("l{l}_{s}");
    let h = rms_norm(b, &p("attn_norm"), x, seed + 1);
    // Small query/key gains keep the attention soft, as in trained models.
    let q = linear(
        b,
        &p("q_proj"),
        &h,
        (HIDDEN, HIDDEN),
        (0.2, false),
        seed + 2,
    );
    let k = linear(
        b,
        &p("k_proj"),
        &h,
        (HIDDEN, HIDDEN),
        (0.2, false),
        seed + 3,
    );
    let v = linear(b, &p("v_proj"), &h, (HIDDEN, HIDDEN), (1.0, true), seed + 4);
    b.node("Transpose", &[&k], &[&p("kt")])
        .name(&p("kt"))
        .attr_ints("perm", &[0, 2, 1]);
    b.node("MatMul", &[&q, &p("kt")], &[&p("scores")])
        .name(&p("scores"));
    b.node("Mul", &[&p("scores"), "attn_scale"], &[&p("scaled")])
        .name(&p("scaled"));
    b.node("Softmax", &[&p("scaled")], &[&p("probs")])
        .name(&p("probs"))
        .attr_int("axis", -1);
    b.node("MatMul", &[&p("probs"), &v], &[&p("ctx")])
        .name(&p("ctx"));
    let o = linear(
        b,
        &p("o_proj"),
        &p("ctx"),
        (HIDDEN, HIDDEN),
        (1.0, false),
        seed + 5,
    );
    b.node("Add", &[x, &o], &[&p("res1")]).name(&p("res1"));
    let h2 = rms_norm(b, &p("mlp_norm"), &p("res1"), seed + 6);
    let gate = linear(
        b,
        &p("gate_proj"),
        &h2,
        (HIDDEN, FFN),
        (1.0, false),
        seed + 7,
    );
    let up = linear(b, &p("up_proj"), &h2, (HIDDEN, FFN), (1.0, true), seed + 8);
    b.node("Sigmoid", &[&gate], &[&p("sig")]).name(&p("sig"));
    b.node("Mul", &[&gate, &p("sig")], &[&p("silu")])
        .name(&p("silu"));
    b.node("Mul", &[&p("silu"), &up], &[&p("swiglu")])
        .name(&p("swiglu"));
    let down = linear(
        b,
        &p("down_proj"),
        &p("swiglu"),
        (FFN, HIDDEN),
        (1.0, false),
        seed + 9,
    );
    b.node("Add", &[&p("res1"), &down], &[&p("res2")])
        .name(&p("res2"));
    p("res2")
}

/// The decoder: `input_ids` [batch, 32] → `logits` [batch, 32, 1000].
fn decoder() -> Model {
    let mut b = ModelBuilder::new(17);
    b.input("input_ids", DataType::Int64, &[-1, SEQUENCE as i64]);
    b.initializer("embed", weight(7, &[VOCAB, HIDDEN], 1.0));
    b.initializer("eps", scalar(1e-5));
    b.initializer("attn_scale", scalar(1.0 / (HIDDEN as f32).sqrt()));
    b.node("Gather", &["embed", "input_ids"], &["x0"])
        .name("embed");
    let mut x = "x0".to_owned();
    for l in 0..LAYERS {
        x = layer(&mut b, l, &x);
    }
    let h = rms_norm(&mut b, "final_norm", &x, 999);
    let logits = linear(&mut b, "lm_head", &h, (HIDDEN, VOCAB), (1.0, false), 1000);
    b.node("Identity", &[&logits], &["logits"]).name("logits");
    b.output(
        "logits",
        DataType::Float32,
        &[-1, SEQUENCE as i64, VOCAB as i64],
    );
    b.build()
}

/// `count` rows of token ids from a seed.
fn tokens(path: &Path, count: usize, seed: u64) {
    let ids: Vec<i64> = (0..count * SEQUENCE)
        .map(|i| ((noise(seed, i) + 0.5) * VOCAB as f32) as i64 % VOCAB as i64)
        .collect();
    let ids = ArrayD::from_shape_vec(IxDyn(&[count, SEQUENCE]), ids).unwrap();
    write_npz(path, &[("input_ids", TensorArray::Int64(ids))]);
}

/// The decoder and its calibration and evaluation data in `dir`.
fn setup(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let model = dir.join("decoder.onnx");
    decoder().save(&model, &Default::default()).unwrap();
    let (calib, eval) = (dir.join("calib.npz"), dir.join("eval.npz"));
    tokens(&calib, 16, 1);
    tokens(&eval, 8, 2);
    (model, calib, eval)
}

/// Quantizes to int4 with `args`; returns `quantize`'s output.
fn quantize(model: &Path, calib: &Path, out: &Path, args: &[&str]) -> String {
    let int4 = [&["--quantize_mode", "int4"], args].concat();
    quantize_calibrated(model, calib, &int4, out)
}

/// The `logits` comparison of `quant` against `float` on `eval`: (SQNR dB, cosine).
fn logits_error(float: &Path, quant: &Path, eval: &Path) -> (f64, f64) {
    let logits = compared_output(float, quant, eval, "logits");
    (
        logits["sqnr_db"].as_f64().unwrap(),
        logits["cosine"].as_f64().unwrap(),
    )
}

/// The decoder's logits on four fixed token rows, run with `optimization`.
fn logits_of(model: &Path, optimization: Optimization) -> Vec<f32> {
    let ids =
        ndarray::Array2::from_shape_fn((4, SEQUENCE), |(r, c)| ((r * 131 + c * 17) % VOCAB) as i64);
    let model = Model::load(model).unwrap();
    let options = SessionOptions {
        optimization,
        ..SessionOptions::default()
    };
    let mut session = common::runtime()
        .session_from_bytes(&model.to_bytes().unwrap(), &[EpSpec::Cpu], options)
        .unwrap();
    let outputs = session
        .run(ort::inputs!["input_ids" => ort::value::Tensor::from_array(ids).unwrap()])
        .unwrap();
    outputs[0]
        .try_extract_array::<f32>()
        .unwrap()
        .iter()
        .copied()
        .collect()
}

/// SQNR of `b` against `a`, in dB.
fn sqnr(a: &[f32], b: &[f32]) -> f64 {
    let signal: f64 = a.iter().map(|v| f64::from(*v).powi(2)).sum();
    let noise: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
    10.0 * (signal / noise.max(1e-30)).log10()
}

#[test]
fn awq_beats_round_to_nearest_by_3_db_on_an_outlier_decoder() {
    let dir = tempfile::tempdir().unwrap();
    let (model, calib, eval) = setup(dir.path());
    let rtn = dir.path().join("rtn.onnx");
    quantize(&model, &calib, &rtn, &["--calibration_method", "rtn_dq"]);
    // The default: AWQ-full, checked against plain rounding on held-out rows.
    let full = dir.path().join("full.onnx");
    let said = quantize(&model, &calib, &full, &[]);
    assert!(said.contains("awq_full: 15 weight(s) searched"), "{said}");
    assert!(said.contains("on 32 held-out row(s)"), "{said}");
    assert!(
        said.contains("folded into the producer's constants"),
        "{said}"
    );
    let awq = dir.path().join("awq.onnx");
    let said = quantize(&model, &calib, &awq, &["--calibration_method", "awq_lite"]);
    assert!(said.contains("awq_lite: 15 weight(s) searched"), "{said}");
    let clip = dir.path().join("clip.onnx");
    let said = quantize(&model, &calib, &clip, &["--calibration_method", "awq_clip"]);
    assert!(said.contains("awq_clip: 15 weight(s) searched"), "{said}");

    let (rtn_db, _) = logits_error(&model, &rtn, &eval);
    let (full_db, _) = logits_error(&model, &full, &eval);
    let (awq_db, _) = logits_error(&model, &awq, &eval);
    let (clip_db, _) = logits_error(&model, &clip, &eval);
    eprintln!(
        "logits SQNR: rtn {rtn_db:.2} dB, awq_full {full_db:.2} dB, awq_lite {awq_db:.2} dB, awq_clip {clip_db:.2} dB"
    );
    assert!(
        awq_db >= rtn_db + 3.0 && full_db >= rtn_db + 3.0,
        "awq_lite {awq_db:.2} dB, awq_full {full_db:.2} dB vs rtn {rtn_db:.2} dB"
    );
    assert!(
        clip_db >= rtn_db,
        "awq_clip {clip_db:.2} dB vs rtn {rtn_db:.2} dB"
    );
}

#[test]
fn matmulnbits_runs_in_onnx_runtime_and_matches_the_dq_form() {
    let dir = tempfile::tempdir().unwrap();
    let (model, calib, eval) = setup(dir.path());
    let dq = dir.path().join("dq.onnx");
    let dq_form = ["--int4_output", "dq"];
    quantize(&model, &calib, &dq, &dq_form);
    // MatMulNBits is the CPU target's default form.
    let nbits = dir.path().join("nbits.onnx");
    quantize(&model, &calib, &nbits, &[]);
    let saved = Model::load(&nbits).unwrap();
    let nodes: Vec<_> = saved.graph().node.iter().collect();
    let fused: Vec<_> = nodes
        .iter()
        .copied()
        .filter(|n| n.op_type() == "MatMulNBits")
        .collect();
    assert_eq!(fused.len(), 15, "{nodes:?}");
    assert!(nodes.iter().all(|n| n.op_type() != "DequantizeLinear"));
    let level = |n: &qdq_studio::model::proto::NodeProto| {
        n.attribute
            .iter()
            .find(|a| a.name() == "accuracy_level")
            .map(|a| a.i())
    };
    assert!(
        fused.iter().all(|n| level(n) == Some(4)),
        "int8 activations by default"
    );
    // Unfused, the DQ form is the exact reference; MatMulNBits at accuracy level 0 computes
    // in float and matches it, level 4 quantizes activations to 8 bits per block (what
    // ONNX Runtime's own optimizer does to the DQ form when it fuses it).
    let exact = logits_of(&dq, Optimization::Disable);
    let nbits_exact = dir.path().join("nbits_exact.onnx");
    let args = ["--int4_output", "matmulnbits", "--accuracy_level", "0"];
    quantize(&model, &calib, &nbits_exact, &args);
    let db = sqnr(&exact, &logits_of(&nbits_exact, Optimization::All));
    assert!(
        db > 80.0,
        "MatMulNBits (level 0) vs the unfused DQ form: {db:.1} dB"
    );
    // About 30 dB measured: the outlier channels widen each block's 8-bit activation scale.
    let db = sqnr(&exact, &logits_of(&nbits, Optimization::All));
    assert!(
        db > 25.0,
        "MatMulNBits (level 4) vs the unfused DQ form: {db:.1} dB"
    );
    let (to_float_dq, _) = logits_error(&model, &dq, &eval);
    let (to_float_nbits, _) = logits_error(&model, &nbits, &eval);
    assert!(
        to_float_nbits >= to_float_dq - 0.5,
        "against float: MatMulNBits {to_float_nbits:.2} dB, DQ {to_float_dq:.2} dB"
    );

    // rtn keeps float weights behind Q/DQ: the same values as rtn_dq.
    let rtn = dir.path().join("rtn.onnx");
    quantize(&model, &calib, &rtn, &["--calibration_method", "rtn"]);
    let rtn_dq = dir.path().join("rtn_dq.onnx");
    quantize(&model, &calib, &rtn_dq, &["--calibration_method", "rtn_dq"]);
    let q_count = Model::load(&rtn)
        .unwrap()
        .graph()
        .node
        .iter()
        .filter(|n| n.op_type() == "QuantizeLinear")
        .count();
    assert_eq!(q_count, 15);
    let (db, _) = logits_error(&rtn_dq, &rtn, &eval);
    assert!(db > 50.0, "rtn vs rtn_dq: {db:.1} dB");
}

#[test]
fn int4_settings_that_cannot_work_are_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let (model, calib, _) = setup(dir.path());
    let out = dir.path().join("x.onnx");
    let refused = |args: &[&str]| {
        let (ok, text) = run_text(
            cli()
                .args(["quantize", "--onnx_path"])
                .arg(&model)
                .arg("--calibration_data_path")
                .arg(&calib)
                .args(args)
                .arg("-o")
                .arg(&out),
        );
        assert!(!ok, "{args:?} was accepted: {text}");
        assert!(!out.exists());
        text
    };
    let text = refused(&["--quantize_mode", "int4", "--calibration_method", "gptq"]);
    assert!(
        text.contains("'gptq' is not an int4 method (awq_lite"),
        "{text}"
    );
    let text = refused(&["--quantize_mode", "int4", "--block_size", "100"]);
    assert!(text.contains("block_size must be a power of two"), "{text}");
    let text = refused(&["--calibration_method", "awq_lite"]);
    assert!(text.contains("add --quantize_mode int4"), "{text}");
    let text = refused(&["--quantize_mode", "int4", "--int4_output", "nbits"]);
    assert!(text.contains("unknown form 'nbits'"), "{text}");

    // A model without a MatMul/Gemm weight.
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[1, 4]);
    b.node("Relu", &["x"], &["y"]).name("relu");
    b.output("y", DataType::Float32, &[1, 4]);
    let plain = dir.path().join("relu.onnx");
    b.build().save(&plain, &Default::default()).unwrap();
    let (ok, text) = run_text(
        cli()
            .args(["quantize", "--quantize_mode", "int4", "--onnx_path"])
            .arg(&plain)
            .arg("-o")
            .arg(&out),
    );
    assert!(!ok && text.contains("nothing to quantize"), "{text}");
    assert_eq!(
        text.trim()
            .lines()
            .filter(|l| l.starts_with("error"))
            .count(),
        1,
        "{text}"
    );
}

/// A one-layer decoder with a KV cache, shaped as ONNX Runtime GenAI exports it: `input_ids`
/// and `position_ids` [batch, sequence] index tables of 50 and 40 rows, `attention_mask`
/// [batch, past + sequence] multiplies the present keys (its length must match them), and
/// `past_key_values.0.key` [batch, 2, past, 16] is concatenated before the new keys.
fn kv_cache_decoder() -> Model {
    let mut b = ModelBuilder::new(17);
    b.input("input_ids", DataType::Int64, &[-1, -1]);
    b.input("attention_mask", DataType::Int64, &[-1, -1]);
    b.input("position_ids", DataType::Int64, &[-1, -1]);
    b.input("past_key_values.0.key", DataType::Float32, &[-1, 2, -1, 16]);
    b.initializer("embed", weight(3, &[50, 32], 1.0));
    b.initializer("positions", weight(4, &[40, 32], 1.0));
    b.initializer("wk", weight(5, &[32, 32], 0.3));
    b.initializer("head", weight(6, &[32, 50], 0.3));
    let ints = |v: &[i64]| {
        TensorArray::Int64(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).unwrap())
    };
    b.initializer("heads", ints(&[0, 0, 2, 16]));
    b.initializer("mask_axes", ints(&[1, 3]));
    b.node("Gather", &["embed", "input_ids"], &["tok"]);
    b.node("Gather", &["positions", "position_ids"], &["pos"]);
    b.node("Add", &["tok", "pos"], &["x"]);
    b.node("MatMul", &["x", "wk"], &["k"]);
    b.node("Reshape", &["k", "heads"], &["k4"]);
    b.node("Transpose", &["k4"], &["kt"])
        .attr_ints("perm", &[0, 2, 1, 3]);
    b.node("Concat", &["past_key_values.0.key", "kt"], &["all_keys"])
        .attr_int("axis", 2);
    b.node("Cast", &["attention_mask"], &["mask_f"])
        .attr_int("to", 1);
    b.node("Unsqueeze", &["mask_f", "mask_axes"], &["mask4"]);
    b.node("Mul", &["all_keys", "mask4"], &["present.0.key"]);
    b.node("MatMul", &["x", "head"], &["logits"]);
    b.output("logits", DataType::Float32, &[-1, -1, 50]);
    b.output("present.0.key", DataType::Float32, &[-1, 2, -1, 16]);
    b.build()
}

/// With no data, a token model calibrates on data it accepts (ids inside both tables, a mask
/// as long as past + sequence, an empty cache): the old uniform integers in [0, 100) and a
/// past of 32 made ONNX Runtime fail on the Gathers and on the mask's broadcast.
#[test]
fn random_data_for_a_kv_cache_decoder_is_valid_token_input() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("kv.onnx");
    kv_cache_decoder()
        .save(&model, &Default::default())
        .unwrap();
    let int8 = dir.path().join("int8.onnx");
    let said = run_ok(
        cli()
            .args(["quantize", "--onnx_path"])
            .arg(&model)
            .arg("-o")
            .arg(&int8),
    );
    assert!(
        said.contains("input_ids [n, 40]: token ids below 50"),
        "{said}"
    );
    assert!(
        said.contains("position_ids [n, 40]: position ids"),
        "{said}"
    );
    assert!(
        said.contains("past_key_values.0.key [n, 2, 0, 16]: empty past"),
        "{said}"
    );
    assert!(
        said.contains("kept in float: 1 tensor(s), tensors calibration saw only empty"),
        "{said}"
    );
    assert!(int8.exists());
    let int4 = dir.path().join("int4.onnx");
    let (ok, said) = run_text(
        cli()
            .args(["quantize", "--quantize_mode", "int4", "--block_size", "16"])
            .args(["--calibration_method", "awq_lite", "--onnx_path"])
            .arg(&model)
            .arg("-o")
            .arg(&int4),
    );
    assert!(ok, "{said}");
    assert!(said.contains("awq_lite: "), "{said}");
}

/// Without data, int4 on a token model keeps AWQ on random token ids (as
/// ModelOpt-Windows does): valid ids reach the embedding rows and so the real outlier
/// channels, and the search still gains over rounding (measured +3.9 dB).
#[test]
fn int4_without_data_runs_awq_on_random_tokens_and_beats_rounding() {
    let dir = tempfile::tempdir().unwrap();
    let (model, _, eval) = setup(dir.path());
    let without_data = |name: &str, args: &[&str]| {
        let out = dir.path().join(name);
        let said = run_ok(
            cli()
                .args(["quantize", "--quantize_mode", "int4", "--onnx_path"])
                .arg(&model)
                .args(args)
                .arg("-o")
                .arg(&out),
        );
        (said, logits_error(&model, &out, &eval).0)
    };
    let (said, awq) = without_data("awq.onnx", &[]);
    assert!(
        said.contains("int4 without calibration data: awq_full on random token data"),
        "{said}"
    );
    assert!(
        said.contains("input_ids [n, 32]: token ids below 1000"),
        "{said}"
    );
    let (_, rtn) = without_data("rtn.onnx", &["--calibration_method", "rtn_dq"]);
    assert!(
        awq >= rtn + 3.0,
        "awq_full on random tokens {awq:.2} dB, rtn {rtn:.2} dB"
    );
}

/// SmoothQuant moves the outlier channels of the norm outputs into the q/k/v and gate/up
/// weights (folded into the RMSNorm's γ): int8 logits get closer to float than with plain
/// per-tensor activation ranges (measured 11.1 → 12.4 dB); int4 refuses it in one line.
#[test]
fn smoothquant_folds_into_the_norms_and_beats_plain_int8() {
    let dir = tempfile::tempdir().unwrap();
    let (model, calib, eval) = setup(dir.path());
    let int8 = |name: &str, args: &[&str]| {
        let out = dir.path().join(name);
        let said = quantize_calibrated(&model, &calib, args, &out);
        (said, logits_error(&model, &out, &eval).0)
    };
    let (_, plain) = int8("plain.onnx", &[]);
    let (said, smooth) = int8("smooth.onnx", &["--smoothquant"]);
    assert!(said.contains("smoothquant: "), "{said}");
    assert!(
        said.contains("folded into the producer's constants"),
        "{said}"
    );
    assert!(
        smooth >= plain + 1.0,
        "smoothquant {smooth:.2} dB, plain {plain:.2} dB"
    );
    let (ok, said) = run_text(
        cli()
            .args([
                "quantize",
                "--quantize_mode",
                "int4",
                "--smoothquant",
                "--onnx_path",
            ])
            .arg(&model)
            .arg("-o")
            .arg(dir.path().join("bad.onnx")),
    );
    assert!(
        !ok && said.contains("smoothquant applies to int8"),
        "{said}"
    );
}

/// Per-layer int4 error: every weight-only MatMul's output against float and its weight,
/// read from both output forms alike (the DQ blocks and MatMulNBits' packed nibbles), with
/// AWQ's row scales fitted out of the weight's error, and every layer's local error.
#[test]
fn per_tensor_comparison_measures_each_int4_layer_and_weight() {
    let dir = tempfile::tempdir().unwrap();
    let (model, calib, eval) = setup(dir.path());
    let dq = dir.path().join("dq.onnx");
    let nbits = dir.path().join("nbits.onnx");
    quantize(&model, &calib, &dq, &[]);
    quantize(&model, &calib, &nbits, &["--int4_output", "matmulnbits"]);
    let dq_path = dq.clone();
    let (dq, nbits) = (
        common::per_tensor_json(&model, &dq, &eval),
        common::per_tensor_json(&model, &nbits, &eval),
    );
    let weights = |t: &serde_json::Value| -> Vec<(String, f64, bool)> {
        t["weights"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| {
                (
                    w["weight"].as_str().unwrap().to_owned(),
                    w["sqnr_db"].as_f64().unwrap(),
                    w["rescaled"].as_bool().unwrap_or(false),
                )
            })
            .collect()
    };
    let (dq_weights, nbits_weights) = (weights(&dq), weights(&nbits));
    assert!(dq_weights.len() >= 6, "{dq_weights:?}");
    assert!(
        dq_weights.iter().any(|w| w.2),
        "AWQ scaled some rows: {dq_weights:?}"
    );
    for (name, db, _) in &dq_weights {
        assert!((12.0..40.0).contains(db), "{name}: {db} dB");
        let other = nbits_weights.iter().find(|w| &w.0 == name);
        assert!(
            other.is_some_and(|w| (w.1 - db).abs() < 0.01),
            "{name}: {db} dB as DQ, {other:?} as MatMulNBits"
        );
    }
    // Plain rounding scales nothing: no fit is taken out.
    let rtn = dir.path().join("rtn.onnx");
    quantize(&model, &calib, &rtn, &["--calibration_method", "rtn_dq"]);
    let rtn_weights = weights(&common::per_tensor_json(&model, &rtn, &eval));
    assert_eq!(rtn_weights.len(), dq_weights.len());
    assert!(rtn_weights.iter().all(|w| !w.2), "{rtn_weights:?}");
    // A model of an older version records which activations AWQ divided but not by how
    // much: the norms are recomputed with their divided constants instead.
    let older = common::per_tensor_json(&model, &common::without_rescale_factors(&dq_path), &eval);
    for tensors in [&dq, &nbits, &older] {
        let layers = tensors["layers"].as_array().unwrap();
        assert_eq!(layers.len(), dq_weights.len(), "{layers:?}");
        for layer in layers {
            let db = layer["sqnr_db"].as_f64().unwrap();
            assert!(db.is_finite() && db > 5.0, "{layer}");
            assert!(layer["weight"].is_string(), "{layer}");
        }
        // Every layer has its local error, those reading an activation AWQ divided (the
        // q/k/v and gate/up projections reading a norm) too: their copies read the float
        // activation divided as the quantized model's is.
        let local: std::collections::HashMap<&str, f64> = tensors["local"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                (
                    l["tensor"].as_str().unwrap(),
                    l["sqnr_db"].as_f64().unwrap(),
                )
            })
            .collect();
        for layer in layers {
            let tensor = layer["tensor"].as_str().unwrap();
            let db = local.get(tensor).copied().unwrap_or(f64::NAN);
            assert!(
                db.is_finite() && db > 5.0,
                "{tensor}: local {db} dB in {local:?}"
            );
        }
        // The first layer's projections have only float upstream: their local error is
        // their cumulative one (the norm recomputed with its divided scale; a factor fitted
        // from the int4 weights was 0.5 dB off, the undivided activation reads about 0 dB).
        for layer in layers
            .iter()
            .filter(|l| l["node"].as_str().unwrap().starts_with("l0_"))
        {
            let (tensor, db) = (
                layer["tensor"].as_str().unwrap(),
                layer["sqnr_db"].as_f64().unwrap(),
            );
            if ["q_proj", "k_proj", "v_proj"]
                .iter()
                .any(|p| tensor.contains(p))
            {
                assert!(
                    (local[tensor] - db).abs() < 0.1,
                    "{tensor}: local {} dB, cumulative {db} dB",
                    local[tensor]
                );
            }
        }
    }
}

/// Int4 blocks run along a weight's rows, the reduced dimension of a MatMul's `[K, N]`. A Gemm
/// with `transB` holds `[N, K]` (blocked as it is, its scales ran across output channels: a
/// Gemm chain read 6 dB). Int4 rewrites a Gemm computing `A·B + C` whose weight only it reads
/// as a MatMul (its weight `[K, N]`) and an Add, so it is blocked like any MatMul and becomes a
/// MatMulNBits too; a Gemm with `alpha` keeps its op, its weight stored `[K, N]`; a weight
/// another node reads too (a tied embedding) keeps its layout and its Gemm stays float.
#[test]
fn int4_quantizes_gemm_layers_as_matmuls_with_k_by_n_weights() {
    use qdq_studio::recipe::{QuantMode, Recipe};
    let values = |seed: u64, shape: &[usize]| {
        let n = shape.iter().product();
        TensorArray::Float32(
            ArrayD::from_shape_vec(IxDyn(shape), common::seeded_values(n, seed, 0.5)).unwrap(),
        )
    };
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[-1, 256]);
    b.initializer("w_gemm", values(1, &[64, 256]));
    b.initializer("b_gemm", values(3, &[64]));
    b.initializer("w_matmul", values(2, &[64, 128]));
    b.initializer("w_scaled", values(6, &[16, 128]));
    b.node("Gemm", &["x", "w_gemm", "b_gemm"], &["h"])
        .name("gemm")
        .attr_int("transB", 1);
    b.node("MatMul", &["h", "w_matmul"], &["m"]).name("matmul");
    b.node("Gemm", &["m", "w_scaled"], &["y"])
        .name("scaled")
        .attr_int("transB", 1)
        .attr_float("alpha", 0.5);
    b.output("y", DataType::Float32, &[-1, 16]);
    let model = b.build();
    let mut recipe = Recipe::default();
    recipe.set_mode(QuantMode::Int4);
    let plan = qdq_studio::quant::explain(&model, &recipe, None).unwrap();
    for weight in ["w_gemm", "w_matmul", "w_scaled"] {
        let how = plan
            .tensor(weight)
            .map(|t| t.describe())
            .unwrap_or_default();
        assert!(how.contains("blocks of"), "{weight}: {how}");
    }

    let dir = tempfile::tempdir().unwrap();
    let (float, calib, eval) = (
        dir.path().join("gemm.onnx"),
        dir.path().join("calib.npz"),
        dir.path().join("eval.npz"),
    );
    model.save(&float, &Default::default()).unwrap();
    for (path, seed) in [(&calib, 4), (&eval, 5)] {
        write_npz(path, &[("x", values(seed, &[16, 256]))]);
    }
    let node_op = |model: &Model, name: &str| {
        let node = model
            .graph()
            .node
            .iter()
            .find(|n| n.name() == name)
            .unwrap();
        let trans_b = node.attribute.iter().find(|a| a.name() == "transB");
        (node.op_type().to_owned(), trans_b.map_or(0, |a| a.i()))
    };
    let mut outputs = Vec::new();
    for (form, gemm_op) in [("dq", "MatMul"), ("matmulnbits", "MatMulNBits")] {
        let quant = dir.path().join(format!("{form}.onnx"));
        quantize(
            &float,
            &calib,
            &quant,
            &["--block_size", "32", "--int4_output", form],
        );
        let saved = Model::load(&quant).unwrap();
        assert_eq!(node_op(&saved, "gemm"), (gemm_op.to_owned(), 0), "{form}");
        assert_eq!(node_op(&saved, "scaled"), ("Gemm".to_owned(), 0), "{form}");
        let read = |name: &str| saved.graph().initializer.iter().any(|t| t.name() == name);
        assert!(
            !read("w_gemm") && !read("w_scaled"),
            "{form}: float weights replaced"
        );
        // Three int4 layers with blocks of 32 along K: about 20 dB on these uniform weights
        // (blocked along the output channels a Gemm read 6 dB).
        let y = compared_output(&float, &quant, &eval, "y");
        let sqnr = y["sqnr_db"].as_f64().unwrap();
        assert!(sqnr > 16.0, "{form}: {sqnr} dB");
        outputs.push(sqnr);
        // The per-tensor comparison reads the stored weights back against the float ones,
        // transposed as the quantized model reads them.
        let tensors = common::per_tensor_json(&float, &quant, &eval);
        for name in ["w_gemm", "w_scaled"] {
            let weights = tensors["weights"].as_array().unwrap();
            let weight = weights.iter().find(|w| w["weight"] == name);
            let db = weight
                .and_then(|w| w["sqnr_db"].as_f64())
                .unwrap_or(f64::NAN);
            assert!(
                (18.0..40.0).contains(&db),
                "{form} {name}: {db} dB in {tensors}"
            );
        }
        // Each layer's output is measured, cumulative and local: the Gemm with a bias too,
        // whose MatMul writes the product and an Add of the bias the Gemm's output.
        let names = |key: &str, field: &str| -> Vec<String> {
            let list = tensors[key]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default();
            list.iter()
                .map(|t| t[field].as_str().unwrap_or_default().to_owned())
                .collect()
        };
        let (layers, local) = (names("layers", "tensor"), names("local", "tensor"));
        for tensor in ["h", "m"] {
            assert!(
                layers.iter().any(|t| t == tensor) && local.iter().any(|t| t == tensor),
                "{form} {tensor}: layers {layers:?}, local {local:?}"
            );
        }
    }
    // Both forms compute the same product.
    assert!((outputs[0] - outputs[1]).abs() < 0.1, "{outputs:?}");
    // The input model keeps its Gemms.
    let original = Model::load(&float).unwrap();
    assert_eq!(node_op(&original, "gemm"), ("Gemm".to_owned(), 1));

    // A transposed weight a Gather reads too stays as it is, and with nothing else for int4
    // the refusal says why.
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[-1, 64]);
    b.input("ids", DataType::Int64, &[-1]);
    b.initializer("tied", values(1, &[32, 64]));
    b.node("Gemm", &["x", "tied"], &["y"])
        .name("gemm")
        .attr_int("transB", 1);
    b.node("Gather", &["tied", "ids"], &["e"]).name("embed");
    b.output("y", DataType::Float32, &[-1, 32]);
    b.output("e", DataType::Float32, &[-1, 64]);
    let err = qdq_studio::quant::quantize(&b.build(), None, &recipe)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("only a weight no other node reads"), "{err}");
}

/// Heads of the GenAI-shaped decoder: query heads, key/value heads and head size.
const GQA: (usize, usize, usize) = (4, 2, 32);

/// A decoder in the form onnxruntime-genai's model builder writes: GroupQueryAttention over a
/// packed QKV projection (its sequence lengths computed from the attention mask), past
/// keys/values declared `[batch_size, num_kv_heads, past_sequence_length, head_size]` with the
/// head count and head size symbolic, SkipSimplifiedLayerNormalization, in `dtype` (float32
/// or float16), saved with external data.
fn genai_decoder(dtype: DataType) -> Model {
    let (heads, kv_heads, head) = GQA;
    let hidden = heads * head;
    let vocab = 64;
    let array = |shape: &[usize], seed: u64| {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|i| noise(seed, i) * 0.2).collect();
        let a = ArrayD::from_shape_vec(IxDyn(shape), v).unwrap();
        match dtype {
            DataType::Float16 => TensorArray::Float16(a.mapv(half::f16::from_f32)),
            _ => TensorArray::Float32(a),
        }
    };
    let mut b = ModelBuilder::new(17);
    b.import("com.microsoft", 1);
    b.input("input_ids", DataType::Int64, &[-1, -1]);
    b.input("attention_mask", DataType::Int64, &[-1, -1]);
    // Every axis symbolic, the head count and head size too (named N0..N3: no name says
    // which is the sequence).
    for kv in ["key", "value"] {
        b.input(&format!("past_key_values.0.{kv}"), dtype, &[-1, -1, -1, -1]);
    }
    b.initializer("embed", array(&[vocab, hidden], 1));
    b.initializer("w_qkv", array(&[hidden, (heads + 2 * kv_heads) * head], 2));
    b.initializer("w_o", array(&[hidden, hidden], 3));
    b.initializer("gamma", array(&[hidden], 4));
    b.initializer("lm_head", array(&[hidden, vocab], 5));
    b.initializer("one", TensorArray::Int64(ArrayD::from_elem(IxDyn(&[]), 1)));
    b.initializer(
        "axis1",
        TensorArray::Int64(ArrayD::from_elem(IxDyn(&[1]), 1)),
    );
    b.node("Gather", &["embed", "input_ids"], &["h"]);
    b.node("MatMul", &["h", "w_qkv"], &["qkv"]);
    b.node("ReduceSum", &["attention_mask", "axis1"], &["lengths"])
        .attr_int("keepdims", 0);
    b.node("Sub", &["lengths", "one"], &["last"]);
    b.node("Cast", &["last"], &["seqlens_k"]).attr_int("to", 6);
    b.node("Shape", &["attention_mask"], &["mask_shape"]);
    b.node("Gather", &["mask_shape", "one"], &["total64"]);
    b.node("Cast", &["total64"], &["total"]).attr_int("to", 6);
    b.node(
        "GroupQueryAttention",
        &[
            "qkv",
            "",
            "",
            "past_key_values.0.key",
            "past_key_values.0.value",
            "seqlens_k",
            "total",
        ],
        &["attn", "present.0.key", "present.0.value"],
    )
    .domain("com.microsoft")
    .attr_int("num_heads", heads as i64)
    .attr_int("kv_num_heads", kv_heads as i64);
    b.node("MatMul", &["attn", "w_o"], &["o"]);
    b.node(
        "SkipSimplifiedLayerNormalization",
        &["o", "h", "gamma"],
        &["n"],
    )
    .domain("com.microsoft")
    .attr_float("epsilon", 1e-5);
    b.node("MatMul", &["n", "lm_head"], &["logits"]);
    b.output("logits", dtype, &[-1, -1, vocab as i64]);
    for kv in ["key", "value"] {
        b.output(&format!("present.0.{kv}"), dtype, &[-1, -1, -1, -1]);
    }
    b.build()
}

/// Onnxruntime-genai's builder models quantize to int4 with no data (random tokens and an
/// empty past whose head count and head size come from GroupQueryAttention), fp32 and fp16,
/// with external data; each output runs in ONNX Runtime on a prompt with an empty past.
#[test]
fn a_genai_builder_decoder_quantizes_to_int4_without_data_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (_, kv_heads, head) = GQA;
    for dtype in [DataType::Float32, DataType::Float16] {
        let name = format!("{dtype:?}").to_lowercase();
        let model = dir.path().join(format!("{name}/model.onnx"));
        std::fs::create_dir_all(model.parent().unwrap()).unwrap();
        let external = qdq_studio::model::SaveOptions {
            external_data: true,
            ..Default::default()
        };
        genai_decoder(dtype).save(&model, &external).unwrap();
        // The folder as the model builder leaves it: its configuration and tokenizer.
        let folder = model.parent().unwrap();
        let config = r#"{"model": {"decoder": {"filename": "model.onnx", "head_size": 32}}}"#;
        std::fs::write(folder.join("genai_config.json"), config).unwrap();
        std::fs::write(folder.join("tokenizer.json"), br#"{"version": "1.0"}"#).unwrap();
        // Into a folder that does not exist yet, the input named by its folder.
        let out = dir.path().join(format!("{name}-int4/model-int4.onnx"));
        let said = run_ok(
            cli()
                .args(["quantize", "--quantize_mode", "int4", "--onnx_path"])
                .arg(folder)
                .arg("-o")
                .arg(&out),
        );
        assert!(said.contains("wrote"), "{said}");
        assert!(
            said.contains("model folder: genai_config.json, tokenizer.json copied beside it"),
            "{said}"
        );
        let copied: serde_json::Value = serde_json::from_slice(
            &std::fs::read(out.with_file_name("genai_config.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(copied["model"]["decoder"]["filename"], "model-int4.onnx");
        assert_eq!(
            std::fs::read(out.with_file_name("tokenizer.json")).unwrap(),
            br#"{"version": "1.0"}"#
        );
        assert_eq!(
            std::fs::read_to_string(folder.join("genai_config.json")).unwrap(),
            config
        );
        let quant = Model::load(&out).unwrap();
        let mut session = common::runtime()
            .session_from_model(
                &quant.to_session_model().unwrap(),
                &[EpSpec::Cpu],
                SessionOptions::default(),
            )
            .unwrap();
        let ids = ndarray::Array2::<i64>::from_shape_fn((1, 5), |(_, j)| j as i64 + 3);
        let mask = ndarray::Array2::<i64>::ones((1, 5));
        let empty = [1, kv_heads, 0, head];
        let past = || match dtype {
            DataType::Float16 => {
                ort::value::Tensor::from_array(ArrayD::<half::f16>::zeros(IxDyn(&empty)))
                    .unwrap()
                    .into_dyn()
            }
            _ => ort::value::Tensor::from_array(ArrayD::<f32>::zeros(IxDyn(&empty)))
                .unwrap()
                .into_dyn(),
        };
        let outputs = session
            .run(ort::inputs![
                "input_ids" => ort::value::Tensor::from_array(ids).unwrap(),
                "attention_mask" => ort::value::Tensor::from_array(mask).unwrap(),
                "past_key_values.0.key" => past(),
                "past_key_values.0.value" => past(),
            ])
            .unwrap();
        let (_, logits) = qdq_studio::runtime::value::float_output(&outputs["logits"]).unwrap();
        assert_eq!(logits.shape(), [1, 5, 64], "{name}");
        assert!(logits.iter().all(|v| v.is_finite()), "{name}");
    }
}
