//! `qdq-studio compare`: float against quantized outputs, and latency, on evaluation data.

use std::path::PathBuf;

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};

use qdq_studio::jobs::JobContext;
use qdq_studio::model::Model;
use qdq_studio::report::{self, CompareReport, Format, latency_line};
use qdq_studio::runtime::{EpSpec, Runtime};
use qdq_studio::workflow::compare::{CompareFiles, LatencyRuns, compare_files};
use qdq_studio::workflow::outputs::RunFiles;
use qdq_studio::workflow::runtime;

/// Arguments of `compare`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("evaluation").args(["data", "eval_text"]).required(true)))]
pub struct CompareArgs {
    /// The float model.
    #[arg(long = "float")]
    pub float: PathBuf,
    /// The QDQ model (qdq-studio's, onnxruntime's or ModelOpt's).
    #[arg(long = "quant")]
    pub quant: PathBuf,
    /// Another QDQ model of the same float model (quantized without a technique, say, or by
    /// another tool), measured on the same data: each output's SQNR before and after and, with
    /// `--per_tensor`, the layers the compared model moved most.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Evaluation data (.npz/.npy, an image folder or ONNX Runtime test data).
    #[arg(long = "data")]
    pub data: Option<PathBuf>,
    /// Evaluation text for a token model, and how it is tokenized.
    #[command(flatten)]
    pub text: super::common::EvalText,
    /// Samples per batch.
    #[arg(
        long = "batch_size",
        visible_alias = "batch-size",
        default_value_t = 1,
        value_parser = super::common::at_least_one
    )]
    pub batch_size: usize,
    /// Execution providers, in priority order (default: the EP of the target the quantized
    /// model was made for, as its recipe says; else cpu).
    #[arg(long = "eps", num_args = 1..)]
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
    /// Output kinds and ground truth.
    #[command(flatten)]
    pub task: super::common::TaskArgs,
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

/// The providers `compare` runs on: `--eps`, else the EP of the quantized model's target (its
/// stamped recipe's), with a line saying so where that is not the CPU (printed once the
/// comparison has run, so that a failure stays one line); a target whose EP this runtime
/// lacks is refused with what to install or choose instead.
fn eps_for(
    args: &CompareArgs,
    quant: &Model,
    runtime: &Runtime,
) -> anyhow::Result<(Vec<EpSpec>, Option<String>)> {
    if !args.eps.is_empty() {
        return Ok((super::common::parse_eps(&args.eps)?, None));
    }
    let Some(target) = qdq_studio::quant::stamped_recipe(quant).and_then(|r| r.target) else {
        return Ok((vec![EpSpec::Cpu], None));
    };
    let ep = target.latency_ep();
    if !runtime.has_ep(&ep) {
        anyhow::bail!(
            "the quantized model was made for target {}, measured on {}, which this ONNX Runtime does not have: {}; or choose the provider with --eps (cpu, cuda, trt, dml, openvino)",
            target.name(),
            ep.ort_name(),
            ep.flavor_hint()
        );
    }
    let note = (ep != EpSpec::Cpu).then(|| {
        format!(
            "measured on {} (the EP of target {}, the quantized model's; --eps to choose another)",
            ep.ort_name(),
            target.name()
        )
    });
    Ok((vec![ep], note))
}

