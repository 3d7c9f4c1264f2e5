//! `qdq-studio quantize` (ModelOpt's flag names) and `qdq-studio preprocess`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use qdq_studio::calib::data::model_inputs;
use qdq_studio::calib::range::RangeMethod;
use qdq_studio::calib::stats::{CalibrationInfo, CalibrationStats, TensorStats};
use qdq_studio::calib::{CalibrationConfig, ParityBins, calibrate, file};
use qdq_studio::jobs::{CancelToken, JobContext};
use qdq_studio::model::{Graph, Model, SaveOptions};
use qdq_studio::quant::{self, preprocess::preprocess};
use qdq_studio::recipe::{Placement, QuantMode, QuantType, Recipe};
use qdq_studio::runtime::{LoadOptions, Runtime};

/// Arguments of `quantize`. Flags override the `--recipe` file; unset flags keep its values
/// (or the defaults: int8, uint8 activations, int8 per-channel weights, MinMax, ort placement).
#[derive(Debug, clap::Args)]
pub struct QuantizeArgs {
    /// The float ONNX model.
    #[arg(long = "onnx_path", visible_alias = "onnx-path")]
    pub onnx_path: PathBuf,
    /// Where to write the QDQ model (default: `<name>.qdq.onnx` beside the input).
    #[arg(long = "output_path", visible_alias = "output-path", short = 'o')]
    pub output_path: Option<PathBuf>,
    /// A recipe (TOML) to start from.
    #[arg(long)]
    pub recipe: Option<PathBuf>,
    /// Also write the recipe these settings amount to.
    #[arg(long = "save-recipe", visible_alias = "save_recipe")]
    pub save_recipe: Option<PathBuf>,
    /// int8 (integer activations and weights), fp8, or int4 (block-wise weight-only).
    #[arg(long = "quantize_mode", visible_alias = "quantize-mode")]
    pub quantize_mode: Option<String>,
    /// Calibration data (.npz/.npy, an image folder or ONNX Runtime test data).
    #[arg(
        long = "calibration_data_path",
        visible_alias = "calibration-data-path"
    )]
    pub calibration_data_path: Option<PathBuf>,
    /// Statistics instead of calibrating: a qdq-studio statistics file, an onnxruntime
    /// calibration cache (JSON) or a TensorRT calibration cache (ranges only: MinMax).
    #[arg(
        long = "calibration_cache_path",
        visible_alias = "calibration-cache-path",
        conflicts_with = "calibration_data_path"
    )]
    pub calibration_cache_path: Option<PathBuf>,
    /// max (MinMax), entropy, percentile, mse, pow2, pow2_mse.
    #[arg(long = "calibration_method", visible_alias = "calibration-method")]
    pub calibration_method: Option<String>,
    /// Execution providers for calibration, in priority order.
    #[arg(long = "calibration_eps", visible_alias = "calibration-eps", num_args = 1.., default_value = "cpu")]
    pub calibration_eps: Vec<String>,
    /// Shapes for symbolic input dims when calibrating on random data.
    #[arg(long = "calibration_shapes", visible_alias = "calibration-shapes")]
    pub calibration_shapes: Option<String>,
    /// Samples per calibration batch.
    #[arg(long = "batch_size", visible_alias = "batch-size", default_value_t = 1)]
    pub batch_size: usize,
    /// onnxruntime-parity calibration (two passes, its histogram layouts).
    #[arg(long = "ort_parity", visible_alias = "ort-parity")]
    pub ort_parity: bool,
    /// Op types to quantize (default: the placement's list).
    #[arg(long = "op_types_to_quantize", visible_alias = "op-types-to-quantize", num_args = 1..)]
    pub op_types_to_quantize: Vec<String>,
    /// Op types to keep in float.
    #[arg(long = "op_types_to_exclude", visible_alias = "op-types-to-exclude", num_args = 1..)]
    pub op_types_to_exclude: Vec<String>,
    /// Only these nodes (names or regex, matched at the start).
    #[arg(long = "nodes_to_quantize", visible_alias = "nodes-to-quantize", num_args = 1..)]
    pub nodes_to_quantize: Vec<String>,
    /// Nodes to keep in float (names or regex, matched at the start).
    #[arg(long = "nodes_to_exclude", visible_alias = "nodes-to-exclude", num_args = 1..)]
    pub nodes_to_exclude: Vec<String>,
    /// Write weights to `<output>.data` (forced above 2 GB).
    #[arg(
        long = "use_external_data_format",
        visible_alias = "use-external-data-format"
    )]
    pub use_external_data_format: bool,
    /// ort (onnxruntime's QDQ placement) or tensorrt (Q/DQ on compute-op inputs only).
    #[arg(long)]
    pub placement: Option<String>,
    /// uint8, int8, uint16, int16.
    #[arg(long = "activation_type", visible_alias = "activation-type")]
    pub activation_type: Option<String>,
    /// int8, uint8 (int4/uint4 in int4 mode).
    #[arg(long = "weight_type", visible_alias = "weight-type")]
    pub weight_type: Option<String>,
    /// One scale per output channel for weights.
    #[arg(
        long = "per_channel",
        visible_alias = "per-channel",
        conflicts_with = "per_tensor"
    )]
    pub per_channel: bool,
    /// One scale per weight tensor.
    #[arg(long = "per_tensor", visible_alias = "per-tensor")]
    pub per_tensor: bool,
    /// Symmetric activation ranges.
    #[arg(
        long = "symmetric_activations",
        visible_alias = "symmetric-activations"
    )]
    pub symmetric_activations: bool,
    /// Skip pre-processing (constants to initializers, BatchNormalization folding, Identity
    /// removal).
    #[arg(long = "no_preprocess", visible_alias = "no-preprocess")]
    pub no_preprocess: bool,
    /// Image-folder preprocessing.
    #[command(flatten)]
    pub images: super::common::ImageArgs,
    /// Random calibration samples when no data is given.
    #[arg(
        long = "random_samples",
        visible_alias = "random-samples",
        default_value_t = 16
    )]
    pub random_samples: usize,
}

