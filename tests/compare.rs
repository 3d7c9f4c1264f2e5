//! Float against quantized comparison on real sessions.

use crate::common;

use std::path::{Path, PathBuf};

use qdq_studio::calib::data::{BatchSource, DataSpec, model_inputs};
use qdq_studio::eval::compare::latency::kernel_costs::{segment_costs, slower_in_int8};
use qdq_studio::eval::compare::latency::kernels::KernelTime;
use qdq_studio::eval::compare::latency::{BLOCKS, measure_in_turn, profile_kernels};
use qdq_studio::eval::compare::{EvalError, OutputMetrics, check_comparable, compare_outputs};
use qdq_studio::jobs::JobContext;
use qdq_studio::model::{DataType, Graph, Model, ModelBuilder};
use qdq_studio::runtime::EpSpec;

use common::{asset, cli, compare_cmd, runtime};

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

/// The sample's evaluation data, opened for `model`'s inputs.
fn eval_source(model: &Model) -> Box<dyn BatchSource> {
    DataSpec::Npz {
        path: asset("eval.npz"),
    }
    .open(&model_inputs(&Graph::build(model)))
    .unwrap()
}

/// Output metrics of `quant` against `float` on the CPU, in batches of 4.
fn metrics_on_cpu(
    float: &Model,
    quant: &Model,
    source: &mut dyn BatchSource,
) -> Vec<OutputMetrics> {
    let runtime = runtime();
    compare_outputs(
        float,
        quant,
        source,
        &runtime,
        &[EpSpec::Cpu],
        4,
        &Default::default(),
        &JobContext::silent(),
    )
    .unwrap()
}

#[test]
fn the_quantized_sample_agrees_with_the_float_model() {
    let dir = tempfile::tempdir().unwrap();
    let quant = Model::load(&quantized_sample(dir.path())).unwrap();
    let float = Model::load(&asset("ppocr_cls.onnx")).unwrap();
    let mut source = eval_source(&float);
    let metrics = metrics_on_cpu(&float, &quant, source.as_mut());
    assert_eq!(metrics.len(), 1);
    let m = &metrics[0];
    assert!(m.sqnr_db > 30.0 && m.cosine > 0.999, "{m:?}");
    assert_eq!(m.top1_agreement, Some(1.0));
    assert_eq!(m.top5_agreement, None, "two classes: no top-5");
    assert_eq!(m.elements, 32);
    let [latency] = measure_in_turn(
        [&quant],
        source.as_mut(),
        &runtime(),
        &[EpSpec::Cpu],
        4,
        1,
        5,
    )
    .unwrap();
    assert!(latency.median_ms > 0.0 && latency.p90_ms >= latency.median_ms && latency.runs == 5);
    // In turn: each model runs its share of the timed runs in each block, and only the QDQ
    // model has a kernel report.
    let runs = 2 * BLOCKS + 1;
    let [float_ms, quant_ms] = measure_in_turn(
        [&float, &quant],
        source.as_mut(),
        &runtime(),
        &[EpSpec::Cpu],
        4,
        1,
        runs,
    )
    .unwrap();
    for timed in [&float_ms, &quant_ms] {
        assert!(
            timed.median_ms > 0.0 && timed.p90_ms >= timed.median_ms,
            "{timed:?}"
        );
        assert_eq!((timed.runs, timed.batch_size), (runs, 4));
    }
    assert!(float_ms.kernels.is_none() && quant_ms.kernels.is_some());
}

/// The latency tuning's per-node proposal rests on matching ONNX Runtime's kernel names to
/// the model's nodes: every convolution of the sample (hard-swish fused into the NCHWc float
/// kernels, QLinearConv renamed by the QDQ fusion) must be found in both profiles, and the
/// hard-swish the QDQ model runs alone must cost its convolutions more than the float kernels.
#[test]
fn both_profiles_of_the_sample_name_every_convolution() {
    let dir = tempfile::tempdir().unwrap();
    let quant = Model::load(&quantized_sample(dir.path())).unwrap();
    let float = Model::load(&asset("ppocr_cls.onnx")).unwrap();
    let graph = Graph::build(&float);
    let mut source = eval_source(&float);
    let profile = |model: &Model, source: &mut dyn BatchSource| {
        profile_kernels(model, source, &runtime(), &[EpSpec::Cpu], 5).unwrap()
    };
    let float_times = profile(&float, source.as_mut());
    let int8_times = profile(&quant, source.as_mut());
    let convs = graph.nodes().iter().filter(|n| n.op_type == "Conv").count();
    let float_costs = segment_costs(&graph, &float_times);
    let int8_costs = segment_costs(&graph, &int8_times);
    assert_eq!(float_costs.len(), convs + 1, "every Conv and the MatMul");
    assert_eq!(int8_costs.len(), convs + 1);
    let total = |times: &[KernelTime]| times.iter().map(|k| k.us).sum::<f64>();
    let costs = |c: &std::collections::BTreeMap<String, f64>| c.values().sum::<f64>();
    // Every kernel is in some segment (the leading ones in the first).
    assert!((costs(&float_costs) - total(&float_times)).abs() < 1e-6);
    assert!((costs(&int8_costs) - total(&int8_times)).abs() < 1e-6);
    let quantized: Vec<String> = graph.nodes().iter().map(|n| n.name.clone()).collect();
    let slower = slower_in_int8(&graph, &float_times, &int8_times, &quantized);
    assert!(
        !slower.is_empty() && slower.len() <= convs + 1,
        "{slower:?}"
    );
}

