//! Where each weight of a model is: the position of its initializer, or of the Constant node
//! that makes it, by name, built on the first look-up and dropped whenever the protobuf may
//! change ([`super::Model::proto_mut`]).
//!
//! Why: quantizing reads every weight by name, and a scan of the initializers and nodes per
//! look-up made that quadratic in the graph's size (an exported LLM has thousands of each).

use std::collections::HashMap;
use std::sync::OnceLock;

use super::proto::{GraphProto, NodeProto, TensorProto};
use crate::model::ops;

/// A weight's place in the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WeightAt {
    /// `graph.initializer[i]`.
    Initializer(usize),
    /// `graph.node[i]`, a Constant whose output it is.
    Constant(usize),
}

/// What a look-up finds.
#[derive(Debug, Clone, Copy)]
pub(super) enum Found<'a> {
    /// An initializer.
    Initializer(&'a TensorProto),
    /// A Constant node.
    Constant(&'a NodeProto),
}

/// The index, empty until first used.
#[derive(Clone, Default)]
pub(super) struct WeightIndex(OnceLock<HashMap<String, WeightAt>>);

impl std::fmt::Debug for WeightIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.get() {
            Some(map) => write!(f, "WeightIndex({} weights)", map.len()),
            None => write!(f, "WeightIndex(not built)"),
        }
    }
}

impl WeightIndex {
    /// Forgets the positions (the protobuf is about to change).
    pub(super) fn reset(&mut self) {
        self.0 = OnceLock::new();
    }

    /// The initializer or Constant node named `name` in `graph` (an initializer first, as
    /// ONNX Runtime resolves them); `None` when it is neither.
    pub(super) fn find<'a>(&self, graph: &'a GraphProto, name: &str) -> Option<Found<'a>> {
        let at = *self.0.get_or_init(|| build(graph)).get(name)?;
        match at {
            WeightAt::Initializer(i) => graph
                .initializer
                .get(i)
                .filter(|t| t.name() == name)
                .map(Found::Initializer),
            WeightAt::Constant(i) => graph
                .node
                .get(i)
                .filter(|n| is_constant_of(n, name))
                .map(Found::Constant),
        }
    }
}

/// Every weight's place: Constants first, so that an initializer of the same name wins.
fn build(graph: &GraphProto) -> HashMap<String, WeightAt> {
    let mut map = HashMap::with_capacity(graph.initializer.len());
    for (i, node) in graph.node.iter().enumerate() {
        if let Some(output) = node.output.first().filter(|o| is_constant_of(node, o)) {
            map.entry(output.clone()).or_insert(WeightAt::Constant(i));
        }
    }
    // The first of duplicate initializers, as a scan would find it.
    for (i, tensor) in graph.initializer.iter().enumerate().rev() {
        map.insert(tensor.name().to_owned(), WeightAt::Initializer(i));
    }
    map
}

/// Whether `node` is a Constant (default domain) whose output is `name`.
fn is_constant_of(node: &NodeProto, name: &str) -> bool {
    node.op_type() == ops::CONSTANT
        && node.domain().is_empty()
        && node.output.first().is_some_and(|o| o == name)
}

#[cfg(test)]
mod tests {
    use ndarray::{ArrayD, IxDyn};

    use crate::model::{DataType, ModelBuilder, TensorArray};

    fn values(v: &[f32]) -> TensorArray {
        TensorArray::Float32(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).unwrap())
    }

    fn first(model: &crate::model::Model, name: &str) -> Option<f32> {
        match model.weight(name).unwrap()? {
            TensorArray::Float32(a) => a.iter().next().copied(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn weights_are_found_by_name_and_the_index_follows_changes() {
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[2]);
        b.initializer("w", values(&[1.0, 2.0]));
        b.node("Constant", &[], &["c"])
            .attr_tensor("value", &values(&[3.0, 4.0]));
        b.node("Add", &["x", "w"], &["s"]);
        b.node("Mul", &["s", "c"], &["y"]);
        b.output("y", DataType::Float32, &[2]);
        let mut model = b.build();
        assert_eq!(first(&model, "w"), Some(1.0));
        assert_eq!(first(&model, "c"), Some(3.0));
        assert_eq!(first(&model, "x"), None, "an input is no weight");
        assert_eq!(first(&model, "s"), None, "nor is an activation");
        // A change through proto_mut is seen: a new initializer, and one that shadows the
        // Constant's name (ONNX Runtime takes the initializer).
        let graph = model.proto_mut().graph.as_mut().unwrap();
        graph.initializer.push(values(&[5.0]).to_proto("v"));
        graph.initializer.push(values(&[6.0]).to_proto("c"));
        assert_eq!(first(&model, "v"), Some(5.0));
        assert_eq!(first(&model, "c"), Some(6.0));
        // A clone keeps answering for its own protobuf.
        let mut copy = model.clone();
        copy.proto_mut().graph.as_mut().unwrap().initializer.clear();
        assert_eq!((first(&copy, "w"), first(&model, "w")), (None, Some(1.0)));
    }
}
