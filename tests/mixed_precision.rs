//! Mixed precision per node (`node_precision`, `--node_precision`): 16-bit activations for
//! some nodes, 4-bit weights for others, in one int8 QDQ model that ONNX Runtime runs.

use crate::common;

use std::collections::BTreeMap;

use qdq_studio::model::{DataType, Graph, Model};
use qdq_studio::recipe::{NodePrecision, Recipe};

use common::{asset, cli, quantize_calibrated, run_text, stamped_recipe};

/// The element type of each Q/DQ node's zero point in `model`, by the tensor it quantizes
/// (the QuantizeLinear's input, or the DequantizeLinear's constant input).
fn quantized_types(model: &Model) -> BTreeMap<String, DataType> {
    let g = model.graph();
    let inits: BTreeMap<&str, i32> = g
        .initializer
        .iter()
        .map(|t| (t.name(), t.data_type()))
        .collect();
    let mut types = BTreeMap::new();
    for node in &g.node {
        let (Some(x), Some(zp)) = (node.input.first(), node.input.get(2)) else {
            continue;
        };
        let quantizes = match node.op_type() {
            "QuantizeLinear" => true,
            "DequantizeLinear" => inits.contains_key(x.as_str()),
            _ => false,
        };
        if quantizes && let Some(&code) = inits.get(zp.as_str()) {
            types.insert(x.clone(), DataType::from_onnx(code).unwrap());
        }
    }
    types
}

#[test]
fn each_node_gets_its_precision_and_onnx_runtime_runs_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mixed.onnx");
    quantize_calibrated(
        &asset("ppocr_cls.onnx"),
        &asset("calib.npz"),
        &["--node_precision", "Conv@8=w8a16,Conv@10=w4a8"],
        &out,
    );
    let float = Model::load(&asset("ppocr_cls.onnx")).unwrap();
    let graph = Graph::build(&float);
    let quant = Model::load(&out).unwrap();
    let types = quantized_types(&quant);
    // Conv@8's input and output (its batch norm's, folded into it) take 16 bits.
    let conv = |name: &str| graph.nodes().iter().find(|n| n.name == name).unwrap();
    let sixteen: Vec<&String> = types
        .iter()
        .filter(|(_, d)| **d == DataType::Uint16)
        .map(|(t, _)| t)
        .collect();
    assert_eq!(sixteen.len(), 2, "{types:?}");
    assert!(sixteen.contains(&&conv("Conv@8").inputs[0]), "{sixteen:?}");
    let weight = &conv("Conv@10").inputs[1];
    let weight_type = types.get(&format!("{weight}_quantized"));
    assert_eq!(weight_type, Some(&DataType::Int4), "{types:?}");
    // Everything else keeps 8 bits (biases 32).
    let wide = types
        .values()
        .filter(|d| d.bits() != 8 && **d != DataType::Int32)
        .count();
    assert_eq!(wide, 3, "{types:?}");
    // The recipe the model records reproduces the choice.
    let recipe = stamped_recipe(&quant);
    assert_eq!(
        recipe.node_precision,
        BTreeMap::from([
            ("Conv@10".to_owned(), NodePrecision::W4a8),
            ("Conv@8".to_owned(), NodePrecision::W8a16),
        ])
    );
}

/// The bundled classifier's logits before their bias and softmax (the last quantized tensor:
/// the default target keeps the softmax input float): their SQNR to float in the quantized
/// sample `quant`, everything upstream quantized.
fn logits_sqnr(quant: &std::path::Path) -> f64 {
    let report = common::run_json(common::compare_cmd(quant, &asset("eval.npz")).args([
        "--latency_runs",
        "0",
        "--per_tensor",
        "--json",
    ]));
    let activations = report["tensors"]["activations"].as_array().unwrap();
    let logits = activations
        .iter()
        .find(|a| a["tensor"] == "linear_1.tmp_0")
        .unwrap_or_else(|| panic!("no logits in {activations:?}"));
    logits["xmodel_sqnr_db"].as_f64().unwrap()
}

#[test]
fn sixteen_bit_activations_on_every_conv_beat_eight_bits() {
    let dir = tempfile::tempdir().unwrap();
    let float = Model::load(&asset("ppocr_cls.onnx")).unwrap();
    let mut recipe = Recipe::default();
    for node in Graph::build(&float).nodes() {
        if node.op_type == "Conv" {
            recipe
                .node_precision
                .insert(node.name.clone(), NodePrecision::W8a16);
        }
    }
    let recipe_path = dir.path().join("a16.toml");
    recipe.save(&recipe_path).unwrap();
    let (eight, sixteen) = (dir.path().join("w8a8.onnx"), dir.path().join("w8a16.onnx"));
    quantize_calibrated(&asset("ppocr_cls.onnx"), &asset("calib.npz"), &[], &eight);
    let recipe_arg = recipe_path.to_str().unwrap();
    quantize_calibrated(
        &asset("ppocr_cls.onnx"),
        &asset("calib.npz"),
        &["--recipe", recipe_arg],
        &sixteen,
    );
    // Judged on the logits: the classifier's softmax, confident on these images, hides what
    // happens before it (47.1 against 47.3 dB there, measured).
    let (a8, a16) = (logits_sqnr(&eight), logits_sqnr(&sixteen));
    assert!(a16 > a8 + 4.0, "w8a16 {a16:.2} dB against w8a8 {a8:.2} dB");
}

#[test]
fn node_precisions_that_cannot_apply_are_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |args: &[&str], says: &str| {
        let out = dir.path().join("refused.onnx");
        let (ok, text) = run_text(
            cli()
                .args(["quantize", "--onnx_path"])
                .arg(asset("ppocr_cls.onnx"))
                .arg("--calibration_data_path")
                .arg(asset("calib.npz"))
                .args(args)
                .arg("-o")
                .arg(&out),
        );
        assert!(!ok, "{args:?} succeeded: {text}");
        assert!(text.contains(says), "{args:?}: {text}");
        assert!(!out.exists());
    };
    refused(
        &["--node_precision", "Conv@999=w8a16"],
        "no node 'Conv@999'",
    );
    refused(
        &["--node_precision", "Relu@0=w4a8"],
        "is for Conv/ConvTranspose/Gemm/MatMul",
    );
    refused(&["--node_precision", "Conv@8=int3"], "not a precision");
    refused(&["--node_precision", "Conv@8"], "NAME=w8a16");
    refused(
        &[
            "--quantize_mode",
            "int4",
            "--node_precision",
            "Conv@8=w8a16",
        ],
        "int8 recipes",
    );
}