/// Runs `compare`.
pub fn run(args: &CompareArgs) -> anyhow::Result<()> {
    if let Some(path) = &args.report {
        // Refuse a bad report name before the long work, not after it.
        Format::of(path)?;
    }
    let float = Model::load(&args.float)?;
    let quant = Model::load(&args.quant)?;
    let baseline = args.baseline.as_deref().map(Model::load).transpose()?;
    let baseline_label = args.baseline.as_ref().map(|p| p.display().to_string());
    let mut request = CompareFiles {
        labels: (
            args.float.display().to_string(),
            args.quant.display().to_string(),
        ),
        data: super::common::data_spec(
            args.text.source(),
            args.data.as_deref(),
            &args.images,
            None,
            0,
            &float,
        )?,
        eps: Vec::new(),
        batch_size: args.batch_size,
        task: args.task.options()?,
        per_tensor: args.per_tensor || args.report.is_some(),
        latency: (args.latency_runs > 0).then_some(LatencyRuns {
            warmup: 3,
            runs: args.latency_runs,
        }),
    };
    RunFiles::new()
        .model("the float model", &float)
        .model("the quantized model", &quant)
        .model_if("the baseline", baseline.as_ref())
        .data("the evaluation data", &request.data)
        .input_if("the character list", args.task.charset.as_deref())
        .output_if("the report", args.report.as_deref())
        .check()?;
    let runtime = runtime::runtime(&mut super::runtime::print_progress)?;
    let (eps, measured_on) = eps_for(args, &quant, &runtime)?;
    request.eps = eps;
    let baseline = baseline_label.as_deref().zip(baseline.as_ref());
    let report = compare_files(
        &float,
        &quant,
        baseline,
        &request,
        &runtime,
        &JobContext::silent(),
    )?;
    if let Some(note) = measured_on {
        eprintln!("{note}");
    }
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
    let task = report::task_table(&report);
    // Shorter than the report's lists: a terminal's worth.
    let against_baseline = report::baseline::baseline_section(&report, (10, 5));
    let CompareReport {
        outputs: metrics,
        tensors,
        latency,
        baseline,
        ..
    } = report;
    if args.json {
        let value = serde_json::json!({
            "outputs": metrics,
            "tensors": tensors,
            "latency": latency,
            "baseline": baseline,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    let mut table = Table::new();
    table
        .load_preset(UTF8_FULL_CONDENSED)
        .set_header(qdq_studio::eval::compare::OUTPUT_TABLE_HEADER);
    for m in &metrics {
        table.add_row(m.table_row());
    }
    println!("{table}");
    if let Some(table) = task.as_ref().and_then(super::common::text_table) {
        println!("{table}");
    }
    if let Some(tensors) = &tensors {
        for table in [
            super::common::text_table(&report::activation_table(tensors, 10)),
            super::common::text_table(&report::local_table(tensors, 10)),
        ]
        .into_iter()
        .flatten()
        {
            println!("{table}");
        }
        if let Some(table) = layer_table(tensors) {
            println!("{table}");
        }
        if let Some(reason) = &tensors.local_unavailable {
            println!("local errors not measured: {reason}");
        }
        if let Some(note) = report::rescaled_note(tensors) {
            println!("{note}");
        }
        if !tensors.unmatched.is_empty() {
            println!(
                "could not match {} Q/DQ pair(s) to float tensors: {}",
                tensors.unmatched.len(),
                tensors.unmatched.join(", ")
            );
        }
    }
    if let Some(section) = &against_baseline {
        print_baseline(section);
    }
    if let Some(latency) = &latency {
        println!("latency {}", latency_line(latency));
        if let Some(kernels) = &latency.quantized.kernels {
            println!("kernels of the quantized model: {}", kernels.line());
        }
    }
    Ok(())
}

/// The baseline's outputs beside the compared model's, and the layers that moved most.
fn print_baseline(section: &report::baseline::BaselineSection) {
    if let Some(outputs) = super::common::text_table(&section.outputs) {
        println!("{outputs}");
    }
    if let Some(line) = &section.summary {
        println!("{line}");
    }
    for table in section.layers.iter().filter_map(super::common::text_table) {
        println!("{table}");
    }
}

/// The weight-only quantized layers (int4), worst first, each with its weight's error; `None`
/// when the model has none.
fn layer_table(tensors: &qdq_studio::eval::tensor_error::tensors::TensorErrors) -> Option<Table> {
    if tensors.layers.is_empty() {
        return None;
    }
    let mut worst = tensors.layers.clone();
    worst.sort_by(|a, b| a.sqnr_db.total_cmp(&b.sqnr_db));
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header([
        "worst weight-only layers",
        "output float vs quantized dB",
        "weight dB",
    ]);
    for layer in worst.iter().take(10) {
        let weight = tensors
            .weight_of(&layer.node)
            .map_or_else(String::new, |w| format!("{:.2}", w.sqnr_db));
        table.add_row([layer.node.clone(), format!("{:.2}", layer.sqnr_db), weight]);
    }
    Some(table)
}
