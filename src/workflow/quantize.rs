//! Quantizing and saving as a step: the QDQ model built from the statistics (or reused when
//! the studio built it already for this recipe), checked in ONNX Runtime, written atomically
//! (never over the input's files), and its companions (the recipe, a report) beside it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::WorkflowError;
use super::model_folder::ModelFolder;
use crate::calib::CalibrationStats;
use crate::jobs::{JobContext, Progress};
use crate::model::{Graph, Model, SaveOptions, SaveReport};
use crate::quant::{self, PreprocessReport};
use crate::recipe::{QuantMode, Recipe};
use crate::report::CompareReport;
use crate::runtime::Runtime;

/// True when `recipe` needs calibration statistics: activation ranges (every mode but int4
/// weight-only), the activations an int4 search runs on (AWQ), or the layer inputs GPTQ
/// rounds for.
pub fn needs_statistics(recipe: &Recipe) -> bool {
    recipe.mode != QuantMode::Int4 || recipe.int4_method.needs_activations() || recipe.gptq
}

/// The default path of the QDQ model: `<name>.qdq.onnx` beside the input; in the current
/// folder, named after `fallback`, for a model that has no file (the bundled sample).
pub fn default_output(input: Option<&Path>, fallback: &str) -> PathBuf {
    match input {
        Some(input) => {
            let stem = input
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "model".to_owned());
            input.with_file_name(format!("{stem}.qdq.onnx"))
        }
        None => std::env::current_dir()
            .unwrap_or_default()
            .join(format!("{fallback}.qdq.onnx")),
    }
}

/// The companion file `<stem>.<suffix>` beside a QDQ model (`net.qdq.onnx` →
/// `net.recipe.toml`).
pub fn companion(model: &Path, suffix: &str) -> PathBuf {
    let name = model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name
        .strip_suffix(".onnx")
        .unwrap_or(&name)
        .trim_end_matches(".qdq");
    model.with_file_name(format!("{stem}.{suffix}"))
}

/// What to write.
#[derive(Debug, Clone)]
pub struct SaveRequest {
    /// The float model.
    pub model: Model,
    /// Cached statistics (`None` for weight-only modes).
    pub stats: Option<Arc<CalibrationStats>>,
    /// The recipe.
    pub recipe: Recipe,
    /// The QDQ model already built with this recipe, when there is one.
    pub quantized: Option<Arc<Model>>,
    /// Where to write it.
    pub path: PathBuf,
    /// Weights in `<file>.data`.
    pub external_data: bool,
    /// Also write the recipe here.
    pub recipe_to: Option<PathBuf>,
    /// Also write this report here.
    pub report_to: Option<(PathBuf, CompareReport)>,
}

/// What building the QDQ model did (when it was built by this step).
#[derive(Debug, Clone)]
pub struct Built {
    /// What pre-processing changed.
    pub preprocess: PreprocessReport,
    /// Quantized nodes per op type.
    pub by_op_type: BTreeMap<String, usize>,
    /// Quantized nodes in all.
    pub quantized_nodes: usize,
    /// Nodes per op type left float for being in a transformer (under a target, only its
    /// compute ops' inputs are quantized).
    pub float_in_transformer: BTreeMap<String, usize>,
    /// Relu/Clip nodes folded into the preceding ranges.
    pub folded: usize,
    /// The opset raise applied, (from, to).
    pub opset_raised: Option<(i64, i64)>,
    /// Tensors automatic precision kept in float, and why.
    pub kept_float: BTreeMap<String, crate::quant::precision::KeptReason>,
    /// Weights automatic precision gave 7 bits against kernel saturation.
    pub seven_bit_weights: usize,
    /// What the int4 search did.
    pub int4: crate::quant::int4::Int4Report,
    /// What SmoothQuant smoothed, when it did.
    pub smoothing: Option<String>,
    /// What bias correction did, when the recipe asks for it.
    pub bias_correction: Option<crate::quant::bias_correction::BiasCorrectionReport>,
    /// What GPTQ rounded, when the recipe asks for it.
    pub gptq: Option<crate::quant::gptq::GptqReport>,
}

impl Built {
    /// What building `q` from `original` did.
    pub fn of(q: &quant::Quantized, original: &Model) -> Built {
        let graph = Graph::build(original);
        Built {
            preprocess: q.preprocess.clone(),
            by_op_type: q.quantized_by_op_type(&graph),
            float_in_transformer: q.float_in_transformer_by_op_type(&graph),
            quantized_nodes: q.quantized_nodes.len(),
            folded: q.removed_nodes.len(),
            opset_raised: q.opset_raised,
            kept_float: q.kept_float.clone(),
            seven_bit_weights: q.seven_bit_weights.len(),
            int4: q.int4.clone(),
            smoothing: q.smoothing.clone(),
            bias_correction: q.bias_correction.clone(),
            gptq: q.gptq.clone(),
        }
    }

    /// One line per step that did something (pre-processing, SmoothQuant, the int4 search,
    /// bias correction, GPTQ, automatic precision, 7-bit weights, folds, the opset): what
    /// both faces say after building a model.
    pub fn technique_lines(&self) -> Vec<String> {
        let mut lines = vec![self.preprocess.summary()];
        lines.extend(self.smoothing.clone());
        lines.extend(self.int4.summary());
        lines.extend(self.bias_correction.as_ref().map(|b| b.summary()));
        lines.extend(self.gptq.as_ref().map(|g| g.summary()));
        lines.extend(self.float_in_transformer_line());
        lines.extend(crate::quant::precision::summary(&self.kept_float));
        lines.extend(crate::quant::saturation::summary(self.seven_bit_weights));
        if self.folded > 0 {
            lines.push(format!(
                "folded {} Relu/Clip node(s) into the preceding ranges",
                self.folded
            ));
        }
        if let Some((from, to)) = self.opset_raised {
            lines.push(format!("opset raised from {from} to {to}"));
        }
        lines
    }

