//! The switchable model a sensitivity scan runs: one session whose gates select any variant
//! of the recipe, equal bit for bit to that variant quantized on its own, graph optimizations
//! off (the Q/DQ arithmetic as written) and on (the fused integer kernels).

use crate::common;

use ndarray::ArrayD;
use qdq_studio::calib::CalibrationConfig;
use qdq_studio::calib::data::DataSpec;
use qdq_studio::calib::stats::CalibrationStats;
use qdq_studio::eval::search::switchable::{Gating, Switchable};
use qdq_studio::jobs::JobContext;
use qdq_studio::model::{Graph, Model, TensorArray};
use qdq_studio::quant;
use qdq_studio::recipe::{QuantType, Recipe};
use qdq_studio::runtime::{EpSpec, Optimization, SessionOptions, value};

use common::{asset, runtime};

/// The sample, its statistics from the bundled calibration set, and one evaluation batch.
fn sample() -> (Model, CalibrationStats, Vec<(String, TensorArray)>) {
    let model = Model::load(&asset("ppocr_cls.onnx")).unwrap();
    let data = DataSpec::Npz {
        path: asset("calib.npz"),
    };
    let stats = qdq_studio::workflow::calibrate::calibrate(
        &model,
        &Default::default(),
        &data,
        &CalibrationConfig::default(),
        &runtime(),
        &JobContext::silent(),
    )
    .unwrap();
    let mut source = DataSpec::Npz {
        path: asset("eval.npz"),
    }
    .open(&qdq_studio::calib::data::model_inputs(&Graph::build(
        &model,
    )))
    .unwrap();
    let batch = source.next_batch(16).unwrap().unwrap();
    (model, stats, batch.inputs)
}

/// `model`'s outputs on `inputs`, graph optimizations off.
fn outputs(model: &Model, inputs: &[(String, TensorArray)]) -> Vec<ArrayD<f32>> {
    let options = SessionOptions {
        optimization: Optimization::Disable,
        ..SessionOptions::default()
    };
    outputs_with(model, inputs, options)
}

/// `model`'s outputs on `inputs` in a session with `options`.
fn outputs_with(
    model: &Model,
    inputs: &[(String, TensorArray)],
    options: SessionOptions,
) -> Vec<ArrayD<f32>> {
    let mut session = runtime()
        .session_from_model(&model.to_session_model().unwrap(), &[EpSpec::Cpu], options)
        .unwrap();
    let owned = value::owned_inputs(inputs.to_vec()).unwrap();
    let out = session.run(value::session_inputs(&owned)).unwrap();
    out.values()
        .map(|v| value::float_output(&v).unwrap().1)
        .collect()
}

