//! The line of key facts a node's box shows under its op type, as Netron does: a weight's
//! shape, strides and groups, a pooling window, an axis, a permutation, a target type, a
//! Reshape's target shape. Read from the file once when the model opens.

use crate::model::ops;
use crate::model::proto::NodeProto;
use crate::model::qdq::QdqStructure;
use crate::model::{Dim, Graph, Model, Node, attributes};

/// Longest detail line drawn; longer ones are elided (the inspector has them whole).
pub const MAX_DETAIL_CHARS: usize = 26;

/// Each node's detail line (by node id), `None` where there is nothing worth a line.
pub fn node_details(model: &Model, graph: &Graph, qdq: &QdqStructure) -> Vec<Option<String>> {
    let protos = &model.graph().node;
    graph
        .nodes()
        .iter()
        .map(|node| {
            let proto = protos.get(node.id.0)?;
            detail(model, graph, qdq, node, proto)
        })
        .collect()
}

/// `a×b×c`.
fn dims_text(dims: &[i64]) -> String {
    joined(dims, "×")
}

/// `a,b,c`.
fn list(values: &[i64]) -> String {
    joined(values, ",")
}

fn joined(values: &[i64], separator: &str) -> String {
    values
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(separator)
}

/// The shape of the constant `node` reads at `position` (through a folded DequantizeLinear).
fn constant_shape(
    graph: &Graph,
    qdq: &QdqStructure,
    node: &Node,
    position: usize,
) -> Option<String> {
    let tensor = qdq.source_of(node.inputs.get(position)?);
    let info = graph.tensor(tensor)?;
    if !info.kind.is_constant() {
        return None;
    }
    let dims: Option<Vec<i64>> = info
        .shape
        .as_ref()?
        .iter()
        .map(|d| match d {
            Dim::Fixed(v) => Some(*v),
            _ => None,
        })
        .collect();
    Some(dims_text(&dims?))
}

/// Strides, dilations and groups that differ from the default: `/2 d2 g32`.
fn window_facts(proto: &NodeProto) -> Vec<String> {
    let mut facts = Vec::new();
    let not_ones = |name: &str| attributes::ints(proto, name).filter(|v| v.iter().any(|&x| x != 1));
    if let Some(strides) = not_ones("strides") {
        facts.push(format!("/{}", dims_text(strides)));
    }
    if let Some(dilations) = not_ones("dilations") {
        facts.push(format!("d{}", dims_text(dilations)));
    }
    if let Some(group) = attributes::int(proto, "group").filter(|&g| g > 1) {
        facts.push(format!("g{group}"));
    }
    facts
}

fn detail(
    model: &Model,
    graph: &Graph,
    qdq: &QdqStructure,
    node: &Node,
    proto: &NodeProto,
) -> Option<String> {
    let axis = || attributes::int(proto, "axis").map(|a| format!("axis {a}"));
    let text = match node.op_type.as_str() {
        ops::CONV | ops::CONV_TRANSPOSE | ops::CONV_INTEGER | ops::Q_LINEAR_CONV => {
            let weight = if node.op_type == ops::Q_LINEAR_CONV {
                3
            } else {
                1
            };
            let mut facts: Vec<String> = constant_shape(graph, qdq, node, weight)
                .into_iter()
                .collect();
            facts.extend(window_facts(proto));
            (!facts.is_empty()).then(|| facts.join(" "))
        }
        ops::MAT_MUL | ops::GEMM | ops::MAT_MUL_INTEGER | ops::MAT_MUL_N_BITS => {
            (0..node.inputs.len())
                .find_map(|i| constant_shape(graph, qdq, node, i))
                .or_else(|| {
                    let k = attributes::int(proto, "K")?;
                    let n = attributes::int(proto, "N")?;
                    Some(format!("{k}×{n}"))
                })
        }
        ops::MAX_POOL | ops::AVERAGE_POOL | "LpPool" => {
            let mut facts: Vec<String> = attributes::ints(proto, "kernel_shape")
                .map(dims_text)
                .into_iter()
                .collect();
            facts.extend(window_facts(proto));
            (!facts.is_empty()).then(|| facts.join(" "))
        }
        ops::TRANSPOSE => attributes::ints(proto, "perm").map(|p| format!("perm {}", list(p))),
        ops::CAST => attributes::int(proto, "to").map(|t| format!("to {}", type_name(t))),
        ops::RESHAPE => reshape_target(model, qdq, node),
        ops::RESIZE | ops::UPSAMPLE => attributes::string(proto, "mode"),
        ops::REDUCE_MEAN
        | ops::REDUCE_SUM
        | ops::REDUCE_MAX
        | ops::REDUCE_MIN
        | ops::REDUCE_PROD
        | ops::REDUCE_L2
        | ops::REDUCE_SUM_SQUARE => attributes::ints(proto, "axes")
            .map(|a| format!("axes {}", list(a)))
            .or_else(axis),
        ops::CONCAT
        | ops::SOFTMAX
        | ops::LOG_SOFTMAX
        | ops::GATHER
        | ops::SPLIT
        | ops::FLATTEN
        | ops::LAYER_NORMALIZATION
        | ops::ARG_MAX
        | ops::ARG_MIN
        | ops::CUM_SUM
        | ops::HARDMAX => axis(),
        _ => None,
    }?;
    Some(crate::app::names::elide_end(&text, MAX_DETAIL_CHARS))
}

