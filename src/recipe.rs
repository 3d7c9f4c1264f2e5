//! [`Recipe`]: every choice that determines a quantized model, saved as TOML.
//!
//! A recipe plus the float model and its calibration statistics reproduce the QDQ model
//! exactly; the studio saves one, the CLI reads or writes one (`--recipe`, `--save-recipe`),
//! and every output model carries its recipe in `metadata_props`.

use std::collections::BTreeMap;
use std::path::Path;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::calib::range::{Range, RangeMethod};
use crate::model::{DataType, Graph};

pub mod node_precision;
mod summary;
pub mod target;

pub use node_precision::NodePrecision;
pub use target::Target;

/// The recipe format version written by this build.
pub const RECIPE_VERSION: u32 = 1;

/// The table of a recipe file that holds the data the studio ran the recipe on (its calibration
/// and evaluation choices). The recipe itself does not read it: the same file quantizes the
/// same model whatever data it names.
pub const DATA_TABLE: &str = "data";

/// The key of the data table holding the calibration data as the engine reads it (a
/// [`crate::calib::DataSpec`]): `quantize --recipe` calibrates on it when given no data, so a
/// recipe saved from the studio reproduces its model from the command line.
pub const CALIBRATION_SPEC: &str = "calibration_spec";

/// The calibration data `data` (a recipe's data table) names, `None` when it names none; an
/// entry that does not read as a data source is an error.
pub fn calibration_spec(data: &toml::Table) -> Result<Option<crate::calib::DataSpec>, RecipeError> {
    data.get(CALIBRATION_SPEC)
        .map(|value| {
            value
                .clone()
                .try_into()
                .map_err(|e: toml::de::Error| RecipeError::Parse {
                    path: format!("[{DATA_TABLE}] {CALIBRATION_SPEC}"),
                    message: e.message().trim().replace('\n', " "),
                })
        })
        .transpose()
}

/// What is quantized and to which types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuantMode {
    /// Integer activations and weights (8- or 16-bit).
    Int8,
    /// FP8 E4M3FN activations and weights.
    Fp8,
    /// 4-bit block-wise weights of MatMul/Gemm, activations left in float.
    Int4,
}

/// Where Q/DQ nodes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// onnxruntime's QDQ placement for its registered op types.
    Ort,
    /// TensorRT explicit quantization: Q/DQ on the inputs of compute ops only.
    Tensorrt,
}

/// How int4 weights are chosen (ModelOpt's `--calibration_method` names in int4 mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Int4Method {
    /// Round to nearest, weights stored in int4 behind a DequantizeLinear (no calibration).
    #[default]
    RtnDq,
    /// Round to nearest as Q/DQ on the float weights (TensorRT's fake-quantized form; the
    /// file keeps float weights).
    Rtn,
    /// Activation-aware scaling (AWQ-lite): per input channel, scales `s = mean|x|^α /
    /// w^(1-α)` with α searched per layer on calibration activations, folded into the
    /// producer of the activation (or an explicit Mul).
    AwqLite,
    /// Activation-aware clipping (AWQ-clip): per block, the clipping ratio of the range that
    /// minimises the layer's output error on calibration activations.
    AwqClip,
    /// Both (ModelOpt's AWQ-full): AWQ-lite's scales, then AWQ-clip's ratios on the scaled
    /// weights. On a trained decoder it beats either alone (`benches/llm`).
    AwqFull,
}

impl Int4Method {
    /// Every method, in the order the faces list them.
    pub const ALL: [Int4Method; 5] = [
        Int4Method::AwqFull,
        Int4Method::AwqLite,
        Int4Method::AwqClip,
        Int4Method::RtnDq,
        Int4Method::Rtn,
    ];

    /// The method's name (the CLI's and the recipe's).
    pub fn name(self) -> &'static str {
        match self {
            Int4Method::RtnDq => "rtn_dq",
            Int4Method::Rtn => "rtn",
            Int4Method::AwqLite => "awq_lite",
            Int4Method::AwqClip => "awq_clip",
            Int4Method::AwqFull => "awq_full",
        }
    }

    /// Parses a name.
    pub fn parse(name: &str) -> Option<Int4Method> {
        Int4Method::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(name))
    }

    /// True when the method searches on calibration activations.
    pub fn needs_activations(self) -> bool {
        matches!(
            self,
            Int4Method::AwqLite | Int4Method::AwqClip | Int4Method::AwqFull
        )
    }
}

/// The form int4 weights take in the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Int4Output {
    /// Opset-21 block-wise DequantizeLinear before each MatMul/Gemm (any runtime).
    #[default]
    Dq,
    /// ONNX Runtime's `com.microsoft.MatMulNBits` in place of each MatMul (its fast int4
    /// kernels on CPU, CUDA and DirectML; Gemm stays in the DequantizeLinear form).
    Matmulnbits,
}

/// MatMulNBits' accuracy level by default: int8 activations, the level ONNX Runtime's own CPU
/// optimizer gives the DQ form when it fuses it, and ONNX Runtime GenAI's for CPU.
pub const DEFAULT_ACCURACY_LEVEL: u8 = 4;

impl Int4Output {
    /// Parses a name.
    pub fn parse(name: &str) -> Option<Int4Output> {
        match name.to_ascii_lowercase().as_str() {
            "dq" | "qdq" => Some(Int4Output::Dq),
            "matmulnbits" | "matmul_nbits" => Some(Int4Output::Matmulnbits),
            _ => None,
        }
    }
}

