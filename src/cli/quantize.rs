//! `qdq-studio quantize` (ModelOpt's flag names) and `qdq-studio preprocess`.

use qdq_studio::workflow::model_folder::resolve_model_path;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};

use qdq_studio::calib::range::RangeMethod;
use qdq_studio::calib::{CalibrationConfig, CalibrationStats, ParityBins};
use qdq_studio::eval::search::latency_tuning::TuneOptions;
use qdq_studio::jobs::JobContext;
use qdq_studio::model::{Model, SaveOptions};
use qdq_studio::quant::Prepared;
use qdq_studio::recipe::{
    Int4Method, Int4Output, NodePrecision, Placement, Preprocessing, QuantMode, QuantType, Recipe,
    Target, WeightRange,
};
use qdq_studio::runtime::Runtime;
use qdq_studio::workflow::outputs::RunFiles;
use qdq_studio::workflow::quantize::{self, SaveRequest, Saved};
use qdq_studio::workflow::reference::EvalSetup;
use qdq_studio::workflow::tune_latency::tune_latency_setup;
use qdq_studio::workflow::weight_ranges::weight_ranges_setup;
use qdq_studio::workflow::{calibrate, runtime, statistics};

/// Arguments of `quantize`. Flags override the `--recipe` file; unset flags keep its values
/// (or the defaults: int8, uint8 activations, int8 per-channel weights, MinMax, ort placement).
#[derive(Debug, clap::Args)]
pub struct QuantizeArgs {
    /// The float ONNX model, or its folder (onnxruntime-genai's, named by its
    /// genai_config.json, or holding one .onnx model). Written into another folder, the
    /// folder's configuration and tokenizer files go beside the output.
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
    /// Calibration text for a token model, and how it is tokenized.
    #[command(flatten)]
    pub text: super::common::CalibrationText,
    /// Statistics instead of calibrating: a qdq-studio statistics file, an onnxruntime
    /// calibration cache (JSON) or a TensorRT calibration cache (ranges only: MinMax).
    #[arg(
        long = "calibration_cache_path",
        visible_alias = "calibration-cache-path",
        conflicts_with = "calibration_data_path"
    )]
    pub calibration_cache_path: Option<PathBuf>,
    /// int8/fp8: max (MinMax), entropy, percentile, mse, pow2, pow2_mse. int4: awq_lite
    /// (the default), awq_clip, rtn_dq (round to nearest, int4 weights) or rtn (Q/DQ on the
    /// float weights).
    #[arg(long = "calibration_method", visible_alias = "calibration-method")]
    pub calibration_method: Option<String>,
    /// int4 block size (rows of a MatMul weight per scale): a power of two ≥ 16.
    #[arg(long = "block_size", visible_alias = "block-size")]
    pub block_size: Option<usize>,
    /// int4 output form: dq (opset-21 DequantizeLinear, any runtime) or matmulnbits (ONNX
    /// Runtime's MatMulNBits kernels on CPU, CUDA and DirectML).
    #[arg(long = "int4_output", visible_alias = "int4-output")]
    pub int4_output: Option<String>,
    /// MatMulNBits' accuracy level: 0 (unset), 1 fp32, 2 fp16, 3 bf16, 4 int8 activations (the
    /// default: ONNX Runtime's fast CPU kernels).
    #[arg(long = "accuracy_level", visible_alias = "accuracy-level")]
    pub accuracy_level: Option<u8>,
    /// Execution providers for calibration, in priority order.
    #[arg(long = "calibration_eps", visible_alias = "calibration-eps", num_args = 1.., default_value = "cpu")]
    pub calibration_eps: Vec<String>,
    /// Shapes for symbolic input dims when calibrating on random data.
    #[arg(long = "calibration_shapes", visible_alias = "calibration-shapes")]
    pub calibration_shapes: Option<String>,
    /// Samples per calibration batch.
    #[arg(
        long = "batch_size",
        visible_alias = "batch-size",
        default_value_t = 1,
        value_parser = super::common::at_least_one
    )]
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
    /// Mixed precision per node: NAME=w8a16 (16-bit activations) or NAME=w4a8 (4-bit
    /// weights, Conv/Gemm/MatMul), comma- or space-separated.
    #[arg(long = "node_precision", visible_alias = "node-precision", num_args = 1..)]
    pub node_precision: Vec<String>,
    /// Write weights to `<output>.data` (forced above 2 GB).
    #[arg(
        long = "use_external_data_format",
        visible_alias = "use-external-data-format"
    )]
    pub use_external_data_format: bool,
    /// Where the model will run: cpu (ONNX Runtime CPU with VNNI/AMX or ARM), cpu-avx2 (x86
    /// without VNNI), tensorrt, directml, openvino, npu (AMD Ryzen AI, XINT8) or qnn
    /// (Qualcomm, A16W8). It sets placement, types, symmetry, scale form and the saturation
    /// guard, and says what it set; flags may change what it only defaults. Default: the
    /// target of the first calibration EP (cpu → cpu, cuda/trt → tensorrt, dml → directml,
    /// openvino → openvino), or the recipe's.
    #[arg(long)]
    pub target: Option<String>,
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
    /// 7-bit weights (onnxruntime's `reduce_range`): avoids the saturation of ONNX Runtime's
    /// u8×s8 kernels on x86 CPUs without VNNI.
    #[arg(long = "reduce_range", visible_alias = "reduce-range")]
    pub reduce_range: bool,
    /// Quantize attention masks and the streams feeding normalizations too, and MatMul
    /// weights' outlier rows with the rest (exactly onnxruntime's placement); by default they
    /// stay in float.
    #[arg(long = "no_auto_precision", visible_alias = "no-auto-precision")]
    pub no_auto_precision: bool,
    /// Keep 8-bit weights (for VNNI CPUs, GPUs and NPUs); by default the int8 weights ONNX
    /// Runtime's u8×s8 kernels read get 7 bits so that those kernels cannot saturate on older
    /// x86 CPUs: per-channel weights, and per-tensor ones whose layer `--cle` equalized or
    /// with at least 1 % of the kernels' pairs able to overflow.
    #[arg(long = "no_saturation_guard", visible_alias = "no-saturation-guard")]
    pub no_saturation_guard: bool,
    /// Quantize MatMul/Gemm weights' outlier rows with the rest; by default the few rows far
    /// larger than the others (more than 3 times the 99th-percentile row, at most 1 % of the
    /// rows) are computed by a small float MatMul beside the quantized one, so that one step
    /// no longer serves them and every other weight alike.
    #[arg(long = "no_outlier_rows", visible_alias = "no-outlier-rows")]
    pub no_outlier_rows: bool,
    /// SmoothQuant (int8): move activation outlier channels into the MatMul weights where the
    /// division folds into the producer; α searched per activation.
    #[arg(long)]
    pub smoothquant: bool,
    /// SmoothQuant's α in [0, 1] instead of the per-activation search (implies --smoothquant).
    #[arg(long = "smoothquant_alpha", visible_alias = "smoothquant-alpha")]
    pub smoothquant_alpha: Option<f32>,
    /// Cross-layer equalization: rescale Conv/Gemm/MatMul pairs so their weight channels
    /// share ranges (float outputs unchanged); helps per-tensor weights most.
    #[arg(long)]
    pub cle: bool,
    /// Bias correction: subtract each layer's mean output shift from weight quantization,
    /// measured on the calibration data, from its bias.
    #[arg(long = "bias_correction", visible_alias = "bias-correction")]
    pub bias_correction: bool,
    /// GPTQ rounding: round each Conv/Gemm/MatMul weight column by column, the rounding
    /// error compensated through the layer's input Hessian from the calibration data (same
    /// scales, other integers; INT8 and INT4).
    #[arg(long)]
    pub gptq: bool,
    /// Layer-wise ranges: each activation gets the range method (MinMax, percentiles,
    /// entropy, MSE) whose quantization of it disturbs the nodes reading it least, measured
    /// on the calibration data.
    #[arg(long = "layerwise_range", visible_alias = "layerwise-range")]
    pub layerwise_range: bool,
    /// How weights get their range: minmax (their extremes, onnxruntime's), mse (the
    /// clipped range of least squared error; per-tensor weights with outliers gain most), or
    /// measured (each weight's choice of the two by the model's outputs on the calibration
    /// data, a real run per weight, and its bit width, 7 or 8, where this CPU's u8×s8 kernels
    /// read it; written into the recipe as per-weight overrides).
    #[arg(long = "weight_range", visible_alias = "weight-range")]
    pub weight_range: Option<String>,
    /// Tune the placement for speed on the target's provider: time the QDQ model there and
    /// leave out of quantization the Q/DQ groups that cost more than they save (the
    /// quantized Conv/MatMul/Gemm that ran in float, then other op types), keeping each only
    /// when the model gets faster and its worst output SQNR on the calibration data stays
    /// within 1 dB of the untuned model's; written into the recipe as exclusions.
    #[arg(long = "tune_latency", visible_alias = "tune-latency")]
    pub tune_latency: bool,
    /// Leave the float forms ONNX Runtime fuses as they are; by default they are rewritten as
    /// the forms its integer kernels take before Q/DQ nodes keep them apart: constant
    /// Reshapes folded, a Conv's bias Add, channel Mul and HardSigmoid folded into it, and a
    /// division by a constant after an elementwise op (hard-swish's /6) made a
    /// multiplication. Calibrate with the same setting.
    #[arg(long = "no_simplify", visible_alias = "no-simplify")]
    pub no_simplify: bool,
    /// Skip pre-processing (constants to initializers, BatchNormalization folding, Identity
    /// removal, simplification).
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

