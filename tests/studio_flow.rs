//! The studio's whole quantization loop, driven like a user drives it without a display:
//! open the bundled sample, exclude an op type, calibrate on the CPU with real ONNX Runtime,
//! read a tensor's histogram ranges, quantize and compare, auto-exclude to a typed target,
//! save the QDQ model, and check the saved file in ONNX Runtime.

use crate::common;

use qdq_studio::app::command::{AppCommand, RecipeCommand, ViewCommand, WorkCommand};
use qdq_studio::eval::tensor_error::tensors::ErrorKind;
use std::path::Path;
use std::time::{Duration, Instant};

use egui::{Event, Key, Modifiers};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use qdq_studio::app::work_panel::WorkTab;
use qdq_studio::app::{Settings, Source, Studio, StudioOptions};
use qdq_studio::calib::range::{self, RangeTarget};
use qdq_studio::model::{Graph, Model};
use qdq_studio::recipe::{QuantType, Recipe, Target};
use qdq_studio::runtime::EpSpec;

fn harness() -> Harness<'static, Studio> {
    let studio = Studio::new(
        StudioOptions {
            native_dialogs: false,
            probe_runtime: false,
        },
        Settings::default(),
    );
    Harness::builder()
        .with_size(egui::vec2(1500.0, 1000.0))
        .build_ui_state(|ui, studio: &mut Studio| studio.ui(ui), studio)
}

/// Steps frames until neither a model is opening nor a task is running.
fn settle(h: &mut Harness<'_, Studio>, what: &str) {
    let started = Instant::now();
    loop {
        let busy = h.state().is_busy()
            || h.state().document().is_some_and(|d| {
                d.work.busy()
                    || matches!(
                        d.work.checks.calibration,
                        qdq_studio::app::work::data::DataCheck::Checking(_)
                    )
            });
        if !busy {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "{what} took over four minutes"
        );
        h.step();
        // A frame each 50 ms: the job, not the UI, should have the cores.
        std::thread::sleep(Duration::from_millis(50));
    }
    h.run_steps(3);
}

/// Calibrates with Ctrl+R and waits for it to end.
fn calibrate(h: &mut Harness<'_, Studio>) {
    h.key_press_modifiers(Modifiers::COMMAND, Key::R);
    h.run_steps(2);
    settle(h, "calibration");
}

/// Quantizes & compares with F5 and waits for it to end.
fn quantize_and_compare(h: &mut Harness<'_, Studio>, what: &str) {
    h.key_press(Key::F5);
    h.run_steps(1);
    settle(h, what);
}

/// Opens `source`, sets a data file (for evaluation when the flag says so), calibrates,
/// quantizes and compares, and checks nothing went wrong.
fn open_calibrate_compare(
    h: &mut Harness<'_, Studio>,
    source: Source,
    data: Option<(std::path::PathBuf, bool)>,
) {
    h.state_mut().open(source);
    settle(h, "opening");
    if let Some((path, evaluation)) = data {
        h.state_mut().push(qdq_studio::app::command::Command::Work(
            WorkCommand::SetDataPath { evaluation, path },
        ));
        h.run_steps(2);
        settle(h, "checking");
    }
    calibrate(h);
    quantize_and_compare(h, "quantize & compare");
    no_notices(h);
}

/// Scrolls the widget labelled `label` into view (as a user would) and clicks it.
fn press(h: &mut Harness<'_, Studio>, label: &str) {
    h.get_by_label(label).scroll_to_me();
    // The scroll animates over a few frames: a widget scrolled in from far below is not
    // under the pointer after two.
    h.run_steps(6);
    h.get_by_label(label).click();
    h.run_steps(2);
}

/// The statistics the studio holds (a test calibrated first).
fn statistics(h: &Harness<'_, Studio>) -> std::sync::Arc<qdq_studio::calib::CalibrationStats> {
    h.state()
        .document()
        .unwrap()
        .work
        .results
        .stats
        .clone()
        .expect("statistics after calibration")
}

fn recipe(h: &Harness<'_, Studio>) -> Recipe {
    h.state().document().unwrap().recipe().clone()
}

/// The last auto-exclude result on screen.
fn auto_excluded(h: &Harness<'_, Studio>) -> qdq_studio::eval::search::auto_exclude::AutoExclude {
    h.state()
        .document()
        .unwrap()
        .work
        .results
        .auto_excluded
        .clone()
        .expect("an auto-exclude result")
}

fn no_notices(h: &Harness<'_, Studio>) {
    assert!(h.state().notices().is_empty(), "{:?}", h.state().notices());
}

/// Replaces a focused text field's content.
fn replace_text(h: &mut Harness<'_, Studio>, label: &str, text: &str) {
    h.get_by_label(label).scroll_to_me();
    h.run_steps(2);
    h.get_by_label(label).focus();
    h.run_steps(1);
    h.key_press_modifiers(Modifiers::COMMAND, Key::A);
    h.event(Event::Text(text.to_owned()));
    h.run_steps(1);
    h.key_press(Key::Enter);
    h.run_steps(2);
}

