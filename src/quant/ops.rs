//! The op types each placement policy quantizes by default.

/// Op types onnxruntime's `quantize_static` quantizes when no list is given: the union of its
/// `QLinearOpsRegistry` and `QDQRegistry` (onnxruntime 1.31.1). Default ONNX domain only.
pub const ORT_DEFAULT_OP_TYPES: &[&str] = &[
    "ArgMax",
    "AveragePool",
    "BatchNormalization",
    "Clip",
    "Concat",
    "Conv",
    "ConvTranspose",
    "CumSum",
    "EmbedLayerNormalization",
    "Flatten",
    "Gather",
    "GatherElements",
    "Gemm",
    "GlobalAveragePool",
    "InstanceNormalization",
    "LayerNormalization",
    "LeakyRelu",
    "MatMul",
    "MaxPool",
    "Mul",
    "Add",
    "Pad",
    "Relu",
    "Reshape",
    "Resize",
    "Sigmoid",
    "Slice",
    "Softmax",
    "Split",
    "Squeeze",
    "TopK",
    "Transpose",
    "Unsqueeze",
    "Where",
];

/// True when onnxruntime quantizes this op type by default. `EmbedLayerNormalization` lives
/// in the `com.microsoft` domain; every other entry is a default-domain op.
pub fn is_quantizable_by_default(domain: &str, op_type: &str) -> bool {
    let default_domain = domain.is_empty() || domain == "ai.onnx";
    let contrib = domain == "com.microsoft" && op_type == "EmbedLayerNormalization";
    (default_domain || contrib) && ORT_DEFAULT_OP_TYPES.contains(&op_type)
}

/// The Q/DQ structure of `model` (indexed as `graph`) with its quantized nodes counted as this
/// quantizer counts them: an op it has a QDQ form for, reading or writing a quantized tensor.
pub fn qdq_structure(
    model: &crate::model::Model,
    graph: &crate::model::Graph,
) -> crate::model::qdq::QdqStructure {
    crate::model::qdq::QdqStructure::read(model, graph, is_quantizable_by_default)
}
