//! Pieces the calibrating subcommands share: the EP list and the data source.

use std::path::{Path, PathBuf};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};

use qdq_studio::calib::data::images::{ChannelOrder, Layout, Preprocess};
use qdq_studio::calib::data::{DataSpec, text};
use qdq_studio::eval::compare::OutputKind;
use qdq_studio::eval::compare::task::TaskOptions;
use qdq_studio::jobs::{CancelToken, JobContext};
use qdq_studio::model::Model;
use qdq_studio::runtime::EpSpec;
use qdq_studio::workflow::calibrate;

/// A progress bar on stderr drawn with `template`, and the job context that feeds it; its
/// message is each report's stage, or its detail when `detail`.
pub fn progress(template: &str, detail: bool) -> (ProgressBar, JobContext) {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let sink = bar.clone();
    let ctx = JobContext::new(CancelToken::new(), move |p| {
        sink.set_length(p.total);
        sink.set_position(p.done);
        sink.set_message(if detail { p.detail } else { p.stage });
    });
    (bar, ctx)
}

/// `--calibration_eps cpu cuda:0 trt` (space- or comma-separated) in priority order.
pub fn parse_eps(values: &[String]) -> anyhow::Result<Vec<EpSpec>> {
    Ok(values
        .iter()
        .flat_map(|s| s.split(','))
        .filter(|s| !s.is_empty())
        .map(EpSpec::parse)
        .collect::<Result<_, _>>()?)
}

/// The data source for `model`: a text with its tokenizer when given (`text`), else the
/// given path (npz/npy, image folder or ONNX Runtime test data), or random data from the
/// input specs with a warning (and, for a token model, a line on what each input gets).
pub fn data_spec(
    text: Option<(&Path, &TextArgs)>,
    path: Option<&Path>,
    images: &ImageArgs,
    shapes: Option<&str>,
    random_samples: usize,
    model: &Model,
) -> anyhow::Result<DataSpec> {
    if let Some((text, args)) = text {
        return args.spec(text, model);
    }
    let inputs = calibrate::inputs(model);
    let preprocess = images.preprocess(&inputs)?;
    let (spec, random) = calibrate::data_or_random(path, preprocess, shapes, random_samples)?;
    if random {
        eprintln!("{}", calibrate::RANDOM_DATA_WARNING);
        if let Some(line) = calibrate::random_token_line(&inputs, &spec) {
            eprintln!("{line}");
        }
    }
    Ok(spec)
}

/// `--calibration_text` and how it is tokenized (`calibrate`, `quantize`).
#[derive(Debug, Clone, clap::Args)]
pub struct CalibrationText {
    /// Calibration text for a token model (an LLM): tokenized with the model's tokenizer and
    /// cut into sequences (see --tokenizer, --seq_len, --text_samples).
    #[arg(
        long = "calibration_text",
        visible_alias = "calibration-text",
        value_name = "FILE",
        conflicts_with = "calibration_data_path"
    )]
    pub calibration_text: Option<PathBuf>,
    /// How the text is tokenized.
    #[command(flatten)]
    pub text: TextArgs,
}

impl CalibrationText {
    /// The text and how to tokenize it, when one is given.
    pub fn source(&self) -> Option<(&Path, &TextArgs)> {
        self.calibration_text.as_deref().map(|t| (t, &self.text))
    }
}

/// `--eval_text` and how it is tokenized (`compare`, `sensitivity`).
#[derive(Debug, Clone, clap::Args)]
pub struct EvalText {
    /// Evaluation text for a token model (an LLM): tokenized with the model's tokenizer and
    /// cut into sequences; a language model's logits are scored by perplexity on it.
    #[arg(
        long = "eval_text",
        visible_alias = "eval-text",
        value_name = "FILE",
        conflicts_with = "data"
    )]
    pub eval_text: Option<PathBuf>,
    /// How the text is tokenized.
    #[command(flatten)]
    pub text: TextArgs,
}

impl EvalText {
    /// The text and how to tokenize it, when one is given.
    pub fn source(&self) -> Option<(&Path, &TextArgs)> {
        self.eval_text.as_deref().map(|t| (t, &self.text))
    }
}