/// True when `node`'s inputs include a DequantizeLinear output (the node runs quantized).
fn fed_by_dequantize(graph: &Graph, node: &str) -> bool {
    let node = graph
        .node_by_name(node)
        .expect("the node is in the saved model");
    node.inputs.iter().any(|t| {
        graph
            .tensor(t)
            .and_then(|info| info.producer)
            .is_some_and(|p| graph.node(p).op_type == "DequantizeLinear")
    })
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one user's walk through the studio, step by step"
)]
fn a_user_calibrates_compares_auto_excludes_and_saves_the_sample() {
    let runtime = common::runtime();
    let mut h = harness();
    h.state_mut().open(Source::Sample);
    settle(&mut h, "opening");
    no_notices(&h);

    // Exclude an op type from the op-type panel (scrolled to, as a user would: the list
    // scrolls smoothly over a few frames).
    h.get_by_label("Mul (27)").scroll_to_me();
    h.run_steps(30);
    h.get_by_label("Mul (27)").click();
    h.run_steps(2);
    assert_eq!(recipe(&h).op_types_to_exclude, ["Mul"]);

    // The sample's own data fits the model (checked before anything runs).
    h.run_steps(2);
    let summary = match &h.state().document().unwrap().work.checks.calibration {
        qdq_studio::app::work::data::DataCheck::Fits(s) => s.clone(),
        _ => panic!("the calibration data was not checked"),
    };
    assert!(summary.starts_with("32 samples"), "{summary}");

    // Calibrate on the CPU.
    assert_eq!(h.state().document().unwrap().work.settings.ep, EpSpec::Cpu);
    h.get_by_label("Calibrate").click();
    h.run_steps(2);
    assert!(
        h.query_by_label("Cancel").is_some(),
        "a running calibration has a Cancel button"
    );
    settle(&mut h, "calibration");
    no_notices(&h);
    let stats = statistics(&h);
    assert_eq!(stats.info.samples, 32);
    assert_eq!(
        h.state().document().unwrap().view.panel.tab,
        WorkTab::Histogram
    );

    // Pick a tensor from the searchable list and read its ranges.
    // One the quantizer's plan quantizes with its own range (not a folded Relu's input or a
    // shared scale: overrides of those go on the tensor whose range they take).
    let shown = h
        .state()
        .document()
        .unwrap()
        .view
        .panel
        .histogram_tensor
        .clone();
    let plan = h.state().document().unwrap().planned.plan.clone();
    let tensor = stats
        .tensors
        .iter()
        .find(|(n, s)| {
            s.histogram.is_some()
                && s.min < 0.0
                && Some(*n) != shown.as_ref()
                && plan.range_tensor(n).as_ref() == Some(*n)
        })
        .map(|(n, _)| n.clone())
        .expect("a signed tensor quantized with its own range");
    replace_text(&mut h, "Find tensor", &tensor);
    press(&mut h, &tensor);
    assert_eq!(
        h.state()
            .document()
            .unwrap()
            .view
            .panel
            .histogram_tensor
            .as_ref(),
        Some(&tensor)
    );
    let s = &stats.tensors[&tensor];
    let all = range::all_ranges(s, RangeTarget::default(), false);
    assert!(all.len() >= 4, "every method's range: {all:?}");
    for (method, expected) in &all {
        let text = format!("{method} [{:.4}, {:.4}]", expected.lo, expected.hi);
        assert!(
            h.query_by_label(&text).is_some(),
            "the histogram lists {text}"
        );
    }
    assert!(
        h.query_by_label("in use").is_some(),
        "the chosen range is marked"
    );
    // Another method for this tensor goes into the recipe (and undoes).
    press(&mut h, "Use percentile");
    assert_eq!(
        recipe(&h).tensor_overrides[&tensor]
            .method
            .as_ref()
            .map(|m| m.name()),
        Some("percentile")
    );
    h.key_press_modifiers(Modifiers::COMMAND, Key::Z);
    h.run_steps(2);
    assert!(recipe(&h).tensor_overrides.is_empty());

    // Quantize & compare from the cached statistics: the heat map and the outputs table.
    quantize_and_compare(&mut h, "quantize & compare");
    no_notices(&h);
    let baseline = {
        let doc = h.state().document().unwrap();
        let comparison = doc.work.results.comparison.as_ref().expect("a comparison");
        assert_eq!(comparison.recipe, *doc.recipe());
        assert_eq!(
            doc.planned.counts.quantized,
            comparison.quantized_nodes.len(),
            "the recipe panel and Results count the same quantized nodes"
        );
        assert!(doc.view.panel.heat_map, "the graph shows the heat map");
        let heat = doc.view.heat.as_ref().expect("per-node SQNR");
        assert!(heat.iter().flatten().count() > 20, "measured nodes");
        assert!(comparison.latency.is_some(), "latency beside accuracy");
        assert_eq!(comparison.outputs.len(), 1);
        comparison.outputs[0].sqnr_db
    };
    assert_eq!(
        h.state().document().unwrap().view.panel.tab,
        WorkTab::Results
    );
    assert!(h.query_by_label("SQNR dB").is_some(), "the outputs table");
    // The speed, called a speed-up only when the runs allow it.
    let verdict = comparison_latency_verdict(&h);
    assert!(
        h.query_by_label_contains(&format!("· {verdict}")).is_some(),
        "latency: {verdict}"
    );
    assert!(
        h.query_by_label_contains("largest: float #").is_some(),
        "the classifier output side by side"
    );
    assert!(h.state().metrics().compare_to_heat_map.is_some());

    // The heat map switched to local error: each node's own quantization, the legend says so.
    let cumulative = h.state().document().unwrap().view.heat.clone().unwrap();
    press(&mut h, "Local");
    {
        let doc = h.state().document().unwrap();
        assert_eq!(doc.view.panel.heat_kind, ErrorKind::Local);
        let local = doc.view.heat.as_ref().expect("per-node local SQNR");
        assert_eq!(local.len(), cumulative.len());
        assert!(local.iter().flatten().count() > 20, "measured nodes");
        assert_ne!(
            *local, cumulative,
            "local figures differ from cumulative ones"
        );
        let comparison = doc.work.results.comparison.as_ref().unwrap();
        let best_local = comparison
            .tensors
            .local
            .iter()
            .map(|l| l.sqnr_db)
            .fold(f64::NEG_INFINITY, f64::max);
        assert!(best_local.is_finite());
    }
    assert!(
        h.query_by_label_contains("Local SQNR").is_some(),
        "the legend"
    );
    assert!(
        h.query_by_label_contains("Where the error is made")
            .is_some(),
        "the worst local tensors"
    );
    press(&mut h, "Cumulative");
    assert_eq!(
        h.state().document().unwrap().view.heat.as_ref(),
        Some(&cumulative)
    );

    // Auto-exclude to a target typed into the Sensitivity tab.
    press(&mut h, "Sensitivity");
    let target = baseline + 0.5;
    replace_text(&mut h, "Target", &format!("{target:.2}"));
    let typed = h.state().document().unwrap().work.settings.target_value;
    assert!((typed - target).abs() < 0.01, "typed target {typed}");
    let before = recipe(&h);
    press(&mut h, "Auto-exclude");
    settle(&mut h, "auto-exclude");
    no_notices(&h);
    let after = recipe(&h);
    let result = auto_excluded(&h);
    assert!(
        !result.excluded.is_empty() || !result.promoted.is_empty(),
        "{result:?}"
    );
    assert!(result.sqnr_db > baseline, "{result:?} vs {baseline}");
    assert_eq!(
        after.nodes_to_exclude.len(),
        before.nodes_to_exclude.len() + result.excluded.len()
    );
    // Promotions (16-bit activations, tried before float) land in the same change.
    assert_eq!(
        after.node_precision.len(),
        before.node_precision.len() + result.promoted.len()
    );
    assert!(
        h.query_by_label("SQNR with it in float").is_some(),
        "the ranking"
    );
    // It is undoable, and redoable.
    h.key_press_modifiers(Modifiers::COMMAND, Key::Z);
    h.run_steps(2);
    assert_eq!(recipe(&h), before);
    h.key_press_modifiers(Modifiers::COMMAND | Modifiers::SHIFT, Key::Z);
    h.run_steps(2);
    assert_eq!(recipe(&h), after);
    // A ranking row selects its node in the graph.
    let worst = h
        .state()
        .document()
        .unwrap()
        .work
        .results
        .scanned
        .as_ref()
        .unwrap()
        .sensitivity
        .nodes[0]
        .node
        .clone();
    press(&mut h, &worst);
    let doc = h.state().document().unwrap();
    assert_eq!(doc.selected_names(), [worst]);

    // Save: Ctrl+Shift+S, a path, Save; the job checks the model in ONNX Runtime.
    assert!(h.state().has_unsaved_work());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cls.qdq.onnx");
    h.key_press_modifiers(Modifiers::COMMAND | Modifiers::SHIFT, Key::S);
    h.run_steps(2);
    replace_text(&mut h, "Save to", &out.display().to_string());
    press(&mut h, "Save");
    settle(&mut h, "saving");
    no_notices(&h);
    assert!(
        h.state().status().contains("cls.qdq.onnx"),
        "{}",
        h.state().status()
    );
    assert!(
        !h.state().has_unsaved_work(),
        "saved work is not asked about"
    );
    let recipe_file = dir.path().join("cls.recipe.toml");
    assert_eq!(Recipe::load(&recipe_file).unwrap(), after);
    // Every indicator agrees: the recipe panel names the recipe file, and the statistics,
    // which quitting no longer asks about, say the saved model holds their ranges.
    assert_eq!(
        h.state().document().unwrap().planned.recipe_path.as_deref(),
        Some(recipe_file.as_path())
    );
    assert!(
        h.query_by_label(&format!("File: {}", recipe_file.display()))
            .is_some()
    );
    press(&mut h, "Calibration");
    assert!(
        h.query_by_label_contains("the saved model holds their ranges")
            .is_some()
    );
    press(&mut h, "Sensitivity");

    // The saved file loads in ONNX Runtime with the expected nodes left in float.
    runtime
        .session_from_file(&out, &[EpSpec::Cpu], Default::default())
        .expect("the saved model loads in ONNX Runtime");
    let saved = Model::load(&out).unwrap();
    // The file is exactly what the recipe and the cached statistics produce...
    let float = qdq_studio::sample::sample_model().unwrap();
    let expected = qdq_studio::quant::quantize(&float, Some(&stats), &after).unwrap();
    assert_eq!(
        saved.to_bytes().unwrap(),
        expected.model.to_bytes().unwrap()
    );
    // The recipe panel's count is the saved model's.
    let quantized = expected.quantized_nodes.len();
    assert_eq!(
        h.state().document().unwrap().planned.counts.quantized,
        quantized
    );
    assert!(
        h.query_by_label(&format!("Quantized: {quantized}"))
            .is_some(),
        "the recipe panel says {quantized} quantized"
    );
    // ...which leaves the auto-excluded nodes and every Mul in float.
    for name in &result.excluded {
        assert!(
            !expected.quantized_nodes.contains(name),
            "{name} stays float"
        );
    }
    let graph = Graph::build(&saved);
    let muls: Vec<&str> = graph
        .nodes()
        .iter()
        .filter(|n| n.op_type == "Mul")
        .map(|n| n.name.as_str())
        .collect();
    assert!(!muls.is_empty());
    for name in &muls {
        assert!(
            !expected.quantized_nodes.iter().any(|q| q == name),
            "Mul {name} stays float"
        );
    }
    // In the file itself: a float Conv reads its float weight, a quantized one a DQ output.
    let weight_dequantized = |name: &str| {
        let node = graph.node_by_name(name).unwrap();
        fed_by_dequantize(&graph, name)
            && node.inputs.get(1).is_some_and(|w| {
                graph
                    .tensor(w)
                    .and_then(|t| t.producer)
                    .is_some_and(|p| graph.node(p).op_type == "DequantizeLinear")
            })
    };
    let convs: Vec<&str> = graph
        .nodes()
        .iter()
        .filter(|n| n.op_type == "Conv")
        .map(|n| n.name.as_str())
        .collect();
    let quantized_convs = convs.iter().filter(|c| weight_dequantized(c)).count();
    assert!(
        quantized_convs > 30,
        "{quantized_convs} Conv nodes quantized"
    );
    for name in result
        .excluded
        .iter()
        .filter(|n| convs.contains(&n.as_str()))
    {
        assert!(
            !weight_dequantized(name),
            "excluded Conv {name} keeps float weights"
        );
    }

    // A target no set of float nodes reaches: the recipe-wide changes are measured and
    // offered, and one click (undoable) takes one into the recipe.
    // Two steps show it as well as ten: each step opens a session per try.
    replace_text(&mut h, "Target", "119");
    replace_text(&mut h, "at most", "2");
    assert_eq!(h.state().document().unwrap().work.settings.max_excluded, 2);
    press(&mut h, "Auto-exclude");
    settle(&mut h, "auto-exclude to an unreachable target");
    no_notices(&h);
    let unreached = auto_excluded(&h);
    assert!(!unreached.reached, "{unreached:?}");
    assert_eq!(unreached.alternatives.len(), 5, "{unreached:?}");
    let before_change = recipe(&h);
    assert_eq!(before_change, unreached.recipe);
    press(&mut h, "Apply 16-bit activations (uint16)");
    let changed = recipe(&h);
    assert_eq!(
        changed.activation_type,
        qdq_studio::recipe::QuantType::Uint16
    );
    assert_eq!(
        Recipe {
            activation_type: before_change.activation_type,
            ..changed
        },
        before_change
    );
    assert!(h.state().status().contains("16-bit activations"));
    h.key_press_modifiers(Modifiers::COMMAND, Key::Z);
    h.run_steps(2);
    assert_eq!(recipe(&h), before_change);
}