fn bits(a: &ArrayD<f32>) -> Vec<u32> {
    a.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn the_switchable_model_equals_each_variant_quantized_on_its_own() {
    let (model, stats, inputs) = sample();
    let recipe = Recipe::default();
    let full = quant::quantize(&model, Some(&stats), &recipe).unwrap();
    let nodes = &full.quantized_nodes;
    assert!(nodes.len() > 20, "{nodes:?}");
    let exact = |name: &str| format!("{}$", regex::escape(name));
    // Every kind of variant a scan runs: the recipe itself, one node left in float (early,
    // middle, last), one node quantized alone.
    let mut variants = vec![recipe.clone()];
    for name in [&nodes[0], &nodes[nodes.len() / 2], &nodes[nodes.len() - 1]] {
        let mut without = recipe.clone();
        without.nodes_to_exclude.push(exact(name));
        variants.push(without);
    }
    for name in [&nodes[1], &nodes[nodes.len() / 3]] {
        let mut only = recipe.clone();
        only.nodes_to_quantize = vec![exact(name)];
        variants.push(only);
    }
    let switchable = Switchable::build(
        &model,
        &stats,
        &variants,
        Gating::Branches,
        &JobContext::silent(),
    )
    .unwrap();
    assert!(switchable.switches() > 0);
    // As a scan runs both: the variants' optimizations, without the CPU's blocked float
    // layout (which fuses a Conv with neighbours that depend on the graph around it).
    let fused = |optimization| SessionOptions {
        optimization,
        blocked_layout: false,
        ..SessionOptions::default()
    };
    let mut differing = 0;
    for (at, variant) in variants.iter().enumerate() {
        let own = quant::quantize(&model, Some(&stats), variant)
            .unwrap()
            .model;
        let mut gated = inputs.clone();
        gated.extend(Switchable::gate_inputs(switchable.gates(at).unwrap()));
        let expected = outputs(&own, &inputs);
        let got = outputs(switchable.model(), &gated);
        assert_eq!(expected.len(), got.len());
        for (e, g) in expected.iter().zip(&got) {
            assert_eq!(bits(e), bits(g), "variant {at} differs from its own model");
        }
        let own_options = fused(quant::cpu_session_options(&own).optimization);
        let expected_fused = outputs_with(&own, &inputs, own_options);
        let got_fused = outputs_with(switchable.model(), &gated, fused(switchable.optimization()));
        for (e, g) in expected_fused.iter().zip(&got_fused) {
            assert_eq!(
                bits(e),
                bits(g),
                "variant {at} differs from its own model with the fused kernels"
            );
        }
        if at == 0 {
            // The fused integer kernels really ran: they round differently from the Q/DQ
            // arithmetic as written.
            assert_ne!(bits(&expected[0]), bits(&expected_fused[0]));
        }
        if at > 0 && bits(&expected[0]) != bits(&outputs(&full.model, &inputs)[0]) {
            differing += 1;
        }
    }
    // The variants really are different models (the gates select something).
    assert!(
        differing >= 3,
        "only {differing} variants differ from the recipe"
    );

    // A combination no single variant is: two nodes left in float at once, found among the
    // chains the variants brought.
    let mut both = recipe.clone();
    both.nodes_to_exclude = vec![exact(&nodes[0]), exact(&nodes[nodes.len() - 1])];
    let gates = switchable
        .gates_for(&model, &stats, &both)
        .unwrap()
        .expect("the combination reads only chains the model holds");
    let own = quant::quantize(&model, Some(&stats), &both).unwrap().model;
    let mut gated = inputs.clone();
    gated.extend(Switchable::gate_inputs(&gates));
    for (e, g) in outputs(&own, &inputs)
        .iter()
        .zip(&outputs(switchable.model(), &gated))
    {
        assert_eq!(
            bits(e),
            bits(g),
            "the combination differs from its own model"
        );
    }
}

/// The recipe, then each of `nodes` left in float and quantized alone (a scan's variants).
fn scan_variants(recipe: &Recipe, nodes: &[&String]) -> Vec<Recipe> {
    let exact = |name: &str| format!("{}$", regex::escape(name));
    let mut variants = vec![recipe.clone()];
    for name in nodes {
        let mut without = recipe.clone();
        without.nodes_to_exclude.push(exact(name));
        let mut only = recipe.clone();
        only.nodes_to_quantize = vec![exact(name)];
        variants.extend([without, only]);
    }
    variants
}

/// The model for accelerators, every form run and the values picked by `Where`: each gate
/// setting gives its variant's outputs as the Q/DQ arithmetic is written (what an
/// accelerator without integer kernels runs).
#[test]
fn the_select_gated_model_equals_each_variant_quantized_on_its_own() {
    let (model, stats, inputs) = sample();
    // uint8 activations are picked as they are; int8 and uint16 ones through int32 casts.
    for activation_type in [QuantType::Uint8, QuantType::Int8, QuantType::Uint16] {
        let recipe = Recipe {
            activation_type,
            ..Recipe::default()
        };
        select_gated_variants_equal_their_models(&model, &stats, &inputs, &recipe);
    }
}

fn select_gated_variants_equal_their_models(
    model: &Model,
    stats: &CalibrationStats,
    inputs: &[(String, TensorArray)],
    recipe: &Recipe,
) {
    let full = quant::quantize(model, Some(stats), recipe).unwrap();
    let nodes = &full.quantized_nodes;
    let picked = [&nodes[0], &nodes[nodes.len() / 2], &nodes[nodes.len() - 1]];
    let variants = scan_variants(recipe, &picked);
    let switchable = Switchable::build(
        model,
        stats,
        &variants,
        Gating::Select,
        &JobContext::silent(),
    )
    .unwrap();
    assert_eq!(switchable.gating(), Gating::Select);
    let graph = &switchable.model().proto().graph;
    let ops: Vec<&str> = graph
        .iter()
        .flat_map(|g| &g.node)
        .map(|n| n.op_type())
        .collect();
    assert!(!ops.contains(&"If"), "no If nodes");
    assert!(ops.contains(&"Where"), "the gates pick by Where");
    // The int32 biases are written dequantized (no host node on an accelerator).
    let int32: Vec<&str> = graph
        .iter()
        .flat_map(|g| &g.initializer)
        .filter(|t| t.data_type() == 6)
        .map(|t| t.name())
        .collect();
    let dequantized_int32 = graph
        .iter()
        .flat_map(|g| &g.node)
        .filter(|n| n.op_type() == "DequantizeLinear")
        .filter(|n| int32.contains(&n.input[0].as_str()))
        .count();
    assert_eq!(dequantized_int32, 0, "int32 biases left to dequantize");
    let full_biases = full.model.graph().node.iter().filter(|n| {
        n.op_type() == "DequantizeLinear"
            && full
                .model
                .graph()
                .initializer
                .iter()
                .any(|t| t.name() == n.input[0] && t.data_type() == 6)
    });
    assert!(
        full_biases.count() > 10,
        "the recipe's own model dequantizes its int32 biases"
    );
    let recipe_outputs = outputs(&full.model, inputs);
    let mut differing = 0;
    for (at, variant) in variants.iter().enumerate() {
        let own = quant::quantize(model, Some(stats), variant).unwrap().model;
        let mut gated = inputs.to_vec();
        gated.extend(Switchable::gate_inputs(switchable.gates(at).unwrap()));
        let expected = outputs(&own, inputs);
        let got = outputs(switchable.model(), &gated);
        assert_eq!(expected.len(), got.len());
        for (e, g) in expected.iter().zip(&got) {
            assert_eq!(
                bits(e),
                bits(g),
                "variant {at} of {:?} differs from its own model",
                recipe.activation_type
            );
        }
        if bits(&expected[0]) != bits(&recipe_outputs[0]) {
            differing += 1;
        }
    }
    assert!(
        differing >= 4,
        "only {differing} variants differ from the recipe"
    );
}

#[test]
fn the_cli_scans_on_a_switchable_model_when_asked_and_says_how_it_measured() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    common::calibrate_sample(&stats);
    let scan_within = |extra: &[&str], memory: Option<&str>| {
        let json = dir.path().join(format!("scan{}.json", extra.len()));
        let mut cli = common::cli();
        if let Some(limit) = memory {
            cli.env("QDQ_STUDIO_MEMORY_LIMIT", limit);
        }
        let text = common::run_ok(
            cli.args(["sensitivity", "--onnx_path"])
                .arg(asset("ppocr_cls.onnx"))
                .arg("--calibration_cache_path")
                .arg(&stats)
                .arg("--data")
                .arg(asset("eval.npz"))
                .args(["--candidates", "Conv@3", "Add@2", "--json"])
                .arg(&json)
                .args(extra),
        );
        let value: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        (text, value["scan"].clone())
    };
    let scan = |extra: &[&str]| scan_within(extra, None);
    let (exact_text, exact) = scan(&[]);
    assert!(
        exact_text.contains("each variant quantized and run on its own"),
        "{exact_text}"
    );
    assert_eq!(exact["method"], "Exact");
    // --workers caps the variants measured at once; the figures stay the same.
    let (one_text, one_at_a_time) = scan(&["--workers", "1"]);
    assert!(one_text.contains("(1 in parallel)"), "{one_text}");
    assert_eq!(one_at_a_time["workers"], 1);
    assert_eq!(one_at_a_time["nodes"], exact["nodes"]);
    // More workers than cores are capped, with a note (100,000 once ran out of threads).
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let (many_text, many) = scan(&["--workers", "100000"]);
    let note = format!("note: --workers 100000 is more than this machine's {cores} cores");
    assert!(many_text.contains(&note), "{many_text}");
    assert!(many["workers"].as_u64().unwrap() <= cores as u64, "{many}");
    assert_eq!(many["nodes"], exact["nodes"]);
    let (text, switched) = scan(&["--switchable"]);
    assert!(text.contains("one switchable model"), "{text}");
    assert_eq!(switched["method"], "Switchable");
    assert_eq!(switched["nodes"].as_array().unwrap().len(), 2);
    // The switchable model's first session is measured (about 12 MB here, its weights
    // 0.7 MB): 8 MB left holds the two its weights would allow, not one more measured one.
    if rayon::current_num_threads() >= 2 {
        assert!(switched["workers"].as_u64().unwrap() >= 2, "{switched}");
        let (_, tight) = scan_within(&["--switchable"], Some("8M"));
        assert_eq!(tight["workers"], 1, "{tight}");
        assert_eq!(tight["nodes"], switched["nodes"]);
    }
}

