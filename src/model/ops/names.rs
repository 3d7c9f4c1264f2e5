//! The op types qdq-studio names, one constant each: code that matches an op type, and the
//! op table's rows, name it through these (the spelling lives here once).

/// `Abs`.
pub const ABS: &str = "Abs";
/// `Add`.
pub const ADD: &str = "Add";
/// `And`.
pub const AND: &str = "And";
/// `ArgMax`.
pub const ARG_MAX: &str = "ArgMax";
/// `ArgMin`.
pub const ARG_MIN: &str = "ArgMin";
/// `AveragePool`.
pub const AVERAGE_POOL: &str = "AveragePool";
/// `BatchNormalization`.
pub const BATCH_NORMALIZATION: &str = "BatchNormalization";
/// `Cast`.
pub const CAST: &str = "Cast";
/// `Ceil`.
pub const CEIL: &str = "Ceil";
/// `Clip`.
pub const CLIP: &str = "Clip";
/// `Concat`.
pub const CONCAT: &str = "Concat";
/// `Constant`.
pub const CONSTANT: &str = "Constant";
/// `ConstantOfShape`.
pub const CONSTANT_OF_SHAPE: &str = "ConstantOfShape";
/// `Conv`.
pub const CONV: &str = "Conv";
/// `ConvInteger`.
pub const CONV_INTEGER: &str = "ConvInteger";
/// `ConvTranspose`.
pub const CONV_TRANSPOSE: &str = "ConvTranspose";
/// `CumSum`.
pub const CUM_SUM: &str = "CumSum";
/// `DequantizeLinear`.
pub const DEQUANTIZE_LINEAR: &str = "DequantizeLinear";
/// `Div`.
pub const DIV: &str = "Div";
/// `Dropout`.
pub const DROPOUT: &str = "Dropout";
/// `DynamicQuantizeLinear`.
pub const DYNAMIC_QUANTIZE_LINEAR: &str = "DynamicQuantizeLinear";
/// `DynamicQuantizeMatMul`.
pub const DYNAMIC_QUANTIZE_MAT_MUL: &str = "DynamicQuantizeMatMul";
/// `Elu`.
pub const ELU: &str = "Elu";
/// `EmbedLayerNormalization`.
pub const EMBED_LAYER_NORMALIZATION: &str = "EmbedLayerNormalization";
/// `Equal`.
pub const EQUAL: &str = "Equal";
/// `Erf`.
pub const ERF: &str = "Erf";
/// `Exp`.
pub const EXP: &str = "Exp";
/// `Expand`.
pub const EXPAND: &str = "Expand";
/// `EyeLike`.
pub const EYE_LIKE: &str = "EyeLike";
/// `Flatten`.
pub const FLATTEN: &str = "Flatten";
/// `Floor`.
pub const FLOOR: &str = "Floor";
/// `FusedConv`.
pub const FUSED_CONV: &str = "FusedConv";
/// `FusedGemm`.
pub const FUSED_GEMM: &str = "FusedGemm";
/// `FusedMatMul`.
pub const FUSED_MAT_MUL: &str = "FusedMatMul";
/// `GRU`.
pub const GRU: &str = "GRU";
/// `Gather`.
pub const GATHER: &str = "Gather";
/// `GatherElements`.
pub const GATHER_ELEMENTS: &str = "GatherElements";
/// `Gemm`.
pub const GEMM: &str = "Gemm";
/// `GlobalAveragePool`.
pub const GLOBAL_AVERAGE_POOL: &str = "GlobalAveragePool";
/// `GlobalMaxPool`.
pub const GLOBAL_MAX_POOL: &str = "GlobalMaxPool";
/// `Greater`.
pub const GREATER: &str = "Greater";
/// `GreaterOrEqual`.
pub const GREATER_OR_EQUAL: &str = "GreaterOrEqual";
/// `GridSample`.
pub const GRID_SAMPLE: &str = "GridSample";
/// `GroupNormalization`.
pub const GROUP_NORMALIZATION: &str = "GroupNormalization";
/// `GroupQueryAttention`.
pub const GROUP_QUERY_ATTENTION: &str = "GroupQueryAttention";
/// `HardSigmoid`.
pub const HARD_SIGMOID: &str = "HardSigmoid";
/// `HardSwish`.
pub const HARD_SWISH: &str = "HardSwish";
/// `Hardmax`.
pub const HARDMAX: &str = "Hardmax";
/// `Identity`.
pub const IDENTITY: &str = "Identity";
/// `If`.
pub const IF: &str = "If";
/// `InstanceNormalization`.
pub const INSTANCE_NORMALIZATION: &str = "InstanceNormalization";
/// `IsInf`.
pub const IS_INF: &str = "IsInf";
/// `IsNaN`.
pub const IS_NAN: &str = "IsNaN";
/// `LRN`.
pub const LRN: &str = "LRN";
/// `LSTM`.
pub const LSTM: &str = "LSTM";
/// `LayerNormalization`.
pub const LAYER_NORMALIZATION: &str = "LayerNormalization";
/// `LeakyRelu`.
pub const LEAKY_RELU: &str = "LeakyRelu";
/// `Less`.
pub const LESS: &str = "Less";
/// `LessOrEqual`.
pub const LESS_OR_EQUAL: &str = "LessOrEqual";
/// `Log`.
pub const LOG: &str = "Log";
/// `LogSoftmax`.
pub const LOG_SOFTMAX: &str = "LogSoftmax";
/// `Loop`.
pub const LOOP: &str = "Loop";
/// `LpNormalization`.
pub const LP_NORMALIZATION: &str = "LpNormalization";
/// `MatMul`.
pub const MAT_MUL: &str = "MatMul";
/// `MatMulInteger`.
pub const MAT_MUL_INTEGER: &str = "MatMulInteger";
/// `MatMulIntegerToFloat`.
pub const MAT_MUL_INTEGER_TO_FLOAT: &str = "MatMulIntegerToFloat";
/// `MatMulNBits`.
pub const MAT_MUL_N_BITS: &str = "MatMulNBits";
/// `Max`.
pub const MAX: &str = "Max";
/// `MaxPool`.
pub const MAX_POOL: &str = "MaxPool";
/// `Min`.
pub const MIN: &str = "Min";
/// `Mul`.
pub const MUL: &str = "Mul";
/// `MultiHeadAttention`.
pub const MULTI_HEAD_ATTENTION: &str = "MultiHeadAttention";
/// `Neg`.
pub const NEG: &str = "Neg";
/// `NhwcFusedConv`.
pub const NHWC_FUSED_CONV: &str = "NhwcFusedConv";
/// `NhwcQLinearConv`.
pub const NHWC_Q_LINEAR_CONV: &str = "NhwcQLinearConv";
/// `NonZero`.
pub const NON_ZERO: &str = "NonZero";
/// `Not`.
pub const NOT: &str = "Not";
/// `OneHot`.
pub const ONE_HOT: &str = "OneHot";
/// `Or`.
pub const OR: &str = "Or";
/// `PRelu`.
pub const P_RELU: &str = "PRelu";
/// `Pad`.
pub const PAD: &str = "Pad";
/// `Pow`.
pub const POW: &str = "Pow";
/// `QAttention`.
pub const Q_ATTENTION: &str = "QAttention";
/// `QGemm`.
pub const Q_GEMM: &str = "QGemm";
/// `QLinearConv`.
pub const Q_LINEAR_CONV: &str = "QLinearConv";
/// `QLinearMatMul`.
pub const Q_LINEAR_MAT_MUL: &str = "QLinearMatMul";
/// `QOrderedMatMul`.
pub const Q_ORDERED_MAT_MUL: &str = "QOrderedMatMul";
/// `QEmbedLayerNormalization`.
pub const Q_EMBED_LAYER_NORMALIZATION: &str = "QEmbedLayerNormalization";
/// `QuantizeLinear`.
pub const QUANTIZE_LINEAR: &str = "QuantizeLinear";
/// `RMSNormalization`.
pub const RMS_NORMALIZATION: &str = "RMSNormalization";
/// `RNN`.
pub const RNN: &str = "RNN";
/// `Reciprocal`.
pub const RECIPROCAL: &str = "Reciprocal";
/// `ReduceL1`.
pub const REDUCE_L1: &str = "ReduceL1";
/// `ReduceL2`.
pub const REDUCE_L2: &str = "ReduceL2";
/// `ReduceLogSum`.
pub const REDUCE_LOG_SUM: &str = "ReduceLogSum";
/// `ReduceLogSumExp`.
pub const REDUCE_LOG_SUM_EXP: &str = "ReduceLogSumExp";
/// `ReduceMax`.
pub const REDUCE_MAX: &str = "ReduceMax";
/// `ReduceMean`.
pub const REDUCE_MEAN: &str = "ReduceMean";
/// `ReduceMin`.
pub const REDUCE_MIN: &str = "ReduceMin";
/// `ReduceProd`.
pub const REDUCE_PROD: &str = "ReduceProd";
/// `ReduceSum`.
pub const REDUCE_SUM: &str = "ReduceSum";
/// `ReduceSumSquare`.
pub const REDUCE_SUM_SQUARE: &str = "ReduceSumSquare";
/// `Relu`.
pub const RELU: &str = "Relu";
/// `Reshape`.
pub const RESHAPE: &str = "Reshape";
/// `Resize`.
pub const RESIZE: &str = "Resize";
/// `Scan`.
pub const SCAN: &str = "Scan";
/// `Selu`.
pub const SELU: &str = "Selu";
/// `Shape`.
pub const SHAPE: &str = "Shape";
/// `Sigmoid`.
pub const SIGMOID: &str = "Sigmoid";
/// `SimplifiedLayerNormalization`.
pub const SIMPLIFIED_LAYER_NORMALIZATION: &str = "SimplifiedLayerNormalization";
/// `Size`.
pub const SIZE: &str = "Size";
/// `SkipLayerNormalization`.
pub const SKIP_LAYER_NORMALIZATION: &str = "SkipLayerNormalization";
/// `SkipSimplifiedLayerNormalization`.
pub const SKIP_SIMPLIFIED_LAYER_NORMALIZATION: &str = "SkipSimplifiedLayerNormalization";
/// `Slice`.
pub const SLICE: &str = "Slice";
/// `Softmax`.
pub const SOFTMAX: &str = "Softmax";
/// `Softplus`.
pub const SOFTPLUS: &str = "Softplus";
/// `Softsign`.
pub const SOFTSIGN: &str = "Softsign";
/// `Split`.
pub const SPLIT: &str = "Split";
/// `Sqrt`.
pub const SQRT: &str = "Sqrt";
/// `Squeeze`.
pub const SQUEEZE: &str = "Squeeze";
/// `Sub`.
pub const SUB: &str = "Sub";
/// `Sum`.
pub const SUM: &str = "Sum";
/// `Tanh`.
pub const TANH: &str = "Tanh";
/// `Tile`.
pub const TILE: &str = "Tile";
/// `TopK`.
pub const TOP_K: &str = "TopK";
/// `Transpose`.
pub const TRANSPOSE: &str = "Transpose";
/// `Unsqueeze`.
pub const UNSQUEEZE: &str = "Unsqueeze";
/// `Upsample`.
pub const UPSAMPLE: &str = "Upsample";
/// `Where`.
pub const WHERE: &str = "Where";
/// `Xor`.
pub const XOR: &str = "Xor";