#[test]
fn bad_data_is_shown_before_running_and_a_failed_save_loses_nothing() {
    let mut h = harness();
    h.state_mut().open(Source::Sample);
    settle(&mut h, "opening");
    // Data that does not fit: the labels file has no array for input x.
    let labels = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/sample/eval_labels.npy");
    replace_text(&mut h, "Data path", &labels.display().to_string());
    settle(&mut h, "checking");
    let problem = match &h.state().document().unwrap().work.checks.calibration {
        qdq_studio::app::work::data::DataCheck::Problem(p) => p.clone(),
        _ => panic!("the mismatch is shown before running"),
    };
    assert!(h.query_by_label_contains(&problem).is_some(), "{problem}");
    // Calibrate is refused with the reason; nothing runs.
    h.key_press_modifiers(Modifiers::COMMAND, Key::R);
    h.run_steps(2);
    assert!(!h.state().document().unwrap().work.busy());
    assert_eq!(
        h.state().notices()[0].title,
        "The calibration data does not fit the model"
    );
    h.get_by_label("Dismiss").click();
    h.run_steps(2);

    // Quantize & compare before calibrating says what to do.
    h.key_press(Key::F5);
    h.run_steps(2);
    assert_eq!(h.state().notices()[0].title, "Calibrate first");
    h.get_by_label("Dismiss").click();
    h.run_steps(2);

    // Saving over the data the model is calibrated from is refused before anything runs,
    // and the file is as it was.
    let before = std::fs::read(&labels).unwrap();
    h.key_press_modifiers(Modifiers::COMMAND | Modifiers::SHIFT, Key::S);
    h.run_steps(2);
    replace_text(&mut h, "Save to", &labels.display().to_string());
    press(&mut h, "Save");
    h.run_steps(2);
    let notice = &h.state().notices()[0];
    assert_eq!(notice.title, "The quantized model was not saved");
    assert!(
        notice.detail.contains("it is the calibration data"),
        "{}",
        notice.detail
    );
    assert!(!h.state().document().unwrap().work.busy());
    assert_eq!(std::fs::read(&labels).unwrap(), before);
    h.get_by_label("Dismiss").click();
    h.run_steps(2);

    // Random data instead; calibrate; save into a folder that cannot exist (its parent is
    // a file): refused before any work, and the statistics and recipe are still there.
    let doc = h.state_mut().document_mut().unwrap();
    doc.work.settings.calibration =
        qdq_studio::app::work::data::DataChoice::random_for(&doc.work.inputs);
    doc.work.settings.calibration.shapes = "x:1x3x48x192".into();
    doc.work.settings.calibration.random_samples = 4;
    h.run_steps(2);
    settle(&mut h, "checking");
    calibrate(&mut h);
    no_notices(&h);
    assert_eq!(statistics(&h).info.samples, 4);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    h.key_press_modifiers(Modifiers::COMMAND | Modifiers::SHIFT, Key::S);
    h.run_steps(2);
    replace_text(
        &mut h,
        "Save to",
        &file.join("m.onnx").display().to_string(),
    );
    press(&mut h, "Save");
    settle(&mut h, "saving");
    let notice = &h.state().notices()[0];
    assert_eq!(notice.title, "The quantized model was not saved");
    assert!(
        notice.detail.contains("cannot create output folder")
            && notice.detail.contains("a-file is a file"),
        "{}",
        notice.detail
    );
    assert!(
        h.state().document().unwrap().work.results.stats.is_some(),
        "the work is still there"
    );
    assert!(
        !h.state().status().ends_with('…'),
        "the status bar no longer says it is saving: {}",
        h.state().status()
    );
    assert!(h.state().has_unsaved_work());
    h.get_by_label("Dismiss").click();
    h.run_steps(2);

    // Quitting with unsaved work asks first; Stay keeps everything.
    h.key_press_modifiers(Modifiers::COMMAND, Key::Q);
    h.run_steps(2);
    assert!(
        h.query_by_label("Quit without saving").is_some(),
        "the question is asked"
    );
    press(&mut h, "Stay");
    assert!(h.query_by_label("Quit without saving").is_none());
    assert!(h.state().document().unwrap().work.results.stats.is_some());
}

/// Statistics from other tools load in the studio: an onnxruntime calibration cache (and a
/// TensorRT one) becomes the statistics quantize & compare runs from, and the plan's ranges
/// are the cache's.
#[test]
fn the_studio_loads_onnxruntime_and_tensorrt_calibration_caches() {
    let dir = tempfile::tempdir().unwrap();
    let (ort_cache, trt_cache) = (dir.path().join("ort.json"), dir.path().join("calib.cache"));
    let out = common::cli()
        .args(["calibrate", "--onnx_path"])
        .arg(common::asset("ppocr_cls.onnx"))
        .arg("--calibration_data_path")
        .arg(common::asset("calib.npz"))
        .arg("-o")
        .arg(dir.path().join("stats.json"))
        .arg("--export_ort_cache")
        .arg(&ort_cache)
        .arg("--export_trt_cache")
        .arg(&trt_cache)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ranges = qdq_studio::calib::file::read_ort_cache(&ort_cache).unwrap();

    let mut h = harness();
    h.state_mut().open(Source::Sample);
    settle(&mut h, "opening");
    h.state_mut().push(qdq_studio::app::command::Command::Work(
        WorkCommand::LoadStatistics(ort_cache.clone()),
    ));
    h.run_steps(2);
    no_notices(&h);
    assert!(
        h.state()
            .status()
            .contains("an onnxruntime calibration cache"),
        "{}",
        h.state().status()
    );
    let doc = h.state().document().unwrap();
    let stats = doc.work.results.stats.clone().expect("statistics loaded");
    assert_eq!(stats.tensors.len(), ranges.len());
    assert!(
        doc.planned.plan.from_statistics,
        "the plan follows the loaded statistics"
    );
    // A tensor quantized with its own range (MinMax) gets the cache's range exactly.
    let (tensor, r) = ranges
        .iter()
        .find(|(t, _)| doc.planned.plan.range_tensor(t).as_deref() == Some(t.as_str()))
        .expect("a tensor with its own range");
    let planned = doc
        .planned
        .plan
        .range(tensor, Some(&stats))
        .unwrap()
        .unwrap();
    assert_eq!((planned.lo, planned.hi), (r.lo.min(0.0), r.hi.max(0.0)));

    // Quantize & compare runs from them. (Per-tensor weights: caches hold no shapes, and
    // without the Softmax input's rank the opset-13 raise per-channel weights need is refused.)
    let doc = h.state_mut().document_mut().unwrap();
    doc.planned.editor.change(|r| r.per_channel = false);
    doc.refresh();
    quantize_and_compare(&mut h, "quantize & compare");
    no_notices(&h);
    let doc = h.state().document().unwrap();
    let comparison = doc.work.results.comparison.as_ref().expect("a comparison");
    assert!(
        comparison.outputs[0].sqnr_db > 20.0,
        "{:?}",
        comparison.outputs
    );

    // A TensorRT cache loads too (symmetric ranges).
    h.state_mut().push(qdq_studio::app::command::Command::Work(
        WorkCommand::LoadStatistics(trt_cache),
    ));
    h.run_steps(2);
    no_notices(&h);
    assert!(
        h.state().status().contains("a TensorRT calibration cache"),
        "{}",
        h.state().status()
    );
}

/// x → LayerNorm → MatMul(w1) → Relu → MatMul(w2) → y with 128 channels (one int4 block), and
/// 16 samples of input data.
fn int4_block(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    use ndarray::{ArrayD, Dimension, IxDyn};
    use qdq_studio::model::{DataType, ModelBuilder, TensorArray};
    let wave = |shape: &[usize], f: f32| {
        TensorArray::Float32(ArrayD::from_shape_fn(IxDyn(shape), |ix| {
            let i = ix.as_array_view().iter().fold(0usize, |a, &v| a * 131 + v);
            (i as f32 * f).sin() * 0.1
        }))
    };
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[1, 8, 128]);
    b.initializer("gamma", TensorArray::Float32(ArrayD::ones(IxDyn(&[128]))));
    b.initializer("w1", wave(&[128, 128], 0.37));
    b.initializer("w2", wave(&[128, 128], 0.71));
    b.node("LayerNormalization", &["x", "gamma"], &["n"])
        .name("ln");
    b.node("MatMul", &["n", "w1"], &["h"]).name("up");
    b.node("Relu", &["h"], &["r"]).name("relu");
    b.node("MatMul", &["r", "w2"], &["y"]).name("down");
    b.output("y", DataType::Float32, &[1, 8, 128]);
    let model = dir.join("block.onnx");
    std::fs::write(&model, b.build().to_bytes().unwrap()).unwrap();
    let data = dir.join("data.npz");
    common::write_npz(&data, &[("x", wave(&[16, 8, 128], 1.3))]);
    (model, data)
}

#[test]
fn int4_layers_show_their_error_in_the_results_heat_map_and_inspector() {
    let dir = tempfile::tempdir().unwrap();
    let (model, data) = int4_block(dir.path());
    let mut h = harness();
    h.state_mut().open(Source::File(model));
    settle(&mut h, "opening");
    h.get_by_value("INT8 (activations and weights)").click();
    h.run_steps(2);
    h.get_by_label("INT4 weight-only").click();
    h.run_steps(3);
    // The data kind starts as random for a model without data beside it: pick a file.
    h.get_all_by_value("Random").next().unwrap().click();
    h.run_steps(2);
    h.get_by_label(".npz / .npy file").click();
    h.run_steps(2);
    replace_text(&mut h, "Data path", &data.display().to_string());
    settle(&mut h, "checking");
    calibrate(&mut h);
    no_notices(&h);
    quantize_and_compare(&mut h, "quantize & compare");
    no_notices(&h);
    let doc = h.state().document().unwrap();
    let comparison = doc.work.results.comparison.as_ref().expect("a comparison");
    let layers = &comparison.tensors.layers;
    assert_eq!(layers.len(), 2, "{layers:?}");
    // Both MatMuls are coloured on the heat map, by their output's error.
    let heat = doc.view.heat.as_ref().expect("per-node SQNR");
    for name in ["up", "down"] {
        let id = doc.opened.graph.node_by_name(name).unwrap().id;
        let layer = layers.iter().find(|l| l.node == name).unwrap();
        assert_eq!(heat[id.0], Some(layer.sqnr_db), "{name}");
    }
    let down = doc.opened.graph.node_by_name("down").unwrap().id;
    assert!(
        h.query_by_label_contains("Worst layers").is_some(),
        "the Results tab lists the layers"
    );
    // The inspector shows the selected layer's output and weight error.
    h.state_mut().document_mut().unwrap().view.selection = vec![down];
    h.run_steps(3);
    assert!(
        h.query_by_label("Quantization error (last comparison)")
            .is_some()
    );
    let weight = comparison_weight(&h, "w2");
    // Once in the Results tab's worst layers, once in the inspector.
    assert_eq!(
        h.query_all_by_label_contains(&format!("weight {weight:.2} dB"))
            .count(),
        2,
        "the inspector shows w2's error"
    );
}

/// The measured error of weight `name` in the open document's last comparison.
/// What the comparison's latency is called (a speed-up only when the runs allow it).
fn comparison_latency_verdict(h: &Harness<'_, Studio>) -> String {
    let doc = h.state().document().unwrap();
    let comparison = doc.work.results.comparison.as_ref().unwrap();
    comparison.latency.as_ref().unwrap().verdict().to_string()
}