    /// The nodes a transformer's placement left float, by op type, and why.
    fn float_in_transformer_line(&self) -> Option<String> {
        if self.float_in_transformer.is_empty() {
            return None;
        }
        let total: usize = self.float_in_transformer.values().sum();
        Some(format!(
            "transformer: {total} node(s) run float ({}): only the inputs of MatMul/Gemm/Conv \
             are quantized, as ModelOpt and TensorRT place them (--op_types_to_quantize \
             quantizes others)",
            by_op_type_text(&self.float_in_transformer)
        ))
    }

    /// `quantized N node(s): Conv 53, ...`: what was quantized, by op type.
    pub fn quantized_line(&self) -> String {
        format!(
            "quantized {} node(s): {}",
            self.quantized_nodes,
            by_op_type_text(&self.by_op_type)
        )
    }

    /// The per-layer effects of the techniques that ran, largest first (at most `count`
    /// rows each): equalized pairs, bias corrections, GPTQ's layers. Empty tables left out.
    pub fn layer_tables(&self, count: usize) -> Vec<crate::report::TextTable> {
        let mut tables = vec![crate::report::equalization_table(
            &self.preprocess.equalized,
            count,
        )];
        tables.extend(
            self.bias_correction
                .as_ref()
                .map(|b| crate::report::bias_correction_table(b, count)),
        );
        tables.extend(
            self.gptq
                .as_ref()
                .map(|g| crate::report::gptq_table(g, count)),
        );
        tables.retain(|t| !t.rows.is_empty());
        tables
    }
}

/// Counts by op type as `Conv 53, Mul 27`.
fn by_op_type_text(counts: &BTreeMap<String, usize>) -> String {
    let parts: Vec<String> = counts.iter().map(|(op, n)| format!("{op} {n}")).collect();
    parts.join(", ")
}

/// Milliseconds each stage took.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SaveTimings {
    /// Building the QDQ model (0 when it was reused).
    pub quantize_ms: f64,
    /// Checking it loads in ONNX Runtime.
    pub verify_ms: f64,
    /// Writing it and its companions.
    pub write_ms: f64,
}

/// Where a save went.
#[derive(Debug, Clone)]
pub struct Saved {
    /// The model (and external data) written.
    pub report: SaveReport,
    /// Other files written (recipe, report and its charts).
    pub companions: Vec<PathBuf>,
    /// The input's model-folder files written beside it (configuration, tokenizer:
    /// [`super::model_folder`]).
    pub folder_files: Vec<PathBuf>,
    /// The recipe saved with it.
    pub recipe: Recipe,
    /// The recipe file written beside it, when one was asked for.
    pub recipe_file: Option<PathBuf>,
    /// What building it did, when this step built it.
    pub built: Option<Built>,
    /// Stage timings.
    pub timings: SaveTimings,
}

fn stage(ctx: &JobContext, name: &str, done: u64) {
    ctx.report(Progress {
        stage: name.to_owned(),
        done,
        total: 3,
        ..Progress::default()
    });
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// Builds the QDQ model (or reuses the one given), checks that ONNX Runtime loads it, and
/// writes it with its companions.
pub fn quantize_and_save(
    request: SaveRequest,
    runtime: &Runtime,
    ctx: &JobContext,
) -> Result<Saved, WorkflowError> {
    let mut timings = SaveTimings::default();
    stage(ctx, "Building the QDQ model", 0);
    let started = Instant::now();
    let (quantized, built) = match request.quantized {
        Some(model) => (model, None),
        None => {
            let q = quant::quantize_with(
                &request.model,
                request.stats.as_deref(),
                &request.recipe,
                ctx,
            )?;
            let built = Built::of(&q, &request.model);
            timings.quantize_ms = ms(started);
            (Arc::new(q.model), Some(built))
        }
    };
    ctx.checkpoint()?;
    stage(ctx, "Checking it loads in ONNX Runtime", 1);
    let t = Instant::now();
    quant::verify_loads(&quantized, runtime)?;
    timings.verify_ms = ms(t);
    stage(ctx, "Writing", 2);
    let t = Instant::now();
    let options = SaveOptions {
        external_data: request.external_data,
        ..SaveOptions::default()
    };
    let report = quantized.save(&request.path, &options)?;
    let mut companions = Vec::new();
    if let Some(path) = &request.recipe_to {
        request.recipe.save(path)?;
        companions.push(path.clone());
    }
    if let Some((path, compare)) = request.report_to {
        companions.extend(compare.write(&path)?);
    }
    let folder_files = match request.model.path().and_then(ModelFolder::of_model) {
        Some(folder) => folder.write_beside(&request.path)?,
        None => Vec::new(),
    };
    timings.write_ms = ms(t);
    Ok(Saved {
        report,
        companions,
        folder_files,
        recipe: request.recipe,
        recipe_file: request.recipe_to,
        built,
        timings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn companions_sit_beside_the_model_under_its_stem() {
        let model = Path::new("/m/net.qdq.onnx");
        assert_eq!(
            companion(model, "recipe.toml"),
            PathBuf::from("/m/net.recipe.toml")
        );
        assert_eq!(
            companion(Path::new("/m/x.onnx"), "report.html"),
            PathBuf::from("/m/x.report.html")
        );
        assert_eq!(
            default_output(Some(Path::new("/m/net.fp32.onnx")), "sample"),
            PathBuf::from("/m/net.fp32.qdq.onnx")
        );
    }
}
