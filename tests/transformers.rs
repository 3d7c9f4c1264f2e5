//! Transformers quantize well by default: a trained sentence transformer (paraphrase-MiniLM-L3-v2
//! from its pinned PyPI wheel) keeps its attention mask and the streams feeding its
//! LayerNorms in float, and its sentence embedding stays close to the float model's in ONNX
//! Runtime; onnxruntime's exact placement (`--no_auto_precision`) does not.

use crate::common;

use std::path::Path;

use common::{compared_output, minilm, quantize_calibrated, sentences};

/// Quantizes MiniLM with `args`, compares it with the float model on held-out sentences, and
/// returns `quantize`'s output and the sentence embedding's (output `461`) cosine to float.
fn quantize_and_compare(dir: &Path, name: &str, args: &[&str]) -> (String, f64) {
    let model = minilm();
    let calib = dir.join("calib.npz");
    let eval = dir.join("eval.npz");
    if !calib.exists() {
        sentences(&calib, 32, 1);
        sentences(&eval, 16, 2);
    }
    let out = dir.join(format!("{name}.onnx"));
    let said = quantize_calibrated(&model, &calib, args, &out);
    let embedding = compared_output(&model, &out, &eval, "461");
    // A sentence embedding: nearest-neighbour agreement over the 16 sentences, no class
    // columns.
    assert_eq!(embedding["kind"], "embedding");
    assert!(embedding["top1_agreement"].is_null(), "{embedding}");
    assert!(embedding["neighbour_agreement"].is_f64(), "{embedding}");
    let cosine = embedding["cosine"]
        .as_f64()
        .expect("the sentence embedding is compared");
    (said, cosine)
}

/// onnxruntime's default op types that MiniLM has: its placement, selected explicitly (a
/// transformer under a target otherwise quantizes only its MatMul inputs).
const ORT_TYPES: &str = "MatMul,Add,Mul,Softmax,LayerNormalization,Concat,Reshape,Transpose,Clip";

#[test]
fn minilm_default_int8_keeps_its_mask_and_normalized_streams_in_float() {
    let dir = tempfile::tempdir().unwrap();
    let (said, cosine) = quantize_and_compare(dir.path(), "default", &[]);
    // A transformer under its target: the MatMul inputs quantized, the elementwise maths,
    // norms and softmax float, so that neither the masks nor the residual stream need
    // keeping.
    assert!(
        said.contains("transformer: 55 node(s) run float (Add 32, Clip 1, Concat 1, Div 3, LayerNormalization 7, Mul 8, Softmax 3)"),
        "{said}"
    );
    assert!(!said.contains("kept in float"), "{said}");
    // The default target is `cpu` (the calibration EP's): 8-bit weights, for the kernels of
    // x86 with VNNI or AMX, and ARM, which do not saturate (0.994 by the Q/DQ model's own
    // arithmetic; 0.966 where u8×s8 pairs saturate, x86 without VNNI).
    assert!(said.contains("target: cpu - "), "{said}");
    assert!(!said.contains("7-bit weights"), "{said}");
    let floor = if common::saturation_free_cpu() {
        0.98
    } else {
        0.95
    };
    assert!(cosine >= floor, "default int8 cosine {cosine}");
    // `cpu-avx2`: per-channel weights get 7 bits, and no CPU's kernels saturate on them.
    let (said, guarded) = quantize_and_compare(dir.path(), "avx2", &["--target", "cpu-avx2"]);
    assert!(said.contains("7-bit weights: 18 weight(s)"), "{said}");
    assert!(guarded >= 0.98, "7-bit weights: cosine {guarded}");
    // onnxruntime's op types: automatic precision keeps the masks and the streams float.
    let ort_types = ["--op_types_to_quantize", ORT_TYPES];
    let (said, kept) = quantize_and_compare(dir.path(), "kept", &ort_types);
    assert!(
        said.contains("kept in float: 5 tensor(s), attention masks"),
        "{said}"
    );
    assert!(
        said.contains("tensor(s), streams feeding a LayerNorm/RMSNorm"),
        "{said}"
    );
    assert!(!said.contains("transformer: "), "{said}");
    assert!(kept >= floor - 0.02, "onnxruntime's op types, kept: {kept}");
    // ... and onnxruntime's exact placement loses the sentence.
    let exact_args = [ort_types[0], ort_types[1], "--no_auto_precision"];
    let (said, exact) = quantize_and_compare(dir.path(), "ort", &exact_args);
    assert!(!said.contains("kept in float"), "{said}");
    assert!(
        exact < 0.9 && cosine > exact + 0.05 && kept > exact + 0.05,
        "onnxruntime's placement {exact} against the default {cosine} and kept {kept}"
    );
}