fn comparison_weight(h: &Harness<'_, Studio>, name: &str) -> f64 {
    let doc = h.state().document().unwrap();
    let comparison = doc.work.results.comparison.as_ref().unwrap();
    comparison
        .tensors
        .weights
        .iter()
        .find(|w| w.weight == name)
        .map(|w| w.sqnr_db)
        .expect("the weight was measured")
}

#[test]
fn the_results_tab_shows_output_kinds_and_accuracy_against_labels() {
    use qdq_studio::calib::data::{DataSpec, model_inputs};
    use qdq_studio::eval::compare::OutputKind;
    let dir = tempfile::tempdir().unwrap();
    // The sample's evaluation images with labels beside them: class 0 for every sample.
    let float = Model::load(&common::asset("ppocr_cls.onnx")).unwrap();
    let mut source = DataSpec::Npz {
        path: common::asset("eval.npz"),
    }
    .open(&model_inputs(&Graph::build(&float)))
    .unwrap();
    let x = source.next_batch(64).unwrap().unwrap().inputs.remove(0).1;
    let n = x.shape()[0];
    let labels = qdq_studio::model::TensorArray::Int64(ndarray::ArrayD::zeros(vec![n]));
    let data = dir.path().join("labelled.npz");
    common::write_npz(&data, &[("x", x), ("labels", labels)]);

    let mut h = harness();
    open_calibrate_compare(&mut h, Source::Sample, Some((data, true)));
    let comparison = h
        .state()
        .document()
        .unwrap()
        .work
        .results
        .comparison
        .clone();
    let metrics = &comparison.expect("a comparison").outputs[0];
    assert_eq!(metrics.kind, OutputKind::Classifier);
    let accuracy = &metrics.task[0];
    assert!(
        h.query_by_label("Against ground truth ('labels')")
            .is_some(),
        "the task table"
    );
    assert!(h.query_by_label("top-1 accuracy").is_some());
    assert!(
        h.query_all_by_label(&format!("{:.2}%", accuracy.quantized * 100.0))
            .count()
            >= 1,
        "the quantized accuracy is shown"
    );
    assert!(h.query_by_label_contains("Kernels: ").is_some(), "kernels");
    // Only the agreements that fit some output get a column: a two-class classifier has
    // top-1, no top-5, neighbours or mask IoU.
    assert!(h.query_by_label("top-1").is_some());
    for absent in ["top-5", "sequences", "neighbours", "mask IoU"] {
        assert!(h.query_by_label(absent).is_none(), "{absent}");
    }

    // Read the output as plain values: no class metrics, no accuracy.
    let kind_menu = |value: &'static str| {
        move |n: &egui_kittest::kittest::AccessKitNode<'_>| {
            n.role() == egui::accesskit::Role::ComboBox && n.value().as_deref() == Some(value)
        }
    };
    h.get_by(kind_menu("class scores")).click();
    h.run_steps(2);
    h.get_by_label("values").click();
    h.run_steps(2);
    let kinds = &h.state().document().unwrap().work.settings.task.kinds;
    assert_eq!(kinds.values().collect::<Vec<_>>(), [&OutputKind::Values]);
    assert!(
        h.query_by_label_contains("measured with other output kinds")
            .is_some()
    );
    quantize_and_compare(&mut h, "quantize & compare again");
    let doc = h.state().document().unwrap();
    let metrics = &doc.work.results.comparison.as_ref().unwrap().outputs[0];
    assert_eq!(metrics.kind, OutputKind::Values);
    assert_eq!((metrics.top1_agreement, metrics.task.len()), (None, 0));
    assert!(h.query_by(kind_menu("values (chosen)")).is_some());
    assert!(
        h.query_by_label("Against ground truth ('labels')")
            .is_none()
    );
}

#[test]
fn unsaved_work_is_asked_about_before_another_model_replaces_it() {
    use qdq_studio::app::command::Command;
    use qdq_studio::report::charts::clipped_share;
    let mut h = harness();
    h.state_mut().open(Source::Sample);
    settle(&mut h, "opening");
    calibrate(&mut h);
    assert!(h.state().has_unsaved_work(), "fresh statistics are unsaved");

    // MinMax's range holds every value seen: its row clips nothing, though the histogram's
    // outer bins reach beyond the values (a bin-width estimate said otherwise).
    let stats = statistics(&h);
    let (name, estimate) = stats
        .tensors
        .iter()
        .filter_map(|(name, t)| {
            let h = t.histogram.as_ref()?;
            let range = (t.min.min(0.0), t.max.max(0.0));
            Some((name.clone(), clipped_share(h, range, None)))
        })
        .find(|(_, estimate)| *estimate > 1e-5)
        .expect("a tensor whose outer bins reach beyond its values");
    h.state_mut()
        .push(Command::Work(WorkCommand::ShowHistogram(name.clone())));
    h.run_steps(3);
    assert!(
        h.query_all_by_label("clips 0.000%").count() >= 1,
        "MinMax clips nothing on {name}"
    );
    let wrong = format!("clips {:.3}%", estimate * 100.0);
    assert!(h.query_by_label(&wrong).is_none(), "{wrong} on {name}");

    // Opening another model asks first; Stay keeps everything.
    let other = common::asset("ppocr_cls.onnx");
    h.state_mut()
        .push(Command::App(AppCommand::Open(other.clone())));
    h.run_steps(3);
    assert!(
        h.query_by_label("Opening ppocr_cls.onnx replaces them.")
            .is_some()
    );
    press(&mut h, "Stay");
    assert!(h.query_by_label("Open without saving").is_none());
    let doc = h.state().document().unwrap();
    assert!(doc.work.results.stats.is_some(), "the work is still there");
    assert_eq!(doc.opened.source, Source::Sample);
    // Asked again, "Open without saving" opens it.
    h.state_mut()
        .push(Command::App(AppCommand::Open(other.clone())));
    h.run_steps(3);
    press(&mut h, "Open without saving");
    settle(&mut h, "opening the other model");
    let doc = h.state().document().unwrap();
    assert_eq!(doc.opened.source, Source::File(other));
    assert!(doc.work.results.stats.is_none());
    no_notices(&h);

    // A model that cannot be opened: the notice says why and the status bar no longer says
    // "Opening …".
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("truncated.onnx");
    std::fs::write(&broken, b"\x08\x07\x12").unwrap();
    h.state_mut().push(Command::App(AppCommand::Open(broken)));
    h.run_steps(2);
    settle(&mut h, "failing to open");
    assert_eq!(h.state().status(), "Could not open truncated.onnx");
    assert_eq!(h.state().notices().len(), 1);

    // Escape closes the shortcuts window.
    h.get_by_label("Dismiss").click();
    h.run_steps(2);
    let before = h.query_all_by_label("Keyboard shortcuts").count();
    h.state_mut().push(Command::App(AppCommand::ShowShortcuts));
    h.run_steps(2);
    assert!(
        h.query_all_by_label("Keyboard shortcuts").count() > before,
        "the window is shown"
    );
    h.key_press(Key::Escape);
    h.run_steps(2);
    assert_eq!(h.query_all_by_label("Keyboard shortcuts").count(), before);
}

#[test]
fn nan_met_in_calibration_is_said_beside_the_statistics() {
    use ndarray::ArrayD;
    use qdq_studio::app::command::Command;
    use qdq_studio::model::{DataType, ModelBuilder, SaveOptions, TensorArray};
    let dir = tempfile::tempdir().unwrap();
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[-1, 4]);
    let w: Vec<f32> = (0..16).map(|i| i as f32 / 8.0 - 1.0).collect();
    b.initializer(
        "w",
        TensorArray::Float32(ArrayD::from_shape_vec(vec![4, 4], w).unwrap()),
    );
    b.node("MatMul", &["x", "w"], &["y"]).name("mm");
    b.output("y", DataType::Float32, &[-1, 4]);
    let model = dir.path().join("mm.onnx");
    b.build().save(&model, &SaveOptions::default()).unwrap();
    let mut x: Vec<f32> = (0..32).map(|i| (i % 7) as f32 - 3.0).collect();
    x[5] = f32::NAN;
    let data = dir.path().join("x.npz");
    common::write_npz(
        &data,
        &[(
            "x",
            TensorArray::Float32(ArrayD::from_shape_vec(vec![8, 4], x).unwrap()),
        )],
    );
    let mut h = harness();
    h.state_mut().open(Source::File(model.clone()));
    settle(&mut h, "opening");
    h.state_mut().push(Command::Work(WorkCommand::SetDataPath {
        evaluation: false,
        path: data.clone(),
    }));
    h.run_steps(2);
    settle(&mut h, "checking");
    calibrate(&mut h);
    no_notices(&h);
    assert!(
        h.state().status().contains("tensor(s) hold NaN or ±Inf"),
        "{}",
        h.state().status()
    );
    press(&mut h, "Calibration");
    assert!(
        h.query_by_label_contains("hold NaN or ±Inf (left out of their ranges)")
            .is_some()
    );
    press(&mut h, "Show x");
    assert_eq!(
        h.state()
            .document()
            .unwrap()
            .view
            .panel
            .histogram_tensor
            .as_deref(),
        Some("x")
    );

    // The data a model was run on comes back when it is opened again.
    h.state_mut().open(Source::Sample);
    settle(&mut h, "opening the sample");
    h.state_mut().open(Source::File(model.clone()));
    settle(&mut h, "opening the model again");
    let settings = &h.state().document().unwrap().work.settings;
    assert_eq!(settings.calibration.path, data.display().to_string());
}

