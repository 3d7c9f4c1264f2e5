//! `qdq-studio sensitivity`: rank the quantized nodes by how much they cost the outputs, and
//! optionally auto-exclude the worst until a target output SQNR is met.

use qdq_studio::model::ops::{self, Family};
use qdq_studio::workflow::model_folder::resolve_model_path;
use std::path::PathBuf;
use std::sync::Arc;

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};

use qdq_studio::eval::search::auto_exclude::{AutoExclude, Goal};

use qdq_studio::eval::search::sensitivity::{Granularity, Sensitivity};

use qdq_studio::eval::search::evaluator::{Target, TargetKind};
use qdq_studio::eval::search::switched_scan::ScanMethod;
use qdq_studio::model::Model;
use qdq_studio::recipe::{Recipe, Target as Deployment};
use qdq_studio::workflow::outputs::RunFiles;
use qdq_studio::workflow::reference::EvalSetup;
use qdq_studio::workflow::sensitivity::{auto_exclude_setup, scan_setup};
use qdq_studio::workflow::{runtime, statistics};

/// Arguments of `sensitivity`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("evaluation").args(["data", "eval_text"]).required(true)))]
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
    pub data: Option<PathBuf>,
    /// Evaluation text for a token model, and how it is tokenized.
    #[command(flatten)]
    pub text: super::common::EvalText,
    /// The recipe to start from (default: the default recipe).
    #[arg(long)]
    pub recipe: Option<PathBuf>,
    /// Samples per batch.
    #[arg(
        long = "batch_size",
        visible_alias = "batch-size",
        default_value_t = 1,
        value_parser = super::common::at_least_one
    )]
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
    /// Run every variant as a gate setting of one switchable model instead of quantizing and
    /// opening each on its own: the same figures (each gate setting runs its variant's fused
    /// integer kernels), without a session per variant, and on a larger model each variant
    /// runs only the part of the model from its node on (PP-OCR rec: two thirds to four
    /// fifths of the time). On an accelerator every form runs and `Where` nodes pick the
    /// chosen ones (an `If` costs a host round trip there).
    #[arg(long = "switchable")]
    pub switchable: bool,
    /// Variants (and auto-exclude's tries) measured at once on the CPU; default: one per
    /// core, as far as the memory holds them. 1 measures one at a time, each on every core.
    #[arg(long = "workers", value_parser = super::common::at_least_one)]
    pub workers: Option<usize>,
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
    /// Auto-exclude until the quantized model's accuracy against the data's ground truth
    /// (top-1 accuracy on labels, exact match on texts) reaches this percentage.
    #[arg(
        long = "target_accuracy",
        visible_alias = "target-accuracy",
        conflicts_with_all = ["by_op_type", "target_sqnr", "target_top1", "target_sequence"]
    )]
    pub target_accuracy: Option<f64>,
    /// Auto-exclude until a language model's perplexity on the evaluation text
    /// (--eval_text) is at most this many percent above the float model's.
    #[arg(
        long = "target_perplexity",
        visible_alias = "target-perplexity",
        value_name = "PERCENT",
        conflicts_with_all = ["by_op_type", "target_sqnr", "target_top1", "target_sequence", "target_accuracy"]
    )]
    pub target_perplexity: Option<f64>,
    /// When keeping nodes in float does not reach the target, save the best measured
    /// recipe-wide change (range method, 16-bit activations) if it does better.
    #[arg(
        long = "take_best_alternative",
        visible_alias = "take-best-alternative"
    )]
    pub take_best_alternative: bool,
    /// Auto-exclude keeps nodes in float only, without trying 16-bit activations (w8a16)
    /// on each first (for ONNX Runtime's CPU, where 16-bit Q/DQ runs slower than float).
    #[arg(long = "no_promotion", visible_alias = "no-promotion")]
    pub no_promotion: bool,
    /// At most this many nodes are changed (kept in float or given 16-bit activations).
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
    /// Output kinds and ground truth.
    #[command(flatten)]
    pub task: super::common::TaskArgs,
}

/// The auto-exclude target the flags ask for, if any.
fn target(args: &SensitivityArgs) -> Option<Target> {
    [
        (args.target_sqnr, TargetKind::SqnrDb),
        (args.target_top1, TargetKind::Top1),
        (args.target_sequence, TargetKind::Sequence),
        (args.target_accuracy, TargetKind::Accuracy),
        (args.target_perplexity, TargetKind::Perplexity),
    ]
    .into_iter()
    .find_map(|(value, kind)| Some(kind.target(value?)))
}

/// Runs `sensitivity`, on `--workers` threads when given.
pub fn run(args: &SensitivityArgs) -> anyhow::Result<()> {
    match args.workers {
        Some(asked) => rayon::ThreadPoolBuilder::new()
            .num_threads(capped_workers(asked))
            .build()?
            .install(|| scan_and_fix(args)),
        None => scan_and_fix(args),
    }
}