#[test]
fn minilm_16_bit_activations_no_longer_turn_the_mask_into_nan() {
    let dir = tempfile::tempdir().unwrap();
    // Dequantizing the mask constant (float32's lowest) overflowed to −Inf, and 0 × −Inf made
    // every attention row NaN.
    let (_, cosine) = quantize_and_compare(dir.path(), "a16", &["--activation_type", "uint16"]);
    assert!(cosine >= 0.99, "16-bit activations: cosine {cosine}");
}

#[test]
fn minilm_int4_weights_with_gptq_beat_round_to_nearest() {
    let dir = tempfile::tempdir().unwrap();
    let int4 = ["--quantize_mode", "int4", "--calibration_method", "rtn_dq"];
    let (_, nearest) = quantize_and_compare(dir.path(), "rtn", &int4);
    let (said, gptq) = quantize_and_compare(dir.path(), "gptq", &[&int4[..], &["--gptq"]].concat());
    assert!(said.contains("gptq: 18 layer(s) rounded"), "{said}");
    eprintln!("int4 cosine: nearest {nearest:.5}, gptq {gptq:.5}");
    // GPTQ must close a real part of the gap to float, not just move the figure.
    assert!(
        1.0 - gptq < 0.8 * (1.0 - nearest),
        "int4 cosine: gptq {gptq} against nearest {nearest}"
    );
}

#[test]
fn minilm_per_tensor_weights_keep_their_resolution_with_mse_ranges() {
    // The first feed-forward output projection holds one weight of 7.5 among values of 0.03:
    // per tensor, its extremes give a step that rounds nearly every other weight to zero
    // (with its outlier rows quantized too, as here).
    let dir = tempfile::tempdir().unwrap();
    let whole = "--no_outlier_rows";
    let (_, extremes) = quantize_and_compare(dir.path(), "minmax", &["--per_tensor", whole]);
    let (said, mse) = quantize_and_compare(
        dir.path(),
        "mse",
        &["--per_tensor", "--weight_range", "mse", whole],
    );
    eprintln!("per-tensor weights, cosine: extremes {extremes:.5}, mse ranges {mse:.5}");
    // Per-tensor weights keep 8 bits: the saturation guard's 7 bits are for per-channel ones
    // (measured here: cosine 0.963 with extremes and 0.988 with MSE ranges at 8 bits, 0.898
    // and 0.985 at 7).
    assert!(!said.contains("7-bit weights"), "{said}");
    assert!(
        mse >= 0.97 && 1.0 - mse < 0.5 * (1.0 - extremes),
        "per-tensor cosine: mse ranges {mse} against extremes {extremes}"
    );
    // Bias correction and GPTQ on top correct the rounding and leave the clipping alone
    // (correcting the clipped outlier's effect on average took the cosine to 0.93).
    let (_, all) = quantize_and_compare(
        dir.path(),
        "mse_bc_gptq",
        &[
            "--per_tensor",
            "--weight_range",
            "mse",
            "--bias_correction",
            "--gptq",
            whole,
        ],
    );
    eprintln!("per-tensor, mse ranges + bias correction + gptq: cosine {all:.5}");
    assert!(
        all >= mse - 0.002,
        "with bias correction and gptq {all} against {mse}"
    );
}