/// A model may declare its first axis free and still need the batch size it is given: here a
/// batched weight `[3, 8, 4]` broadcasts against the input's first axis, which works for one
/// sample at a time and fails for 32. The switchable scan joins evaluation batches into runs
/// of 32 only when that gives the recipe's own figures; here it runs the data's batches and
/// succeeds, with ONNX Runtime's log of the failed try kept off the terminal.
#[test]
fn the_switchable_scan_keeps_the_data_batches_when_joining_them_fails() {
    use qdq_studio::model::{DataType, ModelBuilder};
    let values = |seed: u64, shape: &[usize]| {
        let n = shape.iter().product();
        TensorArray::Float32(
            ArrayD::from_shape_vec(ndarray::IxDyn(shape), common::seeded_values(n, seed, 1.0))
                .unwrap(),
        )
    };
    let mut b = ModelBuilder::new(17);
    b.input("x", DataType::Float32, &[-1, 1, 8]);
    b.initializer("w", values(1, &[3, 8, 4]));
    b.node("Relu", &["x"], &["r"]).name("relu");
    b.node("MatMul", &["r", "w"], &["y"]).name("batched");
    b.output("y", DataType::Float32, &[3, -1, 4]);
    let dir = tempfile::tempdir().unwrap();
    let (model, data, stats) = (
        dir.path().join("batched.onnx"),
        dir.path().join("data.npz"),
        dir.path().join("stats.json"),
    );
    b.build().save(&model, &Default::default()).unwrap();
    common::write_npz(&data, &[("x", values(2, &[40, 1, 8]))]);
    common::run_ok(
        common::cli()
            .args(["calibrate", "--onnx_path"])
            .arg(&model)
            .arg("--calibration_data_path")
            .arg(&data)
            .arg("-o")
            .arg(&stats),
    );
    // 7-bit weights: the exact scan's fused u8×s8 kernels cannot saturate on the batched
    // weight (per tensor, so 8 bits by default), and the two methods measure the same model.
    let recipe = dir.path().join("recipe.toml");
    Recipe {
        reduce_range: true,
        ..Recipe::default()
    }
    .save(&recipe)
    .unwrap();
    let scan = |extra: &[&str]| {
        let json = dir.path().join(format!("scan{}.json", extra.len()));
        let mut cmd = common::cli();
        cmd.args(["sensitivity", "--onnx_path"])
            .arg(&model)
            .arg("--calibration_cache_path")
            .arg(&stats)
            .arg("--data")
            .arg(&data)
            .arg("--recipe")
            .arg(&recipe)
            .arg("--json")
            .arg(&json)
            .args(extra);
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        let value: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        (stderr, value["scan"].clone())
    };
    let (_, exact) = scan(&[]);
    let (stderr, switched) = scan(&["--switchable"]);
    assert_eq!(switched["method"], "Switchable");
    assert!(!stderr.contains("onnxruntime"), "{stderr}");
    let (a, b) = (
        exact["baseline_db"].as_f64().unwrap(),
        switched["baseline_db"].as_f64().unwrap(),
    );
    assert!(
        a.is_finite() && (a - b).abs() < 1.0,
        "exact {a} dB, switchable {b} dB"
    );
}