fn parse_type(text: &str, flag: &str) -> anyhow::Result<QuantType> {
    QuantType::parse(text).with_context(|| {
        format!("--{flag}: unknown type '{text}' (uint8, int8, uint16, int16, int4, uint4, fp8)")
    })
}

/// The recipe the arguments amount to.
pub fn recipe_from(args: &QuantizeArgs) -> anyhow::Result<Recipe> {
    let mut recipe = match &args.recipe {
        Some(path) => Recipe::load(path)?,
        None => Recipe::default(),
    };
    if let Some(mode) = &args.quantize_mode {
        recipe.mode = match mode.as_str() {
            "int8" => QuantMode::Int8,
            "fp8" => {
                recipe.activation_type = QuantType::Float8e4m3fn;
                recipe.weight_type = QuantType::Float8e4m3fn;
                QuantMode::Fp8
            }
            "int4" => {
                recipe.weight_type = QuantType::Int4;
                QuantMode::Int4
            }
            other => bail!("--quantize_mode: unknown mode '{other}' (int8, fp8, int4)"),
        };
    }
    if let Some(method) = &args.calibration_method {
        recipe.calibration_method = RangeMethod::parse(method)
            .with_context(|| format!("--calibration_method: unknown method '{method}'"))?;
    }
    if let Some(placement) = &args.placement {
        recipe.placement = match placement.as_str() {
            "ort" => Placement::Ort,
            "tensorrt" | "trt" => Placement::Tensorrt,
            other => bail!("--placement: unknown policy '{other}' (ort, tensorrt)"),
        };
    }
    if let Some(t) = &args.activation_type {
        recipe.activation_type = parse_type(t, "activation_type")?;
    }
    if let Some(t) = &args.weight_type {
        recipe.weight_type = parse_type(t, "weight_type")?;
    }
    if args.per_channel {
        recipe.per_channel = true;
    }
    if args.per_tensor {
        recipe.per_channel = false;
    }
    if args.symmetric_activations {
        recipe.symmetric_activations = true;
    }
    if args.no_preprocess {
        recipe.preprocessing.constants_to_initializers = false;
        recipe.preprocessing.fold_batchnorm = false;
        recipe.preprocessing.drop_identity = false;
    }
    for (list, values) in [
        (&mut recipe.op_types_to_quantize, &args.op_types_to_quantize),
        (&mut recipe.op_types_to_exclude, &args.op_types_to_exclude),
        (&mut recipe.nodes_to_quantize, &args.nodes_to_quantize),
        (&mut recipe.nodes_to_exclude, &args.nodes_to_exclude),
    ] {
        if !values.is_empty() {
            *list = values
                .iter()
                .flat_map(|v| v.split(','))
                .map(str::to_owned)
                .collect();
        }
    }
    // Validate the combination the flags produced, as if it had been read from a file.
    Recipe::from_toml(&recipe.to_toml(), "the settings")?;
    Ok(recipe)
}

/// Statistics from a cache file of any supported kind.
pub fn load_statistics(path: &Path) -> anyhow::Result<CalibrationStats> {
    if let Ok(stats) = file::load(path) {
        return Ok(stats);
    }
    let ranges = file::read_ort_cache(path).or_else(|_| file::read_trt_cache(path)).with_context(|| {
        format!("{} is neither a qdq-studio statistics file, an onnxruntime calibration cache nor a TensorRT cache", path.display())
    })?;
    let tensors: BTreeMap<String, TensorStats> = ranges
        .into_iter()
        .map(|(name, r)| {
            let mut s = TensorStats::default();
            s.add_batch(&[r.lo, r.hi], &[2], None);
            (name, s)
        })
        .collect();
    Ok(CalibrationStats {
        info: CalibrationInfo {
            source: path.display().to_string(),
            ..CalibrationInfo::default()
        },
        tensors,
    })
}