/// Which weights the saturation guard gives 7 bits (see the quantizer's `saturation` module).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum GuardScope {
    /// Every int8 weight ONNX Runtime's u8×s8 kernels read (a quantized Conv, MatMul or Gemm
    /// with an 8-bit activation input) that is quantized per channel; per tensor, one whose
    /// layer cross-layer equalization rescaled (every channel then spans about the weight's
    /// extremes, as a per-channel weight's does) or one with at least 1 % of the pairs the
    /// kernels add able to overflow at 8 bits, as most per-channel weights have.
    #[default]
    IntegerKernelsAndSaturatingPairs,
    /// Per-channel weights and equalized per-tensor ones, not the per-tensor weights whose
    /// pairs overflow: what the guard covered in recipes written before those were guarded,
    /// kept so that they reproduce the model they made.
    IntegerKernelsAndEqualized,
    /// Every per-channel int8 weight those kernels read: what the guard covered in recipes
    /// written before equalized per-tensor weights were guarded too, kept so that they
    /// reproduce the model they made.
    IntegerKernels,
    /// Only the MatMul/Gemm weights of a model with a LayerNorm/RMSNorm: what the guard
    /// covered in recipes written before its scope was a setting, kept so that they
    /// reproduce the model they made.
    TransformerLinear,
}

impl GuardScope {
    /// The scope of recipes that do not name one.
    fn legacy() -> Self {
        GuardScope::TransformerLinear
    }
}

/// How a weight's range is chosen (per tensor or per channel, integer types; block-wise and
/// FP8 weights always take their extremes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum WeightRange {
    /// The weight's (or channel's) smallest and largest value: onnxruntime's choice.
    #[default]
    Minmax,
    /// The clipped range whose rounding and clipping error is least (mean squared error over
    /// the weight's values): one outlier no longer sets the step of every other weight.
    Mse,
    /// The extremes with the scale rounded up to a power of two (never clipping), for NPUs
    /// that rescale by shifts (the `npu` target's XINT8).
    Pow2,
}

impl WeightRange {
    /// Parses a name.
    pub fn parse(name: &str) -> Option<WeightRange> {
        match name.to_ascii_lowercase().as_str() {
            "minmax" | "max" => Some(WeightRange::Minmax),
            "mse" => Some(WeightRange::Mse),
            "pow2" | "power_of_two" => Some(WeightRange::Pow2),
            _ => None,
        }
    }

    /// The name recipes and the CLI use.
    pub fn name(self) -> &'static str {
        match self {
            WeightRange::Minmax => "minmax",
            WeightRange::Mse => "mse",
            WeightRange::Pow2 => "pow2",
        }
    }

    fn is_minmax(&self) -> bool {
        *self == WeightRange::Minmax
    }
}

/// A per-tensor choice that overrides the recipe's defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TensorOverride {
    /// A fixed range instead of the calibrated one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<[f32; 2]>,
    /// Another calibration method for this tensor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<RangeMethod>,
    /// Another activation type for this tensor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<QuantType>,
    /// Leave this tensor in float (no Q/DQ on it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_float: bool,
    /// 7-bit values for this weight (onnxruntime's `reduce_range`, for one weight).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reduce_range: bool,
    /// 8-bit values for this weight where the saturation guard would give it 7 (what the
    /// measured weight search writes where the integer kernels' saturation costs less than
    /// the bit); `reduce_range` wins when both are set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub full_range: bool,
    /// Another range choice for this weight than the recipe's `weight_range` (what the
    /// measured weight-range search writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_range: Option<WeightRange>,
}

/// An integer (or fp8) quantized element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuantType {
    /// Unsigned 8-bit.
    Uint8,
    /// Signed 8-bit.
    Int8,
    /// Unsigned 16-bit.
    Uint16,
    /// Signed 16-bit.
    Int16,
    /// Signed 4-bit.
    Int4,
    /// Unsigned 4-bit.
    Uint4,
    /// FP8 E4M3FN.
    Float8e4m3fn,
}

impl QuantType {
    /// The ONNX element type.
    pub fn data_type(self) -> DataType {
        match self {
            QuantType::Uint8 => DataType::Uint8,
            QuantType::Int8 => DataType::Int8,
            QuantType::Uint16 => DataType::Uint16,
            QuantType::Int16 => DataType::Int16,
            QuantType::Int4 => DataType::Int4,
            QuantType::Uint4 => DataType::Uint4,
            QuantType::Float8e4m3fn => DataType::Float8E4M3FN,
        }
    }

    /// True for signed integer types.
    pub fn is_signed(self) -> bool {
        matches!(self, QuantType::Int8 | QuantType::Int16 | QuantType::Int4)
    }

    /// Parses a CLI name.
    pub fn parse(name: &str) -> Option<QuantType> {
        Some(match name.to_ascii_lowercase().as_str() {
            "uint8" | "u8" | "quint8" => QuantType::Uint8,
            "int8" | "s8" | "qint8" => QuantType::Int8,
            "uint16" | "u16" => QuantType::Uint16,
            "int16" | "s16" => QuantType::Int16,
            "int4" | "s4" => QuantType::Int4,
            "uint4" | "u4" => QuantType::Uint4,
            "fp8" | "float8e4m3fn" => QuantType::Float8e4m3fn,
            _ => return None,
        })
    }
}

