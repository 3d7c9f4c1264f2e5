//! The op table: what qdq-studio knows of each op type it treats specially, in one place.
//! Per op type its family, its weight and bias inputs and the axis of the weight's output
//! channels, the input whose scale a shared-scale op's outputs take, and the kernels ONNX
//! Runtime runs it as (float fusions and integer forms). The quantizer's planner, the
//! comparison, the searches, the studio and the CLI look op types up here instead of matching
//! their names; code that builds new nodes names the ops it builds.
//!
//! Op types of the default ONNX domain unless said otherwise; an op type not in the table has
//! no special treatment ([`Family::Other`]).

mod names;

pub use names::*;

/// What an op does to values, as quantization sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Multiplies an activation by a weight (Conv, ConvTranspose, Gemm, MatMul): the ops whose
    /// integer kernels are what quantizing buys.
    Compute,
    /// Moves or selects values without changing them (Reshape, Transpose, pooling by max, …):
    /// its outputs share its data input's scale and zero point.
    SharedScale,
    /// An activation with a floor at zero (Relu, Clip), which a range starting at zero makes
    /// exact.
    FloorActivation,
    /// A normalization whose scale input is quantized as a weight and its bias as int32.
    Normalization,
    /// A sum of its inputs (Add, Sub): the residual stream runs through them.
    Sum,
    /// QuantizeLinear or DequantizeLinear.
    Quantizer,
    /// An integer or packed kernel a quantized model runs (ConvInteger, QLinearConv,
    /// MatMulNBits, …).
    Integer,
    /// Anything else.
    Other,
}

/// Where a weighted op's weight keeps its output channels (per-channel scales run along
/// them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelAxis {
    /// Always this axis (Conv 0, ConvTranspose 1, MatMul's `[K, N]` 1).
    Fixed(usize),
    /// Gemm: axis 0 with `transB` (`[N, K]`), else 1 (`[K, N]`).
    GemmTransB,
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpInfo {
    /// The op type.
    pub op_type: &'static str,
    /// What it does, as quantization sees it.
    pub family: Family,
    /// Its weight input, for a [`Family::Compute`] or [`Family::Normalization`] op.
    pub weight: Option<usize>,
    /// Its bias input, quantized to int32 with the input's and weight's scales.
    pub bias: Option<usize>,
    /// Where the weight's output channels lie.
    pub channel_axis: Option<ChannelAxis>,
    /// A convolution: its weight slides over the input's spatial dimensions (Conv,
    /// ConvTranspose), where a dense op's multiplies whole rows (MatMul, Gemm).
    pub convolution: bool,
    /// The weight may be batched (rank above 2, a MatMul's): such a weight goes per tensor,
    /// since ONNX Runtime's integer kernel takes per-column parameters only for a 2-d one.
    pub batched_weight: bool,
    /// For a [`Family::SharedScale`] op: the data input whose scale its outputs take.
    pub data_input: usize,
    /// The kernels ONNX Runtime runs this op as once fused: the float fusions of its graph
    /// optimizer, then the integer forms a Q/DQ group around it becomes on the CPU provider.
    pub kernels: Kernels,
}

/// The kernels an op runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kernels {
    /// Float kernels it may be fused into (`FusedConv`).
    pub float: &'static [&'static str],
    /// Integer kernels a Q/DQ group around it becomes (`QLinearConv`, `ConvInteger`).
    pub integer: &'static [&'static str],
}

const NO_KERNELS: Kernels = Kernels {
    float: &[],
    integer: &[],
};

const fn row(op_type: &'static str, family: Family) -> OpInfo {
    OpInfo {
        op_type,
        family,
        weight: None,
        bias: None,
        channel_axis: None,
        convolution: false,
        batched_weight: false,
        data_input: 0,
        kernels: NO_KERNELS,
    }
}

const fn compute(
    op_type: &'static str,
    bias: Option<usize>,
    channel_axis: ChannelAxis,
    kernels: Kernels,
) -> OpInfo {
    OpInfo {
        weight: Some(1),
        bias,
        channel_axis: Some(channel_axis),
        kernels,
        ..row(op_type, Family::Compute)
    }
}

const fn normalization(op_type: &'static str) -> OpInfo {
    OpInfo {
        weight: Some(1),
        bias: Some(2),
        ..row(op_type, Family::Normalization)
    }
}

