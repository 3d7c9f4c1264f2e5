//! The Markdown report: the same tables as the HTML one, charts linked as SVG files in a
//! folder beside it (Markdown viewers do not render inline SVG).

use std::fmt::Write as _;

use super::baseline::BASELINE_NOTE;
use super::{
    Chart, CompareReport, TextTable, activation_table, charts_named, latency_line, local_table,
    output_table, settings_items, summary_items, task_table, verdict_line, weight_table,
};

/// Escapes a table cell (pipes would end the cell; backticks and stars would format).
fn cell(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace('`', "\\`")
        .replace('*', "\\*")
        .replace('_', "\\_")
}

fn table(out: &mut String, t: &TextTable) {
    let (header, rows) = (&t.header, &t.rows);
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let _ = writeln!(
        out,
        "|{}",
        header
            .iter()
            .enumerate()
            .map(|(i, _)| if i == 0 { " --- |" } else { " ---: |" })
            .collect::<String>()
    );
    for row in rows {
        let cells: Vec<String> = row.iter().map(|c| cell(c)).collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out.push('\n');
}

fn image(out: &mut String, chart: &Chart, folder: &str) {
    let _ = writeln!(
        out,
        "![{}]({folder}/{}.svg)\n",
        chart.title.replace(['[', ']'], ""),
        chart.stem
    );
}

/// The worst local errors (where the errors are made), or why they were not measured.
fn local_section(out: &mut String, tensors: &crate::eval::tensor_error::tensors::TensorErrors) {
    let local = local_table(tensors, 15);
    if !local.rows.is_empty() {
        out.push_str("### Where the error is made\n\nThe tensors whose own node loses most with float inputs: fix these (exclude them, widen their range, raise their precision) before the nodes that only carry their error.\n\n");
        table(out, &local);
    }
    if let Some(note) = super::rescaled_note(tensors) {
        let _ = writeln!(out, "{}\n", cell(&note));
    }
    if let Some(reason) = &tensors.local_unavailable {
        let _ = writeln!(out, "Local errors were not measured: {}\n", cell(reason));
    }
}

/// The baseline's outputs beside the compared model's and the layers that moved most.
fn baseline_section(out: &mut String, report: &CompareReport) {
    let Some(section) = super::baseline::baseline_section(report, super::baseline::REPORT_LAYERS)
    else {
        return;
    };
    let _ = writeln!(
        out,
        "## Against the baseline\n\n`{}` {}\n",
        section.model, BASELINE_NOTE
    );
    table(out, &section.outputs);
    if let Some(line) = &section.summary {
        let _ = writeln!(out, "{}\n", cell(line));
    }
    for layers in &section.layers {
        table(out, layers);
    }
}

/// Renders the page; chart images are referenced as `<folder>/<stem>.svg`.
pub(super) fn render(report: &CompareReport, charts: &[Chart], folder: &str) -> String {
    let mut out = String::from("# Float against quantized\n\n");
    let _ = writeln!(out, "**{}**\n", cell(&verdict_line(report)));
    for (k, v) in summary_items(report) {
        let _ = writeln!(out, "- **{k}**: `{v}`");
    }
    out.push_str("\n## How the QDQ model was made\n\n");
    for (k, v) in settings_items(report) {
        let _ = writeln!(out, "- **{k}**: {}", cell(&v));
    }
    out.push_str("\n## Outputs\n\n");
    table(&mut out, &output_table(report));
    if let Some(task) = task_table(report) {
        out.push_str("## Against ground truth\n\n");
        table(&mut out, &task);
    }
    if let Some(latency) = &report.latency {
        let _ = writeln!(out, "## Latency\n\n{}\n", latency_line(latency));
        if let Some(kernels) = &latency.quantized.kernels {
            let _ = writeln!(out, "Kernels of the quantized model: {}\n", kernels.line());
        }
    }
    baseline_section(&mut out, report);
    let Some(tensors) = &report.tensors else {
        out.push_str("Per-tensor errors were not computed.\n");
        return out;
    };
    out.push_str("## Per-tensor error\n\n*float vs QDQ*: the float model's tensor against the QDQ model's dequantized one; *pre-Q vs post-DQ*: the error this Q/DQ pair adds alone (onnxruntime's qdq_loss_debug semantics); *local*: the error of the node writing the tensor given float inputs (its own quantization alone). A poor local figure marks the node that makes an error; a poor float vs QDQ figure with a good local one, a node that only carries it.\n\n");
    for chart in charts_named(charts, "sqnr_along_graph") {
        image(&mut out, chart, folder);
    }
    table(&mut out, &activation_table(tensors, 15));
    local_section(&mut out, tensors);
    let histograms = charts_named(charts, "histogram_");
    if !histograms.is_empty() {
        out.push_str("## Histograms of the worst tensors\n\nFloat values over the evaluation data (log count); the red lines are the range the QDQ model represents.\n\n");
        for chart in histograms {
            image(&mut out, chart, folder);
        }
    }
    if !tensors.weights.is_empty() {
        out.push_str("## Weights\n\n");
        for chart in charts_named(charts, "weight_sqnr") {
            image(&mut out, chart, folder);
        }
        table(&mut out, &weight_table(tensors));
    }
    if !tensors.unmatched.is_empty() {
        let _ = writeln!(
            out,
            "## Not matched\n\n{} Q/DQ pair(s) could not be matched to a float tensor: {}\n",
            tensors.unmatched.len(),
            cell(&tensors.unmatched.join(", "))
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::cell;

    #[test]
    fn table_cells_escape_pipes_and_emphasis() {
        assert_eq!(cell("a|b_c*d"), "a\\|b\\_c\\*d");
    }
}
