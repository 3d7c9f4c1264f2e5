//! Which op types onnxruntime quantizes by default (the lists per placement are in the op
//! table, [`crate::model::ops`]), and the Q/DQ structure of a model counted that way.

use crate::model::ops;
use crate::model::ops::ORT_DEFAULT_OP_TYPES;

/// True when onnxruntime quantizes this op type by default. `EmbedLayerNormalization` lives
/// in the `com.microsoft` domain; every other entry is a default-domain op.
pub fn is_quantizable_by_default(domain: &str, op_type: &str) -> bool {
    let default_domain = crate::model::graph::is_default_domain(domain);
    let contrib = domain == "com.microsoft" && op_type == ops::EMBED_LAYER_NORMALIZATION;
    (default_domain || contrib) && ORT_DEFAULT_OP_TYPES.contains(&op_type)
}

/// The Q/DQ structure of `model` (indexed as `graph`) with its quantized nodes counted as this
/// quantizer counts them: an op it has a QDQ form for, reading or writing a quantized tensor.
/// A model this tool placed for TensorRT (its stamped recipe says so) counts its residual
/// Adds, quantized on one input, as TensorRT runs them: in the convolution's epilogue.
pub fn qdq_structure(
    model: &crate::model::Model,
    graph: &crate::model::Graph,
) -> crate::model::qdq::QdqStructure {
    let tensorrt = crate::quant::stamped_recipe(model)
        .is_some_and(|r| r.placement == crate::recipe::Placement::Tensorrt);
    crate::model::qdq::QdqStructure::read_for(model, graph, is_quantizable_by_default, tensorrt)
}