/// Auto-exclude measures several tries at once (one per core) but takes the steps a search
/// trying one at a time takes: a kept step sends the tries measured after it back to be
/// measured again on the new recipe.
#[test]
fn auto_exclude_trying_several_at_once_takes_the_steps_of_one_at_a_time() {
    use qdq_studio::eval::search::auto_exclude::{Goal, auto_exclude};
    use qdq_studio::eval::search::evaluator::Target;
    use qdq_studio::eval::search::sensitivity::{Granularity, NodeSensitivity, Sensitivity};
    use qdq_studio::eval::search::switched_scan::ScanMethod;

    let model = Model::load(&asset("ppocr_cls.onnx")).unwrap();
    let rt = runtime();
    // Per-tensor 7-bit weights on the graph as exported (unsimplified): far enough from float
    // that several of the first nodes help, and on every CPU (7 bits cannot saturate ONNX
    // Runtime's fused u8×s8 kernels).
    let recipe = Recipe {
        per_channel: false,
        reduce_range: true,
        preprocessing: qdq_studio::recipe::Preprocessing {
            simplify: false,
            ..Default::default()
        },
        ..Recipe::default()
    };
    let stats = qdq_studio::workflow::calibrate::calibrate(
        &model,
        &recipe.preprocessing,
        &DataSpec::Npz {
            path: asset("calib.npz"),
        },
        &CalibrationConfig::default(),
        &rt,
        &JobContext::silent(),
    )
    .unwrap();
    let data = DataSpec::Npz {
        path: asset("eval.npz"),
    };
    let reference = common::cpu_reference(&model, &data, &rt, 16);
    let eval = common::cpu_evaluator(&model, &stats, &reference, &rt);
    let quantized = quant::quantize(&model, Some(&stats), &recipe).unwrap();
    // The first quantized nodes in graph order, as a scan would rank them.
    let nodes = quantized.quantized_nodes[..40]
        .iter()
        .enumerate()
        .map(|(i, node)| NodeSensitivity {
            node: node.clone(),
            sqnr_without_db: 30.0,
            sqnr_only_db: 40.0 + i as f64,
        })
        .collect();
    let scan = Sensitivity {
        granularity: Granularity::Node,
        baseline_db: 30.0,
        nodes,
        workers: 1,
        method: ScanMethod::Exact,
        fallback: None,
        cancelled_of: None,
    };
    let run = |threads: usize, promote: bool| {
        let goal = Goal {
            promote,
            ..Goal::new(Target::SqnrDb(90.0), 4)
        };
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| auto_exclude(&eval, &recipe, &scan, goal, None, &JobContext::silent()))
            .unwrap()
    };
    for promote in [true, false] {
        let (alone, together) = (run(1, promote), run(3, promote));
        assert_eq!((alone.workers, together.workers), (1, 3));
        assert!(
            alone.excluded.len() + alone.promoted.len() >= 2,
            "several steps taken: {alone:?}"
        );
        assert_eq!(alone.excluded, together.excluded, "promote {promote}");
        assert_eq!(alone.promoted, together.promoted, "promote {promote}");
        assert_eq!(alone.recipe, together.recipe);
        assert_eq!(alone.sqnr_db, together.sqnr_db);
    }
}