/// Optional graph clean-ups applied to a copy before quantizing (what onnxruntime's
/// `quant_pre_process` does for its users).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preprocessing {
    /// Turn Constant-node tensors into initializers.
    #[serde(default = "yes")]
    pub constants_to_initializers: bool,
    /// Fold BatchNormalization into a preceding Conv/ConvTranspose/Gemm.
    #[serde(default = "yes")]
    pub fold_batchnorm: bool,
    /// Remove Identity and Dropout nodes.
    #[serde(default = "yes")]
    pub drop_identity: bool,
    /// Record the activation shapes observed during calibration as `value_info` (dims that
    /// varied between batches stay symbolic), so runtimes and viewers know them.
    #[serde(default = "yes")]
    pub write_observed_shapes: bool,
    /// Rewrite the float forms ONNX Runtime fuses in a float model, and that Q/DQ nodes would
    /// keep apart, as the forms its integer kernels take (see the quantizer's `simplify`:
    /// constant Reshapes folded; a Conv's bias Add, channel Mul and HardSigmoid folded into
    /// it; a division by a constant after an elementwise op as a multiplication). Recipes
    /// written before it lack it and keep the model they made.
    #[serde(default)]
    pub simplify: bool,
    /// Cross-layer equalization of Conv/Gemm/MatMul pairs (float outputs unchanged; the
    /// statistics must be calibrated with it).
    #[serde(default)]
    pub equalize: bool,
    /// Compute in float the few rows of a MatMul/Gemm weight that hold its outliers, so that
    /// one step no longer serves them and every other weight alike (see the quantizer's
    /// `outlier_rows`; exact in float). Applies to 8-bit weights under automatic precision,
    /// without SmoothQuant. Recipes written before it lack it and keep the model they made.
    #[serde(default)]
    pub outlier_rows: bool,
    /// Which op types the split applies to: those of MatMul and Gemm the recipe quantizes.
    /// Not a recipe setting: [`Recipe::prepared_options`] sets them from `outlier_rows` and
    /// the op-type lists, so a layer the recipe never quantizes keeps its one node.
    #[serde(skip)]
    pub outlier_rows_of: OutlierRowsOf,
    /// Store each private weight of a Gemm with `transB` as `[K, N]` (see
    /// [`crate::quant::gemm_layout`]). Not a recipe setting: [`Recipe::prepared_options`] sets
    /// it for int4, whose blocks run along `K`.
    #[serde(skip)]
    pub gemm_weights_k_by_n: bool,
    /// Also rewrite a Gemm computing `A·B + C` as a MatMul and an Add, so int4 treats it as a
    /// MatMul (MatMulNBits included). Set with the above when the recipe quantizes both op
    /// types.
    #[serde(skip)]
    pub gemms_as_matmul: bool,
}

/// The op types whose outlier rows pre-processing splits off (see
/// [`Preprocessing::outlier_rows_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OutlierRowsOf {
    /// MatMul layers.
    pub matmul: bool,
    /// Gemm layers.
    pub gemm: bool,
}

fn yes() -> bool {
    true
}

impl Default for Preprocessing {
    fn default() -> Self {
        Preprocessing {
            constants_to_initializers: true,
            fold_batchnorm: true,
            drop_identity: true,
            write_observed_shapes: true,
            simplify: true,
            equalize: false,
            outlier_rows: true,
            outlier_rows_of: OutlierRowsOf::default(),
            gemm_weights_k_by_n: false,
            gemms_as_matmul: false,
        }
    }
}