#[test]
fn equalization_and_bias_correction_are_recipe_switches_that_calibration_honours() {
    let mut h = harness();
    h.state_mut().open(Source::Sample);
    settle(&mut h, "opening");
    press(&mut h, "even out weight channel ranges");
    press(&mut h, "remove the weights' mean error");
    let chosen = recipe(&h);
    assert!(chosen.preprocessing.equalize && chosen.bias_correction);
    assert!(
        h.state().status().contains("Bias correction on"),
        "{}",
        h.state().status()
    );
    // The plan is drawn from the equalized model.
    let prepared = h
        .state()
        .document()
        .unwrap()
        .planned
        .prepared
        .as_ref()
        .ok()
        .cloned();
    assert!(
        prepared.is_some_and(|p| !p.report.equalized.is_empty()),
        "the studio's model is equalized"
    );
    calibrate(&mut h);
    no_notices(&h);
    let stats = statistics(&h);
    assert!(stats.info.equalized, "calibrated on the equalized model");
    assert!(
        stats.input_means.len() >= 50,
        "mean inputs of the Convs: {}",
        stats.input_means.len()
    );
    quantize_and_compare(&mut h, "quantize and compare");
    no_notices(&h);
    let results = &h.state().document().unwrap().work.results;
    let comparison = results
        .fresh_comparison(&chosen)
        .expect("a comparison of the recipe with both techniques");
    // The activations equalization rescaled are measured at the scale the quantizer recorded,
    // not drawn as -1 dB of error nor set aside; their weights too.
    let tensors = &comparison.tensors;
    assert!(tensors.rescaled.is_empty(), "{:?}", tensors.rescaled);
    assert!(
        // 137 on the simplified graph (its bias Adds and HardSigmoids fold into Convs).
        tensors.activations.len() > 130
            && tensors.activations.iter().all(|a| a.xmodel_sqnr_db > 10.0),
        "every activation measured: {} {:?}",
        tensors.activations.len(),
        tensors
            .activations
            .iter()
            .map(|a| (&a.tensor, a.xmodel_sqnr_db))
            .filter(|(_, db)| *db <= 10.0)
            .collect::<Vec<_>>()
    );
    assert!(
        // (Bias correction moves biases on purpose: those are not held to it.)
        tensors.weights.iter().filter(|w| w.rescaled).count() >= 6
            && tensors
                .weights
                .iter()
                .all(|w| !w.rescaled || w.sqnr_db > 20.0),
        "equalized weights measured with their rescaling taken out: {:?}",
        tensors
            .weights
            .iter()
            .filter(|w| w.rescaled)
            .map(|w| (&w.weight, w.sqnr_db, w.rescaled))
            .collect::<Vec<_>>()
    );
    h.run_steps(2);
    assert!(
        h.query_by_label_contains("rescaled activation(s) not measured")
            .is_none(),
        "nothing is left unmeasured"
    );
}

#[test]
fn gptq_layerwise_and_weight_ranges_are_recipe_switches_that_calibration_honours() {
    let mut h = harness();
    h.state_mut().open(Source::Sample);
    settle(&mut h, "opening");
    press(&mut h, "round weights against inputs");
    press(&mut h, "a range method per tensor");
    assert!(
        h.state().status().contains("Layer-wise ranges on"),
        "{}",
        h.state().status()
    );
    press(&mut h, "clip weight outliers");
    assert!(
        h.state()
            .status()
            .contains("Weight ranges: least squared error"),
        "{}",
        h.state().status()
    );
    // Per-tensor weight scales, from the Recipe panel's menu.
    h.get_by_value("one scale per output channel").click();
    h.run_steps(2);
    h.get_by_label("one scale per weight tensor").click();
    h.run_steps(2);
    assert!(
        h.state()
            .status()
            .contains("Weights: one scale per weight tensor"),
        "{}",
        h.state().status()
    );
    let chosen = recipe(&h);
    assert!(chosen.gptq && chosen.layerwise_range && !chosen.per_channel);
    assert_eq!(chosen.weight_range, qdq_studio::recipe::WeightRange::Mse);
    calibrate(&mut h);
    no_notices(&h);
    let stats = statistics(&h);
    assert!(
        stats.input_hessians.len() >= 50,
        "input Hessians of the Convs: {}",
        stats.input_hessians.len()
    );
    assert!(
        stats.info.layerwise_ranges,
        "the studio's calibration chose ranges"
    );
    assert!(!stats.range_choices.is_empty());
    quantize_and_compare(&mut h, "quantize and compare");
    no_notices(&h);
    let results = &h.state().document().unwrap().work.results;
    assert!(
        results.fresh_comparison(&chosen).is_some(),
        "a comparison of the recipe with both techniques"
    );
    // The Results tab says what GPTQ did, layer by layer, as the CLI does.
    h.run_steps(2);
    assert!(h.query_by_label("What the quantizer did").is_some());
    assert!(
        h.query_by_label_contains("layer output SQNR on held-out calibration samples")
            .is_some(),
        "GPTQ's line"
    );
    assert!(
        h.query_by_label("gptq-rounded layers: the 10 largest")
            .is_some(),
        "GPTQ's table, folded under its title"
    );
}

/// Simplification is a recipe switch: on by default, the sample's hard-swish divisions are
/// planned as quantized multiplications; off, they stay float Divs, and the status says to
/// calibrate again.
#[test]
fn simplification_is_a_recipe_switch_the_plan_follows() {
    let mut h = harness();
    h.state_mut().open(Source::Sample);
    settle(&mut h, "opening");
    assert!(recipe(&h).preprocessing.simplify);
    let quantized = |h: &Harness<'_, Studio>| {
        let nodes = &h.state().document().unwrap().planned.plan.nodes;
        let quantized: Vec<&String> = nodes
            .iter()
            .filter(|(_, d)| **d == qdq_studio::quant::NodeDecision::Quantized)
            .map(|(name, _)| name)
            .collect();
        let divs = quantized.iter().filter(|n| n.starts_with("Div@")).count();
        (quantized.len(), divs)
    };
    assert_eq!(quantized(&h), (178, 18));
    // The inspector of a rewritten Div says what it runs as.
    let div = {
        let graph = &h.state().document().unwrap().opened.graph;
        graph
            .nodes()
            .iter()
            .find(|n| n.op_type == "Div")
            .unwrap()
            .id
    };
    h.state_mut().push(qdq_studio::app::command::Command::View(
        ViewCommand::Select(div, qdq_studio::app::command::SelectMode::Replace),
    ));
    h.run_steps(3);
    assert!(
        h.query_by_label_contains("its constant divisor, which quantizes where")
            .is_some()
    );
    let switch = "fold what the runtime fuses";
    press(&mut h, switch);
    assert!(!recipe(&h).preprocessing.simplify);
    assert!(
        h.state().status().contains("Simplification off"),
        "{}",
        h.state().status()
    );
    assert_eq!(quantized(&h), (168, 0));
    assert!(
        h.query_by_label_contains("runs as a Mul by the reciprocal")
            .is_none()
    );
    press(&mut h, switch);
    assert!(recipe(&h).preprocessing.simplify);
    assert_eq!(quantized(&h), (178, 18));
}

/// "Choose per weight" measures each weight's range at the outputs and changes the recipe
/// once, undoably: the outlier weight gets its least-error range, the other keeps its
/// extremes.
#[test]
fn weight_ranges_chosen_by_the_outputs_are_one_undoable_recipe_change() {
    let dir = tempfile::tempdir().unwrap();
    let (model, data) = (dir.path().join("m.onnx"), dir.path().join("x.npz"));
    common::weight_outlier_model()
        .save(&model, &Default::default())
        .unwrap();
    common::write_npz(&data, &[("x", common::weight_outlier_data(64, 3))]);
    let mut h = harness();
    open_calibrate_compare(&mut h, Source::File(model), Some((data, false)));
    h.get_by_value("one scale per output channel").click();
    h.run_steps(2);
    h.get_by_label("one scale per weight tensor").click();
    h.run_steps(2);
    // With the outlier's row computed in float (the default) there would be nothing to clip.
    h.get_by_label_contains("Outlier rows in float").click();
    h.run_steps(2);
    let before = recipe(&h);
    assert!(!before.per_channel && !before.preprocessing.outlier_rows);
    press(&mut h, "Choose per weight");
    settle(&mut h, "choosing weight ranges");
    no_notices(&h);
    let status = h.state().status().to_owned();
    assert!(
        status.contains("Weight ranges: 1 of 2 weight(s) clipped") && status.contains("Ctrl+Z"),
        "{status}"
    );
    let chosen = recipe(&h);
    assert_eq!(
        chosen.tensor_overrides["w1"].weight_range,
        Some(qdq_studio::recipe::WeightRange::Mse)
    );
    // w2 keeps its extremes; on a CPU whose u8×s8 kernels saturate on its 8 bits, the search
    // may give it 7 (the weight-range tests check that choice).
    assert!(
        chosen
            .tensor_overrides
            .get("w2")
            .is_none_or(|o| o.weight_range.is_none()),
        "{:?}",
        chosen.tensor_overrides
    );
    h.key_press_modifiers(Modifiers::COMMAND, Key::Z);
    h.run_steps(2);
    assert_eq!(recipe(&h), before, "one undo takes the whole choice back");
}

#[test]
fn shapes_the_file_does_not_declare_are_shown_as_calibration_saw_them() {
    use qdq_studio::workflow::tensor_facts::ShapeSource;
    let mut h = harness();
    h.state_mut().open(Source::Sample);
    settle(&mut h, "opening");
    // The sample declares no value_info: a batch norm's output has no type or shape in the
    // file; the type is inferred at once, the shape is known once calibration has seen it.
    // Its scale, a Constant node's value, has its dims at once.
    let conv = {
        let doc = h.state().document().unwrap();
        let node = doc
            .opened
            .graph
            .nodes()
            .iter()
            .find(|n| n.op_type == "BatchNormalization")
            .unwrap();
        let output = node.outputs[0].clone();
        assert!(
            doc.opened
                .graph
                .tensor(&output)
                .unwrap()
                .elem_type
                .is_none()
        );
        assert_eq!(doc.tensor_type(&output), "float32");
        assert_eq!(doc.tensor_shape(&output), None);
        let scale = doc
            .tensor_shape(&node.inputs[1])
            .expect("the Constant's dims");
        assert_eq!(scale.source, ShapeSource::Declared);
        assert_eq!(scale.dims.len(), 1, "{}", scale.text());
        (node.id, output, node.inputs[0].clone())
    };
    let (id, output, conv_output) = conv;
    calibrate(&mut h);
    no_notices(&h);
    let shape = h
        .state()
        .document()
        .unwrap()
        .tensor_shape(&output)
        .expect("seen in calibration");
    assert_eq!(shape.source, ShapeSource::Observed);
    assert!(
        shape.dims.len() == 4 && !shape.dims_text().contains('?'),
        "{}",
        shape.text()
    );
    // The Conv's output before the batch norm is folded away, never calibrated: it has the
    // batch norm's shape.
    let before = h.state().document().unwrap().tensor_shape(&conv_output);
    assert_eq!(before, Some(shape.clone()), "{conv_output}");
    // The inspector shows it.
    h.state_mut().document_mut().unwrap().view.selection = vec![id];
    h.run_steps(3);
    assert_eq!(
        h.query_all_by_label(&shape.dims_text()).count(),
        2,
        "the inspector lists {conv_output} and {output} as {}",
        shape.dims_text()
    );
}