/// A scan's variants run from cuts: each from the furthest node it shares with the recipe or
/// the float model, fed the values crossing there from one run of that model, give the
/// figures they give run whole.
#[test]
fn variants_run_from_cuts_score_as_they_do_run_whole() {
    variants_from_cuts_score_as_whole(Gating::Branches);
}

/// The same with the forms picked by `Where` (fixed gates in a suffix become `Identity`
/// and the forms no variant there selects are dropped).
#[test]
fn select_gated_variants_run_from_cuts_score_as_they_do_run_whole() {
    variants_from_cuts_score_as_whole(Gating::Select);
}

/// The sample, its statistics, ONNX Runtime and the float model's outputs on the bundled
/// evaluation data (8 a batch): what an [`Evaluator`] over the CPU EP borrows.
struct SampleEvaluation {
    model: Model,
    stats: CalibrationStats,
    runtime: qdq_studio::runtime::Runtime,
    reference: qdq_studio::eval::compare::reference::Reference,
    eps: [EpSpec; 1],
}

impl SampleEvaluation {
    fn new() -> Self {
        let (model, stats, _) = sample();
        let runtime = runtime();
        let mut source = DataSpec::Npz {
            path: asset("eval.npz"),
        }
        .open(&qdq_studio::calib::data::model_inputs(&Graph::build(
            &model,
        )))
        .unwrap();
        let eps = [EpSpec::Cpu];
        let reference = qdq_studio::eval::compare::reference::Reference::capture(
            &model,
            &mut *source,
            &runtime,
            &eps,
            8,
            &Default::default(),
            &JobContext::silent(),
        )
        .unwrap();
        SampleEvaluation {
            model,
            stats,
            runtime,
            reference,
            eps,
        }
    }

