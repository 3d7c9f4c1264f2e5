//! Element types of the tensors a file does not describe, inferred from the ops that produce
//! them. Most exported models carry no `value_info`, so without this whether an intermediate
//! tensor is float (and so quantizable) would be known only after a calibration run.
//!
//! Written by hand rather than calling ONNX's shape inference (Python) or running ONNX
//! Runtime: only the element type is needed, and it follows from a short table of op rules.
//! A tensor no rule covers (the outputs of If/Loop/Scan, unknown custom ops without inputs)
//! stays unknown.

use std::collections::HashMap;

use super::proto::NodeProto;
use super::proto::attribute_proto::AttributeType;
use super::{DataType, Graph, Model};
use crate::model::ops;

/// The ONNX codes used below.
const FLOAT: i32 = 1;
const INT32: i32 = 6;
const INT64: i32 = 7;
const BOOL: i32 = 9;
const UINT8: i32 = 2;

/// Ops whose every output is an int64 index or count.
const INT64_OPS: &[&str] = &[
    ops::SHAPE,
    ops::SIZE,
    ops::NON_ZERO,
    ops::ARG_MAX,
    ops::ARG_MIN,
];
/// Ops whose output is a boolean mask.
const BOOL_OPS: &[&str] = &[
    ops::EQUAL,
    ops::LESS,
    ops::GREATER,
    ops::LESS_OR_EQUAL,
    ops::GREATER_OR_EQUAL,
    ops::NOT,
    ops::AND,
    ops::OR,
    ops::XOR,
    ops::IS_NAN,
    ops::IS_INF,
];
/// Ops whose second and later outputs are int64 indices (TopK's, MaxPool's, Unique's).
const INDEX_OUTPUT_OPS: &[&str] = &[ops::TOP_K, ops::MAX_POOL, "Unique"];
/// Ops whose output takes the type of input 1 (Where's x, CastLike's target).
const SECOND_INPUT_OPS: &[&str] = &[ops::WHERE, "CastLike"];
/// Integer-only compute ops (int32 accumulators).
const INT32_OPS: &[&str] = &[ops::MAT_MUL_INTEGER, ops::CONV_INTEGER];
/// Ops with no inputs whose type is the `dtype` attribute (float by default).
const DTYPE_OPS: &[&str] = &[
    "RandomNormal",
    "RandomUniform",
    ops::EYE_LIKE,
    "RandomNormalLike",
    "RandomUniformLike",
];

/// The element type code of every tensor of `graph` (indexing `model`) that is declared or
/// can be inferred.
pub fn elem_types(model: &Model, graph: &Graph) -> HashMap<String, i32> {
    let mut types: HashMap<String, i32> = graph
        .tensors()
        .iter()
        .filter_map(|t| t.elem_type.map(|e| (t.name.clone(), e)))
        .collect();
    let protos = &model.graph().node;
    for &id in graph.topological_order() {
        let Some(proto) = protos.get(id.0) else {
            continue;
        };
        for (k, output) in proto.output.iter().enumerate() {
            if output.is_empty() || types.contains_key(output) {
                continue;
            }
            if let Some(code) = output_type(proto, k, &types) {
                types.insert(output.clone(), code);
            }
        }
    }
    types
}

fn int_attribute(node: &NodeProto, name: &str) -> Option<i64> {
    node.attribute
        .iter()
        .find(|a| a.name() == name && a.r#type() == AttributeType::Int)
        .map(|a| a.i())
}

fn input_type(node: &NodeProto, i: usize, types: &HashMap<String, i32>) -> Option<i32> {
    node.input
        .get(i)
        .filter(|n| !n.is_empty())
        .and_then(|n| types.get(n))
        .copied()
}

/// A Constant's (or ConstantOfShape's) value type.
fn constant_type(node: &NodeProto) -> Option<i32> {
    node.attribute.iter().find_map(|a| match a.name() {
        "value" => a.t.as_ref().map(|t| t.data_type()),
        "value_float" | "value_floats" => Some(FLOAT),
        "value_int" | "value_ints" => Some(INT64),
        _ => None,
    })
}

/// The type of output `k` of `node`, from its op's rule.
fn output_type(node: &NodeProto, k: usize, types: &HashMap<String, i32>) -> Option<i32> {
    let op = node.op_type();
    let first = || (0..node.input.len()).find_map(|i| input_type(node, i, types));
    match op {
        ops::CONSTANT => constant_type(node),
        ops::CONSTANT_OF_SHAPE => constant_type(node).or(Some(FLOAT)),
        ops::CAST => int_attribute(node, "to").map(|t| t as i32),
        ops::QUANTIZE_LINEAR => int_attribute(node, "output_dtype")
            .map(|t| t as i32)
            .filter(|&t| t != 0)
            .or_else(|| input_type(node, 2, types))
            .or(Some(UINT8)),
        ops::DEQUANTIZE_LINEAR => input_type(node, 1, types),
        ops::DYNAMIC_QUANTIZE_LINEAR => Some(if k == 1 { FLOAT } else { UINT8 }),
        ops::ONE_HOT => input_type(node, 2, types),
        "Multinomial" => int_attribute(node, "dtype")
            .map(|t| t as i32)
            .or(Some(INT32)),
        ops::IF | ops::LOOP | ops::SCAN => None,
        _ if INT64_OPS.contains(&op) => Some(INT64),
        _ if BOOL_OPS.contains(&op) => Some(BOOL),
        _ if INT32_OPS.contains(&op) => Some(INT32),
        _ if INDEX_OUTPUT_OPS.contains(&op) && k > 0 => Some(INT64),
        _ if SECOND_INPUT_OPS.contains(&op) => input_type(node, 1, types),
        _ if DTYPE_OPS.contains(&op) => int_attribute(node, "dtype")
            .map(|t| t as i32)
            .or_else(first)
            .or(Some(FLOAT)),
        _ => first(),
    }
}

/// True when an ONNX element type code is one Q/DQ can quantize ([`DataType::is_quantizable`]).
pub fn is_quantizable_code(code: i32) -> bool {
    DataType::from_onnx(code).is_ok_and(DataType::is_quantizable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelBuilder;

    #[test]
    fn untyped_tensors_take_their_producers_types() {
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[1, 4]);
        b.node("Relu", &["x"], &["r"]);
        b.node("Shape", &["r"], &["s"]);
        b.node("Reshape", &["r", "s"], &["y"]);
        b.node("Greater", &["y", "r"], &["mask"]);
        b.node("Cast", &["mask"], &["m16"]).attr_int("to", 10);
        b.node("TopK", &["y", "s"], &["values", "indices"]);
        b.output("values", DataType::Float32, &[1, 4]);
        let model = b.build();
        let graph = Graph::build(&model);
        let types = elem_types(&model, &graph);
        assert_eq!(types["r"], FLOAT);
        assert_eq!(types["s"], INT64);
        assert_eq!(types["y"], FLOAT);
        assert_eq!(types["mask"], BOOL);
        assert_eq!(types["m16"], 10);
        assert_eq!(types["values"], FLOAT);
        assert_eq!(types["indices"], INT64);
    }
}