/// Sets `--calibration_method`: an int4 method in int4 mode, a range method otherwise.
fn set_method(recipe: &mut Recipe, method: &str) -> anyhow::Result<()> {
    if recipe.mode == QuantMode::Int4 {
        recipe.int4_method = Int4Method::parse(method).with_context(|| {
            format!(
                "--calibration_method: '{method}' is not an int4 method (awq_lite, awq_clip, rtn_dq, rtn)"
            )
        })?;
        // rtn keeps float weights behind Q/DQ: MatMulNBits needs stored int4 ones (an
        // explicit --int4_output after this still says otherwise, and is refused).
        if recipe.int4_method == Int4Method::Rtn {
            recipe.int4_output = Int4Output::Dq;
        }
    } else {
        recipe.calibration_method = RangeMethod::parse(method).with_context(|| {
            let int4 = Int4Method::parse(method)
                .map_or("", |_| "; it is an int4 method: add --quantize_mode int4");
            format!(
                "--calibration_method: unknown method '{method}' (max, entropy, percentile, mse, pow2, pow2_mse){int4}"
            )
        })?;
    }
    Ok(())
}

/// The target the arguments name (`--target`), if any.
fn named_target(args: &QuantizeArgs) -> anyhow::Result<Option<Target>> {
    args.target
        .as_deref()
        .map(|name| {
            Target::parse(name).with_context(|| {
                format!("--target: unknown target '{name}' ({})", Target::choices())
            })
        })
        .transpose()
}

