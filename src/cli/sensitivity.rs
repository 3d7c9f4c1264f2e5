//! `qdq-studio sensitivity`: rank the quantized nodes by how much they cost the outputs, and
//! optionally auto-exclude the worst until a target output SQNR is met.

use std::path::PathBuf;

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use indicatif::ProgressBar;

use qdq_studio::calib::data::model_inputs;
use qdq_studio::eval::reference::Reference;
use qdq_studio::eval::sensitivity::{
    Evaluator, Granularity, Target, auto_exclude, scan, scan_units,
};
use qdq_studio::jobs::{CancelToken, JobContext};
use qdq_studio::model::{Graph, Model};
use qdq_studio::recipe::Recipe;
use qdq_studio::runtime::{LoadOptions, Runtime};

/// Arguments of `sensitivity`.
#[derive(Debug, clap::Args)]
pub struct SensitivityArgs {
    /// The float model.
    #[arg(long = "onnx_path", visible_alias = "onnx-path")]
    pub onnx_path: PathBuf,
    /// Cached statistics (from `calibrate`); no calibration runs during the scan.
    #[arg(
        long = "calibration_cache_path",
        visible_alias = "calibration-cache-path"
    )]
    pub calibration_cache_path: PathBuf,
    /// Evaluation data.
    #[arg(long = "data")]
    pub data: PathBuf,
    /// The recipe to start from (default: the default recipe).
    #[arg(long)]
    pub recipe: Option<PathBuf>,
    /// Samples per batch.
    #[arg(long = "batch_size", visible_alias = "batch-size", default_value_t = 1)]
    pub batch_size: usize,
    /// Execution providers, in priority order.
    #[arg(long = "eps", num_args = 1.., default_value = "cpu")]
    pub eps: Vec<String>,
    /// Scan per op type instead of per node (a few runs: a first look at a large model).
    #[arg(long = "by_op_type", visible_alias = "by-op-type")]
    pub by_op_type: bool,
    /// Scan only these nodes (or op types, with --by_op_type) instead of all.
    #[arg(long = "candidates", num_args = 1..)]
    pub candidates: Vec<String>,
    /// Auto-exclude until the worst output's SQNR reaches this many dB.
    #[arg(long = "target_sqnr", visible_alias = "target-sqnr", conflicts_with_all = ["target_top1", "by_op_type"])]
    pub target_sqnr: Option<f64>,
    /// Auto-exclude until the worst classifier output's top-1 agreement reaches this
    /// percentage.
    #[arg(
        long = "target_top1",
        visible_alias = "target-top1",
        conflicts_with_all = ["by_op_type", "target_sequence"]
    )]
    pub target_top1: Option<f64>,
    /// Auto-exclude until the worst sequence output ([N, T, classes]: OCR, speech) reads the
    /// same as the float model (greedy CTC) on this percentage of samples.
    #[arg(
        long = "target_sequence",
        visible_alias = "target-sequence",
        conflicts_with_all = ["by_op_type", "target_sqnr"]
    )]
    pub target_sequence: Option<f64>,
    /// When keeping nodes in float does not reach the target, save the best measured
    /// recipe-wide change (range method, 16-bit activations) if it does better.
    #[arg(
        long = "take_best_alternative",
        visible_alias = "take-best-alternative"
    )]
    pub take_best_alternative: bool,
    /// At most this many nodes are excluded.
    #[arg(
        long = "max_excluded",
        visible_alias = "max-excluded",
        default_value_t = 20
    )]
    pub max_excluded: usize,
    /// Write the auto-excluded recipe here.
    #[arg(long = "save-recipe", visible_alias = "save_recipe")]
    pub save_recipe: Option<PathBuf>,
    /// Also write the whole scan (and auto-exclude result) as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Image-folder preprocessing.
    #[command(flatten)]
    pub images: super::common::ImageArgs,
}