/// The float model onnxruntime's QDQ fixture was made from: the sample pre-processed
/// (Constant weights as initializers, batch norms folded) with its nodes named.
fn sample_preprocessed(dir: &Path) -> std::path::PathBuf {
    let float = Model::load(&common::asset("ppocr_cls.onnx")).unwrap();
    // As the fixture was made: onnxruntime quantized the sample pre-processed, unsimplified.
    let options = qdq_studio::recipe::Preprocessing {
        simplify: false,
        ..Default::default()
    };
    let (mut float, _) = qdq_studio::quant::preprocess::preprocess(&float, &options).unwrap();
    qdq_studio::quant::name_nodes(&mut float);
    let path = dir.join("float.onnx");
    float.save(&path, &Default::default()).unwrap();
    path
}

#[test]
fn an_onnxruntime_qdq_model_reads_as_a_quantized_graph_and_compares_against_its_float_model() {
    let dir = tempfile::tempdir().unwrap();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ort_qdq_sample_pt.onnx");
    let mut h = harness();
    h.state_mut().open(Source::File(fixture));
    settle(&mut h, "opening");
    no_notices(&h);
    {
        let doc = h.state().document().unwrap();
        assert!(doc.is_quantized());
        let graph = &doc.opened.graph;
        // Every Q/DQ pair is folded: no QuantizeLinear/DequantizeLinear box is drawn, and
        // every other node is.
        for node in graph.nodes() {
            let drawn = doc.opened.layout.positions[node.id.0].is_some();
            let qdq = matches!(
                node.op_type.as_str(),
                "QuantizeLinear" | "DequantizeLinear" | "Constant"
            );
            assert_eq!(drawn, !qdq, "{} ({})", node.name, node.op_type);
        }
        // Each activation pair is a u8 tag on an edge from the float tensor's producer to the
        // consumer of the DequantizeLinear.
        let tags = doc.view.canvas.edge_tags();
        assert!(tags.len() >= 150, "{} tags", tags.len());
        assert!(tags.iter().all(|(_, t)| t == "u8"), "{tags:?}");
        for edge in &doc.opened.layout.edges {
            let source = doc.opened.qdq.source_of(&edge.tensor);
            assert_eq!(
                graph.tensor(source).and_then(|t| t.producer),
                Some(edge.from),
                "{}",
                edge.tensor
            );
        }
        // Each Conv shows its int8 per-tensor weight on its box, and runs quantized.
        let conv = graph.nodes().iter().find(|n| n.op_type == "Conv").unwrap();
        assert_eq!(doc.view.canvas.node_tag(conv.id).as_deref(), Some("W i8"));
        let counts = doc.planned.counts;
        assert_eq!(
            counts.quantized + counts.not_quantizable,
            doc.view.canvas.node_count()
        );
        // 137: the 18 Reshapes of constants and the MaxPool that read float and only write a
        // tensor their consumers quantize compute in float.
        assert!(counts.quantized > 130, "{counts:?}");
    }
    assert!(h.query_by_label("Quantized model").is_some());
    assert!(
        h.query_by_label("Histograms").is_none(),
        "no calibration here"
    );
    // The inspector lists a Conv's Q/DQ parameters.
    let (conv, weight_text) = {
        let doc = h.state().document().unwrap();
        let conv = doc
            .opened
            .graph
            .nodes()
            .iter()
            .find(|n| n.op_type == "Conv")
            .unwrap();
        let (_, weight) = doc
            .opened
            .qdq
            .quantized_inputs(conv)
            .find(|(_, r)| r.constant)
            .unwrap();
        (conv.id, weight.params.describe())
    };
    assert!(weight_text.starts_with("int8 · scale "), "{weight_text}");
    h.state_mut().document_mut().unwrap().view.selection = vec![conv];
    h.run_steps(3);
    assert!(h.query_by_label("Quantization in this model").is_some());
    let weight_row = format!("constant: {weight_text}");
    assert!(h.query_by_label(&weight_row).is_some(), "{weight_row}");
    // Comparing needs the float model first: said, nothing runs.
    quantize_and_compare(&mut h, "a refused comparison");
    assert_eq!(h.state().notices().len(), 1);
    assert_eq!(h.state().notices()[0].title, "Choose the float model first");
    h.state_mut().dismiss(0);
    // The float model is chosen through the path field (no native dialogs in tests).
    press(&mut h, "Float model…");
    let float = sample_preprocessed(dir.path());
    replace_text(&mut h, "Path", &float.display().to_string());
    no_notices(&h);
    assert!(h.query_by_label(&float.display().to_string()).is_some());
    // Random data (all this model has) are used once chosen on purpose.
    compare_on_random_data_once_chosen(&mut h);
    let doc = h.state().document().unwrap();
    let comparison = doc.work.results.comparison.as_ref().expect("compared");
    assert!(
        comparison.tensors.unmatched.is_empty(),
        "{:?}",
        comparison.tensors.unmatched
    );
    assert!(comparison.tensors.activations.len() >= 150);
    assert_eq!(
        comparison.quantized_nodes.len(),
        doc.planned.counts.quantized
    );
    // The heat map colours the QDQ model's own nodes.
    let heat = doc.view.heat.as_ref().expect("a heat map");
    let coloured = heat.iter().filter(|h| h.is_some()).count();
    assert!(coloured >= 100, "{coloured} nodes coloured");
    assert!(heat[conv.0].is_some(), "the Conv's output was measured");
    // Side by side: the float model drawn where this one has the same nodes, on one camera,
    // a click on it selecting this model's node of the same name.
    h.state_mut().push(qdq_studio::app::command::Command::View(
        ViewCommand::ToggleSideBySide,
    ));
    h.run_steps(3);
    let (side_conv, conv_rect) = {
        let doc = h.state().document().unwrap();
        let side = doc.view.side.as_ref().expect("the side view");
        assert!(side.label.starts_with("float model"), "{}", side.label);
        let name = &doc.opened.graph.node(conv).name;
        let side_conv = side.graph.node_by_name(name).unwrap().id;
        assert_eq!(side.to_doc[side_conv.0], Some(conv));
        (side_conv, doc.view.canvas.screen_rect_of(conv).unwrap())
    };
    h.state_mut()
        .push(qdq_studio::app::command::Command::View(ViewCommand::ZoomIn));
    h.run_steps(3);
    let doc = h.state().document().unwrap();
    let side = doc.view.side.as_ref().unwrap();
    assert_eq!(side.canvas.camera(), doc.view.canvas.camera(), "one camera");
    let (main_rect, side_rect) = (
        doc.view.canvas.screen_rect_of(conv).unwrap(),
        side.canvas.screen_rect_of(side_conv).unwrap(),
    );
    assert!(main_rect.width() > conv_rect.width(), "zoomed in");
    assert!((main_rect.width() - side_rect.width()).abs() < 0.5);
    let offset = side.canvas.view_rect().unwrap().min - doc.view.canvas.view_rect().unwrap().min;
    assert!(
        ((side_rect.min - main_rect.min) - offset).length() < 0.5,
        "same place in each half"
    );
    let at = side_rect.center();
    h.event(egui::Event::PointerMoved(at));
    for pressed in [true, false] {
        h.event(egui::Event::PointerButton {
            pos: at,
            button: egui::PointerButton::Primary,
            pressed,
            modifiers: Modifiers::NONE,
        });
    }
    h.run_steps(3);
    assert_eq!(h.state().document().unwrap().view.selection, [conv]);
}

