//! Reports of a float-against-quantized comparison: a self-contained HTML page (charts inline
//! as SVG) or a Markdown page with its charts as SVG files beside it. The charts come from
//! [`charts`], the same functions the studio draws with.

pub mod baseline;
pub mod charts;
mod html;
mod markdown;
mod verdict;

pub use verdict::{verdict, verdict_line};

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::eval::compare::OutputMetrics;
use crate::eval::compare::latency::Latency;
use crate::eval::tensor_error::layer_effect::LayerEffect;
use crate::eval::tensor_error::tensors::{ActivationError, TensorErrors};

pub use charts::ChartError;

/// How many of the worst activations get a histogram in a report.
pub const WORST_HISTOGRAMS: usize = 8;

/// Errors of writing a report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A chart failed.
    #[error(transparent)]
    Chart(#[from] ChartError),
    /// The report's extension says neither HTML nor Markdown.
    #[error("cannot tell the report format from {0}: name it .html or .md")]
    Format(PathBuf),
    /// Writing failed.
    #[error("cannot write the report {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Float and quantized latency, side by side.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LatencyPair {
    /// The float model.
    pub float: Latency,
    /// The QDQ model.
    pub quantized: Latency,
}

/// A p90 this many times the median says the runs were disturbed (a busy machine).
const NOISY_SPREAD: f64 = 1.5;

/// The quantized model's speed against the float model's (float median over quantized
/// median), called faster or slower only when the runs allow it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SpeedVerdict {
    /// The quantized model's p90 is under the float model's median.
    Faster(f64),
    /// The float model's p90 is under the quantized model's median.
    Slower(f64),
    /// The two overlap: the medians differ by less than the runs spread.
    Unclear(f64),
    /// A model's runs spread widely ([`LatencyPair::noise_note`]): no figure to trust.
    Noisy(f64),
}

impl std::fmt::Display for SpeedVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            SpeedVerdict::Faster(r) => write!(f, "speed-up {r:.2}×"),
            SpeedVerdict::Slower(r) => write!(f, "slower: {r:.2}× the float model's speed"),
            SpeedVerdict::Unclear(r) => write!(
                f,
                "{r:.2}× the float model's speed, within the runs' spread (no clear difference)"
            ),
            SpeedVerdict::Noisy(r) => {
                write!(
                    f,
                    "{r:.2}× the float model's speed, not to be trusted (noisy runs)"
                )
            }
        }
    }
}

impl LatencyPair {
    /// The speed ratio and what the runs allow calling it.
    pub fn verdict(&self) -> SpeedVerdict {
        let (f, q) = (&self.float, &self.quantized);
        let ratio = f.median_ms / q.median_ms.max(f64::EPSILON);
        if self.noise_note().is_some() {
            SpeedVerdict::Noisy(ratio)
        } else if q.p90_ms < f.median_ms {
            SpeedVerdict::Faster(ratio)
        } else if f.p90_ms < q.median_ms {
            SpeedVerdict::Slower(ratio)
        } else {
            SpeedVerdict::Unclear(ratio)
        }
    }

    /// A warning when either model's runs spread widely (p90 over 1.5× the median): the
    /// speed-up is then not to be trusted.
    pub fn noise_note(&self) -> Option<String> {
        let spread = |l: &Latency| l.p90_ms / l.median_ms.max(f64::EPSILON);
        let worst = spread(&self.float).max(spread(&self.quantized));
        (worst > NOISY_SPREAD).then(|| {
            format!(
                "noisy: a p90 is {worst:.1}× its median (the machine was busy); time again before trusting the speed-up"
            )
        })
    }
}

/// Everything a comparison found, ready to be rendered.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompareReport {
    /// The float model's path as given.
    pub float_model: String,
    /// The QDQ model's path as given.
    pub quant_model: String,
    /// The evaluation data as given.
    pub data: String,
    /// Samples evaluated.
    pub samples: usize,
    /// The execution providers, in priority order.
    pub execution_providers: Vec<String>,
    /// Per output.
    pub outputs: Vec<OutputMetrics>,
    /// Per tensor, when computed.
    pub tensors: Option<TensorErrors>,
    /// Latency, when measured.
    pub latency: Option<LatencyPair>,
    /// A second QDQ model of the same float model measured alongside, when one was given.
    pub baseline: Option<Baseline>,
    /// How the QDQ model was made: its stamped recipe's summary rows (target, types,
    /// ranges, exclusions, techniques); empty for a model made by another tool.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub settings: Vec<(String, String)>,
}