/// Runs `sensitivity`.
pub fn run(args: &SensitivityArgs) -> anyhow::Result<()> {
    let model = Model::load(&args.onnx_path)?;
    let stats = super::quantize::load_statistics(&args.calibration_cache_path)?;
    let recipe = match &args.recipe {
        Some(path) => Recipe::load(path)?,
        None => Recipe::default(),
    };
    let inputs = model_inputs(&Graph::build(&model));
    let spec =
        super::common::data_spec(Some(&args.data), args.images.preprocess(&inputs)?, None, 0)?;
    let mut source = spec.open(&inputs)?;
    let runtime = Runtime::load(&LoadOptions::new()?, &mut super::runtime::print_progress)?;
    let eps = super::common::parse_eps(&args.eps)?;
    let bar = ProgressBar::new(0);
    let sink = bar.clone();
    let ctx = JobContext::new(CancelToken::new(), move |p| {
        sink.set_length(p.total);
        sink.set_position(p.done);
        sink.set_message(p.detail);
    });
    let reference = Reference::capture(
        &model,
        source.as_mut(),
        &runtime,
        &eps,
        args.batch_size,
        &JobContext::silent(),
    )?;
    let evaluator = Evaluator {
        float: &model,
        stats: &stats,
        reference: &reference,
        runtime: &runtime,
        eps: &eps,
    };
    let granularity = if args.by_op_type {
        Granularity::OpType
    } else {
        Granularity::Node
    };
    let started = std::time::Instant::now();
    let graph = Graph::build(&model);
    for candidate in &args.candidates {
        let known = if args.by_op_type {
            graph.nodes().iter().any(|n| &n.op_type == candidate)
        } else {
            graph.node_by_name(candidate).is_some()
        };
        if !known {
            anyhow::bail!(
                "--candidates: the model has no {} named {candidate}",
                if args.by_op_type { "op type" } else { "node" }
            );
        }
    }
    let result = if args.candidates.is_empty() {
        scan(&evaluator, &recipe, granularity, &ctx)
    } else {
        scan_units(&evaluator, &recipe, granularity, &args.candidates, &ctx)
    };
    bar.finish_and_clear();
    let result = result?;
    println!(
        "baseline output SQNR {:.2} dB; {} {} scanned in {:.1} s ({} in parallel)",
        result.baseline_db,
        result.nodes.len(),
        if args.by_op_type { "op types" } else { "nodes" },
        started.elapsed().as_secs_f64(),
        result.workers
    );
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header([
        if args.by_op_type { "op type" } else { "node" },
        "SQNR with it in float",
        "SQNR with only it quantized",
    ]);
    for n in result.nodes.iter().take(20) {
        table.add_row([
            n.node.clone(),
            format!("{:.2}", n.sqnr_without_db),
            format!("{:.2}", n.sqnr_only_db),
        ]);
    }
    println!("{table}");
    let target = match (args.target_sqnr, args.target_top1, args.target_sequence) {
        (Some(db), _, _) => Some(Target::SqnrDb(db)),
        (None, Some(pct), _) => Some(Target::Top1(pct / 100.0)),
        (None, None, Some(pct)) => Some(Target::Sequence(pct / 100.0)),
        (None, None, None) => None,
    };
    let mut fixed_json = serde_json::Value::Null;
    if let Some(target) = target {
        let fixed = auto_exclude(
            &evaluator,
            &recipe,
            &result,
            target,
            args.max_excluded,
            &JobContext::silent(),
        )?;
        let count = |op: &str| fixed.quantized_by_op_type.get(op).copied().unwrap_or(0);
        println!(
            "auto-exclude: {} node(s) kept in float ({}); score {}, output SQNR {:.2} dB; target {} {}; still quantized: {} Conv, {} MatMul, {} Gemm",
            fixed.excluded.len(),
            fixed.excluded.join(", "),
            target.format_score(fixed.score),
            fixed.sqnr_db,
            target.describe(),
            if fixed.reached {
                "reached"
            } else {
                "NOT reached"
            },
            count("Conv"),
            count("MatMul"),
            count("Gemm"),
        );
        if !fixed.alternatives.is_empty() {
            println!("recipe-wide changes on top of it, measured:");
            let mut table = Table::new();
            table.load_preset(UTF8_FULL_CONDENSED).set_header([
                "change",
                "score",
                "output SQNR dB",
                "target",
            ]);
            for a in &fixed.alternatives {
                table.add_row([
                    a.change.clone(),
                    target.format_score(a.score),
                    format!("{:.2}", a.sqnr_db),
                    (if a.reached { "reached" } else { "not reached" }).to_owned(),
                ]);
            }
            println!("{table}");
        }
        let chosen = match fixed.best_alternative() {
            Some(best) if args.take_best_alternative => {
                println!("taking the best change: {}", best.change);
                &best.recipe
            }
            Some(best) => {
                println!(
                    "{} does better; --take_best_alternative saves it instead",
                    best.change
                );
                &fixed.recipe
            }
            None => &fixed.recipe,
        };
        if let Some(path) = &args.save_recipe {
            chosen.save(path)?;
            println!("recipe written to {}", path.display());
        }
        fixed_json = serde_json::to_value(&fixed)?;
    }
    if let Some(path) = &args.json {
        let value = serde_json::json!({"scan": result, "auto_exclude": fixed_json});
        qdq_studio::atomic::write(path, serde_json::to_string_pretty(&value)?.as_bytes())?;
        println!("scan written to {}", path.display());
    }
    Ok(())
}