#[test]
fn on_a_trained_transformer_every_count_is_the_saved_models() {
    use qdq_studio::app::command::Command;
    let dir = tempfile::tempdir().unwrap();
    let calib = dir.path().join("sentences.npz");
    common::sentences(&calib, 8, 1);
    let mut h = harness();
    open_calibrate_compare(&mut h, Source::File(common::minilm()), Some((calib, false)));
    results_fit_the_window(&mut h);
    // Under its target the transformer's MatMul inputs alone are quantized, and the counts
    // agree with the saved model.
    let compute_only = counts_are_the_saved_models(&h);
    assert!(
        !compute_only.is_empty() && compute_only.iter().all(|n| n.contains("MatMul")),
        "{compute_only:?}"
    );
    // Selecting Add lists onnxruntime's op types: its placement, attention Reshapes included.
    h.state_mut()
        .push(Command::Recipe(RecipeCommand::SetOpType {
            op_type: "Add".into(),
            quantize: true,
        }));
    h.run_steps(2);
    quantize_and_compare(&mut h, "quantize & compare with Add");
    no_notices(&h);
    let before = counts_are_the_saved_models(&h);
    // The attention's Reshape/Transpose the saved model wraps in Q/DQ are drawn quantized;
    // unchecking Reshape takes them out of the count and the model alike.
    let reshapes = before
        .iter()
        .filter(|n| n.ends_with("/Reshape") || n.contains("/Reshape_"))
        .count();
    assert!(reshapes > 0, "some Reshape run quantized");
    h.state_mut()
        .push(Command::Recipe(RecipeCommand::SetOpType {
            op_type: "Reshape".into(),
            quantize: false,
        }));
    h.run_steps(2);
    quantize_and_compare(&mut h, "quantize & compare without Reshape");
    no_notices(&h);
    // Fewer Reshapes are wrapped DQ → Reshape → Q: those left sit between two quantized
    // neighbours (the attention's context Reshape, between a quantized Transpose and the
    // output projection), whose pairs surround it whatever the recipe says of it. None is
    // drawn quantized, and the counts still agree.
    let doc = h.state().document().unwrap();
    let comparison = doc.work.results.comparison.as_ref().unwrap();
    let saved = Graph::build(&comparison.quantized);
    let wrapped = |n: &qdq_studio::model::Node| {
        fed_by_dequantize(&saved, &n.name)
            && n.outputs.iter().any(|o| {
                saved.tensor(o).is_some_and(|t| {
                    t.consumers
                        .iter()
                        .any(|&c| saved.node(c).op_type == "QuantizeLinear")
                })
            })
    };
    let wrapped_reshapes = saved
        .nodes()
        .iter()
        .filter(|n| n.op_type == "Reshape" && wrapped(n))
        .count();
    assert!(
        wrapped_reshapes < reshapes,
        "{wrapped_reshapes} of {reshapes}"
    );
    assert!(wrapped_reshapes > 0);
    // The inspector says so of such a Reshape, and not of one its neighbours leave float.
    let pick = |surrounded: bool| {
        saved
            .nodes()
            .iter()
            .find(|n| n.op_type == "Reshape" && wrapped(n) == surrounded)
            .map(|n| doc.opened.graph.node_by_name(&n.name).unwrap().id)
            .unwrap()
    };
    let (surrounded, plain) = (pick(true), pick(false));
    let note = "Excluded, yet its neighbours quantize every tensor it reads and writes";
    for (node, expected) in [(surrounded, true), (plain, false)] {
        h.state_mut().document_mut().unwrap().view.selection = vec![node];
        h.run_steps(3);
        assert_eq!(
            h.query_by_label_contains(note).is_some(),
            expected,
            "{node:?}"
        );
    }
    let doc = h.state().document().unwrap();
    let comparison = doc.work.results.comparison.as_ref().unwrap();
    assert!(doc.opened.graph.nodes().iter().all(|n| {
        n.op_type != "Reshape" || doc.state(n.id) != qdq_studio::app::states::NodeState::Quantized
    }));
    assert_eq!(
        doc.planned.counts.quantized,
        comparison.quantized_nodes.len()
    );
    assert!(
        doc.planned.counts.quantized < before.len(),
        "{} -> {}",
        before.len(),
        doc.planned.counts.quantized
    );
}

/// Checks that Results keeps its Heat map and Side by side columns within the window at
/// 1024×700 and 1600×1000 (long tensor names and lines wrap or scroll, never push them off).
fn results_fit_the_window(h: &mut Harness<'_, Studio>) {
    // The inspector on a node with long names shows its measured error too.
    let node = {
        let doc = h.state().document().unwrap();
        let measured = &doc.work.results.comparison.as_ref().unwrap().tensors;
        doc.opened
            .graph
            .nodes()
            .iter()
            .find(|n| {
                n.outputs[0].len() > 50
                    && measured
                        .activations
                        .iter()
                        .any(|a| a.tensor == n.outputs[0])
            })
            .expect("a node with a long, measured output")
            .id
    };
    h.state_mut().document_mut().unwrap().view.selection = vec![node];
    for size in [egui::vec2(1024.0, 700.0), egui::vec2(1600.0, 1000.0)] {
        h.set_size(size);
        h.run_steps(4);
        let figures: Vec<egui::Rect> = h
            .query_all_by_label_contains("float vs QDQ ")
            .map(|n| n.rect())
            .collect();
        assert!(!figures.is_empty(), "the inspector's measured error");
        for rect in figures {
            assert!(rect.right() <= size.x, "a dB figure at {size:?}: {rect:?}");
        }
        for heading in ["Heat map", "Side by side"] {
            let rect = h.get_by_label(heading).rect();
            // Within the window, on one line (a squeezed column wraps its heading letter by
            // letter).
            assert!(
                rect.left() >= 0.0 && rect.right() <= size.x && rect.height() < 30.0,
                "{heading} at {size:?}: {rect:?}"
            );
        }
        // Every name in the heat map's lists fits the window (long ones lose their start).
        let heat_map = h.get_by_label("Heat map").rect();
        for name in h.query_all_by(|n| n.role() == egui::accesskit::Role::Link) {
            let rect = name.rect();
            if rect.left() >= heat_map.left() && rect.top() > heat_map.top() {
                assert!(rect.right() <= size.x, "a name at {size:?}: {rect:?}");
            }
        }
        // With room for all three, Side by side stands beside the others, not below them.
        if size.x >= 1600.0 {
            let side = h.get_by_label("Side by side").rect();
            assert!(side.left() > heat_map.right(), "{side:?} {heat_map:?}");
        }
    }
    h.set_size(egui::vec2(1500.0, 1000.0));
    h.run_steps(2);
}

/// Checks that the nodes the graph draws quantized, the recipe panel's count and Results'
/// count are the nodes the model Save writes (the comparison's) runs quantized; returns them.
fn counts_are_the_saved_models(h: &Harness<'_, Studio>) -> Vec<String> {
    use qdq_studio::app::states::NodeState;
    let doc = h.state().document().unwrap();
    let comparison = doc.work.results.comparison.as_ref().expect("compared");
    let saved = &comparison.quantized;
    let saved_graph = Graph::build(saved);
    let qdq = qdq_studio::quant::ops::qdq_structure(saved, &saved_graph);
    let runs_quantized: std::collections::BTreeSet<&str> = qdq
        .quantized_nodes(&saved_graph)
        .map(|n| n.name.as_str())
        .collect();
    let shown: std::collections::BTreeSet<&str> = doc
        .opened
        .graph
        .nodes()
        .iter()
        .filter(|n| doc.state(n.id) == NodeState::Quantized)
        .map(|n| n.name.as_str())
        .collect();
    assert_eq!(
        shown.difference(&runs_quantized).collect::<Vec<_>>(),
        Vec::<&&str>::new(),
        "shown quantized, not quantized in the saved model"
    );
    assert_eq!(
        runs_quantized.difference(&shown).collect::<Vec<_>>(),
        Vec::<&&str>::new(),
        "quantized in the saved model, not shown so"
    );
    assert_eq!(
        doc.planned.counts.quantized,
        runs_quantized.len(),
        "the recipe panel"
    );
    assert_eq!(
        comparison.quantized_nodes.len(),
        runs_quantized.len(),
        "Results"
    );
    assert!(
        h.query_by_label(&format!("Quantized: {}", runs_quantized.len()))
            .is_some(),
        "the recipe panel's line"
    );
    assert!(
        shown.iter().all(|n| {
            let id = doc.opened.graph.node_by_name(n).unwrap().id;
            doc.state(id).excludable()
        }),
        "every quantized node can be excluded"
    );
    runs_quantized.into_iter().map(str::to_owned).collect()
}

#[test]
fn a_model_with_static_inputs_shows_its_shapes_before_any_calibration() {
    use qdq_studio::model::{DataType, ModelBuilder, TensorArray};
    use qdq_studio::workflow::tensor_facts::ShapeSource;
    // The runtime is loaded (the studio loads it at start; opening never downloads it).
    let _runtime = common::runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("static.onnx");
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[2, 3, 8, 8]);
    b.initializer(
        "w",
        TensorArray::Float32(ndarray::ArrayD::from_elem(
            ndarray::IxDyn(&[4, 3, 3, 3]),
            0.1,
        )),
    );
    b.node("Conv", &["x", "w"], &["c"])
        .name("conv")
        .attr_ints("strides", &[2, 2]);
    b.node("Relu", &["c"], &["r"]).name("relu");
    b.node("GlobalAveragePool", &["r"], &["y"]).name("pool");
    b.output("y", DataType::Float32, &[2, 4, 1, 1]);
    b.build().save(&path, &Default::default()).unwrap();
    let mut h = harness();
    h.state_mut().open(Source::File(path));
    settle(&mut h, "opening");
    no_notices(&h);
    let doc = h.state().document().unwrap();
    assert!(doc.work.results.stats.is_none(), "nothing calibrated");
    let shape = doc.tensor_shape("r").expect("a shape before calibration");
    assert_eq!(shape.source, ShapeSource::Probed);
    assert_eq!(shape.dims_text(), "[2, 4, 3, 3]");
    assert_eq!(doc.tensor_shape("c").unwrap().dims_text(), "[2, 4, 3, 3]");
    // The inspector shows it.
    let id = doc.opened.graph.node_by_name("relu").unwrap().id;
    h.state_mut().document_mut().unwrap().view.selection = vec![id];
    h.run_steps(3);
    assert_eq!(
        h.query_all_by_label("[2, 4, 3, 3]").count(),
        2,
        "its input (the Conv's output) and its output"
    );
}