/// The recipe the arguments amount to, and the data table of the recipe file (one saved from
/// the studio), read with it.
pub fn recipe_from(args: &QuantizeArgs) -> anyhow::Result<(Recipe, Option<toml::Table>)> {
    let (mut recipe, data) = match &args.recipe {
        Some(path) => Recipe::load_with_data(path)?,
        None => (Recipe::default(), None),
    };
    if let Some(mode) = &args.quantize_mode {
        recipe.set_mode(match mode.as_str() {
            "int8" => QuantMode::Int8,
            "fp8" => QuantMode::Fp8,
            "int4" => QuantMode::Int4,
            other => bail!("--quantize_mode: unknown mode '{other}' (int8, fp8, int4)"),
        });
    }
    // The target first: the flags after it change what it only defaults, and a flag that
    // contradicts what it requires is refused below.
    match named_target(args)? {
        Some(target) => recipe.set_target(target),
        None if args.recipe.is_none() => recipe.set_target(Target::for_execution_providers(
            &super::common::parse_eps(&args.calibration_eps)?,
        )),
        None => {}
    }
    if let Some(method) = &args.calibration_method {
        set_method(&mut recipe, method)?;
    }
    if let Some(block) = args.block_size {
        recipe.block_size = block;
    }
    if let Some(level) = args.accuracy_level {
        recipe.int4_accuracy_level = level;
    }
    if let Some(form) = &args.int4_output {
        recipe.int4_output = Int4Output::parse(form)
            .with_context(|| format!("--int4_output: unknown form '{form}' (dq, matmulnbits)"))?;
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
    if args.reduce_range {
        recipe.reduce_range = true;
    }
    if args.no_auto_precision {
        recipe.auto_precision = false;
    }
    if args.no_outlier_rows {
        recipe.preprocessing.outlier_rows = false;
    }
    if args.no_saturation_guard {
        recipe.saturation_guard = false;
    }
    if args.smoothquant || args.smoothquant_alpha.is_some() {
        recipe.smoothquant = true;
        recipe.smoothquant_alpha = args.smoothquant_alpha;
    }
    if args.cle {
        recipe.preprocessing.equalize = true;
    }
    if args.bias_correction {
        recipe.bias_correction = true;
    }
    if args.gptq {
        recipe.gptq = true;
    }
    if args.layerwise_range {
        recipe.layerwise_range = true;
    }
    if let Some(range) = args.weight_range.as_deref().filter(|r| !measured(r)) {
        recipe.weight_range = WeightRange::parse(range).with_context(|| {
            format!("--weight_range: unknown range '{range}' (minmax, mse, pow2, measured)")
        })?;
    }
    if args.no_preprocess {
        recipe.preprocessing.constants_to_initializers = false;
        recipe.preprocessing.fold_batchnorm = false;
        recipe.preprocessing.drop_identity = false;
    }
    if args.no_preprocess || args.no_simplify {
        recipe.preprocessing.simplify = false;
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
    for entry in args.node_precision.iter().flat_map(|v| v.split(',')) {
        let (node, precision) = parse_node_precision(entry)?;
        recipe.node_precision.insert(node, precision);
    }
    // Validate the combination the flags produced, as if it had been read from a file.
    Recipe::from_toml(&recipe.to_toml(), "the settings")?;
    Ok((recipe, data))
}

/// The line that says which target the model is made for, where it came from and how to
/// change it; then what it set, one line a setting (`quantize` prints them).
pub fn target_lines(args: &QuantizeArgs, recipe: &Recipe) -> Vec<String> {
    let Some(target) = recipe.target else {
        return vec![
            "target: none (the recipe predates targets and keeps exactly its settings; --target to choose one)"
                .to_owned(),
        ];
    };
    let origin = if args.target.is_some() {
        "chosen with --target".to_owned()
    } else if args.recipe.is_some() {
        "the recipe's".to_owned()
    } else {
        format!(
            "follows --calibration_eps {}",
            args.calibration_eps.first().map_or("cpu", String::as_str)
        )
    };
    let mut lines = vec![format!(
        "target: {} - {} ({origin}; change with --target {})",
        target.name(),
        target.describe(),
        Target::ALL.map(Target::name).join("|")
    )];
    lines.extend(recipe.target_lines().into_iter().map(|l| format!("  {l}")));
    lines
}

/// One `--node_precision` entry, `NAME=PRECISION` (the name may hold `=`; the last one splits).
fn parse_node_precision(entry: &str) -> anyhow::Result<(String, NodePrecision)> {
    let (node, precision) = entry.rsplit_once('=').ok_or_else(|| {
        anyhow::anyhow!("--node_precision takes NAME=w8a16 or NAME=w4a8, got '{entry}'")
    })?;
    let precision = NodePrecision::parse(precision).ok_or_else(|| {
        anyhow::anyhow!(
            "--node_precision: '{precision}' is not a precision (w8a16: 16-bit activations, w4a8: 4-bit weights)"
        )
    })?;
    Ok((node.to_owned(), precision))
}

/// int4 with neither data nor a chosen method: the engine's choice for random data (see
/// [`calibrate::int4_method_without_data`]).
fn int4_without_data(args: &QuantizeArgs, recipe: &mut Recipe, model: &Model) -> Option<String> {
    let chosen = args.calibration_method.is_some() || args.recipe.is_some();
    let data = args.calibration_data_path.is_some()
        || args.text.calibration_text.is_some()
        || args.calibration_cache_path.is_some();
    if chosen || data {
        return None;
    }
    calibrate::int4_method_without_data(recipe, &calibrate::inputs(model))
}

/// The calibration data the recipe file's data table names (`data`, a recipe saved from the
/// studio), when no data flag is given; `None` otherwise.
fn recipe_data(
    args: &QuantizeArgs,
    data: Option<&toml::Table>,
) -> anyhow::Result<Option<qdq_studio::calib::DataSpec>> {
    let Some(data) = data else {
        return Ok(None);
    };
    if args.calibration_data_path.is_some() || args.text.calibration_text.is_some() {
        return Ok(None);
    }
    let spec = qdq_studio::recipe::calibration_spec(data)?;
    if let Some(spec) = &spec {
        eprintln!(
            "calibration data from the recipe's [data] table: {}",
            spec.describe()
        );
    }
    Ok(spec)
}

/// The statistics `quantize` uses: none for weight-only modes, the given cache file, or a
/// calibration run on the given (or random) data.
fn statistics_for(
    args: &QuantizeArgs,
    model: &Model,
    recipe: &Recipe,
    data: Option<&toml::Table>,
    runtime: &Runtime,
) -> anyhow::Result<Option<CalibrationStats>> {
    if !quantize::needs_statistics(recipe) {
        return Ok(None);
    }
    if let Some(path) = &args.calibration_cache_path {
        return Ok(Some(statistics::load(path)?.0));
    }
    let spec = match recipe_data(args, data)? {
        Some(spec) => spec,
        None => super::common::data_spec(
            args.text.source(),
            args.calibration_data_path.as_deref(),
            &args.images,
            args.calibration_shapes.as_deref(),
            args.random_samples,
            model,
        )?,
    };
    // The statistics are used here and not kept: only what the recipe reads is gathered (the
    // tensors its plan quantizes; histograms only for range methods that read them).
    let defaults = CalibrationConfig::default();
    let config = CalibrationConfig {
        execution_providers: super::common::parse_eps(&args.calibration_eps)?,
        batch_size: args.batch_size,
        ort_parity: args.ort_parity.then(ParityBins::default),
        histogram_bins: if calibrate::needs_histograms(recipe) {
            defaults.histogram_bins
        } else {
            0
        },
        ..defaults
    };
    eprintln!("calibrating on {} ...", spec.describe());
    // `--tune_latency` leaves groups out and plans again: a group's neighbours may then need
    // ranges the first plan took from inside the group, so it observes every tensor.
    let observed = if args.tune_latency {
        calibrate::Observed::Every
    } else {
        calibrate::Observed::Planned
    };
    let stats = calibrate::calibrate_for_recipe(
        model,
        recipe,
        &spec,
        &config,
        runtime,
        &JobContext::silent(),
        observed,
    )?;
    for note in &stats.info.notes {
        eprintln!("note: {note}");
    }
    eprintln!("{}", calibrate::summary(&stats));
    super::common::print_range_choices(&stats);
    Ok(Some(stats))
}

/// Whether a `--weight_range` value asks for the measured choice.
fn measured(range: &str) -> bool {
    range.eq_ignore_ascii_case("measured")
}

/// Whether the arguments ask for `--weight_range measured`.
fn measured_asked(args: &QuantizeArgs) -> bool {
    args.weight_range.as_deref().is_some_and(measured)
}

/// With `--weight_range measured`: each weight's range chosen by the model's outputs on the
/// calibration data, written into `recipe`.
fn measure_weight_ranges(
    args: &QuantizeArgs,
    model: Model,
    stats: Option<&Arc<CalibrationStats>>,
    recipe: &mut Recipe,
    runtime: &Runtime,
) -> anyhow::Result<Model> {
    let search = |setup: &EvalSetup, ctx: &JobContext| {
        let chosen = weight_ranges_setup(setup, runtime, ctx)?;
        let line = format!(
            "weight ranges measured: {} ({} tried at once)",
            chosen.summary(),
            chosen.workers
        );
        Ok((chosen.recipe, vec![line]))
    };
    let asked = measured_asked(args);
    search_step(
        Searched {
            args,
            model,
            stats,
            recipe,
        },
        asked,
        search,
    )
}

/// What a search on the calibration data starts from, and the recipe it writes into.
struct Searched<'a> {
    args: &'a QuantizeArgs,
    model: Model,
    stats: Option<&'a Arc<CalibrationStats>>,
    recipe: &'a mut Recipe,
}

/// Runs `search` (when `asked` and there are statistics) on the calibration data with a
/// spinner, prints its lines and takes the recipe it chose. The model is handed back (the
/// search holds it meanwhile, without a copy).
fn search_step(
    start: Searched<'_>,
    asked: bool,
    search: impl FnOnce(&EvalSetup, &JobContext) -> anyhow::Result<(Recipe, Vec<String>)>,
) -> anyhow::Result<Model> {
    let Searched {
        args,
        model,
        stats,
        recipe,
    } = start;
    let (Some(stats), true) = (stats, asked) else {
        return Ok(model);
    };
    let setup = eval_setup(args, model, stats, recipe)?;
    let (bar, ctx) = super::common::progress("{spinner} {wide_msg} {pos}/{len}", true);
    let found = search(&setup, &ctx);
    bar.finish_and_clear();
    let (chosen, lines) = found?;
    for line in lines {
        println!("{line}");
    }
    *recipe = chosen;
    Ok(setup.model)
}

/// What the searches on the calibration data (measured weight ranges, latency tuning)
/// evaluate: `recipe` on `model` with `stats`, on the calibration data and EPs.
fn eval_setup(
    args: &QuantizeArgs,
    model: qdq_studio::model::Model,
    stats: &Arc<CalibrationStats>,
    recipe: &Recipe,
) -> anyhow::Result<EvalSetup> {
    let text = args.text.source();
    let data = args.calibration_data_path.as_deref();
    if text.is_none() && data.is_none() {
        anyhow::bail!("the search needs --calibration_data_path or --calibration_text");
    }
    let data = super::common::data_spec(text, data, &args.images, None, 0, &model)?;
    Ok(EvalSetup {
        model,
        stats: Arc::clone(stats),
        recipe: recipe.clone(),
        data,
        eps: super::common::parse_eps(&args.calibration_eps)?,
        batch_size: args.batch_size,
        task: Default::default(),
        reference: None,
    })
}

/// With `--tune_latency`: the placement tuned for speed on the target's provider, written
/// into `recipe`.
fn tune_for_latency(
    args: &QuantizeArgs,
    model: Model,
    stats: Option<&Arc<CalibrationStats>>,
    recipe: &mut Recipe,
    runtime: &Runtime,
) -> anyhow::Result<Model> {
    let search = |setup: &EvalSetup, ctx: &JobContext| {
        let tuned = tune_latency_setup(setup, &TuneOptions::default(), runtime, ctx)?;
        let mut lines: Vec<String> = tuned.try_lines().iter().map(|l| format!("  {l}")).collect();
        lines.push(tuned.summary());
        Ok((tuned.recipe, lines))
    };
    let asked = args.tune_latency;
    search_step(
        Searched {
            args,
            model,
            stats,
            recipe,
        },
        asked,
        search,
    )
}

/// `--weight_range measured` and `--tune_latency` need real data: the outputs decide.
fn check_measured_data(args: &QuantizeArgs) -> anyhow::Result<()> {
    if args.calibration_data_path.is_some() || args.text.calibration_text.is_some() {
        return Ok(());
    }
    if measured_asked(args) {
        bail!(
            "--weight_range measured chooses each weight's range by the model's outputs on the calibration data: give --calibration_data_path (a statistics cache holds no samples)"
        );
    }
    if args.tune_latency {
        bail!(
            "--tune_latency times the model and checks its outputs on the calibration data: give --calibration_data_path (a statistics cache holds no samples)"
        );
    }
    Ok(())
}

/// Runs `quantize`.
pub fn run(args: &QuantizeArgs) -> anyhow::Result<()> {
    check_measured_data(args)?;
    let (mut recipe, data) = recipe_from(args)?;
    for line in target_lines(args, &recipe) {
        eprintln!("{line}");
    }
    let input = resolve_model_path(&args.onnx_path)?;
    let model = Model::load(&input)?;
    // A quantized input and names the model lacks are refused before any calibration runs.
    let graph = qdq_studio::model::Graph::build(&model);
    qdq_studio::quant::refuse_quantized(&graph)?;
    recipe.check_against(&graph)?;
    if let Some(note) = int4_without_data(args, &mut recipe, &model) {
        eprintln!("note: {note}");
    }
    let output = args
        .output_path
        .clone()
        .unwrap_or_else(|| quantize::default_output(Some(&input), "model"));
    RunFiles::new()
        .model("the input model", &model)
        .input_if("the recipe", args.recipe.as_deref())
        .input_if(
            "the calibration data",
            args.calibration_data_path.as_deref(),
        )
        .input_if(
            "the calibration text",
            args.text.calibration_text.as_deref(),
        )
        .input_if("the tokenizer", args.text.text.tokenizer.as_deref())
        .input_if("the statistics", args.calibration_cache_path.as_deref())
        .model_output("the quantized model", &output)
        .output_if("the recipe written", args.save_recipe.as_deref())
        .folder_outputs(&model, &output)
        .check()?;
    let runtime = runtime::runtime(&mut super::runtime::print_progress)?;
    let stats = statistics_for(args, &model, &recipe, data.as_ref(), &runtime)?.map(Arc::new);
    let model = measure_weight_ranges(args, model, stats.as_ref(), &mut recipe, &runtime)?;
    let model = tune_for_latency(args, model, stats.as_ref(), &mut recipe, &runtime)?;
    let request = SaveRequest {
        model,
        stats,
        recipe,
        quantized: None,
        path: output,
        external_data: args.use_external_data_format,
        recipe_to: args.save_recipe.clone(),
        report_to: None,
    };
    let saved = quantize::quantize_and_save(request, &runtime, &JobContext::silent())?;
    print_saved(&saved);
    Ok(())
}

/// What `quantize` says about a save.
fn print_saved(saved: &Saved) {
    for path in &saved.companions {
        println!("recipe written to {}", path.display());
    }
    if !saved.folder_files.is_empty() {
        let names: Vec<String> = saved
            .folder_files
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        let renamed = if names.iter().any(|n| n == "genai_config.json") {
            " (genai_config.json names the new model)"
        } else {
            ""
        };
        println!(
            "model folder: {} copied beside it{renamed}",
            names.join(", ")
        );
    }
    if let Some(built) = &saved.built {
        println!("{}", built.quantized_line());
        for line in built.technique_lines() {
            println!("{line}");
        }
        for table in built.layer_tables(10) {
            if let Some(table) = super::common::text_table(&table) {
                println!("{table}");
            }
        }
    }
    let t = saved.timings;
    println!(
        "timings: quantize {:.0} ms, check in ONNX Runtime {:.0} ms, save {:.0} ms",
        t.quantize_ms, t.verify_ms, t.write_ms
    );
    let report = &saved.report;
    println!(
        "wrote {} ({} bytes{})",
        report.model_path.display(),
        report.model_bytes,
        report
            .data_path
            .as_ref()
            .map_or(String::new(), |d| format!(", weights in {}", d.display()))
    );
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
    /// Leave the float forms ONNX Runtime fuses as they are (see `quantize --no_simplify`).
    #[arg(long = "no_simplify", visible_alias = "no-simplify")]
    pub no_simplify: bool,
    /// Also equalize layer pairs (cross-layer equalization).
    #[arg(long)]
    pub cle: bool,
}

/// Runs `preprocess`: the quantizer's clean-ups alone, for inspection or other tools.
pub fn run_preprocess(args: &PreprocessArgs) -> anyhow::Result<()> {
    let model = Model::load(&resolve_model_path(&args.onnx_path)?)?;
    RunFiles::new()
        .model("the input model", &model)
        .model_output("the pre-processed model", &args.output_path)
        .check()?;
    // The default options split no outlier rows (`outlier_rows_of`): that float path is the
    // quantizer's own placement, set from a recipe, not a clean-up.
    let options = Preprocessing {
        equalize: args.cle,
        simplify: !args.no_simplify,
        ..Preprocessing::default()
    };
    let prepared = Prepared::new(&model, &options)?;
    prepared
        .model
        .save(&args.output_path, &SaveOptions::default())?;
    println!("{}", prepared.report.summary());
    let equalized = qdq_studio::report::equalization_table(&prepared.report.equalized, 10);
    if let Some(table) = super::common::text_table(&equalized) {
        println!("{table}");
    }
    println!("wrote {}", args.output_path.display());
    Ok(())
}