/// A baseline: another QDQ model of the same float model (quantized without a technique, say,
/// or by another tool), measured against the float model on the same data, so that the
/// compared model's gain shows output by output and layer by layer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Baseline {
    /// Its path as given.
    pub model: String,
    /// Its outputs against the float model's.
    pub outputs: Vec<OutputMetrics>,
    /// Every tensor measured in both models, in graph order (empty without per-tensor errors).
    pub layers: Vec<LayerEffect>,
}

/// The report formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One self-contained HTML file.
    Html,
    /// A Markdown file and a folder of SVG charts beside it.
    Markdown,
}

impl Format {
    /// The format a path's extension names.
    pub fn of(path: &Path) -> Result<Format, ReportError> {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("html" | "htm") => Ok(Format::Html),
            Some("md" | "markdown") => Ok(Format::Markdown),
            _ => Err(ReportError::Format(path.to_owned())),
        }
    }
}

/// One rendered chart: a file stem and its SVG.
#[derive(Debug, Clone)]
pub(crate) struct Chart {
    pub stem: String,
    pub title: String,
    pub svg: String,
}

impl CompareReport {
    /// The worst activations (lowest float-against-QDQ SQNR) that have a histogram.
    pub fn worst_with_histograms(&self, count: usize) -> Vec<&ActivationError> {
        self.tensors
            .iter()
            .flat_map(|t| worst_activations(t, usize::MAX))
            .filter(|a| a.histogram.is_some())
            .take(count)
            .collect()
    }

    /// Renders every chart the report holds, in reading order.
    pub(crate) fn charts(&self) -> Result<Vec<Chart>, ChartError> {
        let mut out = Vec::new();
        let Some(tensors) = &self.tensors else {
            return Ok(out);
        };
        if !tensors.activations.is_empty() {
            out.push(Chart {
                stem: "sqnr_along_graph".into(),
                title: "Per-tensor SQNR along the graph".into(),
                svg: charts::to_svg(960, 380, |area| charts::sqnr_along_graph(area, tensors, 5))?,
            });
        }
        for (i, a) in self
            .worst_with_histograms(WORST_HISTOGRAMS)
            .into_iter()
            .enumerate()
        {
            let Some(histogram) = &a.histogram else {
                continue;
            };
            out.push(Chart {
                stem: format!("histogram_{:02}", i + 1),
                title: format!("{} ({:.2} dB float vs QDQ)", a.tensor, a.xmodel_sqnr_db),
                svg: charts::to_svg(460, 260, |area| {
                    charts::value_histogram(area, &a.tensor, histogram, a.range, a.clipped)
                })?,
            });
        }
        if !tensors.weights.is_empty() {
            out.push(Chart {
                stem: "weight_sqnr".into(),
                title: "Weight SQNR per layer".into(),
                svg: charts::to_svg(960, 320, |area| {
                    charts::weight_error_per_layer(area, &tensors.weights)
                })?,
            });
        }
        Ok(out)
    }

    /// Renders the report as one self-contained HTML page.
    pub fn to_html(&self) -> Result<String, ReportError> {
        Ok(html::render(self, &self.charts()?))
    }

    /// Writes the report to `path` in the format its extension names, atomically. A Markdown
    /// report's charts go to `<stem>_charts/` beside it. Returns every file written.
    pub fn write(&self, path: &Path) -> Result<Vec<PathBuf>, ReportError> {
        let write = |target: &Path, bytes: &[u8]| {
            crate::atomic::write(target, bytes).map_err(|source| ReportError::Write {
                path: target.to_owned(),
                source,
            })
        };
        match Format::of(path)? {
            Format::Html => {
                write(path, self.to_html()?.as_bytes())?;
                Ok(vec![path.to_owned()])
            }
            Format::Markdown => {
                let stem = path
                    .file_stem()
                    .map_or_else(|| "report".into(), |s| s.to_string_lossy().into_owned());
                let folder_name = format!("{stem}_charts");
                let folder = path.with_file_name(&folder_name);
                let charts = self.charts()?;
                let mut written = Vec::new();
                if !charts.is_empty() {
                    std::fs::create_dir_all(&folder).map_err(|source| ReportError::Write {
                        path: folder.clone(),
                        source,
                    })?;
                }
                for chart in &charts {
                    let file = folder.join(format!("{}.svg", chart.stem));
                    write(&file, chart.svg.as_bytes())?;
                    written.push(file);
                }
                write(
                    path,
                    markdown::render(self, &charts, &folder_name).as_bytes(),
                )?;
                written.push(path.to_owned());
                Ok(written)
            }
        }
    }
}