fn default_output(input: &Path) -> PathBuf {
    let stem = input
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".to_owned());
    input.with_file_name(format!("{stem}.qdq.onnx"))
}

/// Runs `quantize`.
pub fn run(args: &QuantizeArgs) -> anyhow::Result<()> {
    let recipe = recipe_from(args)?;
    let model = Model::load(&args.onnx_path)?;
    let output = args
        .output_path
        .clone()
        .unwrap_or_else(|| default_output(&args.onnx_path));
    let runtime = Runtime::load(&LoadOptions::new()?, &mut super::runtime::print_progress)?;
    let needs_stats = recipe.mode != QuantMode::Int4;
    let stats = match (&args.calibration_cache_path, needs_stats) {
        (_, false) => None,
        (Some(path), true) => Some(load_statistics(path)?),
        (None, true) => {
            // Calibrate the model as pre-processing will see it, so tensor names match.
            let (prepared, _) = preprocess(&model, &recipe.preprocessing)?;
            let mut named = prepared;
            quant::name_nodes(&mut named);
            let inputs = model_inputs(&Graph::build(&named));
            let spec = super::common::data_spec(
                args.calibration_data_path.as_deref(),
                args.images.preprocess(&inputs)?,
                args.calibration_shapes.as_deref(),
                args.random_samples,
            )?;
            let mut source = spec.open(&inputs)?;
            let config = CalibrationConfig {
                execution_providers: super::common::parse_eps(&args.calibration_eps)?,
                batch_size: args.batch_size,
                ort_parity: args.ort_parity.then(ParityBins::default),
                ..CalibrationConfig::default()
            };
            eprintln!("calibrating on {} ...", source.describe());
            let ctx = JobContext::new(CancelToken::new(), |_| {});
            let stats = calibrate(&named, source.as_mut(), &runtime, &config, &ctx)?;
            for note in &stats.info.notes {
                eprintln!("note: {note}");
            }
            Some(stats)
        }
    };
    let started = std::time::Instant::now();
    let quantized = quant::quantize(&model, stats.as_ref(), &recipe)?;
    let quantize_ms = started.elapsed().as_secs_f64() * 1e3;
    quant::verify_loads(&quantized.model, &runtime)?;
    let verify_ms = started.elapsed().as_secs_f64() * 1e3 - quantize_ms;
    let report = quantized.model.save(
        &output,
        &SaveOptions {
            external_data: args.use_external_data_format,
            ..SaveOptions::default()
        },
    )?;
    if let Some(path) = &args.save_recipe {
        recipe.save(path)?;
        println!("recipe written to {}", path.display());
    }
    println!("{}", quantized.preprocess.summary());
    let mut by_type: BTreeMap<String, usize> = BTreeMap::new();
    let graph = Graph::build(&model);
    for name in &quantized.quantized_nodes {
        let op = graph.node_by_name(name).map_or("?", |n| n.op_type.as_str());
        *by_type.entry(op.to_owned()).or_default() += 1;
    }
    let by_type: Vec<String> = by_type.iter().map(|(op, n)| format!("{op} {n}")).collect();
    println!(
        "quantized {} node(s): {}",
        quantized.quantized_nodes.len(),
        by_type.join(", ")
    );
    if !quantized.removed_nodes.is_empty() {
        println!(
            "folded {} Relu/Clip node(s) into the preceding ranges",
            quantized.removed_nodes.len()
        );
    }
    if let Some((from, to)) = quantized.opset_raised {
        println!("opset raised from {from} to {to}");
    }
    println!(
        "timings: quantize {quantize_ms:.0} ms, check in ONNX Runtime {verify_ms:.0} ms, save {:.0} ms",
        started.elapsed().as_secs_f64() * 1e3 - quantize_ms - verify_ms
    );
    println!(
        "wrote {} ({} bytes{})",
        report.model_path.display(),
        report.model_bytes,
        report
            .data_path
            .as_ref()
            .map_or(String::new(), |d| format!(", weights in {}", d.display()))
    );
    Ok(())
}

/// Arguments of `preprocess`.
#[derive(Debug, clap::Args)]
pub struct PreprocessArgs {
    /// The float ONNX model.
    #[arg(long = "onnx_path", visible_alias = "onnx-path")]
    pub onnx_path: PathBuf,
    /// Where to write the pre-processed model.
    #[arg(long = "output_path", visible_alias = "output-path", short = 'o')]
    pub output_path: PathBuf,
}

/// Runs `preprocess`: the quantizer's clean-ups alone, for inspection or other tools.
pub fn run_preprocess(args: &PreprocessArgs) -> anyhow::Result<()> {
    let model = Model::load(&args.onnx_path)?;
    let (mut prepared, report) = preprocess(&model, &Default::default())?;
    quant::name_nodes(&mut prepared);
    prepared.save(&args.output_path, &SaveOptions::default())?;
    println!("{}", report.summary());
    println!("wrote {}", args.output_path.display());
    Ok(())
}