#[test]
fn a_model_against_itself_has_no_error_and_non_qdq_models_are_refused() {
    let float = Model::load(&asset("ppocr_cls.onnx")).unwrap();
    // The same QDQ model on both sides: the same outputs, so no error at all.
    let dir = tempfile::tempdir().unwrap();
    let quant = Model::load(&quantized_sample(dir.path())).unwrap();
    let mut source = eval_source(&quant);
    let metrics = metrics_on_cpu(&quant, &quant, source.as_mut());
    let m = &metrics[0];
    assert_eq!(
        (m.mse, m.max_abs_error, m.elements),
        (0.0, 0.0, 32),
        "{m:?}"
    );
    assert!(m.sqnr_db.is_infinite() || m.sqnr_db > 100.0, "{m:?}");
    assert!((m.cosine - 1.0).abs() < 1e-12, "{m:?}");
    assert_eq!(m.top1_agreement, Some(1.0));
    // As a quantized model to compare against, a float model is refused.
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
    let value = common::run_json(compare_cmd(&quant, &asset("eval.npz")).args([
        "--batch_size",
        "8",
        "--latency_runs",
        "3",
        "--json",
    ]));
    assert!(value["outputs"][0]["sqnr_db"].as_f64().unwrap() > 30.0);
    assert!(value["latency"]["quantized"]["median_ms"].as_f64().unwrap() > 0.0);
    // Comparing against a non-QDQ model is one line and a failure.
    let out = compare_cmd(&asset("ppocr_cls.onnx"), &asset("eval.npz"))
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
        let mut cmd = compare_cmd(&quant, &asset("eval.npz"));
        cmd.args(["--batch_size", "8", "--latency_runs", "2"])
            .args(extra);
        cmd
    };
    let html = dir.path().join("report.html");
    let value = common::run_json(&mut compare(&[
        "--json",
        "--report",
        html.to_str().unwrap(),
    ]));
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
    // A verdict first, on the evidence the data allow: the sample's labels.
    let verdict = page
        .split("<p class=\"verdict\">")
        .nth(1)
        .and_then(|rest| rest.split("</p>").next())
        .expect("a verdict");
    assert!(
        page.find("class=\"verdict\"") < page.find("<h2>"),
        "the verdict comes first"
    );
    assert!(
        verdict.starts_with("keeps the float model&#39;s top-1 accuracy"),
        "{verdict}"
    );
    assert!(verdict.ends_with("eval.npz"), "{verdict}");
    // How the model was made, from the recipe it carries.
    assert!(page.contains("<h2>How the QDQ model was made</h2>"));
    assert!(page.contains("<dt>target</dt><dd>cpu</dd>"), "the target");
    // The outputs table holds only columns with figures: a classifier has no mask IoU.
    assert!(page.contains("top-1 agreement") && !page.contains("mask IoU"));
    // The speed, called a speed-up only when the runs allow it.
    assert!(
        page.contains("Latency")
            && (page.contains("× the float model") || page.contains(", speed-up ")),
        "latency"
    );

    let md = dir.path().join("report.md");
    common::run_ok(&mut compare(&["--report", md.to_str().unwrap()]));
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
    let out = compare(&["--report", dir.path().join("report.pdf").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("name it .html or .md") && err.lines().count() == 1,
        "{err}"
    );
}

/// A QDQ model as other tools write it: the float weight quantized inside the graph
/// (QuantizeLinear on the initializer), tensors named freely (`x_q`, `x_dq`, `mm_out`).
#[test]
fn per_tensor_errors_match_a_qdq_model_from_another_tool() {
    use qdq_studio::eval::tensor_error::tensors::tensor_errors;
    use qdq_studio::model::TensorArray;

    let w: Vec<f32> = (0..32).map(|i| ((i * 7 % 13) as f32 - 6.0) / 5.0).collect();
    let weight =
        TensorArray::Float32(ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[8, 4]), w).unwrap());
    let scalar = |v: f32| TensorArray::Float32(ndarray::ArrayD::from_elem(ndarray::IxDyn(&[]), v));
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[-1, 8]);
    b.initializer("W", weight.clone());
    b.node("MatMul", &["x", "W"], &["y"]).name("mm");
    b.output("y", DataType::Float32, &[-1, 4]);
    let float = b.build();

    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[-1, 8]);
    b.initializer("W", weight);
    b.initializer("sx", scalar(4.0 / 255.0));
    b.initializer(
        "zx",
        TensorArray::Uint8(ndarray::ArrayD::from_elem(ndarray::IxDyn(&[]), 128)),
    );
    b.initializer("sw", scalar(1.2 / 127.0));
    b.initializer(
        "zw",
        TensorArray::Int8(ndarray::ArrayD::from_elem(ndarray::IxDyn(&[]), 0)),
    );
    b.node("QuantizeLinear", &["x", "sx", "zx"], &["x_q"]);
    b.node("DequantizeLinear", &["x_q", "sx", "zx"], &["x_dq"]);
    b.node("QuantizeLinear", &["W", "sw", "zw"], &["W_q"]);
    b.node("DequantizeLinear", &["W_q", "sw", "zw"], &["W_dq"]);
    b.node("MatMul", &["x_dq", "W_dq"], &["mm_out"]).name("mm");
    b.node("QuantizeLinear", &["mm_out", "sx", "zx"], &["mm_q"]);
    b.node("DequantizeLinear", &["mm_q", "sx", "zx"], &["y"]);
    b.output("y", DataType::Float32, &[-1, 4]);
    let quant = b.build();

    let inputs = model_inputs(&Graph::build(&float));
    let mut source = DataSpec::Random {
        samples: 8,
        shapes: Default::default(),
        seed: 3,
    }
    .open(&inputs)
    .unwrap();
    let errors = tensor_errors(
        &float,
        &quant,
        source.as_mut(),
        &runtime(),
        &[EpSpec::Cpu],
        4,
        &JobContext::silent(),
    )
    .unwrap();
    assert!(errors.unmatched.is_empty(), "{errors:?}");
    let names: Vec<&str> = errors
        .activations
        .iter()
        .map(|a| a.tensor.as_str())
        .collect();
    // The input by its own name; the MatMul output through the DQ output it became.
    assert_eq!(names, ["x", "y"], "{errors:?}");
    let x = &errors.activations[0];
    let (lo, hi) = x.range.unwrap();
    assert!((lo - (-128.0 * 4.0 / 255.0)).abs() < 1e-5 && (hi - 127.0 * 4.0 / 255.0).abs() < 1e-5);
    // The weight quantized in the graph is evaluated as ONNX defines QuantizeLinear: values
    // are multiples of 0.2 and 1.2 / 127 steps leave a small rounding error only.
    assert_eq!(errors.weights.len(), 1, "{errors:?}");
    assert_eq!(errors.weights[0].weight, "W");
    let db = errors.weights[0].sqnr_db;
    assert!(db > 35.0 && db < 80.0, "{db}");
}