/// A table: its header and rows of text cells, shared by the HTML and Markdown renderers and
/// the CLI's tables.
#[derive(Debug, Clone, PartialEq)]
pub struct TextTable {
    /// Column titles.
    pub header: Vec<&'static str>,
    /// Rows of cells, as many as the header has columns.
    pub rows: Vec<Vec<String>>,
}

/// The report's heading facts, as (label, value).
pub(crate) fn summary_items(report: &CompareReport) -> Vec<(&'static str, String)> {
    vec![
        ("float model", report.float_model.clone()),
        ("QDQ model", report.quant_model.clone()),
        ("evaluation data", report.data.clone()),
        ("samples", report.samples.to_string()),
        (
            "execution providers",
            report.execution_providers.join(" > "),
        ),
        (
            "report by",
            format!("qdq-studio {}", env!("CARGO_PKG_VERSION")),
        ),
    ]
}

/// How the QDQ model was made, as (label, value) rows: its recipe's summary, or one row saying
/// none was recorded (a model made by another tool).
pub(crate) fn settings_items(report: &CompareReport) -> Vec<(String, String)> {
    if report.settings.is_empty() {
        vec![(
            "recipe".to_owned(),
            "none recorded in the model (made by another tool)".to_owned(),
        )]
    } else {
        report.settings.clone()
    }
}

/// The per-output table: the fidelity columns, and each agreement column some output has a
/// figure in (a classifier has no mask IoU).
pub(crate) fn output_table(report: &CompareReport) -> TextTable {
    without_empty_columns(all_output_columns(report), FIDELITY_COLUMNS)
}

/// The output table's fidelity columns (the name, kind and four figures every output has).
const FIDELITY_COLUMNS: usize = 6;

/// `table` without the columns from `keep` on whose every cell is "-".
fn without_empty_columns(table: TextTable, keep: usize) -> TextTable {
    let shown: Vec<usize> = (0..table.header.len())
        .filter(|&c| {
            c < keep
                || table
                    .rows
                    .iter()
                    .any(|r| r.get(c).is_some_and(|v| v != "-"))
        })
        .collect();
    TextTable {
        header: shown.iter().map(|&c| table.header[c]).collect(),
        rows: table
            .rows
            .iter()
            .map(|r| shown.iter().filter_map(|&c| r.get(c).cloned()).collect())
            .collect(),
    }
}

/// Every column of the per-output table.
fn all_output_columns(report: &CompareReport) -> TextTable {
    TextTable {
        header: vec![
            "output",
            "kind",
            "SQNR dB",
            "cosine",
            "MSE",
            "max abs err",
            "top-1 agreement",
            "top-5 agreement",
            "sequence agreement",
            "neighbour agreement",
            "mask IoU",
        ],
        rows: report
            .outputs
            .iter()
            .map(|m| {
                vec![
                    m.name.clone(),
                    m.kind.label().to_owned(),
                    db(m.sqnr_db),
                    format!("{:.5}", m.cosine),
                    format!("{:.3e}", m.mse),
                    format!("{:.3e}", m.max_abs_error),
                    percent(m.top1_agreement),
                    percent(m.top5_agreement),
                    percent(m.sequence_agreement),
                    percent(m.neighbour_agreement),
                    percent(m.mask_iou),
                ]
            })
            .collect(),
    }
}

/// The scores against the data's ground truth, float beside quantized; `None` without any.
pub fn task_table(report: &CompareReport) -> Option<TextTable> {
    let rows: Vec<Vec<String>> = report
        .outputs
        .iter()
        .flat_map(|m| m.task_rows())
        .map(Vec::from)
        .collect();
    (!rows.is_empty()).then(|| TextTable {
        header: crate::eval::compare::TASK_TABLE_HEADER.to_vec(),
        rows,
    })
}

