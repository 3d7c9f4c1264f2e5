//! The HTML report: one file, no external resources (styles inline, charts as inline SVG), so
//! it can be attached to a ticket or opened offline.

use std::fmt::Write as _;

use super::baseline::BASELINE_NOTE;
use super::{
    Chart, CompareReport, TextTable, activation_table, charts_named, latency_line, local_table,
    output_table, settings_items, summary_items, task_table, verdict_line, weight_table,
};

/// Escapes text for HTML element content and attribute values.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

// Tables scroll sideways in their own box rather than spilling; numbers never wrap, names
// wrap anywhere (a transformer's tensor names have no spaces; `word-break` for engines that
// predate `overflow-wrap: anywhere`, as the WebKit of `wkhtmltoimage`).
const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1280px;color:#222;padding:0 1em}\
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:1.6em;border-bottom:1px solid #ddd}\
.verdict{font-size:1.1em;padding:.5em .8em;background:#f4f7fb;border-left:4px solid #4a78b5}\
.table{overflow-x:auto;max-width:100%}\
table{border-collapse:collapse;margin:.6em 0;font-size:.92em}th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right;white-space:nowrap}\
th{background:#f3f3f3}td.name,th.name{text-align:left;font-family:ui-monospace,monospace;white-space:normal;overflow-wrap:anywhere;word-break:break-all;min-width:10em}\
dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}dt{font-weight:600}dd{margin:0;font-family:ui-monospace,monospace;overflow-wrap:anywhere;word-break:break-all}\
figure{margin:1em 0}figcaption{font-size:.9em;color:#555}.grid{display:flex;flex-wrap:wrap;gap:8px}.grid figure{margin:0}\
.note{color:#666;font-size:.9em}";

fn table(out: &mut String, t: &TextTable) {
    let (header, rows) = (&t.header, &t.rows);
    out.push_str("<div class=\"table\"><table><thead><tr>");
    for (i, h) in header.iter().enumerate() {
        let class = if i == 0 { " class=\"name\"" } else { "" };
        let _ = write!(out, "<th{class}>{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        out.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let class = if i == 0 { " class=\"name\"" } else { "" };
            let _ = write!(out, "<td{class}>{}</td>", esc(cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>\n");
}

fn figure(out: &mut String, chart: &Chart) {
    let _ = writeln!(
        out,
        "<figure id=\"{}\">{}<figcaption>{}</figcaption></figure>",
        esc(&chart.stem),
        chart.svg,
        esc(&chart.title)
    );
}

/// The worst local errors (where the errors are made), or why they were not measured.
fn local_section(out: &mut String, tensors: &crate::eval::tensor_error::tensors::TensorErrors) {
    let local = local_table(tensors, 15);
    if !local.rows.is_empty() {
        out.push_str("<h3>Where the error is made</h3>\n<p class=\"note\">The tensors whose own node loses most with float inputs: fix these (exclude them, widen their range, raise their precision) before the nodes that only carry their error.</p>\n");
        table(out, &local);
    }
    if let Some(note) = super::rescaled_note(tensors) {
        let _ = writeln!(out, "<p class=\"note\">{}</p>", esc(&note));
    }
    if let Some(reason) = &tensors.local_unavailable {
        let _ = writeln!(
            out,
            "<p class=\"note\">Local errors were not measured: {}</p>",
            esc(reason)
        );
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
        "<h2>Against the baseline</h2>\n<p class=\"note\"><code>{}</code> {}</p>",
        esc(&section.model),
        esc(BASELINE_NOTE)
    );
    table(out, &section.outputs);
    if let Some(line) = &section.summary {
        let _ = writeln!(out, "<p>{}</p>", esc(line));
    }
    for layers in &section.layers {
        table(out, layers);
    }
}

/// Renders the whole page.
pub(super) fn render(report: &CompareReport, charts: &[Chart]) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>qdq-studio report: {}</title><style>{STYLE}</style></head><body>\n",
        esc(&report.quant_model)
    );
    out.push_str("<h1>Float against quantized</h1>\n");
    let _ = writeln!(
        out,
        "<p class=\"verdict\">{}</p>\n<dl>",
        esc(&verdict_line(report))
    );
    for (k, v) in summary_items(report) {
        let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", esc(k), esc(&v));
    }
    out.push_str("</dl>\n<h2>How the QDQ model was made</h2>\n<dl>");
    for (k, v) in settings_items(report) {
        let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", esc(&k), esc(&v));
    }
    out.push_str("</dl>\n<h2>Outputs</h2>\n");
    table(&mut out, &output_table(report));
    if let Some(task) = task_table(report) {
        out.push_str("<h2>Against ground truth</h2>\n");
        table(&mut out, &task);
    }
    if let Some(latency) = &report.latency {
        let _ = write!(
            out,
            "<h2>Latency</h2>\n<p>{}</p>\n",
            esc(&latency_line(latency))
        );
        if let Some(kernels) = &latency.quantized.kernels {
            let _ = writeln!(
                out,
                "<p>Kernels of the quantized model: {}</p>",
                esc(&kernels.line())
            );
        }
    }
    baseline_section(&mut out, report);
    let Some(tensors) = &report.tensors else {
        out.push_str("<p class=\"note\">Per-tensor errors were not computed.</p></body></html>\n");
        return out;
    };
    out.push_str("<h2>Per-tensor error</h2>\n<p class=\"note\">onnxruntime's qdq_loss_debug semantics: <b>float vs QDQ</b> compares the float model's tensor with the QDQ model's dequantized one (error accumulated up to there); <b>pre-Q vs post-DQ</b> is the error this Q/DQ pair adds alone; <b>local</b> is the error of the node writing the tensor given float inputs (its own quantization alone): a poor local figure marks the node that makes an error, a poor float vs QDQ figure with a good local one a node that only carries it.</p>\n");
    for chart in charts_named(charts, "sqnr_along_graph") {
        figure(&mut out, chart);
    }
    table(&mut out, &activation_table(tensors, 15));
    local_section(&mut out, tensors);
    let histograms = charts_named(charts, "histogram_");
    if !histograms.is_empty() {
        out.push_str("<h2>Histograms of the worst tensors</h2>\n<p class=\"note\">Float values over the evaluation data (log count); the red lines are the range the QDQ model represents, values beyond them are clipped.</p>\n<div class=\"grid\">");
        for chart in histograms {
            figure(&mut out, chart);
        }
        out.push_str("</div>\n");
    }
    if !tensors.weights.is_empty() {
        out.push_str("<h2>Weights</h2>\n");
        for chart in charts_named(charts, "weight_sqnr") {
            figure(&mut out, chart);
        }
        table(&mut out, &weight_table(tensors));
    }
    if !tensors.unmatched.is_empty() {
        let _ = write!(
            out,
            "<h2>Not matched</h2>\n<p>{} Q/DQ pair(s) could not be matched to a float tensor: {}</p>\n",
            tensors.unmatched.len(),
            esc(&tensors.unmatched.join(", "))
        );
    }
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::esc;

    #[test]
    fn escapes_markup_in_names() {
        assert_eq!(esc("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
    }
}
