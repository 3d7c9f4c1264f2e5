//! `qdq-studio calibrate`: run calibration headless and save the statistics.

use qdq_studio::workflow::model_folder::resolve_model_path;
use std::path::PathBuf;

use anyhow::Context;

use qdq_studio::calib::range::RangeMethod;
use qdq_studio::calib::{CalibrationConfig, ParityBins};
use qdq_studio::model::Model;
use qdq_studio::recipe::Recipe;
use qdq_studio::workflow::outputs::RunFiles;
use qdq_studio::workflow::{calibrate, runtime, statistics};

/// Arguments of `calibrate` (ModelOpt's flag names, kebab-case spellings accepted too).
#[derive(Debug, clap::Args)]
pub struct CalibrateArgs {
    /// The float ONNX model.
    #[arg(long = "onnx_path", visible_alias = "onnx-path")]
    pub onnx_path: PathBuf,
    /// Calibration data: a .npz/.npy file (keyed by input name, samples on axis 0) or a folder
    /// of ONNX Runtime test_data_set_* folders. Without it, random data is used.
    #[arg(
        long = "calibration_data_path",
        visible_alias = "calibration-data-path"
    )]
    pub calibration_data_path: Option<PathBuf>,
    /// Calibration text for a token model, and how it is tokenized.
    #[command(flatten)]
    pub text: super::common::CalibrationText,
    /// Shapes for inputs with symbolic dims, for random data: `in0:1x3x224x224,in1:1x128`.
    #[arg(long = "calibration_shapes", visible_alias = "calibration-shapes")]
    pub calibration_shapes: Option<String>,
    /// Execution providers in priority order: cpu, cuda[:N], trt[:N], dml[:N], openvino[:DEV].
    #[arg(long = "calibration_eps", visible_alias = "calibration-eps", num_args = 1.., default_value = "cpu")]
    pub calibration_eps: Vec<String>,
    /// Samples per batch.
    #[arg(
        long = "batch_size",
        visible_alias = "batch-size",
        default_value_t = 1,
        value_parser = super::common::at_least_one
    )]
    pub batch_size: usize,
    /// Use at most this many samples.
    #[arg(long = "max_samples", visible_alias = "max-samples")]
    pub max_samples: Option<usize>,
    /// Samples of random data when no data path is given.
    #[arg(
        long = "random_samples",
        visible_alias = "random-samples",
        default_value_t = 16
    )]
    pub random_samples: usize,
    /// Bins of the streaming histograms (a multiple of 4).
    #[arg(long = "num_bins", visible_alias = "num-bins", default_value_t = 2048)]
    pub num_bins: usize,
    /// Collect extremes only (MinMax); no histograms, so no Entropy/Percentile/MSE ranges.
    #[arg(
        long = "no_histograms",
        visible_alias = "no-histograms",
        conflicts_with = "ort_parity"
    )]
    pub no_histograms: bool,
    /// Reproduce onnxruntime quantize_static's Entropy/Percentile ranges (two passes).
    #[arg(long = "ort_parity", visible_alias = "ort-parity")]
    pub ort_parity: bool,
    /// Let ONNX Runtime optimise the graph during calibration.
    #[arg(long)]
    pub optimize: bool,
    /// Image-folder preprocessing.
    #[command(flatten)]
    pub images: super::common::ImageArgs,
    /// Calibrate the model with cross-layer equalization (for `quantize --cle`).
    #[arg(long)]
    pub cle: bool,
    /// Calibrate the model as it is, not simplified (for `quantize --no_simplify`).
    #[arg(long = "no_simplify", visible_alias = "no-simplify")]
    pub no_simplify: bool,
    /// Also gather the layers' mean inputs (for `quantize --bias_correction`).
    #[arg(long = "bias_correction", visible_alias = "bias-correction")]
    pub bias_correction: bool,
    /// Also gather the layers' input Hessians (for `quantize --gptq`).
    #[arg(long)]
    pub gptq: bool,
    /// Also choose each activation's range method layer-wise (for
    /// `quantize --layerwise_range`), against `--calibration_method`.
    #[arg(long = "layerwise_range", visible_alias = "layerwise-range")]
    pub layerwise_range: bool,
    /// Where to write the statistics (qdq-studio format, re-usable by `quantize`).
    #[arg(short = 'o', long = "output_path", visible_alias = "output-path")]
    pub output: PathBuf,
    /// Also write onnxruntime's calibration cache JSON with the ranges of `--method`.
    #[arg(long = "export_ort_cache", visible_alias = "export-ort-cache")]
    pub export_ort_cache: Option<PathBuf>,
    /// Also write a TensorRT calibration cache with the ranges of `--method`.
    #[arg(long = "export_trt_cache", visible_alias = "export-trt-cache")]
    pub export_trt_cache: Option<PathBuf>,
    /// Range method for the exports: minmax, entropy, percentile, mse, pow2, pow2_mse.
    #[arg(
        long = "calibration_method",
        visible_alias = "calibration-method",
        default_value = "minmax"
    )]
    pub calibration_method: String,
}