/// Everything that determines the quantized model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// Recipe format version.
    pub version: u32,
    /// Where the model will run (see [`target`]): it sets placement, types, symmetry, scale
    /// form and the saturation guard, and the settings it requires must agree with it.
    /// Recipes written before targets existed have none and keep exactly what they say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Target>,
    /// What to quantize to.
    pub mode: QuantMode,
    /// Activation type (int8 mode).
    pub activation_type: QuantType,
    /// Weight type.
    pub weight_type: QuantType,
    /// Symmetric activation ranges.
    #[serde(default)]
    pub symmetric_activations: bool,
    /// Symmetric weight ranges (default: symmetric for signed weight types).
    #[serde(default = "yes")]
    pub symmetric_weights: bool,
    /// One scale per output channel for weights.
    pub per_channel: bool,
    /// 7-bit weights (onnxruntime's `reduce_range`, for old x86 VNNI-less CPUs).
    #[serde(default)]
    pub reduce_range: bool,
    /// Q/DQ placement policy.
    pub placement: Placement,
    /// How activation ranges are chosen.
    pub calibration_method: RangeMethod,
    /// Op types to quantize (empty: the policy's defaults).
    #[serde(default)]
    pub op_types_to_quantize: Vec<String>,
    /// Op types never quantized.
    #[serde(default)]
    pub op_types_to_exclude: Vec<String>,
    /// Only nodes whose name matches one of these (exact names or regex, matched at the start
    /// like Python's `re.match`).
    #[serde(default)]
    pub nodes_to_quantize: Vec<String>,
    /// Nodes never quantized (exact names or regex, `re.match`).
    #[serde(default)]
    pub nodes_to_exclude: Vec<String>,
    /// Quantize only between these nodes (their names); empty: from the inputs.
    #[serde(default)]
    pub subgraph_start: Vec<String>,
    /// ... and these (empty: to the outputs).
    #[serde(default)]
    pub subgraph_end: Vec<String>,
    /// Block size of int4 weights.
    #[serde(default = "default_block_size")]
    pub block_size: usize,
    /// How int4 weights are chosen (recipes written before this setting: `rtn_dq`).
    #[serde(default)]
    pub int4_method: Int4Method,
    /// The form int4 weights take in the output.
    #[serde(default)]
    pub int4_output: Int4Output,
    /// MatMulNBits' `accuracy_level`: the least precision its CPU kernels may compute in
    /// (0 unset, 1 fp32, 2 fp16, 3 bf16, 4 int8 activations, the fast one; CUDA and DirectML
    /// ignore it). Recipes written before this setting: 0.
    #[serde(default)]
    pub int4_accuracy_level: u8,
    /// SmoothQuant for int8 MatMuls: activation outlier channels moved into the weights where
    /// the division folds exactly into the producer (see the quantizer's `smooth` module).
    #[serde(default)]
    pub smoothquant: bool,
    /// SmoothQuant's migration strength α in [0, 1]; none: searched per activation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smoothquant_alpha: Option<f32>,
    /// Bias correction: each quantized layer's mean output shift from its weight quantization,
    /// measured on the calibration data, subtracted from its bias (see the quantizer's
    /// `bias_correction` module; the statistics must be gathered with it on).
    #[serde(default)]
    pub bias_correction: bool,
    /// GPTQ rounding: each quantized Conv/Gemm/MatMul weight rounded column by column, the
    /// error of each column spread over the columns not yet rounded through the inverse of
    /// the layer's input Hessian measured on the calibration data (see the quantizer's `gptq`
    /// module; the statistics must be gathered with it on). Same scales, other integers.
    #[serde(default)]
    pub gptq: bool,
    /// Layer-wise range choice: each activation quantized with the range method (MinMax,
    /// percentiles, entropy, MSE) whose quantization of it disturbs the outputs of the nodes
    /// reading it least, measured on the calibration data (see the quantizer's `layerwise`
    /// module; the statistics must be gathered with it on). A tensor's own method wins.
    #[serde(default)]
    pub layerwise_range: bool,
    /// How integer weights (per tensor or per channel) get their range: their extremes, or
    /// the clipped range of least squared error (see the quantizer's `weight_range`
    /// module). Recipes written before this setting: extremes.
    #[serde(default, skip_serializing_if = "WeightRange::is_minmax")]
    pub weight_range: WeightRange,
    /// Graph clean-ups applied first.
    #[serde(default)]
    pub preprocessing: Preprocessing,
    /// Keep in float the tensors 8-bit activations are known to break (attention masks, the
    /// streams feeding a LayerNorm/RMSNorm; see the quantizer's `precision` module). Off: exactly
    /// onnxruntime's placement.
    #[serde(default = "yes")]
    pub auto_precision: bool,
    /// With automatic precision, the per-channel int8 weights ONNX Runtime's u8×s8 kernels
    /// read get 7 bits, as those kernels saturate on x86 CPUs without VNNI (see the
    /// quantizer's `saturation` module). Recipes written before this setting: off, so they
    /// reproduce the model they made.
    #[serde(default)]
    pub saturation_guard: bool,
    /// Which weights the saturation guard covers. Recipes written before this setting: a
    /// transformer's MatMul/Gemm weights only, as then.
    #[serde(default = "GuardScope::legacy")]
    pub saturation_guard_scope: GuardScope,
    /// Per-tensor overrides, by tensor name.
    #[serde(default)]
    pub tensor_overrides: BTreeMap<String, TensorOverride>,
    /// Mixed precision: nodes (exact names) with 16-bit activations or 4-bit weights instead
    /// of the recipe's 8 bits (see [`node_precision`]). A tensor's own override wins.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_precision: BTreeMap<String, NodePrecision>,
}

fn default_block_size() -> usize {
    128
}

impl Default for Recipe {
    /// onnxruntime `quantize_static`'s usual setting: uint8 activations, int8 per-channel
    /// weights, MinMax, its placement, with the saturation guard on (right on every x86) and
    /// no target. The faces start from [`Recipe::for_target`] instead: the target decides.
    fn default() -> Self {
        Recipe {
            version: RECIPE_VERSION,
            target: None,
            mode: QuantMode::Int8,
            activation_type: QuantType::Uint8,
            weight_type: QuantType::Int8,
            symmetric_activations: false,
            symmetric_weights: true,
            per_channel: true,
            reduce_range: false,
            placement: Placement::Ort,
            calibration_method: RangeMethod::MinMax {
                moving_average: false,
            },
            op_types_to_quantize: Vec::new(),
            op_types_to_exclude: Vec::new(),
            nodes_to_quantize: Vec::new(),
            nodes_to_exclude: Vec::new(),
            subgraph_start: Vec::new(),
            subgraph_end: Vec::new(),
            block_size: default_block_size(),
            int4_method: Int4Method::AwqFull,
            int4_output: Int4Output::Dq,
            int4_accuracy_level: DEFAULT_ACCURACY_LEVEL,
            smoothquant: false,
            smoothquant_alpha: None,
            bias_correction: false,
            gptq: false,
            layerwise_range: false,
            weight_range: WeightRange::Minmax,
            preprocessing: Preprocessing::default(),
            auto_precision: true,
            saturation_guard: true,
            saturation_guard_scope: GuardScope::IntegerKernelsAndSaturatingPairs,
            tensor_overrides: BTreeMap::new(),
            node_precision: BTreeMap::new(),
        }
    }
}