/// The table of the `count` worst activations by cumulative error (float vs QDQ), each with
/// its local error.
pub fn activation_table(tensors: &TensorErrors, count: usize) -> TextTable {
    TextTable {
        header: vec![
            "worst activations",
            "float vs QDQ dB",
            "local dB",
            "pre-Q vs post-DQ dB",
            "quantized range",
            "clipped",
        ],
        rows: worst_activations(tensors, count)
            .into_iter()
            .map(|a| {
                vec![
                    a.tensor.clone(),
                    db(a.xmodel_sqnr_db),
                    tensors.local_of(&a.tensor).map_or_else(|| "-".into(), db),
                    db(a.qdq_sqnr_db),
                    a.range
                        .map_or_else(|| "-".into(), |(lo, hi)| format!("[{lo:.4}, {hi:.4}]")),
                    clipped(a),
                ]
            })
            .collect(),
    }
}

/// The table of the `count` worst local errors: where the error is made (each with the
/// cumulative error, which also carries what upstream nodes made). Empty when the local
/// errors were not measured.
pub fn local_table(tensors: &TensorErrors, count: usize) -> TextTable {
    let cumulative: std::collections::HashMap<&str, f64> = tensors.tensor_sqnr().collect();
    let mut worst: Vec<_> = tensors.local.iter().collect();
    worst.sort_by(|a, b| a.sqnr_db.total_cmp(&b.sqnr_db));
    TextTable {
        header: vec!["worst local errors", "local dB", "float vs QDQ dB"],
        rows: worst
            .into_iter()
            .take(count)
            .map(|l| {
                let carried = cumulative.get(l.tensor.as_str()).copied();
                vec![
                    l.tensor.clone(),
                    db(l.sqnr_db),
                    carried.map_or_else(|| "-".into(), db),
                ]
            })
            .collect(),
    }
}

/// The `count` equalized layer pairs whose weights gained most (per-tensor int8 weight SQNR
/// of both layers, before → after).
pub fn equalization_table(
    pairs: &[crate::quant::equalize::EqualizedPair],
    count: usize,
) -> TextTable {
    let gain = |p: &crate::quant::equalize::EqualizedPair| {
        (p.first_sqnr_db[1] - p.first_sqnr_db[0]) + (p.second_sqnr_db[1] - p.second_sqnr_db[0])
    };
    let mut sorted: Vec<_> = pairs.iter().collect();
    sorted.sort_by(|a, b| gain(b).total_cmp(&gain(a)));
    let arrow = |[before, after]: [f64; 2]| format!("{} → {}", db(before), db(after));
    TextTable {
        header: vec![
            "equalized pair",
            "channels",
            "first weight dB",
            "second weight dB",
        ],
        rows: sorted
            .into_iter()
            .take(count)
            .map(|p| {
                let between = p
                    .between
                    .as_deref()
                    .map_or(String::new(), |b| format!(" → {b}"));
                vec![
                    format!("{}{between} → {}", p.first, p.second),
                    p.channels.to_string(),
                    arrow(p.first_sqnr_db),
                    arrow(p.second_sqnr_db),
                ]
            })
            .collect(),
    }
}

/// The `count` layers bias correction shifted most, relative to their output range.
pub fn bias_correction_table(
    report: &crate::quant::bias_correction::BiasCorrectionReport,
    count: usize,
) -> TextTable {
    TextTable {
        header: vec![
            "bias-corrected layer",
            "channels",
            "mean shift removed (RMS)",
            "of output range",
        ],
        rows: report
            .largest()
            .into_iter()
            .take(count)
            .map(|c| {
                let share = c
                    .output_abs_max
                    .filter(|m| *m > 0.0)
                    .map_or("-".to_owned(), |m| {
                        format!("{:.2} %", 100.0 * c.shift_rms / f64::from(m))
                    });
                let layer = if c.added_bias {
                    format!("{} (bias added)", c.layer)
                } else {
                    c.layer.clone()
                };
                vec![
                    layer,
                    c.channels.to_string(),
                    format!("{:.3e}", c.shift_rms),
                    share,
                ]
            })
            .collect(),
    }
}

