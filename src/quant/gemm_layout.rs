//! Int4 pre-processing of Gemm layers. Int4's blocks run along a weight's rows, the reduced
//! dimension `K` of a `[K, N]` weight (one scale per block of inputs for each output
//! channel), and its deployable form, MatMulNBits, replaces MatMul nodes. A Gemm whose weight
//! only it reads, as a constant, is therefore rewritten: as a MatMul of the same name
//! (followed by an Add of its bias) when it computes `A·B + C` (no `transA`, `alpha` and
//! `beta` 1), with a `transB` weight stored transposed as `[K, N]`; else, with `transB`, only
//! its weight is stored as `[K, N]` and the flag cleared. Either way the same product, and a
//! weight int4 blocks like any MatMul's. A weight something else reads too (a tied embedding)
//! keeps its layout, and its Gemm stays float.

use std::collections::HashSet;

use crate::model::attributes;
use crate::model::graph::{overridable_initializers, put_initializer};
use crate::model::ops;
use crate::model::proto::NodeProto;
use crate::model::{Graph, Model, ModelError, TensorArray};

/// What int4 pre-processing did to the Gemm layers (node names).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct GemmLayout {
    /// Gemms rewritten as MatMul (and an Add of their bias).
    pub as_matmul: Vec<String>,
    /// Gemms kept, their `transB` weight stored as `[K, N]`.
    pub transposed: Vec<String>,
}

/// One Gemm's rewrite.
struct Change {
    index: usize,
    weight: String,
    /// The weight as `[K, N]` when it was stored `[N, K]`.
    transposed: Option<TensorArray>,
    as_matmul: bool,
}

/// Whether `node`'s attribute `name` (a float) is 1 or absent.
fn is_one(node: &NodeProto, name: &str) -> bool {
    attributes::float(node, name).is_none_or(|v| v == 1.0)
}

/// The rewrite of the node at `index` when it is a Gemm whose weight is a private, constant,
/// rank-2 float initializer (as MatMul only when `to_matmul`).
fn change(
    model: &Model,
    graph: &Graph,
    overridable: &HashSet<&str>,
    index: usize,
    to_matmul: bool,
) -> Result<Option<Change>, ModelError> {
    let node = &model.graph().node[index];
    let Some(weight) = node.input.get(1) else {
        return Ok(None);
    };
    if node.op_type() != ops::GEMM
        || !node.domain().is_empty()
        || !graph.is_private_initializer(weight)
        || overridable.contains(weight.as_str())
    {
        return Ok(None);
    }
    let Some(tensor) = model
        .graph()
        .initializer
        .iter()
        .find(|t| t.name() == weight)
    else {
        return Ok(None);
    };
    let trans_b = attributes::int(node, "transB").unwrap_or(0) != 0;
    let as_matmul = to_matmul
        && attributes::int(node, "transA").unwrap_or(0) == 0
        && is_one(node, "alpha")
        && (is_one(node, "beta") || node.input.get(2).is_none_or(String::is_empty));
    if !as_matmul && !trans_b {
        return Ok(None);
    }
    let value = model.tensor_array(tensor)?;
    if !value.dtype().is_plain_float() || value.shape().len() != 2 {
        return Ok(None);
    }
    Ok(Some(Change {
        index,
        weight: weight.clone(),
        transposed: trans_b.then(|| value.transposed()),
        as_matmul,
    }))
}

/// The Gemm `node` as a MatMul of its name reading `A` and `B`, and the Add of its bias `C`
/// (when it has one) writing its output.
fn as_matmul(node: &mut NodeProto, graph: &Graph, made: &mut HashSet<String>) -> Option<NodeProto> {
    let bias = node.input.get(2).filter(|c| !c.is_empty()).cloned();
    node.op_type = Some("MatMul".to_owned());
    node.attribute.clear();
    node.input.truncate(2);
    let bias = bias?;
    let output = node.output.first()?.clone();
    let product = graph.fresh_name(made, &format!("{output}_matmul"));
    node.output[0] = product.clone();
    Some(NodeProto {
        op_type: Some("Add".to_owned()),
        name: Some(graph.fresh_name(made, &format!("{}_bias", node.name()))),
        input: vec![product, bias],
        output: vec![output],
        ..Default::default()
    })
}

