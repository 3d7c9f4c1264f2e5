//! Walks every `TensorProto` a model holds: initializers, Constant-node and attribute tensors,
//! sparse tensors, and the same inside subgraphs (If/Loop/Scan bodies) and local functions.

use super::proto::{AttributeProto, GraphProto, ModelProto, SparseTensorProto, TensorProto};

/// Calls `f` on every tensor of the model, depth first, stopping at the first error.
pub fn for_each_tensor_mut<E>(
    model: &mut ModelProto,
    f: &mut dyn FnMut(&mut TensorProto) -> Result<(), E>,
) -> Result<(), E> {
    if let Some(graph) = model.graph.as_mut() {
        graph_tensors_mut(graph, f)?;
    }
    for function in &mut model.functions {
        for node in &mut function.node {
            for attribute in &mut node.attribute {
                attribute_tensors_mut(attribute, f)?;
            }
        }
    }
    Ok(())
}

/// Calls `f` on every tensor of `graph` and of its subgraphs.
pub fn graph_tensors_mut<E>(
    graph: &mut GraphProto,
    f: &mut dyn FnMut(&mut TensorProto) -> Result<(), E>,
) -> Result<(), E> {
    for tensor in &mut graph.initializer {
        f(tensor)?;
    }
    for sparse in &mut graph.sparse_initializer {
        sparse_tensors_mut(sparse, f)?;
    }
    for node in &mut graph.node {
        for attribute in &mut node.attribute {
            attribute_tensors_mut(attribute, f)?;
        }
    }
    Ok(())
}

fn sparse_tensors_mut<E>(
    sparse: &mut SparseTensorProto,
    f: &mut dyn FnMut(&mut TensorProto) -> Result<(), E>,
) -> Result<(), E> {
    if let Some(values) = sparse.values.as_mut() {
        f(values)?;
    }
    if let Some(indices) = sparse.indices.as_mut() {
        f(indices)?;
    }
    Ok(())
}

fn attribute_tensors_mut<E>(
    attribute: &mut AttributeProto,
    f: &mut dyn FnMut(&mut TensorProto) -> Result<(), E>,
) -> Result<(), E> {
    if let Some(tensor) = attribute.t.as_mut() {
        f(tensor)?;
    }
    for tensor in &mut attribute.tensors {
        f(tensor)?;
    }
    if let Some(sparse) = attribute.sparse_tensor.as_mut() {
        sparse_tensors_mut(sparse, f)?;
    }
    for sparse in &mut attribute.sparse_tensors {
        sparse_tensors_mut(sparse, f)?;
    }
    if let Some(graph) = attribute.g.as_mut() {
        graph_tensors_mut(graph, f)?;
    }
    for graph in &mut attribute.graphs {
        graph_tensors_mut(graph, f)?;
    }
    Ok(())
}