/// The `count` layers GPTQ helped most: each layer's output SQNR on the held-out calibration
/// samples (on the calibration data for statistics without them)
/// with its weight rounded to nearest and with GPTQ.
pub fn gptq_table(report: &crate::quant::gptq::GptqReport, count: usize) -> TextTable {
    TextTable {
        header: vec![
            "gptq-rounded layer",
            "output SQNR, nearest (dB)",
            "with gptq (dB)",
            "gain (dB)",
        ],
        rows: report
            .largest_gains()
            .into_iter()
            .take(count)
            .map(|l| {
                vec![
                    l.layer.clone(),
                    format!("{:.2}", l.rtn_sqnr_db),
                    format!("{:.2}", l.gptq_sqnr_db),
                    format!("{:+.2}", l.gptq_sqnr_db - l.rtn_sqnr_db),
                ]
            })
            .collect(),
    }
}

/// One line on the layer-wise range choices in `stats`, when there are any.
pub fn range_choice_summary(stats: &crate::calib::CalibrationStats) -> Option<String> {
    if !stats.info.layerwise_ranges {
        return None;
    }
    let changed: Vec<&crate::calib::stats::RangeChoice> = stats
        .range_choices
        .values()
        .filter(|c| c.errors.first().is_some_and(|e| e.0 != c.method))
        .collect();
    let mut by_method: std::collections::BTreeMap<String, usize> = Default::default();
    for c in &changed {
        *by_method.entry(c.method.label()).or_default() += 1;
    }
    let methods: Vec<String> = by_method.iter().map(|(m, n)| format!("{m} ×{n}")).collect();
    Some(format!(
        "layer-wise ranges: {} of {} activation(s) measured take another method than the recipe's{}",
        changed.len(),
        stats.range_choices.len(),
        if methods.is_empty() {
            String::new()
        } else {
            format!(" ({})", methods.join(", "))
        }
    ))
}

/// The `count` activations whose layer-wise range choice lowers the error they cause most:
/// the method chosen and how much less error it causes where the activation is read than
/// the recipe's method.
pub fn range_choice_table(stats: &crate::calib::CalibrationStats, count: usize) -> TextTable {
    let mut list: Vec<(&String, &crate::calib::stats::RangeChoice)> = stats
        .range_choices
        .iter()
        .filter(|(_, c)| c.gain_db() > 0.0)
        .collect();
    list.sort_by(|a, b| b.1.gain_db().total_cmp(&a.1.gain_db()));
    TextTable {
        header: vec![
            "activation",
            "recipe's method",
            "chosen",
            "error where read, lower by (dB)",
        ],
        rows: list
            .into_iter()
            .take(count)
            .map(|(tensor, c)| {
                vec![
                    tensor.clone(),
                    c.errors.first().map_or("-".to_owned(), |e| e.0.label()),
                    c.method.label(),
                    format!("{:.2}", c.gain_db()),
                ]
            })
            .collect(),
    }
}

/// The table of the 10 worst weights.
pub(crate) fn weight_table(tensors: &TensorErrors) -> TextTable {
    let mut worst: Vec<_> = tensors.weights.iter().collect();
    worst.sort_by(|a, b| a.sqnr_db.total_cmp(&b.sqnr_db));
    TextTable {
        header: vec!["worst weights", "SQNR dB"],
        rows: worst
            .iter()
            .take(10)
            .map(|w| vec![w.weight.clone(), db(w.sqnr_db)])
            .collect(),
    }
}

/// The charts whose stem is `stem`, or starts with it when it ends in `_`.
pub(crate) fn charts_named<'a>(charts: &'a [Chart], stem: &str) -> Vec<&'a Chart> {
    charts
        .iter()
        .filter(|c| {
            if stem.ends_with('_') {
                c.stem.starts_with(stem)
            } else {
                c.stem == stem
            }
        })
        .collect()
}

/// One line on the activations the quantizer rescaled on purpose and the comparison set
/// aside; `None` when there are none.
pub fn rescaled_note(tensors: &TensorErrors) -> Option<String> {
    let names = &tensors.rescaled;
    (!names.is_empty()).then(|| {
        let shown: Vec<&str> = names.iter().take(8).map(String::as_str).collect();
        let more = names.len().saturating_sub(shown.len());
        format!(
            "{} activation(s) rescaled on purpose (cross-layer equalization, AWQ, SmoothQuant) are not compared with the float model's, which they differ from by design: {}{}",
            names.len(),
            shown.join(", "),
            if more > 0 { format!(" and {more} more") } else { String::new() }
        )
    })
}