/// How a text becomes token sequences (`--calibration_text`, `--eval_text`).
#[derive(Debug, Clone, clap::Args)]
pub struct TextArgs {
    /// Text data: the model's tokenizer (default: the tokenizer.json beside the model).
    #[arg(long, value_name = "FILE")]
    pub tokenizer: Option<PathBuf>,
    /// Text data: tokens per sequence (default: the model's fixed length, else 128).
    #[arg(long = "seq_len", visible_alias = "seq-len", value_parser = at_least_one)]
    pub seq_len: Option<usize>,
    /// Text data: sequences taken at most, from the start of the text.
    #[arg(
        long = "text_samples",
        visible_alias = "text-samples",
        default_value_t = text::DEFAULT_TEXT_SAMPLES,
        value_parser = at_least_one
    )]
    pub text_samples: usize,
}

impl TextArgs {
    /// `text` tokenized by `--tokenizer`, else by the tokenizer beside `model`.
    pub fn spec(&self, text: &Path, model: &Model) -> anyhow::Result<DataSpec> {
        let tokenizer = match (&self.tokenizer, model.path()) {
            (Some(path), _) => path.clone(),
            (None, Some(model_path)) => text::tokenizer_beside(model_path).with_context(|| {
                format!(
                    "no {} beside {}: give the model's tokenizer with --tokenizer FILE",
                    text::TOKENIZER_FILE,
                    model_path.display()
                )
            })?,
            (None, None) => anyhow::bail!("give the model's tokenizer with --tokenizer FILE"),
        };
        Ok(DataSpec::Text(text::TextSpec {
            path: text.to_path_buf(),
            tokenizer,
            sequence: self.seq_len,
            max_samples: self.text_samples,
        }))
    }
}

/// How images of an image folder become input tensors.
#[derive(Debug, Clone, clap::Args)]
pub struct ImageArgs {
    /// Image folders: output size WxH (default: the model input's fixed size).
    #[arg(long = "image_size", visible_alias = "image-size")]
    pub image_size: Option<String>,
    /// Image folders: resize the shorter side to this, then centre-crop (0: plain resize).
    #[arg(
        long = "resize_shorter",
        visible_alias = "resize-shorter",
        default_value_t = 0
    )]
    pub resize_shorter: u32,
    /// Image folders: channel order.
    #[arg(long, value_enum, default_value = "rgb")]
    pub channels: ChannelArg,
    /// Image folders: tensor layout.
    #[arg(long, value_enum, default_value = "nchw")]
    pub layout: LayoutArg,
    /// Image folders: multiplier for 0..255 pixel values.
    #[arg(long, default_value_t = 1.0 / 255.0)]
    pub scale: f32,
    /// Image folders: per-channel mean, `r,g,b`.
    #[arg(long, default_value = "0.485,0.456,0.406")]
    pub mean: String,
    /// Image folders: per-channel std, `r,g,b`.
    #[arg(long, default_value = "0.229,0.224,0.225")]
    pub std: String,
}

impl ImageArgs {
    /// The preprocessing these flags describe; the size defaults to the model input's.
    pub fn preprocess(
        &self,
        inputs: &[qdq_studio::calib::data::InputSpec],
    ) -> anyhow::Result<Preprocess> {
        preprocess_of(self, inputs)
    }
}

/// `--channels`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ChannelArg {
    /// Red, green, blue.
    Rgb,
    /// Blue, green, red.
    Bgr,
}

/// `--layout`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LayoutArg {
    /// Channels first.
    Nchw,
    /// Channels last.
    Nhwc,
}

fn triple(text: &str, flag: &str) -> anyhow::Result<[f32; 3]> {
    let values: Vec<f32> = text
        .split(',')
        .map(|v| v.trim().parse::<f32>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("--{flag} '{text}' is not three numbers"))?;
    values
        .try_into()
        .map_err(|_| anyhow::anyhow!("--{flag} needs exactly three values, got '{text}'"))
}

