//! `qdq-studio compare`: float against quantized outputs, and latency, on evaluation data.

use std::path::PathBuf;

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};

use qdq_studio::calib::data::model_inputs;
use qdq_studio::eval::{compare_outputs, measure_latency};
use qdq_studio::jobs::JobContext;
use qdq_studio::model::{Graph, Model};
use qdq_studio::report::{CompareReport, Format, LatencyPair, latency_line};
use qdq_studio::runtime::{LoadOptions, Runtime};

/// Arguments of `compare`.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// The float model.
    #[arg(long = "float")]
    pub float: PathBuf,
    /// The QDQ model (qdq-studio's, onnxruntime's or ModelOpt's).
    #[arg(long = "quant")]
    pub quant: PathBuf,
    /// Evaluation data (.npz/.npy, an image folder or ONNX Runtime test data).
    #[arg(long = "data")]
    pub data: PathBuf,
    /// Samples per batch.
    #[arg(long = "batch_size", visible_alias = "batch-size", default_value_t = 1)]
    pub batch_size: usize,
    /// Execution providers, in priority order.
    #[arg(long = "eps", num_args = 1.., default_value = "cpu")]
    pub eps: Vec<String>,
    /// Timed runs per model for latency (0: skip).
    #[arg(
        long = "latency_runs",
        visible_alias = "latency-runs",
        default_value_t = 20
    )]
    pub latency_runs: usize,
    /// Image-folder preprocessing.
    #[command(flatten)]
    pub images: super::common::ImageArgs,
    /// Also compute per-tensor errors (onnxruntime's qdq_loss_debug semantics) and list the
    /// worst tensors.
    #[arg(long = "per_tensor", visible_alias = "per-tensor")]
    pub per_tensor: bool,
    /// Write a report: a self-contained HTML page (`.html`) or Markdown with SVG charts beside
    /// it (`.md`). Implies `--per_tensor`.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `compare`.
pub fn run(args: &CompareArgs) -> anyhow::Result<()> {
    if let Some(path) = &args.report {
        // Refuse a bad report name before the long work, not after it.
        Format::of(path)?;
    }
    let float = Model::load(&args.float)?;
    let quant = Model::load(&args.quant)?;
    qdq_studio::eval::check_comparable(&float, &quant, &args.quant.display().to_string())?;
    let eps = super::common::parse_eps(&args.eps)?;
    let inputs = model_inputs(&Graph::build(&float));
    let spec =
        super::common::data_spec(Some(&args.data), args.images.preprocess(&inputs)?, None, 0)?;
    let mut source = spec.open(&inputs)?;
    let runtime = Runtime::load(&LoadOptions::new()?, &mut super::runtime::print_progress)?;
    let metrics = compare_outputs(
        &float,
        &quant,
        source.as_mut(),
        &runtime,
        &eps,
        args.batch_size,
        &JobContext::silent(),
    )?;
    let tensors = if args.per_tensor || args.report.is_some() {
        Some(qdq_studio::eval::tensors::tensor_errors(
            &float,
            &quant,
            source.as_mut(),
            &runtime,
            &eps,
            args.batch_size,
            &JobContext::silent(),
        )?)
    } else {
        None
    };
    let latency = if args.latency_runs > 0 {
        let f = measure_latency(
            &float,
            source.as_mut(),
            &runtime,
            &eps,
            args.batch_size,
            3,
            args.latency_runs,
        )?;
        let q = measure_latency(
            &quant,
            source.as_mut(),
            &runtime,
            &eps,
            args.batch_size,
            3,
            args.latency_runs,
        )?;
        Some((f, q))
    } else {
        None
    };
    let report = CompareReport {
        float_model: args.float.display().to_string(),
        quant_model: args.quant.display().to_string(),
        data: args.data.display().to_string(),
        samples: source.samples(),
        execution_providers: eps.iter().map(ToString::to_string).collect(),
        outputs: metrics,
        tensors,
        latency: latency.map(|(float, quantized)| LatencyPair { float, quantized }),
    };
    if let Some(path) = &args.report {
        let written = report.write(path)?;
        eprintln!(
            "report written: {}",
            written
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let CompareReport {
        outputs: metrics,
        tensors,
        latency,
        ..
    } = report;
    if args.json {
        let value = serde_json::json!({
            "outputs": metrics,
            "tensors": tensors,
            "latency": latency,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    let mut table = Table::new();
    table
        .load_preset(UTF8_FULL_CONDENSED)
        .set_header(qdq_studio::eval::OUTPUT_TABLE_HEADER);
    for m in &metrics {
        table.add_row(m.table_row());
    }
    println!("{table}");
    if let Some(tensors) = &tensors {
        let mut worst = tensors.activations.clone();
        worst.sort_by(|a, b| a.xmodel_sqnr_db.total_cmp(&b.xmodel_sqnr_db));
        let mut table = Table::new();
        table.load_preset(UTF8_FULL_CONDENSED).set_header([
            "worst activations",
            "float vs QDQ dB",
            "pre-Q vs post-DQ dB",
        ]);
        for a in worst.iter().take(10) {
            table.add_row([
                a.tensor.clone(),
                format!("{:.2}", a.xmodel_sqnr_db),
                format!("{:.2}", a.qdq_sqnr_db),
            ]);
        }
        println!("{table}");
        if !tensors.unmatched.is_empty() {
            println!(
                "could not match {} Q/DQ pair(s) to float tensors: {}",
                tensors.unmatched.len(),
                tensors.unmatched.join(", ")
            );
        }
    }
    if let Some(latency) = &latency {
        println!("latency {}", latency_line(latency));
    }
    Ok(())
}