/// A recipe problem, with the line it is on when it came from a file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecipeError {
    /// The TOML does not parse or has unknown keys.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message (with line and column).
        message: String,
    },
    /// Settings that contradict each other or the model.
    #[error("{}", .problems.join("; "))]
    Invalid {
        /// One line per problem.
        problems: Vec<String>,
    },
    /// The file could not be read or written.
    #[error("recipe {path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

/// Writes a recipe file's `text` atomically.
fn write_text(path: &Path, text: &str) -> Result<(), RecipeError> {
    crate::atomic::write(path, text.as_bytes())
        .map(|_| ())
        .map_err(|e| RecipeError::Io {
            path: path.display().to_string(),
            reason: e.to_string(),
        })
}

/// The TOML parser's message on one line, with where it is (`line 3, column 8: ...`): its own
/// rendering draws the line and a caret over several lines.
fn parse_message(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim().replace('\n', " ");
    match error.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            let source: String = text
                .lines()
                .nth(line - 1)
                .unwrap_or_default()
                .trim()
                .chars()
                .take(60)
                .collect();
            format!("line {line}, column {column} (`{source}`): {message}")
        }
        None => message,
    }
}

/// The 1-based line of `key` in `text`, for messages.
fn line_of(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| l.trim_start().starts_with(key))
        .map(|i| i + 1)
}

/// A node-name pattern: an exact name or a regex matched at the start (`re.match`).
#[derive(Debug, Clone)]
pub struct NamePattern {
    text: String,
    regex: Result<Regex, String>,
}

impl NamePattern {
    /// Compiles a pattern; a string that is not valid regex is taken literally.
    pub fn new(text: &str) -> Self {
        NamePattern {
            text: text.to_owned(),
            regex: Regex::new(&format!("^(?:{text})")).map_err(|e| {
                // The regex crate's message spans lines with a caret diagram; its last line
                // says what is wrong.
                let text = e.to_string();
                let last = text.lines().last().unwrap_or_default().trim();
                last.strip_prefix("error: ").unwrap_or(last).to_owned()
            }),
        }
    }

    /// Why the pattern is not a valid regular expression (it is then matched literally).
    pub fn regex_error(&self) -> Option<&str> {
        self.regex.as_ref().err().map(String::as_str)
    }

    /// True when `name` is the pattern or the regex matches at its start.
    pub fn matches(&self, name: &str) -> bool {
        name == self.text || self.regex.as_ref().is_ok_and(|r| r.is_match(name))
    }
}

/// Up to three names close to `wanted`, for "did you mean" messages.
pub fn close_matches<'a>(wanted: &str, candidates: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut scored: Vec<(f64, &str)> = candidates
        .map(|c| (strsim::normalized_levenshtein(wanted, c), c))
        .filter(|(score, _)| *score > 0.5)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored
        .into_iter()
        .take(3)
        .map(|(_, c)| c.to_owned())
        .collect()
}

impl Recipe {
    /// Parses TOML, refusing unknown keys (with their line).
    pub fn from_toml(text: &str, origin: &str) -> Result<Recipe, RecipeError> {
        Self::from_toml_with_data(text, origin).map(|(recipe, _)| recipe)
    }

