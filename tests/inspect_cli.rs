//! `qdq-studio inspect --json` on the real PP-OCR models agrees with the Python `onnx` package
//! (fixture written by `tests/fixtures/make_inspect_fixture.py`).

use crate::common;

use std::collections::BTreeMap;

use serde_json::Value;

use common::{PPOCR_ALL, cli, ppocr};

#[test]
fn inspect_counts_match_python_onnx() {
    let fixture: Value = serde_json::from_str(include_str!("fixtures/inspect_ppocr.json")).unwrap();
    for name in PPOCR_ALL {
        let expected = &fixture[name];
        let got = common::run_json(cli().args(["inspect", "--json"]).arg(ppocr(name)));

        assert_eq!(got["ir_version"], expected["ir_version"], "{name}");
        assert_eq!(got["node_count"], expected["node_count"], "{name}");
        assert_eq!(got["renamed_nodes"], expected["unnamed_nodes"], "{name}");
        assert_eq!(
            got["initializer_count"], expected["initializer_count"],
            "{name}"
        );
        assert_eq!(got["parameters"], expected["parameters"], "{name}");
        let opsets: BTreeMap<String, i64> = got["opsets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                (
                    o["domain"].as_str().unwrap().to_owned(),
                    o["version"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            serde_json::to_value(opsets).unwrap(),
            expected["opsets"],
            "{name}"
        );
        let ops: BTreeMap<String, u64> = got["op_types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                (
                    o["op_type"].as_str().unwrap().to_owned(),
                    o["count"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            serde_json::to_value(ops).unwrap(),
            expected["op_types"],
            "{name}"
        );
        for (kind, key) in [("inputs", "inputs"), ("outputs", "outputs")] {
            let values: Vec<Value> = got[kind]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| serde_json::json!([v["name"], v["dtype"], v["shape"]]))
                .collect();
            assert_eq!(Value::Array(values), expected[key], "{name} {kind}");
        }
    }
}

#[test]
fn inspect_prints_tables_for_humans() {
    let out = cli()
        .arg("inspect")
        .arg(ppocr(common::PPOCR_CLS))
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("nodes      566 (226 quantizable by default, 308 renamed)"),
        "{text}"
    );
    assert!(text.contains("│ Conv") && text.contains("53"), "{text}");
    assert!(text.contains("[-1, 3, ?, ?]"), "{text}");
}

/// `inspect --plan` says what `quantize` then does: the same number of quantized nodes, the
/// softmax float under the default target, and its output on the fixed [0, 1] range without
/// automatic precision.
#[test]
fn inspect_plan_tells_what_quantize_does() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::asset("ppocr_cls.onnx");
    let plan = common::run_json(cli().args(["inspect", "--plan", "--json"]).arg(&model));
    let planned = plan["nodes"]
        .as_object()
        .unwrap()
        .values()
        .filter(|d| d["decision"] == "quantized")
        .count();
    // The default target keeps the softmax input float (automatic precision), and the
    // Softmax, which then fuses nothing, runs float: its output is not quantized.
    assert!(
        plan["tensors"]["linear_1.tmp_1"].is_null(),
        "{}",
        plan["tensors"]
    );
    assert!(
        plan["tensors"]["softmax_0.tmp_0"].is_null(),
        "{}",
        plan["tensors"]
    );
    // Without automatic precision the Softmax output takes its fixed [0, 1] range.
    let recipe = dir.path().join("exact.toml");
    std::fs::write(&recipe, "target = \"cpu\"\nauto_precision = false\n").unwrap();
    let exact = common::run_json(
        cli()
            .args(["inspect", "--plan", "--json", "--recipe"])
            .arg(&recipe)
            .arg(&model),
    );
    assert!(
        exact["tensors"]["softmax_0.tmp_0"]
            .as_str()
            .is_some_and(|t| t.contains("Softmax range [0, 1]")),
        "{}",
        exact["tensors"]
    );
    let out = cli()
        .args(["quantize", "--onnx_path"])
        .arg(&model)
        .arg("--calibration_data_path")
        .arg(common::asset("calib.npz"))
        .arg("-o")
        .arg(dir.path().join("q.onnx"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let quantized: usize = stdout
        .lines()
        .find_map(|l| l.strip_prefix("quantized "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(planned, quantized);
}