/// Rewrites the Gemm layers int4 can quantize (see the module docs); as MatMul only when
/// `to_matmul` (the recipe quantizes MatMul nodes too).
pub fn lay_out_gemms_for_int4(
    model: &mut Model,
    to_matmul: bool,
) -> Result<GemmLayout, ModelError> {
    let graph = Graph::build(model);
    let overridable = overridable_initializers(model.graph(), model.proto().ir_version());
    let mut changes = Vec::new();
    for index in 0..model.graph().node.len() {
        changes.extend(change(model, &graph, &overridable, index, to_matmul)?);
    }
    let mut layout = GemmLayout::default();
    let Some(g) = model.proto_mut().graph.as_mut() else {
        return Ok(layout);
    };
    let mut made = HashSet::new();
    // Last first: an inserted Add leaves the indices before it as they were.
    for change in changes.into_iter().rev() {
        if let Some(transposed) = change.transposed {
            put_initializer(g, transposed.to_proto(&change.weight));
            // A declared shape of the old layout would contradict the new one.
            g.value_info.retain(|v| v.name() != change.weight);
        }
        let node = &mut g.node[change.index];
        let name = node.name().to_owned();
        if change.as_matmul {
            if let Some(add) = as_matmul(node, &graph, &mut made) {
                g.node.insert(change.index + 1, add);
            }
            layout.as_matmul.push(name);
        } else {
            for attribute in node.attribute.iter_mut().filter(|a| a.name() == "transB") {
                attribute.i = Some(0);
            }
            layout.transposed.push(name);
        }
    }
    layout.as_matmul.reverse();
    layout.transposed.reverse();
    Ok(layout)
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

    /// A model of three Gemms: `plain` (transB, bias) rewritable as MatMul + Add, `scaled`
    /// (alpha 0.5, transB) only transposable, `shared` (its weight also gathered) untouched.
    fn gemms() -> Model {
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[-1, 3]);
        b.input("ids", DataType::Int64, &[-1]);
        b.initializer("w", weight(&[2, 3]));
        b.initializer("c", weight(&[2]));
        b.initializer("w_scaled", weight(&[4, 2]));
        b.initializer("tied", weight(&[4, 4]));
        b.node("Gemm", &["x", "w", "c"], &["h"])
            .name("plain")
            .attr_int("transB", 1);
        b.node("Gemm", &["h", "w_scaled"], &["s"])
            .name("scaled")
            .attr_int("transB", 1)
            .attr_float("alpha", 0.5);
        b.node("Gemm", &["s", "tied"], &["y"])
            .name("shared")
            .attr_int("transB", 1);
        b.node("Gather", &["tied", "ids"], &["e"]).name("embed");
        b.output("y", DataType::Float32, &[-1, 4]);
        b.output("e", DataType::Float32, &[-1, 4]);
        b.build()
    }

    fn stored(model: &Model, name: &str) -> ndarray::ArrayD<f32> {
        let t = model.graph().initializer.iter().find(|t| t.name() == name);
        model.tensor_array(t.unwrap()).unwrap().to_f32()
    }

    fn node<'m>(model: &'m Model, name: &str) -> &'m NodeProto {
        let found = model.graph().node.iter().find(|n| n.name() == name);
        found.unwrap_or_else(|| panic!("no node {name}"))
    }

    fn trans_b(node: &NodeProto) -> bool {
        attributes::int(node, "transB").unwrap_or(0) != 0
    }

    #[test]
    fn gemms_become_matmuls_or_get_k_by_n_weights_and_shared_weights_are_left() {
        let mut model = gemms();
        let layout = lay_out_gemms_for_int4(&mut model, true).unwrap();
        assert_eq!(layout.as_matmul, vec!["plain".to_owned()]);
        assert_eq!(layout.transposed, vec!["scaled".to_owned()]);
        // plain: MatMul of the same name into a new tensor, then the bias added into `h`.
        let plain = node(&model, "plain");
        assert_eq!(plain.op_type(), "MatMul");
        assert_eq!(plain.input, vec!["x".to_owned(), "w".to_owned()]);
        assert!(plain.attribute.is_empty());
        let bias = node(&model, "plain_bias");
        assert_eq!(bias.op_type(), "Add");
        assert_eq!(bias.input, vec![plain.output[0].clone(), "c".to_owned()]);
        assert_eq!(bias.output, vec!["h".to_owned()]);
        let at = |name: &str| model.graph().node.iter().position(|n| n.name() == name);
        assert_eq!(at("plain_bias"), at("plain").map(|i| i + 1));
        // w[k][n] is the old w[n][k].
        let w = stored(&model, "w");
        assert_eq!(w.shape(), &[3, 2]);
        assert_eq!((w[[2, 1]], w[[1, 0]]), (5.0, 1.0));
        // scaled: still a Gemm (alpha), its weight [K, N] and transB cleared.
        let scaled = node(&model, "scaled");
        assert_eq!(scaled.op_type(), "Gemm");
        assert!(!trans_b(scaled));
        assert_eq!(attributes::float(scaled, "alpha"), Some(0.5));
        assert_eq!(stored(&model, "w_scaled").shape(), &[2, 4]);
        // shared: as it was.
        assert!(trans_b(node(&model, "shared")));
        assert_eq!(stored(&model, "tied")[[0, 1]], 1.0);
    }

    #[test]
    fn without_matmuls_in_the_recipe_gemms_stay_gemms() {
        let mut model = gemms();
        let layout = lay_out_gemms_for_int4(&mut model, false).unwrap();
        assert!(layout.as_matmul.is_empty());
        assert_eq!(
            layout.transposed,
            vec!["plain".to_owned(), "scaled".to_owned()]
        );
        let plain = node(&model, "plain");
        assert_eq!((plain.op_type(), trans_b(plain)), ("Gemm", false));
        assert_eq!(plain.input.len(), 3);
    }
}