    /// [`Recipe::from_toml`], with the data table beside the recipe if there is one
    /// ([`DATA_TABLE`]).
    fn from_toml_with_data(
        text: &str,
        origin: &str,
    ) -> Result<(Recipe, Option<toml::Table>), RecipeError> {
        let parse_error = |e: toml::de::Error| RecipeError::Parse {
            path: origin.to_owned(),
            message: parse_message(text, &e),
        };
        let mut table: toml::Table = toml::from_str(text).map_err(parse_error)?;
        let data = table.remove(DATA_TABLE);
        let recipe: Recipe = if table.contains_key("target") || data.is_some() {
            // What the recipe leaves unsaid comes from its target.
            target::fill_from_target(&mut table);
            toml::Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| RecipeError::Parse {
                    path: origin.to_owned(),
                    message: e.message().trim().replace('\n', " "),
                })?
        } else {
            toml::from_str(text).map_err(parse_error)?
        };
        if recipe.version > RECIPE_VERSION {
            return Err(RecipeError::Parse {
                path: origin.to_owned(),
                message: format!(
                    "recipe version {} is newer than this qdq-studio understands ({RECIPE_VERSION})",
                    recipe.version
                ),
            });
        }
        recipe
            .check_settings()
            .map_err(|problems| RecipeError::Invalid {
                problems: problems
                    .into_iter()
                    .map(|(key, p)| match line_of(text, key) {
                        Some(line) => format!("{origin} line {line}: {p}"),
                        None => format!("{origin}: {p}"),
                    })
                    .collect(),
            })?;
        let data = data.and_then(|d| match d {
            toml::Value::Table(table) => Some(table),
            _ => None,
        });
        Ok((recipe, data))
    }

    /// Reads a recipe file.
    pub fn load(path: &Path) -> Result<Recipe, RecipeError> {
        Self::load_with_data(path).map(|(recipe, _)| recipe)
    }

    /// Reads a recipe file with the data table beside it, if it has one ([`DATA_TABLE`]).
    pub fn load_with_data(path: &Path) -> Result<(Recipe, Option<toml::Table>), RecipeError> {
        let text = crate::util::read_regular_text(path).map_err(|e| RecipeError::Io {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Self::from_toml_with_data(&text, &path.display().to_string())
    }

    /// Writes the recipe atomically with `data` as its data table ([`DATA_TABLE`]).
    pub fn save_with_data(&self, path: &Path, data: &toml::Table) -> Result<(), RecipeError> {
        let mut wrapper = toml::Table::new();
        wrapper.insert(DATA_TABLE.to_owned(), toml::Value::Table(data.clone()));
        // Plain data with string keys: serialising cannot fail.
        let table = toml::to_string_pretty(&wrapper).unwrap_or_default();
        write_text(path, &format!("{}\n{table}", self.to_toml()))
    }

    /// The recipe as TOML.
    pub fn to_toml(&self) -> String {
        // Serialising plain data with string keys cannot fail.
        toml::to_string_pretty(self).unwrap_or_default()
    }

    /// Writes the recipe atomically.
    pub fn save(&self, path: &Path) -> Result<(), RecipeError> {
        write_text(path, &self.to_toml())
    }

    /// Settings that contradict each other, as (key, message).
    fn check_settings(&self) -> Result<(), Vec<(&'static str, String)>> {
        let mut problems = Vec::new();
        let fp8 = QuantType::Float8e4m3fn;
        if self.smoothquant && self.mode != QuantMode::Int8 {
            problems.push((
                "smoothquant",
                "smoothquant applies to int8 activations and weights (mode = \"int8\")".to_owned(),
            ));
        }
        if let Some(alpha) = self.smoothquant_alpha
            && !(0.0..=1.0).contains(&alpha)
        {
            problems.push((
                "smoothquant_alpha",
                format!("smoothquant_alpha must lie in [0, 1], got {alpha}"),
            ));
        }
        match self.mode {
            QuantMode::Fp8 => {
                if self.activation_type != fp8 {
                    problems.push((
                        "activation_type",
                        format!(
                            "fp8 mode needs activation_type = \"float8e4m3fn\", not {:?}",
                            self.activation_type
                        ),
                    ));
                }
                if self.weight_type != fp8 {
                    problems.push((
                        "weight_type",
                        "fp8 mode needs weight_type = \"float8e4m3fn\"".to_owned(),
                    ));
                }
            }
            QuantMode::Int4 => {
                if !matches!(self.weight_type, QuantType::Int4 | QuantType::Uint4) {
                    problems.push((
                        "weight_type",
                        "int4 mode needs weight_type = \"int4\" or \"uint4\"".to_owned(),
                    ));
                }
                if self.block_size < 16 || !self.block_size.is_power_of_two() {
                    problems.push((
                        "block_size",
                        format!(
                            "block_size must be a power of two ≥ 16 (16, 32, 64, 128, 256 …), got {}",
                            self.block_size
                        ),
                    ));
                }
                if self.int4_accuracy_level > 4 {
                    problems.push((
                        "int4_accuracy_level",
                        format!(
                            "int4_accuracy_level must be 0 (unset), 1 (fp32), 2 (fp16), 3 (bf16) or 4 (int8), got {}",
                            self.int4_accuracy_level
                        ),
                    ));
                }
                if self.int4_output == Int4Output::Matmulnbits
                    && self.int4_method == Int4Method::Rtn
                {
                    problems.push((
                        "int4_output",
                        "int4_output = \"matmulnbits\" needs stored int4 weights: use int4_method rtn_dq, awq_lite or awq_clip (rtn keeps float weights behind Q/DQ)".to_owned(),
                    ));
                }
            }
            QuantMode::Int8 => {
                if self.activation_type == fp8 || self.weight_type == fp8 {
                    problems.push(("mode", "float8e4m3fn types need mode = \"fp8\"".to_owned()));
                }
                if matches!(self.activation_type, QuantType::Int4 | QuantType::Uint4) {
                    problems.push((
                        "activation_type",
                        "4-bit activations are not supported".to_owned(),
                    ));
                }
                if self.activation_type.is_signed() && !self.weight_type.is_signed() {
                    problems.push(("weight_type", "signed activations with unsigned weights are not supported by onnxruntime's kernels".to_owned()));
                }
            }
        }
        if self.mode != QuantMode::Int4 && self.int4_output == Int4Output::Matmulnbits {
            problems.push((
                "int4_output",
                "int4_output = \"matmulnbits\" is for mode = \"int4\"".to_owned(),
            ));
        }
        if let Some(problem) = self.calibration_method.problem() {
            problems.push(("calibration_method", problem));
        }
        problems.extend(node_precision::setting_problems(self));
        problems.extend(
            self.target_contradictions()
                .into_iter()
                .map(|c| (c.key, c.message)),
        );
        for (name, o) in &self.tensor_overrides {
            if let Some(problem) = o.method.as_ref().and_then(RangeMethod::problem) {
                problems.push((
                    "tensor_overrides",
                    format!("override of '{name}': {problem}"),
                ));
            }
            if let Some([lo, hi]) = o.range
                && !(lo <= hi && lo.is_finite() && hi.is_finite())
            {
                problems.push((
                    "tensor_overrides",
                    format!("override of '{name}': range [{lo}, {hi}] is not a finite lo ≤ hi"),
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    /// Checks that every node and op type the recipe names exists in `graph`; suggests close
    /// matches for the ones that do not.
    pub fn check_against(&self, graph: &Graph) -> Result<(), RecipeError> {
        let mut problems = Vec::new();
        let names: Vec<&str> = graph.nodes().iter().map(|n| n.name.as_str()).collect();
        let op_types: std::collections::BTreeSet<&str> =
            graph.nodes().iter().map(|n| n.op_type.as_str()).collect();
        let suggest = |wanted: &str, pool: &mut dyn Iterator<Item = &str>| {
            let close = close_matches(wanted, pool);
            if close.is_empty() {
                String::new()
            } else {
                format!(" (did you mean {}?)", close.join(", "))
            }
        };
        for (key, patterns) in [
            ("nodes_to_quantize", &self.nodes_to_quantize),
            ("nodes_to_exclude", &self.nodes_to_exclude),
            ("subgraph_start", &self.subgraph_start),
            ("subgraph_end", &self.subgraph_end),
        ] {
            for pattern in patterns {
                let p = NamePattern::new(pattern);
                if !names.iter().any(|n| p.matches(n)) {
                    let invalid = p.regex_error().map_or(String::new(), |e| {
                        format!(
                            " (not a valid regular expression, {e}, so matched as a literal name)"
                        )
                    });
                    problems.push(format!(
                        "{key}: no node matches '{pattern}'{invalid}{}",
                        suggest(pattern, &mut names.iter().copied())
                    ));
                }
            }
        }
        for (key, list) in [
            ("op_types_to_quantize", &self.op_types_to_quantize),
            ("op_types_to_exclude", &self.op_types_to_exclude),
        ] {
            for op in list {
                if !op_types.contains(op.as_str()) {
                    problems.push(format!(
                        "{key}: the model has no '{op}' nodes{}",
                        suggest(op, &mut op_types.iter().copied())
                    ));
                }
            }
        }
        problems.extend(node_precision::graph_problems(self, graph));
        for name in self.tensor_overrides.keys() {
            if graph.tensor(name).is_none() {
                let tensors: Vec<&str> = graph.tensors().iter().map(|t| t.name.as_str()).collect();
                problems.push(format!(
                    "tensor_overrides: the model has no tensor '{name}'{}",
                    suggest(name, &mut tensors.iter().copied())
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(RecipeError::Invalid { problems })
        }
    }

    /// The pre-processing a model gets before this recipe quantizes it: the recipe's own
    /// options, and what its mode needs (int4: Gemm weights as `[K, N]`, and Gemms as MatMul
    /// when it quantizes both, so a recipe selecting Gemm alone still finds its Gemms).
    pub fn prepared_options(&self) -> Preprocessing {
        let int4 = self.mode == QuantMode::Int4;
        let listed = |op: &str| {
            (self.op_types_to_quantize.is_empty()
                || self.op_types_to_quantize.iter().any(|t| t == op))
                && !self.op_types_to_exclude.iter().any(|t| t == op)
        };
        let eight_bit_weights = matches!(self.weight_type, QuantType::Int8 | QuantType::Uint8);
        // SmoothQuant rescales the same rows, and a MatMul input the float path also reads is
        // not its to smooth.
        let split = self.preprocessing.outlier_rows
            && self.auto_precision
            && self.mode == QuantMode::Int8
            && eight_bit_weights
            && !self.smoothquant;
        Preprocessing {
            gemm_weights_k_by_n: int4,
            gemms_as_matmul: int4 && listed("MatMul") && listed("Gemm"),
            outlier_rows_of: OutlierRowsOf {
                matmul: split && listed("MatMul"),
                gemm: split && listed("Gemm"),
            },
            ..self.preprocessing
        }
    }

    /// Switches to `mode` with the element types it needs: fp8 both sides, int4 (or uint4)
    /// weights, and back to uint8/int8 from those for int8. Types that already fit are kept.
    pub fn set_mode(&mut self, mode: QuantMode) {
        let fp8 = QuantType::Float8e4m3fn;
        let four_bit = |t: QuantType| matches!(t, QuantType::Int4 | QuantType::Uint4);
        match mode {
            QuantMode::Fp8 => {
                self.activation_type = fp8;
                self.weight_type = fp8;
            }
            QuantMode::Int4 if !four_bit(self.weight_type) => self.weight_type = QuantType::Int4,
            QuantMode::Int4 => {}
            QuantMode::Int8 => {
                if self.activation_type == fp8 || four_bit(self.activation_type) {
                    self.activation_type = QuantType::Uint8;
                }
                if self.weight_type == fp8 || four_bit(self.weight_type) {
                    self.weight_type = QuantType::Int8;
                }
            }
        }
        if mode != QuantMode::Int4 {
            self.int4_output = Int4Output::Dq;
        }
        if mode != QuantMode::Int8 {
            self.smoothquant = false;
        }
        self.mode = mode;
        // The target's settings for the new mode (int8's types and guard, say).
        self.apply_target_settings();
    }

    /// The range override for a tensor, if the recipe fixes one.
    pub fn fixed_range(&self, tensor: &str) -> Option<Range> {
        self.tensor_overrides
            .get(tensor)
            .and_then(|o| o.range)
            .map(|[lo, hi]| Range { lo, hi })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_table_travels_beside_the_recipe_and_changes_nothing_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.toml");
        let mut recipe = Recipe::default();
        recipe.nodes_to_exclude.push("head/.*".into());
        let mut data = toml::Table::new();
        data.insert(
            "calibration".into(),
            toml::Value::String("calib.npz".into()),
        );
        recipe.save_with_data(&path, &data).unwrap();
        let (loaded, read) = Recipe::load_with_data(&path).unwrap();
        assert_eq!(loaded, recipe);
        assert_eq!(read, Some(data));
        assert_eq!(Recipe::load(&path).unwrap(), recipe);
        recipe.save(&path).unwrap();
        assert_eq!(Recipe::load_with_data(&path).unwrap(), (recipe, None));
    }

    #[test]
    fn the_default_recipe_round_trips_through_toml() {
        let mut recipe = Recipe::default();
        recipe.nodes_to_exclude.push("head/.*".into());
        recipe.tensor_overrides.insert(
            "t".into(),
            TensorOverride {
                range: Some([-1.0, 2.0]),
                ..Default::default()
            },
        );
        let text = recipe.to_toml();
        assert_eq!(Recipe::from_toml(&text, "r.toml").unwrap(), recipe);
    }

    #[test]
    fn recipes_from_before_a_setting_keep_what_they_meant_then() {
        let text = Recipe::default().to_toml();
        let current = "saturation_guard_scope = \"integer_kernels_and_saturating_pairs\"";
        assert!(text.contains(current), "{text}");
        // Recipes of the scopes before per-tensor weights with overflowing pairs, or
        // equalized ones, were guarded keep theirs.
        for (name, scope) in [
            (
                "integer_kernels_and_equalized",
                GuardScope::IntegerKernelsAndEqualized,
            ),
            ("integer_kernels", GuardScope::IntegerKernels),
        ] {
            let before = text.replace(current, &format!("saturation_guard_scope = \"{name}\""));
            let recipe = Recipe::from_toml(&before, "r.toml").unwrap();
            assert_eq!(recipe.saturation_guard_scope, scope);
        }
        let older: String = text
            .lines()
            .filter(|l| !l.starts_with("saturation_guard"))
            .map(|l| format!("{l}\n"))
            .collect();
        let recipe = Recipe::from_toml(&older, "r.toml").unwrap();
        assert!(!recipe.saturation_guard);
        let guarded = older.replace(
            "auto_precision = true",
            "auto_precision = true\nsaturation_guard = true",
        );
        let recipe = Recipe::from_toml(&guarded, "r.toml").unwrap();
        assert!(recipe.saturation_guard);
        assert_eq!(recipe.saturation_guard_scope, GuardScope::TransformerLinear);
        // Recipes from before outlier rows went to float quantize their weights whole.
        assert!(text.contains("outlier_rows = true"), "{text}");
        let whole = text.replace("outlier_rows = true\n", "");
        let recipe = Recipe::from_toml(&whole, "r.toml").unwrap();
        let of = |r: &Recipe| r.prepared_options().outlier_rows_of;
        assert!(!recipe.preprocessing.outlier_rows);
        assert_eq!(of(&recipe), OutlierRowsOf::default());
        let both = OutlierRowsOf {
            matmul: true,
            gemm: true,
        };
        assert_eq!(of(&Recipe::default()), both);
        let smoothed = Recipe {
            smoothquant: true,
            ..Recipe::default()
        };
        assert_eq!(of(&smoothed), OutlierRowsOf::default());
        // Only the op types the recipe quantizes.
        let convs_and_gemms = Recipe {
            op_types_to_quantize: vec!["Conv".into(), "Gemm".into()],
            ..Recipe::default()
        };
        let gemm_only = OutlierRowsOf {
            matmul: false,
            gemm: true,
        };
        assert_eq!(of(&convs_and_gemms), gemm_only);
    }

    #[test]
    fn unknown_keys_and_contradictions_name_their_line() {
        let mut text = Recipe::default().to_toml();
        text.push_str("colour = \"blue\"\n");
        let err = Recipe::from_toml(&text, "r.toml").unwrap_err();
        assert!(err.to_string().contains("colour"), "{err}");

        let text = Recipe::default()
            .to_toml()
            .replace("mode = \"int8\"", "mode = \"fp8\"");
        let err = Recipe::from_toml(&text, "r.toml").unwrap_err().to_string();
        let line = text
            .lines()
            .position(|l| l.starts_with("activation_type"))
            .unwrap()
            + 1;
        assert!(
            err.contains(&format!("r.toml line {line}")) && err.contains("float8e4m3fn"),
            "{err}"
        );
    }

    #[test]
    fn patterns_match_like_python_re_match() {
        let p = NamePattern::new("conv.*");
        assert!(p.matches("conv1") && p.matches("conv") && !p.matches("my_conv"));
        let exact = NamePattern::new("a.b[");
        assert!(
            exact.matches("a.b["),
            "invalid regex falls back to the literal name"
        );
        assert_eq!(
            close_matches("conv_1", ["conv_2", "relu", "conv_11"].into_iter()).len(),
            2
        );
    }
}