#[test]
fn evaluation_data_that_does_not_fit_the_inputs_is_one_clear_line() {
    use qdq_studio::model::TensorArray;

    let dir = tempfile::tempdir().unwrap();
    let quant = quantized_sample(dir.path());
    let float =
        |shape: &[usize]| TensorArray::Float32(ndarray::ArrayD::zeros(ndarray::IxDyn(shape)));
    let cases = [
        ("wrong_name.npz", ("image", float(&[2, 3, 48, 192])), "x"),
        ("wrong_channels.npz", ("x", float(&[2, 1, 48, 192])), "x"),
        (
            "wrong_dtype.npz",
            (
                "x",
                TensorArray::Int64(ndarray::ArrayD::zeros(ndarray::IxDyn(&[2, 3, 48, 192]))),
            ),
            "x",
        ),
    ];
    for (file, (name, array), mentions) in cases {
        let path = dir.path().join(file);
        common::write_npz(&path, &[(name, array)]);
        for extra in [&["--latency_runs", "0"][..], &["--report", "r.html"][..]] {
            let out = compare_cmd(&quant, &path)
                .current_dir(dir.path())
                .args(extra)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{file}");
            assert_eq!(err.lines().count(), 1, "{file}: {err}");
            assert!(err.contains(mentions), "{file}: {err}");
            assert!(
                !dir.path().join("r.html").exists(),
                "no report from a failed run"
            );
        }
    }
}

