//! Where AWQ's activation scales go. The weights are multiplied by `s` per input channel, so
//! their input must be divided by it; that division is folded, exactly, into whatever made
//! the input when it is per-channel and linear and read by these MatMuls alone:
//!
//! - a normalisation's scale and bias (LayerNormalization, SimplifiedLayerNormalization,
//!   RMSNormalization, SkipLayerNormalization, SkipSimplifiedLayerNormalization);
//! - a Mul by a per-channel constant (the γ of an RMSNorm written out in standard ops);
//! - the columns of a preceding MatMul's constant weight.
//!
//! Anywhere else an explicit `Mul` by `1/s` is inserted before the MatMuls.

use std::collections::BTreeSet;

use crate::model::ops;
use crate::model::proto::{NodeProto, TensorProto};
use crate::model::tensor::array;
use crate::model::{DataType, Dim, Graph, Node, NodeId, TensorArray, TensorKind};

/// Where one activation's division by `s` goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScaleSite {
    /// Divide these per-channel constants (of the producing node) by `s`.
    Constants(Vec<String>),
    /// Divide the columns of the producing MatMul's weight by `s`.
    ProducerWeight(String),
    /// Insert `Mul(x, 1/s)` before the MatMuls.
    Mul,
}

impl ScaleSite {
    /// A few words for reports.
    pub fn describe(&self) -> &'static str {
        match self {
            ScaleSite::Constants(_) => "folded into the producer's constants",
            ScaleSite::ProducerWeight(_) => "folded into the preceding MatMul",
            ScaleSite::Mul => "explicit Mul",
        }
    }
}

/// Input indices of the per-channel scale and bias of a normalisation's output 0.
fn norm_constants(op: &str) -> Option<&'static [usize]> {
    Some(match op {
        ops::LAYER_NORMALIZATION => &[1, 2],
        ops::SIMPLIFIED_LAYER_NORMALIZATION | ops::RMS_NORMALIZATION => &[1],
        ops::SKIP_LAYER_NORMALIZATION => &[2, 3],
        ops::SKIP_SIMPLIFIED_LAYER_NORMALIZATION => &[2],
        _ => return None,
    })
}

/// True when `name` is an initializer that only `node` reads, shaped `[.., channels]` with
/// every other dimension 1 (one value per channel of the activation).
fn per_channel_constant(graph: &Graph, node: &Node, name: &str, channels: usize) -> bool {
    let Some(t) = graph.tensor(name) else {
        return false;
    };
    let sole_reader = t.consumers.iter().all(|&c| c == node.id);
    let shaped = t.shape.as_ref().is_some_and(|dims| {
        let fixed = |d: &Dim, v: i64| matches!(d, Dim::Fixed(x) if *x == v);
        dims.last().is_some_and(|d| fixed(d, channels as i64))
            && dims[..dims.len() - 1].iter().all(|d| fixed(d, 1))
    });
    t.kind == TensorKind::Initializer && sole_reader && shaped
}

/// Where the division of `activation` (with `channels` channels, read by `readers`) goes.
pub fn site(graph: &Graph, activation: &str, channels: usize, readers: &[NodeId]) -> ScaleSite {
    let Some(info) = graph.tensor(activation) else {
        return ScaleSite::Mul;
    };
    let consumers: BTreeSet<NodeId> = info.consumers.iter().copied().collect();
    let readers: BTreeSet<NodeId> = readers.iter().copied().collect();
    let Some(producer) = info.producer.map(|id| graph.node(id)) else {
        return ScaleSite::Mul;
    };
    if info.is_output
        || consumers != readers
        || producer.outputs.first().map(String::as_str) != Some(activation)
    {
        return ScaleSite::Mul;
    }
    let input = |i: usize| producer.inputs.get(i).filter(|n| !n.is_empty());
    if let Some(indices) = norm_constants(&producer.op_type) {
        let names: Vec<String> = indices.iter().filter_map(|&i| input(i).cloned()).collect();
        return if names
            .iter()
            .all(|n| per_channel_constant(graph, producer, n, channels))
        {
            ScaleSite::Constants(names)
        } else {
            ScaleSite::Mul
        };
    }
    match producer.op_type.as_str() {
        ops::MUL => {
            let constants: Vec<&String> = producer
                .inputs
                .iter()
                .filter(|n| per_channel_constant(graph, producer, n, channels))
                .collect();
            match constants.as_slice() {
                [one] => ScaleSite::Constants(vec![(*one).clone()]),
                _ => ScaleSite::Mul,
            }
        }
        ops::MAT_MUL => match input(1) {
            Some(w) if weight_with_columns(graph, producer, w, channels) => {
                ScaleSite::ProducerWeight(w.clone())
            }
            _ => ScaleSite::Mul,
        },
        _ => ScaleSite::Mul,
    }
}

/// True when `name` is a rank-2 initializer `[k, channels]` read by `node` alone.
fn weight_with_columns(graph: &Graph, node: &Node, name: &str, channels: usize) -> bool {
    graph.tensor(name).is_some_and(|t| {
        t.kind == TensorKind::Initializer
            && t.consumers.iter().all(|&c| c == node.id)
            && t.shape.as_ref().is_some_and(|d| {
                d.len() == 2 && matches!(d[1], Dim::Fixed(c) if c == channels as i64)
            })
    })
}

/// `output = Mul(x, 1/s)`: the initializer `{x}_{tag}_inverse_scale` holding `1/s` in
/// `float_type` and the node `{x}_{tag}_Mul` (AWQ's explicit division, and SmoothQuant's
/// observation of the smoothed activation).
pub fn division_by_scales(
    x: &str,
    scales: &[f32],
    float_type: DataType,
    tag: &str,
    output: &str,
) -> (TensorProto, NodeProto) {
    let inverse: Vec<f32> = scales.iter().map(|s| 1.0 / s).collect();
    let factor = format!("{x}_{tag}_inverse_scale");
    let initializer = TensorArray::Float32(array(vec![inverse.len()], inverse))
        .cast_float(float_type)
        .to_proto(&factor);
    let mul = NodeProto {
        op_type: Some("Mul".to_owned()),
        name: Some(format!("{x}_{tag}_Mul")),
        input: vec![x.to_owned(), factor],
        output: vec![output.to_owned()],
        ..NodeProto::default()
    };
    (initializer, mul)
}