/// The table. Its order is the order lists of a family come in.
pub const OPS: &[OpInfo] = &[
    OpInfo {
        convolution: true,
        ..compute(
            CONV,
            Some(2),
            ChannelAxis::Fixed(0),
            Kernels {
                float: &[FUSED_CONV, NHWC_FUSED_CONV],
                integer: &[Q_LINEAR_CONV, NHWC_Q_LINEAR_CONV, CONV_INTEGER],
            },
        )
    },
    OpInfo {
        convolution: true,
        ..compute(CONV_TRANSPOSE, Some(2), ChannelAxis::Fixed(1), NO_KERNELS)
    },
    compute(
        GEMM,
        Some(2),
        ChannelAxis::GemmTransB,
        Kernels {
            float: &[FUSED_GEMM],
            integer: &[Q_GEMM],
        },
    ),
    OpInfo {
        batched_weight: true,
        ..compute(
            MAT_MUL,
            None,
            ChannelAxis::Fixed(1),
            Kernels {
                float: &[FUSED_MAT_MUL],
                integer: &[
                    Q_LINEAR_MAT_MUL,
                    MAT_MUL_INTEGER,
                    MAT_MUL_INTEGER_TO_FLOAT,
                    DYNAMIC_QUANTIZE_MAT_MUL,
                ],
            },
        )
    },
    row(RESHAPE, Family::SharedScale),
    row(TRANSPOSE, Family::SharedScale),
    row(SQUEEZE, Family::SharedScale),
    row(UNSQUEEZE, Family::SharedScale),
    row(FLATTEN, Family::SharedScale),
    row(SLICE, Family::SharedScale),
    row(MAX_POOL, Family::SharedScale),
    row(RESIZE, Family::SharedScale),
    row(PAD, Family::SharedScale),
    row(SPLIT, Family::SharedScale),
    row(GATHER, Family::SharedScale),
    row(GATHER_ELEMENTS, Family::SharedScale),
    row(TOP_K, Family::SharedScale),
    row(AVERAGE_POOL, Family::SharedScale),
    OpInfo {
        data_input: 1,
        ..row(WHERE, Family::SharedScale)
    },
    row(RELU, Family::FloorActivation),
    row(CLIP, Family::FloorActivation),
    normalization(BATCH_NORMALIZATION),
    normalization(LAYER_NORMALIZATION),
    normalization(INSTANCE_NORMALIZATION),
    row(ADD, Family::Sum),
    row(SUB, Family::Sum),
    row(QUANTIZE_LINEAR, Family::Quantizer),
    row(DEQUANTIZE_LINEAR, Family::Quantizer),
    row(CONV_INTEGER, Family::Integer),
    row(MAT_MUL_INTEGER, Family::Integer),
    row(MAT_MUL_INTEGER_TO_FLOAT, Family::Integer),
    row(DYNAMIC_QUANTIZE_MAT_MUL, Family::Integer),
    row(Q_LINEAR_CONV, Family::Integer),
    row(NHWC_Q_LINEAR_CONV, Family::Integer),
    row(Q_LINEAR_MAT_MUL, Family::Integer),
    row(Q_GEMM, Family::Integer),
    row(MAT_MUL_N_BITS, Family::Integer),
    row(Q_ATTENTION, Family::Integer),
    row(Q_ORDERED_MAT_MUL, Family::Integer),
    row(Q_EMBED_LAYER_NORMALIZATION, Family::Integer),
];

/// Op types onnxruntime's `quantize_static` quantizes when no list is given: the union of its
/// `QLinearOpsRegistry` and `QDQRegistry` (onnxruntime 1.31.1). Default ONNX domain only.
pub const ORT_DEFAULT_OP_TYPES: &[&str] = &[
    ARG_MAX,
    AVERAGE_POOL,
    BATCH_NORMALIZATION,
    CLIP,
    CONCAT,
    CONV,
    CONV_TRANSPOSE,
    CUM_SUM,
    EMBED_LAYER_NORMALIZATION,
    FLATTEN,
    GATHER,
    GATHER_ELEMENTS,
    GEMM,
    GLOBAL_AVERAGE_POOL,
    INSTANCE_NORMALIZATION,
    LAYER_NORMALIZATION,
    LEAKY_RELU,
    MAT_MUL,
    MAX_POOL,
    MUL,
    ADD,
    PAD,
    RELU,
    RESHAPE,
    RESIZE,
    SIGMOID,
    SLICE,
    SOFTMAX,
    SPLIT,
    SQUEEZE,
    TOP_K,
    TRANSPOSE,
    UNSQUEEZE,
    WHERE,
];