#[test]
fn per_tensor_errors_match_onnxruntime_qdq_loss_debug() {
    let fixture: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/ort_loss_debug_sample.json")).unwrap();
    let float = Model::load(&asset("ppocr_cls.onnx")).unwrap();
    // As the fixture was made: onnxruntime quantized the sample pre-processed, unsimplified.
    let options = qdq_studio::recipe::Preprocessing {
        simplify: false,
        ..Default::default()
    };
    let (mut float, _) = qdq_studio::quant::preprocess::preprocess(&float, &options).unwrap();
    qdq_studio::quant::name_nodes(&mut float);
    let quant = Model::load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ort_qdq_sample_pt.onnx"),
    )
    .unwrap();
    let mut source = eval_source(&float);
    let errors = qdq_studio::eval::tensor_error::tensors::tensor_errors(
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

    use qdq_studio::eval::search::auto_exclude::{Goal, auto_exclude};

    use qdq_studio::eval::search::sensitivity::{Granularity, scan, scan_keeping};

    use qdq_studio::eval::search::evaluator::Target;
    use qdq_studio::eval::search::switched_scan::ScanMethod;
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
    let eval_data = DataSpec::Random {
        samples: 16,
        shapes: Default::default(),
        seed: 6,
    };
    let rt = runtime();
    let reference = common::cpu_reference(&model, &eval_data, &rt, 8);
    assert_eq!(reference.samples(), 16);
    let evaluator = common::cpu_evaluator(&model, &stats, &reference, &rt);
    let recipe = Recipe {
        op_types_to_quantize: vec!["Add".into(), "Mul".into()],
        ..Recipe::default()
    };
    let (result, switchable) = scan_keeping(
        &evaluator,
        &recipe,
        Granularity::Node,
        ScanMethod::Switchable,
        &JobContext::silent(),
    )
    .unwrap();
    assert_eq!(result.method, ScanMethod::Switchable, "{result:?}");
    assert!(switchable.is_some());
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
        &evaluator,
        &recipe,
        &result,
        Goal::new(Target::SqnrDb(target), 5),
        switchable.as_ref(),
        &JobContext::silent(),
    )
    .unwrap();
    // 16-bit activations are tried before float, and they fix it: the Mul stays quantized.
    assert!(fixed.reached, "{fixed:?}");
    assert_eq!(fixed.promoted, ["harmful_mul"], "{fixed:?}");
    assert!(fixed.excluded.is_empty(), "{fixed:?}");
    assert_eq!(
        fixed.recipe.node_precision.get("harmful_mul"),
        Some(&qdq_studio::recipe::NodePrecision::W8a16)
    );
    // The recipe it wrote reproduces the SQNR it reported.
    assert!((evaluator.sqnr(&fixed.recipe).unwrap() - fixed.sqnr_db).abs() < 1e-9);
    assert_eq!(
        fixed.quantized_by_op_type,
        [("Add".to_owned(), 1), ("Mul".to_owned(), 1)].into(),
        "both stay quantized"
    );
    // Without promotions (a CPU deployment), the Mul goes to float, as it always did.
    let float_only = auto_exclude(
        &evaluator,
        &recipe,
        &result,
        Goal {
            promote: false,
            ..Goal::new(Target::SqnrDb(target), 5)
        },
        switchable.as_ref(),
        &JobContext::silent(),
    )
    .unwrap();
    assert!(float_only.reached, "{float_only:?}");
    assert_eq!(float_only.excluded, ["harmful_mul"]);
    assert!(float_only.promoted.is_empty());
    assert!(float_only.recipe.node_precision.is_empty());
    // A target 16 bits cannot reach takes the Mul to float instead.
    let fixed = auto_exclude(
        &evaluator,
        &recipe,
        &result,
        Goal::new(Target::SqnrDb(200.0), 5),
        switchable.as_ref(),
        &JobContext::silent(),
    )
    .unwrap();
    assert!(
        fixed.excluded.iter().any(|n| n == "harmful_mul"),
        "{fixed:?}"
    );
    assert!(
        fixed
            .recipe
            .nodes_to_exclude
            .iter()
            .any(|p| p.starts_with("harmful_mul"))
    );
    assert!(!fixed.recipe.node_precision.contains_key("harmful_mul"));

    // The op-type scan runs one pair of variants per op type.
    let by_type = scan(
        &evaluator,
        &recipe,
        Granularity::OpType,
        ScanMethod::Exact,
        &JobContext::silent(),
    )
    .unwrap();
    let types: Vec<&str> = by_type.nodes.iter().map(|n| n.node.as_str()).collect();
    assert_eq!(types.len(), 2, "{by_type:?}");
    assert!(types.contains(&"Add") && types.contains(&"Mul"));
    assert_eq!(types[0], "Mul", "the harmful node is a Mul: {by_type:?}");
    // The output is [N, 4]: a top-1 agreement target works too, and is met exactly.
    let fixed = auto_exclude(
        &evaluator,
        &recipe,
        &result,
        Goal::new(Target::Top1(1.0), 5),
        None,
        &JobContext::silent(),
    )
    .unwrap();
    assert!(fixed.reached && fixed.score == 1.0, "{fixed:?}");
}

/// An MLP whose weights (2 × 256 × 1024 float32, 2 MB) outweigh its activations many times
/// over, as an LLM's do: the per-tensor comparison captures the float activations first and
/// closes the float session. The errors must be those of running both models side by side.
#[test]
fn per_tensor_errors_from_captured_float_activations_equal_those_run_side_by_side() {
    use ndarray::{ArrayD, IxDyn};
    use qdq_studio::eval::tensor_error::tensors::{
        Float, FloatPass, FloatRun, FloatTensors, tensor_errors_against,
    };
    use qdq_studio::model::TensorArray;
    let weight = |rows: usize, cols: usize, seed: usize| {
        TensorArray::Float32(ArrayD::from_shape_fn(IxDyn(&[rows, cols]), |ix| {
            (((ix[0] * 31 + ix[1] * 17 + seed) % 101) as f32 - 50.0) / 500.0
        }))
    };
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[-1, 256]);
    b.initializer("w1", weight(256, 1024, 1));
    b.initializer("w2", weight(1024, 256, 2));
    b.node("MatMul", &["x", "w1"], &["h"]).name("up");
    b.node("Relu", &["h"], &["r"]).name("relu");
    b.node("MatMul", &["r", "w2"], &["y"]).name("down");
    b.output("y", DataType::Float32, &[-1, 256]);
    let float = b.build();
    let data = DataSpec::Random {
        samples: 8,
        shapes: Default::default(),
        seed: 3,
    };
    let runtime = runtime();
    let ctx = JobContext::silent();
    let inputs = model_inputs(&Graph::build(&float));
    let stats = qdq_studio::workflow::calibrate::calibrate(
        &float,
        &Default::default(),
        &data,
        &Default::default(),
        &runtime,
        &ctx,
    )
    .unwrap();
    let recipe = qdq_studio::recipe::Recipe::default();
    let quant = qdq_studio::quant::quantize(&float, Some(&stats), &recipe)
        .unwrap()
        .model;
    let errors = |run: FloatRun<'_>| {
        let mut source = data.open(&inputs).unwrap();
        let float = Float { model: &float, run };
        tensor_errors_against(
            float,
            &quant,
            source.as_mut(),
            &runtime,
            &[EpSpec::Cpu],
            2,
            &ctx,
        )
        .unwrap()
    };
    let mut source = data.open(&inputs).unwrap();
    let FloatPass::Captured(captured) =
        FloatTensors::capture(&float, source.as_mut(), &runtime, &[EpSpec::Cpu], 2, &ctx).unwrap()
    else {
        panic!(
            "activations of 8 × (256 + 1024 + 1024 + 256) floats are not kept beside 2 MB of weights"
        )
    };
    assert!(captured.bytes() > 0);
    let side_by_side = errors(FloatRun::Open);
    let from_captured = errors(FloatRun::Captured(&captured));
    assert_eq!(side_by_side.activations.len(), 3, "{side_by_side:?}");
    assert!(
        side_by_side
            .activations
            .iter()
            .all(|a| a.xmodel_sqnr_db.is_finite())
    );
    assert_eq!(side_by_side, from_captured);
    // The convenience entry point takes the captured path here, with the same result.
    let mut source = data.open(&inputs).unwrap();
    let direct = qdq_studio::eval::tensor_error::tensors::tensor_errors(
        &float,
        &quant,
        source.as_mut(),
        &runtime,
        &[EpSpec::Cpu],
        2,
        &ctx,
    )
    .unwrap();
    assert_eq!(direct, side_by_side);
}