    fn evaluator(&self) -> qdq_studio::eval::search::evaluator::Evaluator<'_> {
        qdq_studio::eval::search::evaluator::Evaluator {
            float: &self.model,
            stats: &self.stats,
            reference: &self.reference,
            runtime: &self.runtime,
            eps: &self.eps,
        }
    }

    /// The nodes `recipe` quantizes in the sample.
    fn quantized_nodes(&self, recipe: &Recipe) -> Vec<String> {
        quant::quantize(&self.model, Some(&self.stats), recipe)
            .unwrap()
            .quantized_nodes
    }
}

fn variants_from_cuts_score_as_whole(gating: Gating) {
    use qdq_studio::eval::search::switched_scan::{Cuts, GatedRuns, variant_sqnrs};
    let sample = SampleEvaluation::new();
    let (model, stats) = (&sample.model, &sample.stats);
    let ctx = JobContext::silent();
    let eval = sample.evaluator();
    let recipe = Recipe::default();
    let nodes = sample.quantized_nodes(&recipe);
    // As a scan builds them, for nodes spread from the first to the last: enough that a
    // cut's variants of one base fill more than one suffix (eight of them each).
    let spread: Vec<&String> = nodes.iter().step_by((nodes.len() / 40).max(1)).collect();
    let variants = scan_variants(&recipe, &spread);
    let switchable = Switchable::build(model, stats, &variants, gating, &ctx).unwrap();
    let scores = |cuts: Cuts| {
        let mut runs = GatedRuns::open(&eval, &switchable, true, ctx.cancel_token()).unwrap();
        runs.set_cuts(cuts);
        let scores = variant_sqnrs(&runs, &ctx).unwrap();
        // A run on the whole model after the scan (auto-exclude's): its sessions, closed
        // while the variants ran from cuts, open again.
        let after = runs.recipe_metrics(&recipe).unwrap()[0].sqnr_db;
        (scores, runs.cuts_taken(), after)
    };
    let (whole, none, after_whole) = scores(Cuts::AtMost(0));
    assert_eq!(none, 0);
    let (cut, taken, after_cuts) = scores(Cuts::AtMost(5));
    assert!(taken >= 3, "{taken} cuts taken");
    assert!(after_whole.is_finite());
    assert_eq!(after_whole, after_cuts);
    assert_eq!(whole.len(), variants.len());
    for (at, (w, c)) in whole.iter().zip(&cut).enumerate() {
        // Equal where both are finite, up to float rounding: with `Where` gating a suffix's
        // fixed forms fuse with their neighbours as the whole model's cannot, and a variant
        // quantizing one late node alone (83 dB: noise 5e-9 of the signal) moves by 0.002
        // dB. The float model's infinite SQNR on both sides.
        assert!(
            w == c || (w - c).abs() < 1e-2,
            "variant {at}: {w} dB run whole, {c} dB from a cut"
        );
    }
}

