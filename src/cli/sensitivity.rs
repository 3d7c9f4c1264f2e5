//! `qdq-studio sensitivity`: rank the quantized nodes by how much they cost the outputs, and
//! optionally auto-exclude the worst until a target output SQNR is met.

use std::path::PathBuf;

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use indicatif::ProgressBar;

use qdq_studio::calib::data::model_inputs;
use qdq_studio::eval::sensitivity::{Evaluator, auto_exclude, scan};
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
    /// Auto-exclude until the worst output's SQNR reaches this many dB.
    #[arg(long = "target_sqnr", visible_alias = "target-sqnr")]
    pub target_sqnr: Option<f64>,
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
    let mut evaluator = Evaluator {
        float: &model,
        stats: &stats,
        source: source.as_mut(),
        runtime: &runtime,
        eps: &eps,
        batch_size: args.batch_size,
    };
    let result = scan(&mut evaluator, &recipe, &ctx);
    bar.finish_and_clear();
    let result = result?;
    println!("baseline output SQNR {:.2} dB", result.baseline_db);
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header([
        "node",
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
    if let Some(target) = args.target_sqnr {
        let fixed = auto_exclude(
            &mut evaluator,
            &recipe,
            &result,
            target,
            args.max_excluded,
            &JobContext::silent(),
        )?;
        println!(
            "auto-exclude: {} node(s) kept in float ({}), output SQNR {:.2} dB, target {target:.2} dB {}",
            fixed.excluded.len(),
            fixed.excluded.join(", "),
            fixed.sqnr_db,
            if fixed.reached {
                "reached"
            } else {
                "NOT reached"
            }
        );
        if let Some(path) = &args.save_recipe {
            fixed.recipe.save(path)?;
            println!("recipe written to {}", path.display());
        }
    }
    Ok(())
}