/// A CNN-like model whose activations outweigh its weights: the float activations are not
/// kept, and the session that ran is handed back to run beside the quantized one.
#[test]
fn float_activations_larger_than_the_weights_are_not_kept() {
    use qdq_studio::eval::tensor_error::tensors::{FloatPass, FloatTensors};
    let model = common::wide_model();
    let data = DataSpec::Random {
        samples: 4,
        shapes: [("x".to_owned(), vec![1, 256, 256])].into_iter().collect(),
        seed: 1,
    };
    let mut source = data.open(&model_inputs(&Graph::build(&model))).unwrap();
    let pass = FloatTensors::capture(
        &model,
        source.as_mut(),
        &runtime(),
        &[EpSpec::Cpu],
        1,
        &JobContext::silent(),
    )
    .unwrap();
    assert!(matches!(pass, FloatPass::Declined(_)));
}

/// The best class of each sample of `x` by `model` (the first of equal scores, as numpy's
/// argmax), run as the comparison runs it.
fn best_classes(model: &Model, x: &qdq_studio::model::TensorArray) -> Vec<usize> {
    use qdq_studio::quant::cpu_session_options;
    use qdq_studio::runtime::value::{float_output, owned_inputs, session_inputs};
    // A float model's CPU options are the defaults, as the comparison runs it.
    let mut session = runtime()
        .session_from_bytes(
            &model.to_bytes().unwrap(),
            &[EpSpec::Cpu],
            cpu_session_options(model),
        )
        .unwrap();
    let owned = owned_inputs(vec![("x".to_owned(), x.clone())]).unwrap();
    let out = session.run(session_inputs(&owned)).unwrap();
    let (_, scores) = float_output(&out[0]).unwrap();
    scores
        .outer_iter()
        .map(|row| {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            row.iter().position(|&v| v == max).unwrap()
        })
        .collect()
}

#[test]
fn labels_beside_the_inputs_give_the_accuracy_of_both_models() {
    let dir = tempfile::tempdir().unwrap();
    let quant_path = quantized_sample(dir.path());
    let float = Model::load(&asset("ppocr_cls.onnx")).unwrap();
    let quant = Model::load(&quant_path).unwrap();
    let x = eval_source(&float).next_batch(64).unwrap().unwrap().inputs[0]
        .1
        .clone();
    // Labels: the float model's classes with sample 0's flipped (two classes).
    let float_best = best_classes(&float, &x);
    let mut labels: Vec<i64> = float_best.iter().map(|&c| c as i64).collect();
    labels[0] = 1 - labels[0];
    let quant_best = best_classes(&quant, &x);
    let right = |best: &[usize]| {
        best.iter()
            .zip(&labels)
            .filter(|(b, l)| **b as i64 == **l)
            .count() as f64
            / labels.len() as f64
    };
    let data = dir.path().join("labelled.npz");
    let n = labels.len();
    common::write_npz(
        &data,
        &[
            ("x", x),
            (
                "labels",
                qdq_studio::model::TensorArray::Int64(
                    ndarray::ArrayD::from_shape_vec(vec![n], labels.clone()).unwrap(),
                ),
            ),
        ],
    );
    let json =
        common::run_ok(compare_cmd(&quant_path, &data).args(["--latency_runs", "0", "--json"]));
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    let output = &report["outputs"][0];
    assert_eq!(output["kind"], "classifier");
    let task = output["task"].as_array().unwrap();
    assert_eq!(task.len(), 1, "two classes: top-1 only: {task:?}");
    assert_eq!(task[0]["metric"], "top1_accuracy");
    assert_eq!(task[0]["float"].as_f64(), Some((n - 1) as f64 / n as f64));
    assert_eq!(task[0]["quantized"].as_f64(), Some(right(&quant_best)));
    // The table shows them, and a key named on the command line that is not there is one
    // clear line.
    let text = common::run_ok(compare_cmd(&quant_path, &data).args(["--latency_runs", "0"]));
    assert!(
        text.contains("top-1 accuracy") && text.contains("class scores"),
        "{text}"
    );
    let report = dir.path().join("report.md");
    common::run_ok(
        compare_cmd(&quant_path, &data)
            .args(["--latency_runs", "0", "--report"])
            .arg(&report),
    );
    let page = std::fs::read_to_string(&report).unwrap();
    assert!(
        page.contains("## Against ground truth") && page.contains("top-1 accuracy"),
        "{page}"
    );
    let (ok, text) = common::run_text(compare_cmd(&quant_path, &data).args(["--labels", "y"]));
    assert!(!ok);
    assert!(
        text.contains(
            "no array 'y' to read ground truth from (beside the inputs it holds 'labels')"
        ),
        "{text}"
    );
}