/// A Reshape's target shape when it is a constant: `to 1×-1×12×64`.
fn reshape_target(model: &Model, qdq: &QdqStructure, node: &Node) -> Option<String> {
    let shape = model.weight(qdq.source_of(node.inputs.get(1)?)).ok()??;
    let values: Vec<i64> = match shape {
        crate::model::TensorArray::Int64(a) => a.iter().copied().collect(),
        _ => return None,
    };
    Some(format!("to {}", dims_text(&values)))
}

/// An ONNX element type code's name (`float16`), or its number.
fn type_name(code: i64) -> String {
    i32::try_from(code).map_or_else(|_| code.to_string(), crate::model::dtype::onnx_type_name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DataType, ModelBuilder, TensorArray};
    use ndarray::{ArrayD, IxDyn};

    #[test]
    fn boxes_show_weight_shapes_windows_axes_and_targets() {
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[1, 8, 16, 16]);
        b.initializer(
            "w",
            TensorArray::Float32(ArrayD::zeros(IxDyn(&[16, 4, 3, 3]))),
        );
        b.initializer(
            "shape",
            TensorArray::Int64(ArrayD::from_shape_vec(IxDyn(&[2]), vec![1, -1]).unwrap()),
        );
        b.node("Conv", &["x", "w"], &["c"])
            .name("conv")
            .attr_ints("strides", &[2, 2])
            .attr_int("group", 2);
        b.node("MaxPool", &["c"], &["p"])
            .name("pool")
            .attr_ints("kernel_shape", &[3, 3])
            .attr_ints("strides", &[1, 1]);
        b.node("Transpose", &["p"], &["t"])
            .name("tr")
            .attr_ints("perm", &[0, 2, 3, 1]);
        b.node("Reshape", &["t", "shape"], &["r"]).name("reshape");
        b.node("Cast", &["r"], &["h"])
            .name("cast")
            .attr_int("to", 10);
        b.node("Softmax", &["h"], &["y"])
            .name("softmax")
            .attr_int("axis", -1);
        b.node("Relu", &["y"], &["z"]).name("relu");
        b.output("z", DataType::Float16, &[1, 256]);
        let model = b.build();
        let graph = Graph::build(&model);
        let details = node_details(&model, &graph, &QdqStructure::default());
        let of = |name: &str| {
            let id = graph.node_by_name(name).unwrap().id;
            details[id.0].clone()
        };
        assert_eq!(of("conv").as_deref(), Some("16×4×3×3 /2×2 g2"));
        assert_eq!(
            of("pool").as_deref(),
            Some("3×3"),
            "unit strides are the default"
        );
        assert_eq!(of("tr").as_deref(), Some("perm 0,2,3,1"));
        assert_eq!(of("reshape").as_deref(), Some("to 1×-1"));
        assert_eq!(of("cast").as_deref(), Some("to float16"));
        assert_eq!(of("softmax").as_deref(), Some("axis -1"));
        assert_eq!(of("relu"), None);
    }
}