/// `--workers`, at most one per core of this machine (more only wait for a core, each with
/// its own sessions and buffers: 100,000 once ran out of threads), with a note when capped.
fn capped_workers(asked: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    if asked > cores {
        eprintln!(
            "note: --workers {asked} is more than this machine's {cores} cores: {cores} used"
        );
        return cores;
    }
    asked
}

/// The scan, and auto-exclude when a target is given.
fn scan_and_fix(args: &SensitivityArgs) -> anyhow::Result<()> {
    let model = Model::load(&resolve_model_path(&args.onnx_path)?)?;
    let (stats, _) = statistics::load(&args.calibration_cache_path)?;
    // Without a recipe, the default one for the target of the EP the scan runs on.
    let eps = super::common::parse_eps(&args.eps)?;
    let recipe = match &args.recipe {
        Some(path) => Recipe::load(path)?,
        None => Recipe::for_target(Deployment::for_execution_providers(&eps)),
    };
    let data = super::common::data_spec(
        args.text.source(),
        args.data.as_deref(),
        &args.images,
        None,
        0,
        &model,
    )?;
    RunFiles::new()
        .model("the input model", &model)
        .input("the statistics", &args.calibration_cache_path)
        .data("the evaluation data", &data)
        .input_if("the recipe", args.recipe.as_deref())
        .input_if("the character list", args.task.charset.as_deref())
        .output_if("the recipe written", args.save_recipe.as_deref())
        .output_if("the scan", args.json.as_deref())
        .check()?;
    let runtime = runtime::runtime(&mut super::runtime::print_progress)?;
    let setup = EvalSetup {
        model,
        stats: Arc::new(stats),
        recipe,
        data,
        eps,
        batch_size: args.batch_size,
        task: args.task.options()?,
        reference: None,
    };
    let granularity = if args.by_op_type {
        Granularity::OpType
    } else {
        Granularity::Node
    };
    let started = std::time::Instant::now();
    let (bar, ctx) = super::common::progress("{spinner} {wide_msg} {pos}/{len}", true);
    let method = if args.switchable {
        ScanMethod::Switchable
    } else {
        ScanMethod::Exact
    };
    let scanned = scan_setup(
        &setup,
        granularity,
        &args.candidates,
        method,
        &runtime,
        &ctx,
    );
    bar.finish_and_clear();
    let scanned = scanned?;
    print_scan(&scanned.sensitivity, started.elapsed().as_secs_f64());
    let mut fixed_json = serde_json::Value::Null;
    if let Some(target) = target(args) {
        let (bar, ctx) = super::common::progress("{spinner} {msg} {pos}/{len} tries", true);
        let fixed = auto_exclude_setup(
            &setup,
            Some(scanned.clone()),
            Goal {
                target,
                max_changed: args.max_excluded,
                promote: !args.no_promotion,
            },
            &runtime,
            &ctx,
        );
        bar.finish_and_clear();
        let (fixed, _) = fixed?;
        print_auto_exclude(&fixed, target);
        let (chosen, taken) = fixed.chosen(args.take_best_alternative);
        match (taken, fixed.best_alternative()) {
            (Some(best), _) => println!("taking the best change: {}", best.change),
            (None, Some(best)) => println!(
                "{} does better; --take_best_alternative saves it instead",
                best.change
            ),
            (None, None) => {}
        }
        if let Some(path) = &args.save_recipe {
            chosen.save(path)?;
            println!("recipe written to {}", path.display());
        }
        fixed_json = serde_json::to_value(&fixed)?;
    }
    if let Some(path) = &args.json {
        let value = serde_json::json!({"scan": scanned.sensitivity, "auto_exclude": fixed_json});
        qdq_studio::atomic::write(path, serde_json::to_string_pretty(&value)?.as_bytes())?;
        println!("scan written to {}", path.display());
    }
    Ok(())
}

/// The scan's headline and its 20 most harmful units.
fn print_scan(result: &Sensitivity, seconds: f64) {
    let unit = result.granularity.unit_name();
    println!(
        "baseline output SQNR {:.2} dB; {} {unit}s scanned in {:.1} s ({} in parallel)",
        result.baseline_db,
        result.nodes.len(),
        seconds,
        result.workers
    );
    println!("measured on {}", result.method_note());
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header([
        unit,
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
}

/// Auto-exclude's result and the recipe-wide changes it measured.
fn print_auto_exclude(fixed: &AutoExclude, target: Target) {
    let compute: Vec<String> = ops::of_family(Family::Compute)
        .map(|op| {
            let n = fixed.quantized_by_op_type.get(op).copied().unwrap_or(0);
            format!("{n} {op}")
        })
        .collect();
    let promoted = match fixed.promoted.len() {
        0 => String::new(),
        n => format!(
            "{n} node(s) given 16-bit activations, w8a16 ({}); ",
            fixed.promoted.join(", ")
        ),
    };
    println!(
        "auto-exclude: {promoted}{} node(s) kept in float ({}); score {}, output SQNR {:.2} dB; target {} {}; still quantized: {}; {} tries measured at once",
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
        compute.join(", "),
        fixed.workers,
    );
    if fixed.alternatives.is_empty() {
        return;
    }
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