/// Cancelling a scan part way keeps the units it had measured, marked partial, for both
/// ways of measuring: the studio's cancel used to throw away every variant already run.
#[test]
fn a_cancelled_scan_keeps_the_units_it_measured() {
    use qdq_studio::eval::search::sensitivity::{Granularity, scan_units};
    use qdq_studio::eval::search::switched_scan::ScanMethod;
    use qdq_studio::jobs::CancelToken;
    let sample = SampleEvaluation::new();
    let eval = sample.evaluator();
    let recipe = Recipe::default();
    let nodes = sample.quantized_nodes(&recipe);
    let units: Vec<String> = nodes.iter().step_by(4).take(10).cloned().collect();
    for method in [ScanMethod::Exact, ScanMethod::Switchable] {
        // Cancelled once the scan reports its fourth measured model; the switchable scan
        // runs its models in the order of the cuts they share, not unit by unit, so it is
        // cancelled with two models left, when at least one unit has both its variants.
        let cancel = CancelToken::new();
        let token = cancel.clone();
        let late = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let late_reports = late.clone();
        let ctx = JobContext::new(cancel, move |p| {
            if p.stage != "sensitivity scan" {
                return;
            }
            if token.is_cancelled() {
                late_reports.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            } else if p.done >= 4 && (method == ScanMethod::Exact || p.done + 2 >= p.total) {
                token.cancel();
            }
        });
        let partial = scan_units(&eval, &recipe, Granularity::Node, &units, method, &ctx)
            .unwrap_or_else(|e| panic!("{method:?}: {e}"));
        assert_eq!(partial.cancelled_of, Some(units.len()), "{method:?}");
        // The runs in flight on the other workers stop with the cancel (ONNX Runtime's
        // terminate flag) instead of finishing their models.
        assert_eq!(
            late.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "{method:?}: models finished after the cancel"
        );
        let measured = partial.nodes.len();
        assert!(
            (1..units.len()).contains(&measured),
            "{method:?}: {measured} of {} kept ({units:?}; {:?}, fallback {:?})",
            units.len(),
            partial.nodes,
            partial.fallback
        );
        // What was kept is what a whole scan measures for those units.
        let whole = scan_units(
            &eval,
            &recipe,
            Granularity::Node,
            &units,
            method,
            &JobContext::silent(),
        )
        .unwrap();
        assert_eq!(whole.cancelled_of, None);
        assert_eq!(whole.baseline_db, partial.baseline_db, "{method:?}");
        for kept in &partial.nodes {
            let full = whole.nodes.iter().find(|n| n.node == kept.node).unwrap();
            assert_eq!(
                (full.sqnr_without_db, full.sqnr_only_db),
                (kept.sqnr_without_db, kept.sqnr_only_db),
                "{method:?}: {}",
                kept.node
            );
        }
        assert!(
            partial.partial_note().unwrap().ends_with(&format!(
                "of {} nodes measured before the scan was cancelled",
                units.len()
            )),
            "{:?}",
            partial.partial_note()
        );
    }
}