/// Runs `calibrate`: the model as the quantizer sees it (named, pre-processed as the default
/// recipe does, equalized with `--cle`), so `quantize --calibration_cache_path` finds every tensor it needs.
pub fn run(args: &CalibrateArgs) -> anyhow::Result<()> {
    let method = RangeMethod::parse(&args.calibration_method)
        .with_context(|| format!("unknown calibration method '{}'", args.calibration_method))?;
    let eps = super::common::parse_eps(&args.calibration_eps)?;
    calibrate::check_bins(args.num_bins)?;
    let model = Model::load(&resolve_model_path(&args.onnx_path)?)?;
    let spec = super::common::data_spec(
        args.text.source(),
        args.calibration_data_path.as_deref(),
        &args.images,
        args.calibration_shapes.as_deref(),
        args.random_samples,
        &model,
    )?;
    RunFiles::new()
        .model("the input model", &model)
        .data("the calibration data", &spec)
        .output("the statistics", &args.output)
        .output_if("the onnxruntime cache", args.export_ort_cache.as_deref())
        .output_if("the TensorRT cache", args.export_trt_cache.as_deref())
        .check()?;
    let runtime = runtime::runtime(&mut super::runtime::print_progress)?;
    let config = CalibrationConfig {
        execution_providers: eps,
        batch_size: args.batch_size,
        max_samples: args.max_samples,
        histogram_bins: if args.no_histograms { 0 } else { args.num_bins },
        optimize: args.optimize,
        ort_parity: args.ort_parity.then(ParityBins::default),
        ..CalibrationConfig::default()
    };
    let (bar, ctx) = super::common::progress(
        "{spinner} {msg:<22} [{bar:30}] {pos}/{len} samples  {per_sec}  eta {eta}",
        false,
    );
    let mut recipe = Recipe::default();
    recipe.preprocessing.equalize = args.cle;
    recipe.preprocessing.simplify = !args.no_simplify;
    recipe.bias_correction = args.bias_correction;
    recipe.gptq = args.gptq;
    recipe.layerwise_range = args.layerwise_range;
    recipe.calibration_method = method;
    let every = calibrate::Observed::Every;
    let stats =
        calibrate::calibrate_for_recipe(&model, &recipe, &spec, &config, &runtime, &ctx, every);
    bar.finish_and_clear();
    let stats = stats?;
    statistics::save(&stats, &args.output)?;
    println!("{}", calibrate::summary(&stats));
    super::common::print_range_choices(&stats);
    for note in &stats.info.notes {
        println!("note: {note}");
    }
    for warning in statistics::warnings(&stats) {
        println!("warning: {warning}");
    }
    println!("statistics written to {}", args.output.display());
    if let Some(path) = &args.export_ort_cache {
        statistics::export_ort_cache(&stats, &method, path)?;
        println!(
            "onnxruntime calibration cache ({}) written to {}",
            method.name(),
            path.display()
        );
    }
    if let Some(path) = &args.export_trt_cache {
        statistics::export_trt_cache(&stats, &method, path)?;
        println!(
            "TensorRT calibration cache ({}) written to {}",
            method.name(),
            path.display()
        );
    }
    Ok(())
}