#[test]
fn an_output_kind_chosen_on_the_command_line_decides_the_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let quant = quantized_sample(dir.path());
    let output = "save_infer_model/scale_0.tmp_1";
    let json = common::run_ok(compare_cmd(&quant, &asset("eval.npz")).args([
        "--latency_runs",
        "0",
        "--json",
        "--output_kind",
        &format!("{output}=values"),
    ]));
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    let metrics = &report["outputs"][0];
    assert_eq!(metrics["kind"], "values");
    assert!(metrics["top1_agreement"].is_null(), "{metrics}");
    assert!(metrics["sqnr_db"].as_f64().unwrap() > 30.0, "{metrics}");
    let (ok, text) = common::run_text(
        compare_cmd(&quant, &asset("eval.npz")).args(["--output_kind", "logits=classifier"]),
    );
    assert!(!ok);
    assert!(
        text.contains("the model has no output 'logits' to set the kind of"),
        "{text}"
    );
}

#[test]
fn a_dense_map_gets_the_iou_of_its_masks_and_no_class_columns() {
    use ndarray::ArrayD;
    use qdq_studio::model::TensorArray;
    let dir = tempfile::tempdir().unwrap();
    // A probability map: Sigmoid(Conv(x)), [N, 1, 16, 16].
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[-1, 3, 16, 16]);
    let w: Vec<f32> = (0..27).map(|i| ((i * 7 % 11) as f32 - 5.0) / 5.0).collect();
    b.initializer(
        "w",
        TensorArray::Float32(ArrayD::from_shape_vec(vec![1, 3, 3, 3], w).unwrap()),
    );
    b.node("Conv", &["x", "w"], &["c"])
        .name("conv")
        .attr_ints("pads", &[1, 1, 1, 1]);
    b.node("Sigmoid", &["c"], &["maps"]).name("sigmoid");
    b.output("maps", DataType::Float32, &[-1, 1, 16, 16]);
    let model = dir.path().join("maps.onnx");
    b.build()
        .save(&model, &qdq_studio::model::SaveOptions::default())
        .unwrap();
    let samples = |seed: u32| {
        let values: Vec<f32> = (0..8 * 3 * 16 * 16)
            .map(|i: u32| (((i.wrapping_mul(2_654_435_761) ^ seed) % 1000) as f32 / 500.0) - 1.0)
            .collect();
        TensorArray::Float32(ArrayD::from_shape_vec(vec![8, 3, 16, 16], values).unwrap())
    };
    let (calib, eval) = (dir.path().join("c.npz"), dir.path().join("e.npz"));
    common::write_npz(&calib, &[("x", samples(1))]);
    common::write_npz(&eval, &[("x", samples(2))]);
    let quant = dir.path().join("q.onnx");
    common::quantize_calibrated(&model, &calib, &[], &quant);
    let metrics = common::compared_output(&model, &quant, &eval, "maps");
    assert_eq!(metrics["kind"], "dense_map");
    let iou = metrics["mask_iou"]
        .as_f64()
        .expect("a dense map has a mask IoU");
    assert!(iou > 0.8 && iou <= 1.0, "{metrics}");
    assert!(metrics["top1_agreement"].is_null(), "{metrics}");
    assert!(metrics["task"].as_array().unwrap().is_empty(), "{metrics}");
}

/// x → Q/DQ → conv1 (int8 weights, uint8 activations) → Q/DQ → conv2 (int8 weights, uint16
/// output) → Q/DQ → y: ONNX Runtime's CPU provider fuses conv1 into QLinearConv and has no
/// integer kernel for conv2's 16-bit output.
fn one_fusing_conv_and_one_not() -> Model {
    use ndarray::ArrayD;
    use qdq_studio::model::TensorArray;
    let mut b = ModelBuilder::new(21);
    b.input("x", DataType::Float32, &[1, 4, 8, 8]);
    let scalar_f = |v: f32| TensorArray::Float32(ArrayD::from_elem(vec![], v));
    b.initializer("s", scalar_f(0.02));
    b.initializer("ws", scalar_f(0.01));
    b.initializer("z8", TensorArray::Uint8(ArrayD::from_elem(vec![], 128)));
    b.initializer("z16", TensorArray::Uint16(ArrayD::from_elem(vec![], 32768)));
    for name in ["w1", "w2"] {
        let w: Vec<i8> = (0..4 * 4 * 9).map(|i| (i % 13) as i8 - 6).collect();
        b.initializer(
            name,
            TensorArray::Int8(ArrayD::from_shape_vec(vec![4, 4, 3, 3], w).unwrap()),
        );
        b.node("DequantizeLinear", &[name, "ws"], &[&format!("{name}_f")]);
    }
    let pads = [1i64, 1, 1, 1];
    b.node("QuantizeLinear", &["x", "s", "z8"], &["xq"]);
    b.node("DequantizeLinear", &["xq", "s", "z8"], &["xd"]);
    b.node("Conv", &["xd", "w1_f"], &["c1"])
        .name("conv1")
        .attr_ints("pads", &pads);
    b.node("QuantizeLinear", &["c1", "s", "z8"], &["c1q"]);
    b.node("DequantizeLinear", &["c1q", "s", "z8"], &["c1d"]);
    b.node("Conv", &["c1d", "w2_f"], &["c2"])
        .name("conv2")
        .attr_ints("pads", &pads);
    b.node("QuantizeLinear", &["c2", "s", "z16"], &["c2q"]);
    b.node("DequantizeLinear", &["c2q", "s", "z16"], &["y"]);
    b.output("y", DataType::Float32, &[1, 4, 8, 8]);
    b.build()
}

