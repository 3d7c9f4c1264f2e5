//! Local against cumulative error per tensor, on real sessions: a node made bad on purpose
//! is flagged by its own local error, the nodes after it only by the cumulative error they
//! carry.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use qdq_studio::model::{Graph, Model, SaveOptions, TensorArray};

use common::{asset, quantize_calibrated, run_ok};

/// `compare --per_tensor` of the sample against `quant` on its evaluation data, no latency.
fn compare_per_tensor(quant: &Path) -> std::process::Command {
    let mut cmd = common::compare_cmd(quant, &asset("eval.npz"));
    cmd.args(["--latency_runs", "0", "--per_tensor"]);
    cmd
}

/// Local and cumulative SQNR per tensor from `compare --per_tensor --json` of the sample
/// against `quant`.
fn errors(quant: &Path) -> (HashMap<String, f64>, HashMap<String, f64>) {
    let json = run_ok(compare_per_tensor(quant).arg("--json"));
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    let tensors = &report["tensors"];
    assert!(tensors["local_unavailable"].is_null(), "{tensors}");
    let read = |list: &str, key: &str| -> HashMap<String, f64> {
        tensors[list]
            .as_array()
            .unwrap_or_else(|| panic!("no {list} in {tensors}"))
            .iter()
            .map(|e| {
                let db = e[key].as_f64().unwrap_or(f64::INFINITY);
                (e["tensor"].as_str().unwrap().to_owned(), db)
            })
            .collect()
    };
    (
        read("local", "sqnr_db"),
        read("activations", "xmodel_sqnr_db"),
    )
}

/// Writes `quant` with the weight scale of its first Conv (in graph order) multiplied by
/// `factor` to `out`; returns the tensor that Conv writes.
fn with_bad_first_conv(quant: &Path, out: &Path, factor: f32) -> String {
    let mut model = Model::load(quant).unwrap();
    let graph = Graph::build(&model);
    let conv = graph
        .topological_order()
        .iter()
        .map(|&id| graph.node(id))
        .find(|n| n.op_type == "Conv")
        .unwrap();
    let weight_dq = graph
        .tensor(&conv.inputs[1])
        .and_then(|t| t.producer)
        .map(|id| graph.node(id))
        .filter(|n| n.op_type == "DequantizeLinear")
        .expect("the first Conv reads a dequantized weight");
    let scale = weight_dq.inputs[1].clone();
    let written = conv.outputs[0].clone();
    let initializers = &mut model.proto_mut().graph.as_mut().unwrap().initializer;
    let init = initializers.iter_mut().find(|t| t.name() == scale).unwrap();
    let values = TensorArray::from_proto(init, None).unwrap().to_f32();
    *init = TensorArray::Float32(values.mapv(|v| v * factor)).to_proto(&scale);
    model.save(out, &SaveOptions::default()).unwrap();
    written
}

/// The sample quantized into `dir` and a copy whose first Conv is made bad (weight scale
/// ×4): (quantized, bad, the tensor the bad Conv writes).
fn sample_with_bad_first_conv(dir: &Path) -> (PathBuf, PathBuf, String) {
    let quant = dir.join("q.onnx");
    // For this machine's kernels: 8-bit weights saturate on x86 without VNNI.
    let args = common::host_target_args();
    quantize_calibrated(&asset("ppocr_cls.onnx"), &asset("calib.npz"), args, &quant);
    let bad = dir.join("bad.onnx");
    let culprit = with_bad_first_conv(&quant, &bad, 4.0);
    (quant, bad, culprit)
}

#[test]
fn a_node_made_bad_is_flagged_by_its_local_error_and_those_after_it_by_cumulative_error_only() {
    let dir = tempfile::tempdir().unwrap();
    let (quant, bad, culprit) = sample_with_bad_first_conv(dir.path());
    let (good_local, good_cumulative) = errors(&quant);
    let (local, cumulative) = errors(&bad);
    const FLAG_DB: f64 = 20.0;

    // The culprit's own output is four times too large: error three times the signal.
    assert!(good_local[&culprit] > FLAG_DB, "{good_local:?}");
    assert!(local[&culprit] < 0.0, "{culprit}: {local:?}");
    // Every other node's local error is its own, untouched by the culprit upstream.
    assert_eq!(local.len(), good_local.len());
    for (tensor, &db) in local.iter().filter(|(t, _)| **t != culprit) {
        assert!(
            (db - good_local[tensor]).abs() < 0.01,
            "{tensor}: local {db:.3} dB with the bad Conv, {:.3} dB without",
            good_local[tensor]
        );
        assert!(db > FLAG_DB, "{tensor}: {db:.2} dB");
    }
    // The cumulative error flags the nodes downstream, which carry the culprit's error.
    let carriers: Vec<&String> = cumulative
        .iter()
        .filter(|(t, db)| **t != culprit && **db < FLAG_DB && good_cumulative[*t] > FLAG_DB)
        .map(|(t, _)| t)
        .collect();
    assert!(
        carriers.len() >= 10,
        "only {} tensors carry the error: {cumulative:?}",
        carriers.len()
    );
}

#[test]
fn the_cli_and_the_report_tell_local_from_cumulative_error() {
    let dir = tempfile::tempdir().unwrap();
    let (_, bad, culprit) = sample_with_bad_first_conv(dir.path());
    let report = dir.path().join("report.md");
    let text = run_ok(compare_per_tensor(&bad).arg("--report").arg(&report));
    let local_table = text
        .split("worst local errors")
        .nth(1)
        .expect("the CLI prints the worst local errors");
    let first_row = local_table.lines().nth(2).unwrap_or_default();
    assert!(
        first_row.contains(&culprit),
        "the culprit heads the local table: {local_table}"
    );
    let markdown = std::fs::read_to_string(&report).unwrap();
    let made = markdown
        .split("Where the error is made")
        .nth(1)
        .expect("the report has the local table");
    assert!(made.contains(&culprit), "{made}");
    assert!(markdown.contains("| local dB |"), "{markdown}");
}
