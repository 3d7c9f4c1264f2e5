//! `qdq-studio inspect MODEL [--json]`.

use std::path::PathBuf;

use comfy_table::{Cell, CellAlignment, Table, presets::UTF8_FULL_CONDENSED};

use qdq_studio::workflow::inspect::ModelSummary;

/// Arguments of `inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The ONNX model.
    pub model: PathBuf,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
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
    let summary = qdq_studio::workflow::inspect::inspect(&args.model)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", render(&summary));
    }
    Ok(())
}