#[test]
fn the_kernel_report_tells_a_fused_qdq_conv_from_one_run_in_float() {
    let model = one_fusing_conv_and_one_not();
    let mut source = DataSpec::Random {
        samples: 1,
        shapes: Default::default(),
        seed: 3,
    }
    .open(&model_inputs(&Graph::build(&model)))
    .unwrap();
    let [latency] = measure_in_turn(
        [&model],
        source.as_mut(),
        &runtime(),
        &[EpSpec::Cpu],
        1,
        0,
        1,
    )
    .unwrap();
    let kernels = latency.kernels.expect("a QDQ model's kernels are profiled");
    assert_eq!(kernels.quantized_compute, 2, "{kernels:?}");
    assert_eq!(kernels.float_compute, ["conv2"], "{kernels:?}");
    assert!(
        kernels
            .kernels
            .iter()
            .any(|k| k.op == "QLinearConv" && k.provider == "CPUExecutionProvider"),
        "{kernels:?}"
    );
    assert!(kernels.integer_kernels >= 1, "{kernels:?}");
    let hint = kernels.hint.as_deref().expect("a hint for the float conv");
    assert!(hint.contains("1 of the 2 quantized"), "{hint}");
    assert!(
        kernels
            .line()
            .contains("1 of 2 quantized Conv/MatMul/Gemm in float")
    );
}

#[test]
fn auto_exclude_takes_an_accuracy_target_against_the_labels() {
    let dir = tempfile::tempdir().unwrap();
    let float = Model::load(&asset("ppocr_cls.onnx")).unwrap();
    let x = eval_source(&float).next_batch(64).unwrap().unwrap().inputs[0]
        .1
        .clone();
    let labels: Vec<i64> = best_classes(&float, &x).iter().map(|&c| c as i64).collect();
    let n = labels.len();
    let data = dir.path().join("labelled.npz");
    let labels = qdq_studio::model::TensorArray::Int64(
        ndarray::ArrayD::from_shape_vec(vec![n], labels).unwrap(),
    );
    common::write_npz(&data, &[("x", x), ("labels", labels)]);
    let stats = dir.path().join("stats.json");
    common::calibrate_sample(&stats);
    let scan = |data: &Path| {
        let mut cmd = cli();
        cmd.args(["sensitivity", "--onnx_path"])
            .arg(asset("ppocr_cls.onnx"))
            .arg("--calibration_cache_path")
            .arg(&stats)
            .arg("--data")
            .arg(data)
            .args(["--candidates", "Conv@0", "--target_accuracy", "90"]);
        cmd
    };
    let text = common::run_ok(&mut scan(&data));
    assert!(
        text.contains("target accuracy 90.0% reached"),
        "the float model's own classes are read right: {text}"
    );
    // The calibration set carries no labels (the evaluation set does).
    let (ok, text) = common::run_text(&mut scan(&asset("calib.npz")));
    assert!(!ok);
    assert!(text.contains("an accuracy target needs 'labels'"), "{text}");
}

/// `compare` of `quant` against `float` on `text` (no latency runs), with `extra` flags.
fn compare_on_text(
    float: &Path,
    quant: &Path,
    text: &Path,
    extra: &[&str],
) -> std::process::Command {
    let mut cmd = cli();
    cmd.args(["compare", "--float"])
        .arg(float)
        .arg("--quant")
        .arg(quant)
        .arg("--eval_text")
        .arg(text)
        .args(["--latency_runs", "0"])
        .args(extra);
    cmd
}

/// Perplexity of `model` on `sequences` of 64 ids, from its logits: exp of the mean negative
/// log-softmax of each next token, in f64 (the reference the CLI's figure is checked against).
fn perplexity_of(model: &Path, sequences: &[&[i64]]) -> f64 {
    let model = Model::load(model).unwrap();
    let mut session = runtime()
        .session_from_bytes(
            &model.to_bytes().unwrap(),
            &[EpSpec::Cpu],
            Default::default(),
        )
        .unwrap();
    let (mut nll, mut count) = (0.0f64, 0usize);
    for ids in sequences {
        let input = ndarray::Array2::from_shape_vec((1, ids.len()), ids.to_vec()).unwrap();
        let outputs = session
            .run(ort::inputs!["input_ids" => ort::value::Tensor::from_array(input).unwrap()])
            .unwrap();
        let logits = outputs["logits"].try_extract_array::<f32>().unwrap();
        for t in 0..ids.len() - 1 {
            let row: Vec<f64> = (0..32).map(|c| f64::from(logits[[0, t, c]])).collect();
            let log_sum: f64 = row.iter().map(|v| v.exp()).sum::<f64>().ln();
            nll += log_sum - row[ids[t + 1] as usize];
            count += 1;
        }
    }
    (nll / count as f64).exp()
}

