//! Transformers quantize well by default: a trained sentence transformer (paraphrase-MiniLM-L3-v2
//! from its pinned PyPI wheel) keeps its attention mask and the streams feeding its
//! LayerNorms in float, and its sentence embedding stays close to the float model's in ONNX
//! Runtime; onnxruntime's exact placement (`--no_auto_precision`) does not.

mod common;

use std::path::Path;

use ndarray::{ArrayD, IxDyn};
use qdq_studio::model::TensorArray;

use common::{compared_output, minilm, quantize_calibrated, write_npz};

/// Tokens per sentence (padded).
const SEQUENCE: usize = 32;
/// BERT's [CLS] and [SEP] ids in the uncased WordPiece vocabulary.
const CLS: i64 = 101;
const SEP: i64 = 102;
/// Ids of ordinary whole words in that vocabulary (its frequent-word block).
const WORDS: std::ops::Range<i64> = 1996..8000;

/// `count` sentences of 6 to 29 word ids between [CLS] and [SEP], padded with 0 and masked,
/// from a fixed seed: `input_ids` and `attention_mask`, each [count, 32].
fn sentences(path: &Path, count: usize, seed: u64) {
    let mut state = seed;
    let mut next = |below: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % below
    };
    let mut ids = vec![0i64; count * SEQUENCE];
    let mut mask = vec![0i64; count * SEQUENCE];
    for s in 0..count {
        let words = 6 + next(24) as usize;
        let row = &mut ids[s * SEQUENCE..(s + 1) * SEQUENCE];
        row[0] = CLS;
        for id in &mut row[1..=words] {
            *id = WORDS.start + next((WORDS.end - WORDS.start) as u64) as i64;
        }
        row[words + 1] = SEP;
        mask[s * SEQUENCE..s * SEQUENCE + words + 2].fill(1);
    }
    let array = |v: Vec<i64>| {
        TensorArray::Int64(ArrayD::from_shape_vec(IxDyn(&[count, SEQUENCE]), v).unwrap())
    };
    write_npz(
        path,
        &[("input_ids", array(ids)), ("attention_mask", array(mask))],
    );
}

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

#[test]
fn minilm_default_int8_keeps_its_mask_and_normalized_streams_in_float() {
    let dir = tempfile::tempdir().unwrap();
    let (said, cosine) = quantize_and_compare(dir.path(), "default", &[]);
    assert!(
        said.contains("kept in float: 5 tensor(s), attention masks"),
        "{said}"
    );
    assert!(
        said.contains("tensor(s), streams feeding a LayerNorm/RMSNorm"),
        "{said}"
    );
    // Transformer weights get 7 bits: ONNX Runtime's u8×s8 kernels saturate on x86 CPUs
    // without VNNI (0.966 there with 8 bits; 0.991 by the Q/DQ model's own arithmetic).
    assert!(said.contains("7-bit weights: 18 weight(s)"), "{said}");
    assert!(cosine >= 0.98, "default int8 cosine {cosine}");
    let (said, eight) = quantize_and_compare(dir.path(), "eight", &["--no_saturation_guard"]);
    assert!(!said.contains("7-bit weights"), "{said}");
    assert!(eight >= 0.95, "8-bit weights: cosine {eight}");
    let (said, exact) = quantize_and_compare(dir.path(), "ort", &["--no_auto_precision"]);
    assert!(!said.contains("kept in float"), "{said}");
    assert!(
        exact < 0.9 && cosine > exact + 0.05,
        "onnxruntime's placement {exact} against the default {cosine}"
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