/// The recipe's deployment target in the studio: it follows the execution provider until the
/// user picks one, picking one applies its settings, an edit it does not allow is refused with
/// the reason; and tuning for speed is one undoable recipe change that only leaves things out.
#[test]
fn the_target_follows_the_provider_until_chosen_and_tuning_for_speed_only_leaves_out() {
    use qdq_studio::app::command::Command;
    let mut h = harness();
    open_calibrate_compare(&mut h, Source::Sample, None);
    assert_eq!(recipe(&h).target, Some(Target::Cpu));
    let before = recipe(&h);
    h.state_mut().push(Command::Work(WorkCommand::TuneLatency));
    h.run_steps(2);
    settle(&mut h, "tuning for speed");
    no_notices(&h);
    let status = h.state().status().to_owned();
    assert!(status.starts_with("latency tuning: "), "{status}");
    let tuned = recipe(&h);
    assert!(
        before
            .op_types_to_exclude
            .iter()
            .all(|op| tuned.op_types_to_exclude.contains(op)),
        "{tuned:?}"
    );
    assert_eq!(
        Recipe {
            op_types_to_exclude: before.op_types_to_exclude.clone(),
            nodes_to_exclude: before.nodes_to_exclude.clone(),
            ..tuned.clone()
        },
        before,
        "tuning changes exclusions only"
    );
    if tuned != before {
        assert!(status.contains("Ctrl+Z"), "{status}");
        h.key_press_modifiers(Modifiers::COMMAND, Key::Z);
        h.run_steps(2);
        assert_eq!(recipe(&h), before);
    } else {
        assert!(status.contains("the recipe is unchanged"), "{status}");
    }
    // The target follows the provider while it is the provider's.
    h.state_mut().push(Command::Recipe(RecipeCommand::FollowEp(
        EpSpec::Cpu,
        EpSpec::OpenVino("CPU".to_owned()),
    )));
    h.run_steps(2);
    assert_eq!(recipe(&h).target, Some(Target::Openvino));
    assert!(
        h.state()
            .status()
            .contains("follows the execution provider")
    );
    h.state_mut().push(Command::Recipe(RecipeCommand::FollowEp(
        EpSpec::OpenVino("CPU".to_owned()),
        EpSpec::Cpu,
    )));
    h.run_steps(2);
    assert_eq!(recipe(&h).target, Some(Target::Cpu));
    // A target chosen by the user applies its settings and stays when the provider changes.
    h.state_mut()
        .push(Command::Recipe(RecipeCommand::SetTarget(Target::Tensorrt)));
    h.run_steps(2);
    let trt = recipe(&h);
    assert_eq!(trt.target, Some(Target::Tensorrt));
    assert!(trt.symmetric_activations && trt.activation_type == QuantType::Int8);
    h.state_mut().push(Command::Recipe(RecipeCommand::FollowEp(
        EpSpec::Cpu,
        EpSpec::DirectMl(0),
    )));
    h.run_steps(2);
    assert_eq!(recipe(&h).target, Some(Target::Tensorrt));
    // TensorRT's kernels never saturate: the guard is refused, with the reason.
    h.state_mut()
        .push(Command::Recipe(RecipeCommand::SetSaturationGuard(true)));
    h.run_steps(2);
    assert!(!recipe(&h).saturation_guard);
    let status = h.state().status().to_owned();
    assert!(
        status.starts_with("Not changed: target \"tensorrt\" needs saturation_guard = false"),
        "{status}"
    );
    h.get_by_label("Deploy to");
}

/// A task that fails (here calibration: ONNX Runtime cannot run the model) shows why, and the
/// status bar stops saying it runs.
#[test]
fn a_failed_task_says_so_in_the_status_bar() {
    use ndarray::ArrayD;
    use qdq_studio::model::{DataType, ModelBuilder, SaveOptions, TensorArray};
    let dir = tempfile::tempdir().unwrap();
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[1, 4]);
    b.initializer(
        "shape",
        TensorArray::Int64(ArrayD::from_shape_vec(vec![2], vec![3, 3]).unwrap()),
    );
    // Four values cannot take the shape [3, 3].
    b.node("Reshape", &["x", "shape"], &["r"]).name("reshape");
    b.node("Relu", &["r"], &["y"]).name("relu");
    b.output("y", DataType::Float32, &[3, 3]);
    let model = dir.path().join("bad_reshape.onnx");
    b.build().save(&model, &SaveOptions::default()).unwrap();
    let mut h = harness();
    h.state_mut().open(Source::File(model));
    settle(&mut h, "opening");
    calibrate(&mut h);
    assert_eq!(h.state().notices().len(), 1, "{:?}", h.state().notices());
    assert!(
        h.state().status().contains("failed") && !h.state().status().ends_with('…'),
        "{}",
        h.state().status()
    );
    assert!(h.state().document().unwrap().work.results.stats.is_none());
}

/// Compares an open quantized model whose data are random and not chosen yet: refused with
/// one notice, then measured once *Compare on random data* is ticked in its Data tab.
fn compare_on_random_data_once_chosen(h: &mut Harness<'_, Studio>) {
    quantize_and_compare(h, "a comparison on unchosen random data");
    assert_eq!(h.state().notices().len(), 1);
    assert_eq!(h.state().notices()[0].title, "Choose the evaluation data");
    h.state_mut().dismiss(0);
    press(h, "Data");
    press(h, "Compare on random data");
    quantize_and_compare(h, "comparing on random data");
    no_notices(h);
}

/// Saves the open model's QDQ model to `out` through the save dialog.
fn save_model(h: &mut Harness<'_, Studio>, out: &Path) {
    h.key_press_modifiers(Modifiers::COMMAND | Modifiers::SHIFT, Key::S);
    h.run_steps(2);
    replace_text(h, "Save to", &out.display().to_string());
    press(h, "Save");
    settle(h, "saving");
    no_notices(h);
}

/// The comparison on screen.
fn comparison(h: &Harness<'_, Studio>) -> qdq_studio::workflow::compare::Comparison {
    h.state()
        .document()
        .unwrap()
        .work
        .results
        .comparison
        .clone()
        .expect("a comparison")
}

#[test]
fn a_saved_qdq_model_reopens_with_its_float_model_and_data_and_compares_as_the_cli_does() {
    use qdq_studio::app::work::data::DataKind;
    use qdq_studio::calib::data::DataSpec;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cls.qdq.onnx");
    let mut h = harness();
    open_calibrate_compare(&mut h, Source::Sample, None);
    let first = comparison(&h);
    save_model(&mut h, &out);

    // Reopened: the float model it was made from (the sample's, written beside its data)
    // and the data it was measured on come back with it.
    h.state_mut().open(Source::File(out.clone()));
    settle(&mut h, "opening the QDQ model");
    h.run_steps(3);
    no_notices(&h);
    let (float, eval) = {
        let doc = h.state().document().unwrap();
        assert!(doc.is_quantized());
        let float = doc
            .work
            .float_model
            .as_ref()
            .expect("the float model follows");
        let eval = doc.work.settings.evaluation_choice().clone();
        assert_eq!(eval.kind, DataKind::File);
        (float.path.clone(), std::path::PathBuf::from(eval.path))
    };
    assert_eq!(
        std::fs::read(&float).unwrap(),
        qdq_studio::sample::SAMPLE_MODEL,
        "the sample's float model is on disk"
    );
    quantize_and_compare(&mut h, "comparing the reopened model");
    no_notices(&h);
    let second = comparison(&h);
    assert_eq!(second.reference.data, DataSpec::Npz { path: eval.clone() });
    assert_eq!(second.reference.data, first.reference.data, "the same data");
    let measured_on = second.measured_on();
    assert!(
        measured_on.starts_with(&format!("16 sample(s) of {}", eval.display())),
        "{measured_on}"
    );
    assert!(h.query_by_label_contains(&measured_on).is_some());
    // The labels travel in the sample's evaluation file: accuracy is scored.
    let (a, b) = (&first.outputs[0], &second.outputs[0]);
    assert_eq!(b.task.len(), 1, "accuracy against the sample's labels");
    assert!(
        (a.sqnr_db - b.sqnr_db).abs() < 1e-6,
        "{} {}",
        a.sqnr_db,
        b.sqnr_db
    );
    // The CLI's figures on the same files.
    let cli = common::compared_output(&float, &out, &eval, &b.name);
    assert!(
        (cli["sqnr_db"].as_f64().unwrap() - b.sqnr_db).abs() < 1e-6,
        "{cli}"
    );
    assert_eq!(cli["top1_agreement"].as_f64(), b.top1_agreement);
    assert_eq!(
        cli["task"][0]["quantized"].as_f64(),
        Some(b.task[0].quantized)
    );

    // Opened afresh (nothing remembered), with its float model chosen: the comparison
    // refuses the random data it starts with until they are chosen on purpose.
    let mut h = harness();
    h.state_mut().open(Source::File(out.clone()));
    settle(&mut h, "opening afresh");
    h.state_mut().push(qdq_studio::app::command::Command::Work(
        WorkCommand::SetFloatModel(float),
    ));
    h.run_steps(2);
    compare_on_random_data_once_chosen(&mut h);
    assert!(comparison(&h).on_random_data());
    assert!(
        h.query_by_label_contains("Random data: these figures say")
            .is_some()
    );
}

#[test]
fn a_language_model_calibrates_and_compares_on_text_with_the_tokenizer_beside_it() {
    use qdq_studio::app::work::data::DataKind;
    use qdq_studio::eval::compare::TaskMetric;
    let dir = tempfile::tempdir().unwrap();
    let (model, text, _) = common::decoder_with_text(dir.path(), 4 * 64);
    let mut h = harness();
    h.state_mut().open(Source::File(model));
    settle(&mut h, "opening");
    let tokenizer = dir.path().join("tokenizer.json").display().to_string();
    let settings = &h.state().document().unwrap().work.settings;
    assert_eq!(
        settings.calibration.tokenizer, tokenizer,
        "found beside the model"
    );
    // A text file chosen for random data becomes text data, tokenized by that tokenizer.
    h.state_mut().push(qdq_studio::app::command::Command::Work(
        WorkCommand::SetDataPath {
            evaluation: false,
            path: text,
        },
    ));
    h.run_steps(2);
    settle(&mut h, "checking");
    calibrate(&mut h);
    quantize_and_compare(&mut h, "quantize & compare");
    no_notices(&h);
    let doc = h.state().document().unwrap();
    assert_eq!(doc.work.settings.calibration.kind, DataKind::Text);
    assert_eq!(
        statistics(&h).info.samples,
        4,
        "four sequences of 64 tokens"
    );
    let comparison = doc.work.results.comparison.clone().expect("a comparison");
    let scores = &comparison.outputs[0].task;
    assert_eq!(scores[0].metric, TaskMetric::Perplexity, "{scores:?}");
    assert!(h.query_by_label("perplexity").is_some(), "the task table");
    assert!(
        h.query_by_label_contains("Against ground truth ('next tokens')")
            .is_some()
    );
    assert!(
        h.query_by_label(&format!("{:.3}", scores[0].quantized))
            .is_some(),
        "the quantized perplexity is shown"
    );
}