#[test]
fn text_is_tokenized_by_the_models_tokenizer_and_gives_the_perplexity_of_both_models() {
    let dir = tempfile::tempdir().unwrap();
    // Four sequences of 64 and 20 tokens left over.
    let (model, text, ids) = common::decoder_with_text(dir.path(), 4 * 64 + 20);
    let quant = dir.path().join("out/decoder_int8.onnx");
    let said = common::run_ok(
        cli()
            .args(["quantize", "--onnx_path"])
            .arg(&model)
            .arg("--calibration_text")
            .arg(&text)
            .arg("-o")
            .arg(&quant),
    );
    assert!(said.contains("calibrating on the text"), "{said}");
    assert!(said.contains("on 4 samples"), "{said}");
    let json = common::run_json(&mut compare_on_text(
        &model,
        &quant,
        &text,
        &["--batch_size", "3", "--json"],
    ));
    let logits = json["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "logits")
        .unwrap();
    let task = logits["task"].as_array().unwrap();
    let perplexity = task.iter().find(|s| s["metric"] == "perplexity").unwrap();
    let sequences: Vec<&[i64]> = ids.chunks_exact(64).collect();
    for (model, reported) in [
        (&model, &perplexity["float"]),
        (&quant, &perplexity["quantized"]),
    ] {
        let expected = perplexity_of(model, &sequences);
        let reported = reported.as_f64().unwrap();
        assert!(
            (reported / expected - 1.0).abs() < 1e-5,
            "{}: reported {reported}, from the logits {expected}",
            model.display()
        );
    }
    // Random weights: near the 32 classes, and the quantized model a little off the float one.
    let float = perplexity["float"].as_f64().unwrap();
    assert!((10.0..100.0).contains(&float), "{float}");
    assert_ne!(perplexity["quantized"].as_f64().unwrap(), float);
    let accuracy = task
        .iter()
        .find(|s| s["metric"] == "next_token_accuracy")
        .unwrap();
    assert!(accuracy["float"].as_f64().unwrap() <= 1.0);
    // The table says both, the change in percent of the float model's.
    let table = common::run_ok(&mut compare_on_text(&model, &quant, &text, &[]));
    assert!(
        table.contains("perplexity") && table.contains(" %)"),
        "{table}"
    );
}

#[test]
fn text_without_a_tokenizer_or_too_short_for_a_sequence_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let (model, text, _) = common::decoder_with_text(dir.path(), 40);
    // Calibration reads the text before anything runs.
    let calibrate = |extra: &[&str]| {
        let (ok, said) = common::run_text(
            cli()
                .args(["calibrate", "--onnx_path"])
                .arg(&model)
                .arg("--calibration_text")
                .arg(&text)
                .arg("-o")
                .arg(dir.path().join("stats.json"))
                .args(extra),
        );
        assert!(!ok, "{said}");
        said
    };
    let said = calibrate(&[]);
    assert!(
        said.contains("40 tokens, fewer than one sequence of 64"),
        "{said}"
    );
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    std::fs::remove_file(dir.path().join("tokenizer.json")).unwrap();
    let said = calibrate(&[]);
    assert!(said.contains("no tokenizer.json beside"), "{said}");
    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "{\"model\": 3}").unwrap();
    let said = calibrate(&["--tokenizer", broken.to_str().unwrap()]);
    assert!(said.contains("cannot read the tokenizer"), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "{said}");
}

#[test]
fn auto_exclude_takes_a_perplexity_target_on_text() {
    let dir = tempfile::tempdir().unwrap();
    let (model, text, _) = common::decoder_with_text(dir.path(), 4 * 64);
    let stats = dir.path().join("stats.json");
    common::run_ok(
        cli()
            .args(["calibrate", "--onnx_path"])
            .arg(&model)
            .arg("--calibration_text")
            .arg(&text)
            .arg("-o")
            .arg(&stats),
    );
    // Measured on the models themselves: the default misses the target, the recipe
    // auto-exclude writes meets it.
    let rise = |args: &[&str], name: &str| {
        let quant = dir.path().join(name);
        common::run_ok(
            cli()
                .args(["quantize", "--onnx_path"])
                .arg(&model)
                .arg("--calibration_cache_path")
                .arg(&stats)
                .args(args)
                .arg("-o")
                .arg(&quant),
        );
        let json = common::run_json(&mut compare_on_text(&model, &quant, &text, &["--json"]));
        let score = &json["outputs"][0]["task"][0];
        assert_eq!(score["metric"], "perplexity");
        (score["quantized"].as_f64().unwrap() / score["float"].as_f64().unwrap() - 1.0) * 100.0
    };
    // The default recipe, for this machine's kernels (8-bit weights saturate on x86 without
    // VNNI): auto-exclude starts from it.
    let base = dir.path().join("base.toml");
    let base_arg = base.to_str().unwrap();
    let save_base = ["--save-recipe", base_arg];
    let args: Vec<&str> = common::host_target_args()
        .iter()
        .copied()
        .chain(save_base)
        .collect();
    let default = rise(&args, "default.onnx");
    let recipe = dir.path().join("fixed.toml");
    let said = common::run_ok(
        cli()
            .args(["sensitivity", "--onnx_path"])
            .arg(&model)
            .arg("--calibration_cache_path")
            .arg(&stats)
            .arg("--eval_text")
            .arg(&text)
            .arg("--recipe")
            .arg(&base)
            .args(["--target_perplexity", "0.02", "--save-recipe"])
            .arg(&recipe),
    );
    assert!(
        said.contains("target perplexity rise 0.02% reached"),
        "{said}"
    );
    let fixed = rise(&["--recipe", recipe.to_str().unwrap()], "fixed.onnx");
    assert!(default > 0.02 && fixed <= 0.02, "{default} % → {fixed} %");
}
