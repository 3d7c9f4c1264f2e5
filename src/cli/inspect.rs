//! `qdq-studio inspect MODEL [--json]`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use comfy_table::{Cell, CellAlignment, Table, presets::UTF8_FULL_CONDENSED};

use qdq_studio::quant::Explanation;
use qdq_studio::recipe::{Recipe, Target};
use qdq_studio::workflow::inspect::{self, ModelSummary};
use qdq_studio::workflow::statistics;

/// Arguments of `inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The ONNX model.
    pub model: PathBuf,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Print the quantizer's plan instead: each node quantized or why not, and how each
    /// tensor is quantized (type, symmetry, range source, weight axis).
    #[arg(long)]
    pub plan: bool,
    /// With --plan: the recipe to plan for (default: the default recipe).
    #[arg(long, requires = "plan")]
    pub recipe: Option<PathBuf>,
    /// With --plan: statistics (any format `quantize` reads) deciding which untyped tensors
    /// are float, as quantizing with them would.
    #[arg(
        long = "calibration_cache_path",
        visible_alias = "calibration-cache-path",
        requires = "plan"
    )]
    pub calibration_cache_path: Option<PathBuf>,
}

/// Renders the summary as tables.
pub fn render(summary: &ModelSummary) -> String {
    let mut out = String::new();
    let path = summary
        .path
        .as_ref()
        .map_or_else(|| "(in memory)".to_owned(), |p| p.display().to_string());
    let opsets: Vec<String> = summary
        .opsets
        .iter()
        .map(|o| format!("{} {}", o.domain, o.version))
        .collect();
    out += &format!("model      {path}\n");
    out += &format!(
        "ir         {}   opsets: {}\n",
        summary.ir_version,
        opsets.join(", ")
    );
    if let Some(legacy) = &summary.legacy_opset {
        out += &format!("           {legacy}\n");
    }
    out += &format!(
        "producer   {}\n",
        if summary.producer.is_empty() {
            "-"
        } else {
            &summary.producer
        }
    );
    out += &format!(
        "nodes      {} ({} quantizable by default, {} renamed)\n",
        summary.node_count, summary.quantizable_nodes, summary.renamed_nodes
    );
    out += &format!(
        "parameters {} in {} initializers ({})\n",
        summary.parameters,
        summary.initializer_count,
        qdq_studio::util::format_bytes(summary.parameter_bytes)
    );
    for file in &summary.external_data_files {
        out += &format!("external   {}\n", file.display());
    }

    let mut io = Table::new();
    io.load_preset(UTF8_FULL_CONDENSED)
        .set_header(["", "name", "type", "shape"]);
    for (kind, values) in [("input", &summary.inputs), ("output", &summary.outputs)] {
        for v in values {
            io.add_row([kind, &v.name, &v.dtype, &v.shape]);
        }
    }
    out += &format!("\n{io}\n");

    let mut ops = Table::new();
    ops.load_preset(UTF8_FULL_CONDENSED)
        .set_header(["op type", "count", "quantizable"]);
    for op in &summary.op_types {
        ops.add_row([
            Cell::new(&op.op_type),
            Cell::new(op.count).set_alignment(CellAlignment::Right),
            Cell::new(if op.quantizable { "yes" } else { "" }),
        ]);
    }
    out += &format!("\n{ops}\n");
    for sub in &summary.subgraphs {
        out += &format!(
            "subgraph   {} ({}) attribute '{}': {} nodes (listed, not quantized)\n",
            sub.node, sub.op_type, sub.attribute, sub.nodes
        );
    }
    for problem in &summary.problems {
        out += &format!("problem    {problem}\n");
    }
    out
}

/// Runs `inspect`.
pub fn run(args: &InspectArgs) -> anyhow::Result<()> {
    if args.plan {
        return run_plan(args);
    }
    let summary = inspect::inspect(&args.model)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", render(&summary));
    }
    Ok(())
}

/// `inspect --plan`: the explained plan.
fn run_plan(args: &InspectArgs) -> anyhow::Result<()> {
    let recipe = match &args.recipe {
        Some(path) => Recipe::load(path)?,
        None => Recipe::for_target(Target::Cpu),
    };
    let stats = match &args.calibration_cache_path {
        Some(path) => Some(statistics::load(path)?.0),
        None => None,
    };
    let plan = inspect::plan(&args.model, &recipe, stats.as_ref())?;
    let tensors: BTreeMap<&str, String> = plan
        .tensors
        .iter()
        .map(|(name, t)| (name.as_str(), t.describe()))
        .collect();
    if args.json {
        let value = serde_json::json!({
            "nodes": plan.nodes,
            "tensors": tensors,
            "kept_float": plan.kept_float,
            "seven_bit_weights": plan.seven_bit_weights,
            "outlier_rows": plan.outlier_rows,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    print!("{}", render_plan(&plan, &tensors));
    Ok(())
}

/// The plan as text: the counts, the op types, then every quantized tensor.
fn render_plan(plan: &Explanation, tensors: &BTreeMap<&str, String>) -> String {
    let mut out = format!(
        "{} of {} nodes quantized (float tensors {})\n",
        plan.quantized_count(),
        plan.nodes.len(),
        if plan.from_statistics {
            "from the statistics"
        } else {
            "from the graph's element types, declared or inferred"
        }
    );
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header([
        "op type",
        "nodes",
        "quantized",
        "policy quantizes it",
    ]);
    for (op, t) in &plan.op_types {
        table.add_row([
            op.clone(),
            t.count.to_string(),
            t.quantized.to_string(),
            (if t.quantizable { "yes" } else { "" }).to_owned(),
        ]);
    }
    out += &format!("{table}\n");
    let mut table = Table::new();
    table
        .load_preset(UTF8_FULL_CONDENSED)
        .set_header(["tensor", "quantized as"]);
    for (name, how) in tensors {
        table.add_row([(*name).to_owned(), how.clone()]);
    }
    out += &format!("{table}\n");
    for line in qdq_studio::quant::precision::summary(&plan.kept_float) {
        out += &format!("{line}\n");
    }
    if let Some(line) = qdq_studio::quant::saturation::summary(plan.seven_bit_weights.len()) {
        out += &format!("{line}\n");
    }
    if let Some(line) = qdq_studio::quant::outlier_rows::summary(&plan.outlier_rows) {
        out += &format!("{line}\n");
    }
    out
}
