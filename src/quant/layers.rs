//! The weighted layers bias correction and GPTQ handle (quantized Conv, Gemm and MatMul with
//! an initializer weight) and how each reads its input, which calibration needs to gather
//! their mean inputs and input Hessians.

use crate::calib::input_means::{Geometry, MeanSpec, Padding};
use crate::model::attributes;
use crate::model::ops;
use crate::model::proto::NodeProto;
use crate::model::{Graph, Model, NodeId};
use crate::quant::plan::{Plan, TensorRole};

/// How a layer's output channels combine its weight and mean input.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// `[O, C/g, k…]` weight, `group` groups.
    Conv {
        /// Groups.
        group: usize,
    },
    /// `[K, N]` weight (`[N, K]` with `trans_b`), output scaled by `alpha`, bias by `beta`.
    Gemm {
        /// The weight is stored transposed.
        trans_b: bool,
        /// Gemm's `alpha`.
        alpha: f32,
        /// Gemm's `beta`.
        beta: f32,
    },
    /// `[K, N]` weight; the bias, if any, is the constant of the Add that follows.
    MatMul,
}

/// One quantized weighted layer.
#[derive(Debug, Clone)]
pub struct Layer {
    /// The node.
    pub node: NodeId,
    /// Its name.
    pub name: String,
    /// The data input.
    pub input: String,
    /// The weight initializer.
    pub weight: String,
    /// What it computes.
    pub kind: Kind,
}

/// Every quantized Conv, Gemm (without transA) and MatMul of `plan` whose weight is quantized
/// as a weight and whose input is an activation.
pub fn layers(graph: &Graph, model: &Model, plan: &Plan) -> Vec<Layer> {
    plan.quantized
        .iter()
        .filter_map(|&id| {
            let node = graph.node(id);
            let proto = model.graph().node.get(id.0)?;
            let weight = node.inputs.get(1)?;
            if !matches!(plan.roles.get(weight), Some(TensorRole::Weight { .. })) {
                return None;
            }
            let kind = match node.op_type.as_str() {
                ops::CONV => Kind::Conv {
                    group: node.int_attribute("group").unwrap_or(1).max(1) as usize,
                },
                ops::GEMM if node.int_attribute("transA").unwrap_or(0) == 0 => Kind::Gemm {
                    trans_b: node.int_attribute("transB").unwrap_or(0) == 1,
                    alpha: attributes::float(proto, "alpha").unwrap_or(1.0),
                    beta: attributes::float(proto, "beta").unwrap_or(1.0),
                },
                ops::MAT_MUL => Kind::MatMul,
                _ => return None,
            };
            Some(Layer {
                node: id,
                name: node.name.clone(),
                input: node.inputs.first().filter(|i| !i.is_empty())?.clone(),
                weight: weight.clone(),
                kind,
            })
        })
        .collect()
}

/// How `layer` reads its input (`None` for a Conv that is neither 1-D nor 2-D).
pub fn geometry(model: &Model, layer: &Layer) -> Option<Geometry> {
    match layer.kind {
        Kind::Conv { .. } => conv_geometry(model, layer),
        Kind::Gemm { .. } | Kind::MatMul => Some(Geometry::LastAxis),
    }
}

/// What calibration gathers for `layer`'s bias correction.
pub fn mean_spec(model: &Model, layer: &Layer) -> Option<MeanSpec> {
    Some(MeanSpec {
        layer: layer.name.clone(),
        tensor: layer.input.clone(),
        geometry: geometry(model, layer)?,
    })
}

/// An integer-list attribute as sizes (negative values, invalid anyway, read as 0).
fn sizes(node: &NodeProto, name: &str) -> Option<Vec<usize>> {
    attributes::ints(node, name).map(|v| v.iter().map(|&d| d.max(0) as usize).collect())
}

/// A Conv's kernel, strides, dilations and padding, as 2-D (a 1-D Conv has height 1).
fn conv_geometry(model: &Model, layer: &Layer) -> Option<Geometry> {
    let node = model.graph().node.get(layer.node.0)?;
    let weight = model
        .graph()
        .initializer
        .iter()
        .find(|t| t.name() == layer.weight)?;
    let spatial: Vec<usize> = weight
        .dims
        .iter()
        .skip(2)
        .map(|&d| d.max(0) as usize)
        .collect();
    let rank = spatial.len();
    if !(1..=2).contains(&rank) {
        return None;
    }
    let kernel = sizes(node, "kernel_shape").unwrap_or(spatial);
    let strides = sizes(node, "strides").unwrap_or_else(|| vec![1; rank]);
    let dilations = sizes(node, "dilations").unwrap_or_else(|| vec![1; rank]);
    let pads = sizes(node, "pads").unwrap_or_else(|| vec![0; 2 * rank]);
    if kernel.len() != rank || strides.len() != rank || dilations.len() != rank {
        return None;
    }
    let auto_pad = attributes::string(node, "auto_pad").unwrap_or_default();
    let pads = match auto_pad.as_str() {
        "SAME_UPPER" => Padding::Same { upper: true },
        "SAME_LOWER" => Padding::Same { upper: false },
        "VALID" => Padding::Explicit([0; 4]),
        _ if pads.len() == 2 * rank => Padding::Explicit(if rank == 2 {
            [pads[0], pads[1], pads[2], pads[3]]
        } else {
            [0, pads[0], 0, pads[1]]
        }),
        _ => return None,
    };
    let two = |v: &[usize]| if rank == 2 { [v[0], v[1]] } else { [1, v[0]] };
    Some(Geometry::Conv {
        kernel: two(&kernel),
        strides: two(&strides),
        dilations: two(&dilations),
        pads,
    })
}
