//! Normalizations (LayerNorm, RMSNorm, as one op or written out in primitives) and the
//! residual streams that flow into them: what tells a transformer from a convolutional
//! network, and which activations a transformer's placement keeps in float.

use std::collections::HashSet;

use crate::model::ops;
use crate::model::{Graph, TensorKind};

/// Whether the graph normalizes anything (a LayerNorm/RMSNorm, as one op or in primitives):
/// what tells a transformer from a convolutional network here.
pub fn has_normalization(graph: &Graph) -> bool {
    !norm_inputs(graph).is_empty()
}

/// Normalizations: their data input (and a Skip variant's skip input) is normalized.
const NORM_OPS: &[(&str, &[usize])] = &[
    (ops::LAYER_NORMALIZATION, &[0]),
    (ops::RMS_NORMALIZATION, &[0]),
    (ops::SIMPLIFIED_LAYER_NORMALIZATION, &[0]),
    (ops::SKIP_LAYER_NORMALIZATION, &[0, 1]),
    (ops::SKIP_SIMPLIFIED_LAYER_NORMALIZATION, &[0, 1]),
];

/// Every tensor that flows into a normalization through sums: the norm's input, and, behind
/// each Add/Sub on the way, its activation inputs (stopping at other norms' outputs, which are
/// already normalized, and after the first tensor that is not a sum).
pub(crate) fn normalized_streams(graph: &Graph) -> HashSet<String> {
    let mut stack: Vec<&str> = norm_inputs(graph);
    let mut seen = HashSet::new();
    while let Some(name) = stack.pop() {
        if !seen.insert(name.to_owned()) {
            continue;
        }
        let Some(producer) = graph.tensor(name).and_then(|t| t.producer) else {
            continue;
        };
        let node = graph.node(producer);
        if !ops::is_sum(&node.op_type) {
            continue;
        }
        for input in &node.inputs {
            let Some(info) = graph.tensor(input) else {
                continue;
            };
            let activation = matches!(info.kind, TensorKind::Activation | TensorKind::Input);
            let normalized = info
                .producer
                .is_some_and(|p| norm_data_inputs(&graph.node(p).op_type).is_some());
            if activation && !normalized {
                stack.push(input);
            }
        }
    }
    seen
}

fn norm_data_inputs(op_type: &str) -> Option<&'static [usize]> {
    NORM_OPS
        .iter()
        .find(|(op, _)| *op == op_type)
        .map(|(_, inputs)| *inputs)
}

/// The tensors normalized by a norm op, or by a LayerNorm/RMSNorm written out in primitives
/// (`x − ReduceMean(x)`, or `x × …(ReduceMean(x²))`).
fn norm_inputs(graph: &Graph) -> Vec<&str> {
    let mut found = Vec::new();
    for node in graph.nodes() {
        if let Some(inputs) = norm_data_inputs(&node.op_type) {
            found.extend(
                inputs
                    .iter()
                    .filter_map(|&i| node.inputs.get(i))
                    .filter(|n| !n.is_empty())
                    .map(String::as_str),
            );
        }
    }
    for info in graph.tensors() {
        if is_decomposed_norm_input(graph, &info.name) {
            found.push(info.name.as_str());
        }
    }
    found
}

/// `name` is centred by a ReduceMean of itself (LayerNorm), or its square is averaged
/// (RMSNorm: `Pow(x, 2)` or `Mul(x, x)` into ReduceMean).
fn is_decomposed_norm_input(graph: &Graph, name: &str) -> bool {
    let Some(info) = graph.tensor(name) else {
        return false;
    };
    let feeds_mean = |output: &str| {
        graph.tensor(output).is_some_and(|t| {
            t.consumers
                .iter()
                .any(|&c| graph.node(c).op_type == ops::REDUCE_MEAN)
        })
    };
    info.consumers.iter().any(|&c| {
        let node = graph.node(c);
        let squares = match node.op_type.as_str() {
            ops::POW => node.inputs.first().is_some_and(|i| i == name),
            ops::MUL => node.inputs.len() == 2 && node.inputs.iter().all(|i| i == name),
            _ => false,
        };
        let centred = node.op_type == ops::REDUCE_MEAN
            && node.outputs.first().is_some_and(|mean| {
                graph.tensor(mean).is_some_and(|t| {
                    t.consumers.iter().any(|&s| {
                        let sub = graph.node(s);
                        sub.op_type == ops::SUB && sub.inputs.iter().any(|i| i == name)
                    })
                })
            });
        centred || (squares && node.outputs.first().is_some_and(|o| feeds_mean(o)))
    })
}