fn preprocess_of(
    args: &ImageArgs,
    inputs: &[qdq_studio::calib::data::InputSpec],
) -> anyhow::Result<Preprocess> {
    let layout = match args.layout {
        LayoutArg::Nchw => Layout::Nchw,
        LayoutArg::Nhwc => Layout::Nhwc,
    };
    let (width, height) = match &args.image_size {
        Some(size) => {
            let (w, h) = size
                .split_once('x')
                .with_context(|| format!("--image_size '{size}' is not WxH"))?;
            (w.trim().parse()?, h.trim().parse()?)
        }
        None => {
            let dims = inputs
                .first()
                .and_then(|i| i.shape.clone())
                .unwrap_or_default();
            let fixed = |axis: usize| match dims.get(axis) {
                Some(qdq_studio::model::Dim::Fixed(v)) if *v > 0 => Some(*v as u32),
                _ => None,
            };
            let (h_axis, w_axis) = if layout == Layout::Nchw {
                (2, 3)
            } else {
                (1, 2)
            };
            (fixed(w_axis).unwrap_or(224), fixed(h_axis).unwrap_or(224))
        }
    };
    Ok(Preprocess {
        width,
        height,
        resize_shorter: args.resize_shorter,
        channels: match args.channels {
            ChannelArg::Rgb => ChannelOrder::Rgb,
            ChannelArg::Bgr => ChannelOrder::Bgr,
        },
        layout,
        scale: args.scale,
        mean: triple(&args.mean, "mean")?,
        std: triple(&args.std, "std")?,
    })
}

/// A count that must be at least 1 (`--batch_size`): 0 is refused by the parser with the
/// reason instead of being taken silently.
pub fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// What the task metrics need: output kinds chosen over the detected ones, and where ground
/// truth is.
#[derive(Debug, Clone, clap::Args)]
pub struct TaskArgs {
    /// The evaluation data's array holding ground truth: class labels (integers, one per
    /// sample) or texts (strings). Default: `labels` or `texts` when the data has one.
    #[arg(long = "labels", value_name = "KEY")]
    pub labels: Option<String>,
    /// A CTC model's characters, one per line (default: the model's `character` metadata,
    /// which PaddleOCR's recognizers carry).
    #[arg(long = "charset", value_name = "FILE")]
    pub charset: Option<std::path::PathBuf>,
    /// An output's kind, over the detected one (repeatable). Kinds: classifier,
    /// ctc_sequence, token_scores, embedding, hidden_states, dense_map, values.
    #[arg(
        long = "output_kind",
        visible_alias = "output-kind",
        value_name = "NAME=KIND"
    )]
    pub output_kind: Vec<String>,
    /// Dense maps: values at or above this are foreground for the mask IoU.
    #[arg(
        long = "iou_threshold",
        visible_alias = "iou-threshold",
        default_value_t = 0.5
    )]
    pub iou_threshold: f32,
}

impl TaskArgs {
    /// The task options the flags ask for.
    pub fn options(&self) -> anyhow::Result<TaskOptions> {
        let mut kinds = std::collections::BTreeMap::new();
        for spec in &self.output_kind {
            let parsed = spec
                .rsplit_once('=')
                .and_then(|(name, kind)| Some((name, OutputKind::parse(kind)?)));
            let Some((name, kind)) = parsed else {
                let names: Vec<&str> = OutputKind::ALL.iter().map(|k| k.name()).collect();
                anyhow::bail!(
                    "bad --output_kind '{spec}': expected NAME=KIND, KIND one of {}",
                    names.join(", ")
                );
            };
            kinds.insert(name.to_owned(), kind);
        }
        Ok(TaskOptions {
            kinds,
            truth_key: self.labels.clone(),
            charset: self.charset.clone(),
            iou_threshold: self.iou_threshold,
        })
    }
}

/// A report table as a terminal table; `None` when it has no rows.
pub fn text_table(t: &qdq_studio::report::TextTable) -> Option<comfy_table::Table> {
    if t.rows.is_empty() {
        return None;
    }
    let mut table = comfy_table::Table::new();
    table
        .load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_header(t.header.clone());
    for row in &t.rows {
        table.add_row(row.clone());
    }
    Some(table)
}

/// Prints the layer-wise range choices of `stats` (a line and the 10 largest gains), when
/// there are any.
pub fn print_range_choices(stats: &qdq_studio::calib::CalibrationStats) {
    let Some(line) = qdq_studio::report::range_choice_summary(stats) else {
        return;
    };
    println!("{line}");
    if let Some(table) = text_table(&qdq_studio::report::range_choice_table(stats, 10)) {
        println!("{table}");
    }
}