/// Above this an SQNR says only that the two agree to float32 rounding (about 7 digits):
/// the figure itself is noise and is not printed.
const ROUNDING_DB: f64 = 140.0;

/// Formats a dB figure (∞ for an exact match, "> 140" where only float rounding differs).
pub(crate) fn db(v: f64) -> String {
    if v.is_infinite() && v > 0.0 {
        "∞".into()
    } else if v > ROUNDING_DB {
        format!("> {ROUNDING_DB:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Formats a share as a percentage, or "-".
pub(crate) fn percent(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{:.1}%", v * 100.0))
}

/// Clipped share of an activation as text, when it was counted.
pub(crate) fn clipped(a: &ActivationError) -> String {
    a.clipped
        .map_or_else(|| "-".into(), |c| format!("{:.3}%", c * 100.0))
}

/// The worst `count` activations by float-against-QDQ SQNR.
pub(crate) fn worst_activations(tensors: &TensorErrors, count: usize) -> Vec<&ActivationError> {
    let mut worst: Vec<&ActivationError> = tensors.activations.iter().collect();
    worst.sort_by(|a, b| a.xmodel_sqnr_db.total_cmp(&b.xmodel_sqnr_db));
    worst.truncate(count);
    worst
}

/// One line saying how the latency was measured and what it came to.
pub fn latency_line(l: &LatencyPair) -> String {
    let threads = if l.float.intra_op_threads == 0 {
        "ONNX Runtime's default intra-op threads".to_owned()
    } else {
        format!("{} intra-op threads", l.float.intra_op_threads)
    };
    format!(
        "on {} with {threads}, batch {}, {} timed runs after warm-up: float {:.2} ms median / {:.2} ms p90, quantized {:.2} ms / {:.2} ms, {}",
        l.float.execution_providers.join(" > "),
        l.float.batch_size,
        l.float.runs,
        l.float.median_ms,
        l.float.p90_ms,
        l.quantized.median_ms,
        l.quantized.p90_ms,
        l.verdict()
    ) + &l
        .noise_note()
        .map(|n| format!(" ({n})"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn latency(median_ms: f64, p90_ms: f64) -> Latency {
        Latency {
            median_ms,
            p90_ms,
            runs: 10,
            execution_providers: vec!["cpu".into()],
            intra_op_threads: 0,
            batch_size: 1,
            kernels: None,
        }
    }

    #[test]
    fn widely_spread_runs_are_flagged_as_noise() {
        let steady = LatencyPair {
            float: latency(1.0, 1.1),
            quantized: latency(0.5, 0.6),
        };
        assert_eq!(steady.noise_note(), None);
        assert!(!latency_line(&steady).contains("noisy"));
        let busy = LatencyPair {
            float: latency(1.0, 1.1),
            quantized: latency(0.5, 2.0),
        };
        let note = busy.noise_note().unwrap();
        assert!(note.contains("4.0×"), "{note}");
        assert!(latency_line(&busy).ends_with(&format!("({note})")));
        assert_eq!(busy.verdict(), SpeedVerdict::Noisy(2.0));
    }

    #[test]
    fn a_speed_up_is_called_one_only_when_the_runs_do_not_overlap() {
        let pair = |f: (f64, f64), q: (f64, f64)| LatencyPair {
            float: latency(f.0, f.1),
            quantized: latency(q.0, q.1),
        };
        let faster = pair((1.0, 1.1), (0.5, 0.6));
        assert_eq!(faster.verdict(), SpeedVerdict::Faster(2.0));
        assert!(latency_line(&faster).contains(", speed-up 2.00×"));
        let slower = pair((1.0, 1.1), (2.0, 2.2));
        assert_eq!(slower.verdict(), SpeedVerdict::Slower(0.5));
        assert!(!latency_line(&slower).contains("speed-up"));
        // 5 % apart with runs spreading 20 %: no claim either way.
        let close = pair((1.0, 1.2), (0.95, 1.1));
        assert!(
            matches!(close.verdict(), SpeedVerdict::Unclear(r) if (r - 1.0 / 0.95).abs() < 1e-12)
        );
        assert!(close.verdict().to_string().contains("no clear difference"));
    }
}
