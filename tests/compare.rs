//! Float against quantized comparison on real sessions.

mod common;

use std::path::{Path, PathBuf};

use qdq_studio::calib::data::{DataSpec, model_inputs};
use qdq_studio::eval::{EvalError, check_comparable, compare_outputs, measure_latency};
use qdq_studio::jobs::JobContext;
use qdq_studio::model::{DataType, Graph, Model, ModelBuilder};
use qdq_studio::runtime::EpSpec;

use common::{asset, cli, runtime};

/// The sample quantized by the CLI (MinMax, per-channel, calibration set).
fn quantized_sample(dir: &Path) -> PathBuf {
    let out = dir.join("q.onnx");
    let status = cli()
        .args(["quantize", "--onnx_path"])
        .arg(asset("ppocr_cls.onnx"))
        .arg("--calibration_data_path")
        .arg(asset("calib.npz"))
        .args(["--batch_size", "8", "-o"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    out
}

#[test]
fn the_quantized_sample_agrees_with_the_float_model() {
    let dir = tempfile::tempdir().unwrap();
    let quant = Model::load(&quantized_sample(dir.path())).unwrap();
    let float = Model::load(&asset("ppocr_cls.onnx")).unwrap();
    let inputs = model_inputs(&Graph::build(&float));
    let mut source = DataSpec::Npz {
        path: asset("eval.npz"),
    }
    .open(&inputs)
    .unwrap();
    let metrics = compare_outputs(
        &float,
        &quant,
        source.as_mut(),
        &runtime(),
        &[EpSpec::Cpu],
        4,
        &JobContext::silent(),
    )
    .unwrap();
    assert_eq!(metrics.len(), 1);
    let m = &metrics[0];
    assert!(m.sqnr_db > 30.0 && m.cosine > 0.999, "{m:?}");
    assert_eq!(m.top1_agreement, Some(1.0));
    assert_eq!(m.top5_agreement, None, "two classes: no top-5");
    assert_eq!(m.elements, 32);
    let latency =
        measure_latency(&quant, source.as_mut(), &runtime(), &[EpSpec::Cpu], 4, 1, 5).unwrap();
    assert!(latency.median_ms > 0.0 && latency.p90_ms >= latency.median_ms && latency.runs == 5);
}

#[test]
fn a_model_against_itself_has_no_error_and_non_qdq_models_are_refused() {
    let float = Model::load(&asset("ppocr_cls.onnx")).unwrap();
    let err = check_comparable(&float, &float, "float.onnx").unwrap_err();
    assert!(matches!(err, EvalError::NotQuantized(_)), "{err}");

    let mut b = ModelBuilder::new(17);
    b.input("other", DataType::Float32, &[1, 2]);
    b.node("Relu", &["other"], &["y"]);
    b.output("y", DataType::Float32, &[1, 2]);
    let err = check_comparable(&float, &b.build(), "other.onnx").unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("inputs differ") && text.contains("outputs differ"),
        "{text}"
    );
}

#[test]
fn the_cli_prints_the_table_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let quant = quantized_sample(dir.path());
    let out = cli()
        .args(["compare", "--float"])
        .arg(asset("ppocr_cls.onnx"))
        .arg("--quant")
        .arg(&quant)
        .arg("--data")
        .arg(asset("eval.npz"))
        .args(["--batch_size", "8", "--latency_runs", "3", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(value["outputs"][0]["sqnr_db"].as_f64().unwrap() > 30.0);
    assert!(value["latency"]["quantized"]["median_ms"].as_f64().unwrap() > 0.0);
    // Comparing against a non-QDQ model is one line and a failure.
    let out = cli()
        .args(["compare", "--float"])
        .arg(asset("ppocr_cls.onnx"))
        .arg("--quant")
        .arg(asset("ppocr_cls.onnx"))
        .arg("--data")
        .arg(asset("eval.npz"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a QDQ model"));
}

#[test]
fn the_report_shows_charts_of_the_worst_tensors_in_html_and_markdown() {
    let dir = tempfile::tempdir().unwrap();
    let quant = quantized_sample(dir.path());
    let compare = |extra: &[&str]| {
        cli()
            .args(["compare", "--float"])
            .arg(asset("ppocr_cls.onnx"))
            .arg("--quant")
            .arg(&quant)
            .arg("--data")
            .arg(asset("eval.npz"))
            .args(["--batch_size", "8", "--latency_runs", "2"])
            .args(extra)
            .output()
            .unwrap()
    };
    let html = dir.path().join("report.html");
    let out = compare(&["--json", "--report", html.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let activations = value["tensors"]["activations"].as_array().unwrap();
    // Every activation of qdq-studio's model has a constant per-tensor scale: a range, and an
    // exact clipped share.
    assert!(activations.iter().all(|a| a["range"].is_array()));
    assert!(activations.iter().all(|a| {
        let c = a["clipped"].as_f64().unwrap();
        (0.0..=1.0).contains(&c)
    }));
    let worst = activations
        .iter()
        .min_by(|a, b| {
            a["xmodel_sqnr_db"]
                .as_f64()
                .unwrap()
                .total_cmp(&b["xmodel_sqnr_db"].as_f64().unwrap())
        })
        .unwrap()["tensor"]
        .as_str()
        .unwrap()
        .to_owned();
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    // One SQNR chart, eight histograms, one weight chart; nothing fetched from elsewhere.
    assert_eq!(page.matches("<svg").count(), 10, "charts inline");
    assert!(!page.contains("src=\"http") && !page.contains("href=\"http"));
    assert!(page.contains("save_infer_model/scale_0.tmp_1"));
    assert!(
        page.contains(&format!("worst: {worst}")),
        "the worst tensor is named on the chart"
    );
    assert!(page.contains("Latency") && page.contains("speed-up"));

    let md = dir.path().join("report.md");
    let out = compare(&["--report", md.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&md).unwrap();
    let charts: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("![").and_then(|l| l.split("](").nth(1)))
        .map(|l| l.trim_end_matches(')'))
        .collect();
    assert_eq!(charts.len(), 10, "{text}");
    for chart in charts {
        let svg = std::fs::read_to_string(dir.path().join(chart)).unwrap();
        assert!(svg.starts_with("<svg"), "{chart}");
    }
    assert!(text.contains("| worst activations |"));

    // A report name without a known extension is refused before any work, in one line.
    let out = compare(&["--report", dir.path().join("report.pdf").to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("name it .html or .md") && err.lines().count() == 1,
        "{err}"
    );
}

#[test]
fn per_tensor_errors_match_onnxruntime_qdq_loss_debug() {
    let fixture: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/ort_loss_debug_sample.json")).unwrap();
    let float = Model::load(&asset("ppocr_cls.onnx")).unwrap();
    let (mut float, _) =
        qdq_studio::quant::preprocess::preprocess(&float, &Default::default()).unwrap();
    qdq_studio::quant::name_nodes(&mut float);
    let quant = Model::load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ort_qdq_sample_pt.onnx"),
    )
    .unwrap();
    let inputs = model_inputs(&Graph::build(&float));
    let mut source = DataSpec::Npz {
        path: asset("eval.npz"),
    }
    .open(&inputs)
    .unwrap();
    let errors = qdq_studio::eval::tensors::tensor_errors(
        &float,
        &quant,
        source.as_mut(),
        &runtime(),
        &[EpSpec::Cpu],
        4,
        &JobContext::silent(),
    )
    .unwrap();
    assert!(errors.unmatched.is_empty(), "{:?}", errors.unmatched);
    let expected = fixture["activations"].as_object().unwrap();
    let mut compared = 0;
    for a in &errors.activations {
        let Some(want) = expected.get(&a.tensor) else {
            continue;
        };
        compared += 1;
        let (qdq, xmodel) = (
            want["qdq_err"].as_f64().unwrap(),
            want["xmodel_err"].as_f64().unwrap(),
        );
        assert!(
            (a.qdq_sqnr_db - qdq).abs() < 0.1,
            "{}: qdq {} vs {qdq}",
            a.tensor,
            a.qdq_sqnr_db
        );
        assert!(
            (a.xmodel_sqnr_db - xmodel).abs() < 0.1,
            "{}: xmodel {} vs {xmodel}",
            a.tensor,
            a.xmodel_sqnr_db
        );
    }
    assert!(
        compared * 100 >= expected.len() * 95,
        "only {compared} of {} activations compared",
        expected.len()
    );
    let weights = fixture["weights"].as_object().unwrap();
    let unsigned: Vec<String> = quant
        .graph()
        .initializer
        .iter()
        .filter(|t| t.data_type() == DataType::Uint8.to_onnx())
        .map(|t| t.name().trim_end_matches("_quantized").to_owned())
        .collect();
    let mut compared = 0;
    for w in &errors.weights {
        let Some(want) = weights.get(&w.weight).and_then(|v| v.as_f64()) else {
            continue;
        };
        compared += 1;
        if unsigned.contains(&w.weight) {
            // onnxruntime's create_weight_matching subtracts the zero point in uint8 and wraps
            // around (a defect we do not copy): ours must be at least as good.
            assert!(
                w.sqnr_db >= want - 0.1,
                "{}: {} vs {want}",
                w.weight,
                w.sqnr_db
            );
        } else {
            assert!(
                (w.sqnr_db - want).abs() < 0.1,
                "{}: {} vs {want}",
                w.weight,
                w.sqnr_db
            );
        }
    }
    assert!(
        compared * 100 >= weights.len() * 95,
        "only {compared} of {} weights compared",
        weights.len()
    );
}

/// x → Add(c) → a → Mul(s) → y → MatMul(w) → out, where s scales channel 0 by 1000 and w
/// ignores channel 0: quantizing y per tensor crushes the channels the output depends on, so
/// the Mul is the harmful node (the MatMul is left out of the recipe).
fn outlier_model() -> Model {
    use ndarray::{ArrayD, IxDyn};
    use qdq_studio::model::TensorArray;
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[-1, 16]);
    b.initializer(
        "c",
        TensorArray::Float32(ArrayD::from_elem(IxDyn(&[16]), 0.1)),
    );
    let mut s = vec![1.0f32; 16];
    s[0] = 1000.0;
    b.initializer(
        "s",
        TensorArray::Float32(ArrayD::from_shape_vec(IxDyn(&[16]), s).unwrap()),
    );
    b.node("Add", &["x", "c"], &["a"]).name("benign_add");
    b.node("Mul", &["a", "s"], &["y"]).name("harmful_mul");
    let w: Vec<f32> = (0..64)
        .map(|i| {
            if i < 4 {
                0.0
            } else {
                ((i % 7) as f32 - 3.0) / 3.0
            }
        })
        .collect();
    b.initializer(
        "w",
        TensorArray::Float32(ArrayD::from_shape_vec(IxDyn(&[16, 4]), w).unwrap()),
    );
    b.node("MatMul", &["y", "w"], &["out"]).name("head");
    b.output("out", DataType::Float32, &[-1, 4]);
    b.build()
}

#[test]
fn the_sensitivity_scan_finds_the_harmful_node_and_auto_exclude_fixes_it() {
    use qdq_studio::calib::{CalibrationConfig, calibrate};
    use qdq_studio::eval::sensitivity::{Evaluator, auto_exclude, scan};
    use qdq_studio::recipe::Recipe;

    let model = outlier_model();
    let inputs = model_inputs(&Graph::build(&model));
    let random = DataSpec::Random {
        samples: 32,
        shapes: Default::default(),
        seed: 5,
    };
    let mut calib = random.open(&inputs).unwrap();
    let stats = calibrate(
        &model,
        calib.as_mut(),
        &runtime(),
        &CalibrationConfig::default(),
        &JobContext::silent(),
    )
    .unwrap();
    let mut eval_source = DataSpec::Random {
        samples: 16,
        shapes: Default::default(),
        seed: 6,
    }
    .open(&inputs)
    .unwrap();
    let rt = runtime();
    let mut evaluator = Evaluator {
        float: &model,
        stats: &stats,
        source: eval_source.as_mut(),
        runtime: &rt,
        eps: &[EpSpec::Cpu],
        batch_size: 8,
    };
    let recipe = Recipe {
        op_types_to_quantize: vec!["Add".into(), "Mul".into()],
        ..Recipe::default()
    };
    let result = scan(&mut evaluator, &recipe, &JobContext::silent()).unwrap();
    assert_eq!(result.nodes.len(), 2);
    assert_eq!(result.nodes[0].node, "harmful_mul", "{result:?}");
    assert!(
        result.nodes[0].sqnr_without_db > result.baseline_db + 10.0,
        "{result:?}"
    );
    assert!(
        result.nodes[1].sqnr_only_db > result.nodes[0].sqnr_only_db,
        "{result:?}"
    );

    let target = result.baseline_db + 10.0;
    let fixed = auto_exclude(
        &mut evaluator,
        &recipe,
        &result,
        target,
        5,
        &JobContext::silent(),
    )
    .unwrap();
    assert!(fixed.reached, "{fixed:?}");
    assert_eq!(fixed.excluded, ["harmful_mul"]);
    assert!(
        fixed
            .recipe
            .nodes_to_exclude
            .iter()
            .any(|p| p.starts_with("harmful_mul"))
    );
    // The recipe it wrote reproduces the SQNR it reported.
    assert!((evaluator.sqnr(&fixed.recipe).unwrap() - fixed.sqnr_db).abs() < 1e-9);
}
