//! Int4 pre-processing: a Gemm with `transB` holds its weight as `[N, K]`, while int4's blocks
//! run along a weight's rows, the reduced dimension `K` of a `[K, N]` weight (one scale per
//! block of inputs for each output channel). Each such weight that only its Gemm reads is
//! stored transposed, as `[K, N]`, and the Gemm's `transB` cleared: the same product
//! exactly, and a weight int4 can block like any MatMul's. A weight something else reads too
//! (a tied embedding) keeps its layout, and its Gemm stays float.

use crate::model::graph::{overridable_initializers, put_initializer};
use crate::model::proto::NodeProto;
use crate::model::{Graph, Model, ModelError};

/// Whether `node` is a default-domain Gemm with `transB` set.
fn transposes_b(node: &NodeProto) -> bool {
    node.op_type() == "Gemm"
        && node.domain().is_empty()
        && node
            .attribute
            .iter()
            .any(|a| a.name() == "transB" && a.i() != 0)
}

/// Stores the private, constant, rank-2 float weight of every Gemm with `transB` as `[K, N]`
/// and clears the flag; returns the Gemm nodes changed (their names).
pub fn store_gemm_weights_k_by_n(model: &mut Model) -> Result<Vec<String>, ModelError> {
    let graph = Graph::build(model);
    let overridable = overridable_initializers(model.graph(), model.proto().ir_version());
    let mut changes = Vec::new();
    for (index, node) in model.graph().node.iter().enumerate() {
        let Some(weight) = node.input.get(1).filter(|_| transposes_b(node)) else {
            continue;
        };
        if !graph.is_private_initializer(weight) || overridable.contains(weight.as_str()) {
            continue;
        }
        let Some(tensor) = model
            .graph()
            .initializer
            .iter()
            .find(|t| t.name() == weight)
        else {
            continue;
        };
        let value = model.tensor_array(tensor)?;
        if value.dtype().is_plain_float() && value.shape().len() == 2 {
            changes.push((index, weight.clone(), value.transposed()));
        }
    }
    let Some(g) = model.proto_mut().graph.as_mut() else {
        return Ok(Vec::new());
    };
    let mut changed = Vec::with_capacity(changes.len());
    for (index, weight, transposed) in changes {
        put_initializer(g, transposed.to_proto(&weight));
        // A declared shape of the old layout would contradict the new one.
        g.value_info.retain(|v| v.name() != weight);
        let node = &mut g.node[index];
        for attribute in node.attribute.iter_mut().filter(|a| a.name() == "transB") {
            attribute.i = Some(0);
        }
        changed.push(node.name().to_owned());
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DataType, ModelBuilder, TensorArray};
    use ndarray::{ArrayD, IxDyn};

    fn weight(shape: &[usize]) -> TensorArray {
        let n = shape.iter().product();
        TensorArray::Float32(
            ArrayD::from_shape_vec(IxDyn(shape), (0..n).map(|i| i as f32).collect()).unwrap(),
        )
    }

    #[test]
    fn a_private_transposed_gemm_weight_is_stored_k_by_n_and_a_shared_one_is_left() {
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[-1, 3]);
        b.input("ids", DataType::Int64, &[-1]);
        b.initializer("w", weight(&[2, 3]));
        b.initializer("tied", weight(&[4, 2]));
        b.node("Gemm", &["x", "w"], &["h"])
            .name("private")
            .attr_int("transB", 1);
        b.node("Gemm", &["h", "tied"], &["y"])
            .name("shared")
            .attr_int("transB", 1);
        b.node("Gather", &["tied", "ids"], &["e"]).name("embed");
        b.output("y", DataType::Float32, &[-1, 4]);
        b.output("e", DataType::Float32, &[-1, 2]);
        let mut model = b.build();
        let changed = store_gemm_weights_k_by_n(&mut model).unwrap();
        assert_eq!(changed, vec!["private".to_owned()]);
        let stored = |name: &str| {
            let t = model.graph().initializer.iter().find(|t| t.name() == name);
            model.tensor_array(t.unwrap()).unwrap().to_f32()
        };
        let w = stored("w");
        assert_eq!(w.shape(), &[3, 2]);
        // w[k][n] is the old w[n][k].
        assert_eq!(w[[2, 1]], 5.0);
        assert_eq!(w[[1, 0]], 1.0);
        assert_eq!(stored("tied").shape(), &[4, 2]);
        let trans_b = |name: &str| {
            let node = model
                .graph()
                .node
                .iter()
                .find(|n| n.name() == name)
                .unwrap();
            transposes_b(node)
        };
        assert!(!trans_b("private"));
        assert!(trans_b("shared"));
    }
}