#[test]
fn minilm_per_tensor_weights_compute_their_outlier_rows_in_float() {
    // The same outliers, kept exact on a float path beside the quantized MatMul: every other
    // weight gets a fine step and the extremes-based range needs no clipping.
    let dir = tempfile::tempdir().unwrap();
    let (said_whole, whole) =
        quantize_and_compare(dir.path(), "whole", &["--per_tensor", "--no_outlier_rows"]);
    let (said, split) = quantize_and_compare(dir.path(), "split", &["--per_tensor"]);
    // The float path's own tensors are float by design, not kept by automatic precision.
    let streams = |said: &str| {
        said.lines()
            .find(|l| l.contains("streams feeding a LayerNorm"))
            .map(|l| l.split(',').next().unwrap_or_default().to_owned())
    };
    assert_eq!(streams(&said), streams(&said_whole), "{said}");
    eprintln!("per-tensor weights, cosine: outlier rows quantized {whole:.5}, in float {split:.5}");
    assert!(
        said.contains("4 outlier row(s) of 2 weight(s) computed in float"),
        "{said}"
    );
    assert!(
        split >= 0.985 && 1.0 - split < 0.5 * (1.0 - whole),
        "per-tensor cosine: outlier rows in float {split} against quantized {whole}"
    );
    // `inspect --plan` tells it before quantizing.
    let plan = common::run_ok(common::cli().args(["inspect", "--plan"]).arg(minilm()));
    assert!(
        plan.contains("outlier rows in float: 4 row(s) of 2 weight(s)"),
        "{plan}"
    );
    // onnxruntime's placement quantizes them.
    let exact = [
        "--per_tensor",
        "--no_auto_precision",
        "--op_types_to_quantize",
        ORT_TYPES,
    ];
    let (said, _) = quantize_and_compare(dir.path(), "ort", &exact);
    assert!(!said.contains("outlier row"), "{said}");
}

/// A decoder LM (rotary embeddings computed in the graph, an additive causal mask): under a
/// target, the positions, angles, Cos/Sin tables and the mask stay float (they come from the
/// sequence's shape alone), the softmax input stays float, and only the MatMuls' inputs are
/// quantized; the logits then stay close to float. A recipe written
/// before targets (no `target`) keeps onnxruntime's placement, whose mask-swamped softmax
/// input loses the scores.
#[test]
fn decoder_default_int8_keeps_positions_mask_and_softmax_input_in_float() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("decoder.onnx");
    common::decoder_model()
        .save(&model, &Default::default())
        .unwrap();
    let (calib, eval) = (dir.path().join("calib.npz"), dir.path().join("eval.npz"));
    common::token_ids(&calib, 16, 1);
    common::token_ids(&eval, 8, 2);
    let out = dir.path().join("default.onnx");
    let recipe = dir.path().join("recipe.toml");
    let recipe_arg = recipe.to_str().unwrap();
    // The default target, or this machine's when its kernels saturate on 8-bit weights.
    let args: Vec<&str> = ["--save-recipe", recipe_arg]
        .into_iter()
        .chain(common::host_target_args().iter().copied())
        .collect();
    let said = quantize_calibrated(&model, &calib, &args, &out);
    let target = common::host_target();
    assert!(said.contains(&format!("target: {target} - ")), "{said}");
    // Elementwise maths, norms and softmax run float; the MatMuls' inputs are quantized.
    assert!(
        said.contains(
            "transformer: 26 node(s) run float (Add 8, Concat 3, Mul 13, Sigmoid 1, Softmax 1)"
        ),
        "{said}"
    );
    let quantized = said
        .lines()
        .find(|l| l.starts_with("quantized "))
        .unwrap_or_else(|| panic!("{said}"));
    // The MatMuls' inputs alone.
    assert!(quantized.ends_with("node(s): MatMul 10"), "{quantized}");
    let ours = compared_output(&model, &out, &eval, "logits")["sqnr_db"]
        .as_f64()
        .unwrap();
    // The same recipe without its target: onnxruntime's placement, mask and angles quantized.
    let text = std::fs::read_to_string(&recipe).unwrap();
    let legacy_text: String = text
        .lines()
        .filter(|l| !l.starts_with("target ="))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(legacy_text, text, "the saved recipe names its target");
    let legacy_recipe = dir.path().join("legacy.toml");
    std::fs::write(&legacy_recipe, legacy_text).unwrap();
    let legacy = dir.path().join("legacy.onnx");
    let said = quantize_calibrated(
        &model,
        &calib,
        &["--recipe", legacy_recipe.to_str().unwrap()],
        &legacy,
    );
    assert!(!said.contains("transformer: "), "{said}");
    let theirs = compared_output(&model, &legacy, &eval, "logits")["sqnr_db"]
        .as_f64()
        .unwrap();
    assert!(ours >= 25.0, "decoder logits SQNR {ours:.2} dB");
    assert!(
        ours >= theirs + 10.0,
        "target placement {ours:.2} dB against onnxruntime's {theirs:.2} dB"
    );
}