/// TensorRT explicit quantization: compute ops whose inputs get Q/DQ (ModelOpt's default
/// int8 set).
pub const TENSORRT_OP_TYPES: &[&str] = &[
    CONV,
    CONV_TRANSPOSE,
    GEMM,
    MAT_MUL,
    ADD,
    AVERAGE_POOL,
    GLOBAL_AVERAGE_POOL,
    MAX_POOL,
    BATCH_NORMALIZATION,
    MUL,
    CLIP,
];

/// Op types quantized weight-only in int4 mode.
pub const INT4_OP_TYPES: &[&str] = &[MAT_MUL, GEMM];

/// Op types quantized in fp8 mode.
pub const FP8_OP_TYPES: &[&str] = &[CONV, GEMM, MAT_MUL];

/// The row of `op_type`, if it has one.
pub fn info(op_type: &str) -> Option<&'static OpInfo> {
    OPS.iter().find(|o| o.op_type == op_type)
}

/// The family of `op_type` ([`Family::Other`] when not in the table).
pub fn family(op_type: &str) -> Family {
    info(op_type).map_or(Family::Other, |o| o.family)
}

/// True for a kernel that computes on integers (a fused Q/DQ group, from ONNX Runtime's
/// profile): every `QLinear*` op and the table's [`Family::Integer`] rows.
pub fn is_integer_kernel(op_type: &str) -> bool {
    op_type.starts_with("QLinear") || family(op_type) == Family::Integer
}

/// True for QuantizeLinear and DequantizeLinear.
pub fn is_quantizer(op_type: &str) -> bool {
    family(op_type) == Family::Quantizer
}

/// True for the sums the residual stream runs through (Add, Sub).
pub fn is_sum(op_type: &str) -> bool {
    family(op_type) == Family::Sum
}

/// True for the compute ops (Conv, ConvTranspose, Gemm, MatMul).
pub fn is_compute(op_type: &str) -> bool {
    family(op_type) == Family::Compute
}

/// The op types of `family`, in the table's order.
pub fn of_family(family: Family) -> impl Iterator<Item = &'static str> {
    OPS.iter()
        .filter(move |o| o.family == family)
        .map(|o| o.op_type)
}

/// The output-channel axis of a compute op's weight (per-channel scales run along it), given
/// a Gemm's `transB` (its weight held `[N, K]`); 1 (a MatMul's `[K, N]` columns) for an op
/// without one in the table.
pub fn channel_axis(op_type: &str, trans_b: bool) -> usize {
    match info(op_type).and_then(|o| o.channel_axis) {
        Some(ChannelAxis::Fixed(axis)) => axis,
        Some(ChannelAxis::GemmTransB) => usize::from(!trans_b),
        None => 1,
    }
}

/// True when `kernel` (an op ONNX Runtime ran, from its profile) is a compute op's kernel:
/// the op itself, a float fusion of it, or an integer form.
pub fn is_compute_kernel(kernel: &str) -> bool {
    OPS.iter().filter(|o| o.family == Family::Compute).any(|o| {
        o.op_type == kernel
            || o.kernels.float.contains(&kernel)
            || o.kernels.integer.contains(&kernel)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_type_has_one_row() {
        for (i, op) in OPS.iter().enumerate() {
            assert!(
                OPS[..i].iter().all(|o| o.op_type != op.op_type),
                "{} twice",
                op.op_type
            );
        }
    }

    #[test]
    fn compute_ops_have_a_weight_and_an_axis_and_the_others_none() {
        for op in OPS {
            let compute = op.family == Family::Compute;
            assert_eq!(op.channel_axis.is_some(), compute, "{}", op.op_type);
            if compute {
                assert_eq!(op.weight, Some(1), "{}", op.op_type);
            }
        }
        let compute: Vec<&str> = of_family(Family::Compute).collect();
        assert_eq!(compute, ["Conv", "ConvTranspose", "Gemm", "MatMul"]);
        assert!(is_compute_kernel("QLinearConv") && is_compute_kernel("FusedGemm"));
        assert!(!is_compute_kernel("Relu"));
        assert!(is_integer_kernel("QGemm") && is_integer_kernel("QLinearAdd"));
        assert!(!is_integer_kernel("Conv"));
    }
}
