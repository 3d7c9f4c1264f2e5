//! Simplification before quantization: the float forms ONNX Runtime's graph optimizer fuses
//! when it loads a float model, rewritten before Q/DQ nodes are placed between their parts and
//! keep them apart. Without it a quantized model runs ops its float model never ran: PP-OCR's
//! direction classifier adds a reshaped bias after 18 Convs, and its 9 HardSigmoids and 18
//! divisions by 6 (hard-swish) have no integer kernel, so standalone Q/DQ nodes surround them;
//! its QDQ model ran at 0.6x the float model's speed on the CPU provider.
//!
//! Four rewrites, each exact up to float rounding (as ONNX Runtime's own fusions are):
//! 1. a Reshape of a constant by a constant shape becomes the reshaped constant (constant
//!    folding; exporters reshape a Conv's bias this way);
//! 2. an Add or Mul of a per-channel constant after a Conv (or a ConvTranspose of one group)
//!    folds into its bias and weights (ONNX Runtime's ConvAddFusion and ConvMulFusion);
//! 3. a HardSigmoid after such a Conv folds its slope and offset into the Conv and leaves a
//!    Clip to [0, 1], which the Conv's integer kernel takes as its output range;
//! 4. a division by a float constant becomes a multiplication by its reciprocal where the
//!    dividend is the output of an elementwise op ([`ELEMENTWISE_DIVIDENDS`], hard-swish's
//!    `x·relu6(x+3)/6`): ONNX Runtime has an integer Mul but no integer Div. Where the
//!    placement quantizes such an op its output is quantized already, and the quotient's
//!    range is that range divided by the constant, so quantizing the quotient too lands on
//!    the same grid and adds no rounding of note. A dividend a MatMul writes (attention
//!    scores divided by √d) is not quantized by the placement when float ops read it; a Mul
//!    would quantize it, so that Div stays.
//!
//! A Conv's weight and bias are changed only when the Conv alone reads them, and a folded
//! node's output only when no other node reads it and it is no graph output. A tensor whose
//! values change keeps no old name: the Conv before a folded HardSigmoid writes a new tensor,
//! so statistics calibrated without simplification cannot be read as its range.
//!
//! Written here: graph rewriting is the product's core, and no Rust crate rewrites ONNX graphs.

use std::collections::{BTreeMap, HashMap, HashSet};

use ndarray::{ArrayD, Axis};

use crate::model::graph::{drop_orphans, put_initializer, remove_nodes};
use crate::model::legacy::default_opset;
use crate::model::ops;
use crate::model::proto::{AttributeProto, GraphProto};
use crate::model::{DataType, Graph, Model, ModelError, Node, NodeId, TensorArray, TensorKind};

/// What simplification rewrote (counts of nodes).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SimplifyReport {
    /// Reshapes of constants folded into constants.
    pub reshapes: usize,
    /// Adds of a per-channel constant folded into the Conv before them.
    pub bias_adds: usize,
    /// Muls by a per-channel constant folded into the Conv before them.
    pub channel_muls: usize,
    /// HardSigmoids folded into the Conv before them (a Clip to [0, 1] stays).
    pub hard_sigmoids: usize,
    /// The tensors the folded HardSigmoids' Convs write now (`<output>_unclipped`): the float
    /// model has no twin of them, so a per-tensor comparison does not look for one.
    pub unclipped: Vec<String>,
    /// The Div nodes rewritten as multiplications by their divisor's reciprocal (they keep
    /// their names).
    pub divisions: Vec<String>,
}

impl SimplifyReport {
    /// True when nothing was rewritten.
    pub fn is_empty(&self) -> bool {
        *self == SimplifyReport::default()
    }

    /// One phrase for the pre-processing line (`None` when nothing was rewritten).
    pub fn summary(&self) -> Option<String> {
        let parts: Vec<String> = [
            (self.reshapes, "constant Reshape(s) folded"),
            (self.bias_adds, "bias Add(s) folded into Conv"),
            (self.channel_muls, "channel Mul(s) folded into Conv"),
            (self.hard_sigmoids, "HardSigmoid(s) folded into Conv"),
            (self.divisions.len(), "Div(s) by a constant as Mul"),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        (!parts.is_empty()).then(|| format!("simplified: {}", parts.join(", ")))
    }

    /// The op type each rewritten node had (by node name): what the recipe's op-type lists
    /// also match.
    pub fn original_op_types(&self) -> HashMap<String, String> {
        self.divisions
            .iter()
            .map(|name| (name.clone(), ops::DIV.to_owned()))
            .collect()
    }
}

/// The ops whose output a division by a constant may follow to become a multiplication
/// (see the module docs, rewrite 4).
pub const ELEMENTWISE_DIVIDENDS: &[&str] = &[ops::MUL, ops::ADD, ops::SUB, ops::CLIP, ops::RELU];

/// Applies the four rewrites of the module docs to `model`.
pub fn simplify(model: &mut Model) -> Result<SimplifyReport, ModelError> {
    let mut report = SimplifyReport {
        reshapes: fold_constant_reshapes(model)?,
        ..SimplifyReport::default()
    };
    // A fold can make the next possible (Conv → Add → HardSigmoid); each round removes or
    // rewrites nodes, so the rounds end.
    loop {
        let round = fold_into_convs(model)?;
        if round.is_empty() {
            break;
        }
        report.bias_adds += round.bias_adds;
        report.channel_muls += round.channel_muls;
        report.hard_sigmoids += round.hard_sigmoids;
        report.unclipped.extend(round.unclipped);
    }
    report.divisions = divisions_as_products(model)?;
    Ok(report)
}

/// The value of `name` when it is an initializer no caller can override.
fn constant(model: &Model, graph: &Graph, name: &str) -> Result<Option<TensorArray>, ModelError> {
    match graph.tensor(name) {
        Some(t) if t.kind == TensorKind::Initializer => model.weight(name),
        _ => Ok(None),
    }
}

/// ONNX Reshape's output shape for an input of `input` dims: 0 copies the input's dim (unless
/// `allow_zero`), -1 takes what is left. `None` when the shape is invalid.
fn reshape_target(input: &[usize], shape: &[i64], allow_zero: bool) -> Option<Vec<usize>> {
    let total: usize = input.iter().product();
    let mut dims = Vec::with_capacity(shape.len());
    let mut inferred = None;
    for (i, &d) in shape.iter().enumerate() {
        match d {
            -1 if inferred.is_none() => {
                inferred = Some(i);
                dims.push(1);
            }
            0 if !allow_zero => dims.push(*input.get(i)?),
            d => dims.push(usize::try_from(d).ok()?),
        }
    }
    if let Some(i) = inferred {
        let known: usize = dims.iter().product();
        if known == 0 || !total.is_multiple_of(known) {
            return None;
        }
        dims[i] = total / known;
    }
    (dims.iter().product::<usize>() == total).then_some(dims)
}

/// Rewrite 1: every Reshape of a constant by a constant shape, replaced by the reshaped
/// constant under the Reshape's output name.
fn fold_constant_reshapes(model: &mut Model) -> Result<usize, ModelError> {
    let graph = Graph::build(model);
    let mut folded = Vec::new();
    for node in graph.nodes() {
        if node.op_type != ops::RESHAPE || !node.is_default_domain() || node.inputs.len() < 2 {
            continue;
        }
        let output = &node.outputs[0];
        if graph.tensor(output).is_none_or(|t| t.is_output) {
            continue;
        }
        let (Some(data), Some(TensorArray::Int64(shape))) = (
            constant(model, &graph, &node.inputs[0])?,
            constant(model, &graph, &node.inputs[1])?,
        ) else {
            continue;
        };
        let allow_zero = node.int_attribute("allowzero").unwrap_or(0) != 0;
        let shape: Vec<i64> = shape.iter().copied().collect();
        let Some(value) = reshape_target(data.shape(), &shape, allow_zero)
            .and_then(|target| data.reshaped(&target))
        else {
            continue;
        };
        folded.push((node.id, value.to_proto(output), node.inputs.clone()));
    }
    let Some(g) = model.proto_mut().graph.as_mut() else {
        return Ok(0);
    };
    let removed: HashSet<usize> = folded.iter().map(|(id, _, _)| id.0).collect();
    let mut candidates = HashSet::new();
    for (_, tensor, inputs) in folded {
        // The output is a tensor of its own now: a declared shape of it still holds.
        put_initializer(g, tensor);
        candidates.extend(inputs);
    }
    remove_nodes(g, &removed);
    drop_orphans(g, &candidates);
    Ok(removed.len())
}

/// A Conv (or ConvTranspose of one group) whose weight and bias are float initializers only it
/// reads: what a per-channel fold rescales.
struct ConvParts {
    /// The weight's values, in f32.
    weight: ArrayD<f32>,
    /// Its stored type.
    weight_type: DataType,
    /// The axis of its output channels.
    channel_axis: usize,
    /// The bias's values (zeros when it has none) and its stored type.
    bias: Vec<f32>,
    /// The type a bias is stored in.
    bias_type: DataType,
}

impl ConvParts {
    /// `conv`'s parts, or `None` when it is no foldable Conv.
    fn of(model: &Model, graph: &Graph, conv: &Node) -> Result<Option<Self>, ModelError> {
        let channel_axis = match conv.op_type.as_str() {
            ops::CONV => 0,
            ops::CONV_TRANSPOSE if conv.int_attribute("group").unwrap_or(1) == 1 => 1,
            _ => return Ok(None),
        };
        let private = |name: &str| graph.is_private_initializer(name);
        let bias_name = conv.inputs.get(2).filter(|b| !b.is_empty());
        if !conv.is_default_domain()
            || conv.inputs.len() < 2
            || !private(&conv.inputs[1])
            || bias_name.is_some_and(|b| !private(b))
        {
            return Ok(None);
        }
        let Some(weight) = constant(model, graph, &conv.inputs[1])? else {
            return Ok(None);
        };
        let weight_type = weight.dtype();
        let Some(&channels) = weight.shape().get(channel_axis) else {
            return Ok(None);
        };
        if !weight_type.is_plain_float() || weight.shape().len() < 3 {
            return Ok(None);
        }
        let (bias, bias_type) = match bias_name {
            Some(name) => match constant(model, graph, name)? {
                Some(b) if b.dtype().is_plain_float() && b.len() == channels => {
                    let dtype = b.dtype();
                    (b.into_f32().iter().copied().collect(), dtype)
                }
                _ => return Ok(None),
            },
            None => (vec![0.0; channels], weight_type),
        };
        Ok(Some(ConvParts {
            weight: weight.into_f32(),
            weight_type,
            channel_axis,
            bias,
            bias_type,
        }))
    }

    /// The number of output channels.
    fn channels(&self) -> usize {
        self.bias.len()
    }

    /// The rank of the Conv's output (its weight's).
    fn output_rank(&self) -> usize {
        self.weight.ndim()
    }

    /// The weight and bias of `scale · conv(x) + shift` per output channel, in their stored
    /// types (computed in f64, as the BatchNormalization fold does).
    fn affine(mut self, scale: &[f64], shift: &[f64]) -> (TensorArray, TensorArray) {
        for (c, mut lane) in self
            .weight
            .axis_iter_mut(Axis(self.channel_axis))
            .enumerate()
        {
            lane.mapv_inplace(|w| (f64::from(w) * scale[c]) as f32);
        }
        let bias: Vec<f32> = self
            .bias
            .iter()
            .enumerate()
            .map(|(c, &b)| (f64::from(b) * scale[c] + shift[c]) as f32)
            .collect();
        let channels = bias.len();
        let bias = TensorArray::Float32(crate::model::tensor::array(vec![channels], bias));
        (
            TensorArray::Float32(self.weight).cast_float(self.weight_type),
            bias.cast_float(self.bias_type),
        )
    }
}

/// `value` as one factor per output channel of a Conv output of rank `rank` with `channels`
/// channels, when it broadcasts so (a scalar, `[C, 1, 1]`, `[1, C, 1, 1]`, …); `None` when it
/// varies along another axis.
fn per_channel(value: &TensorArray, channels: usize, rank: usize) -> Option<Vec<f64>> {
    let shape = value.shape();
    if !value.dtype().is_plain_float() || shape.len() > rank {
        return None;
    }
    let offset = rank - shape.len();
    let fits = shape
        .iter()
        .enumerate()
        .all(|(j, &d)| d == 1 || (offset + j == 1 && d == channels));
    if !fits {
        return None;
    }
    let values: Vec<f64> = value.to_f32().iter().map(|&v| f64::from(v)).collect();
    match values.len() {
        1 => Some(vec![values[0]; channels]),
        n if n == channels => Some(values),
        _ => None,
    }
}

/// What a fold does to the node after the Conv.
enum Follower {
    /// Removed: the Conv writes its output.
    Removed,
    /// Becomes a Clip to [0, 1] of the Conv's new output.
    Clip {
        /// The tensor the Conv writes now.
        conv_output: String,
        /// The names of its bounds' initializers (from opset 11).
        bounds: [String; 2],
    },
}

/// One per-channel fold of a round.
struct ChannelFold {
    conv: NodeId,
    follower: NodeId,
    weight: TensorArray,
    /// The bias and its name (the Conv's own, or a new one).
    bias: (String, TensorArray),
    then: Follower,
}

/// The op a node after a Conv is, for rewrites 2 and 3.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FoldKind {
    Add,
    Mul,
    HardSigmoid,
}

/// The fold of `node` into the Conv before it, when there is one.
fn channel_fold(
    model: &Model,
    graph: &Graph,
    node: &Node,
    made: &mut HashSet<String>,
) -> Result<Option<(FoldKind, ChannelFold)>, ModelError> {
    let kind = match node.op_type.as_str() {
        ops::ADD => FoldKind::Add,
        ops::MUL => FoldKind::Mul,
        ops::HARD_SIGMOID => FoldKind::HardSigmoid,
        _ => return Ok(None),
    };
    if !node.is_default_domain() || node.outputs.len() != 1 {
        return Ok(None);
    }
    // The Conv's output and, for Add and Mul, the constant (either input).
    let inputs: Vec<&String> = node.inputs.iter().filter(|i| !i.is_empty()).collect();
    let (conv_output, other) = match (kind, inputs.as_slice()) {
        (FoldKind::HardSigmoid, [x]) => (*x, None),
        (FoldKind::Add | FoldKind::Mul, [a, b]) if graph.is_constant(b) => (*a, Some(*b)),
        (FoldKind::Add | FoldKind::Mul, [a, b]) if graph.is_constant(a) => (*b, Some(*a)),
        _ => return Ok(None),
    };
    let Some(conv) = graph.producer_of(conv_output) else {
        return Ok(None);
    };
    if graph.sole_consumer(conv_output) != Some(node.id) {
        return Ok(None);
    }
    let Some(parts) = ConvParts::of(model, graph, conv)? else {
        return Ok(None);
    };
    let channels = parts.channels();
    let (scale, shift) = match (kind, other) {
        (FoldKind::HardSigmoid, _) => {
            let alpha = f64::from(attribute_f32(model, node, "alpha").unwrap_or(0.2));
            let beta = f64::from(attribute_f32(model, node, "beta").unwrap_or(0.5));
            (vec![alpha; channels], vec![beta; channels])
        }
        (_, Some(name)) => {
            let Some(value) = constant(model, graph, name)? else {
                return Ok(None);
            };
            let Some(factors) = per_channel(&value, channels, parts.output_rank()) else {
                return Ok(None);
            };
            match kind {
                FoldKind::Add => (vec![1.0; channels], factors),
                _ => (factors, vec![0.0; channels]),
            }
        }
        _ => return Ok(None),
    };
    let (weight, bias) = parts.affine(&scale, &shift);
    let bias_name = match conv.inputs.get(2).filter(|b| !b.is_empty()) {
        Some(name) => name.clone(),
        None => graph.fresh_name(made, &format!("{}_bias", conv.name)),
    };
    let then = match kind {
        FoldKind::HardSigmoid => Follower::Clip {
            conv_output: graph.fresh_name(made, &format!("{}_unclipped", node.outputs[0])),
            bounds: ["min", "max"].map(|b| graph.fresh_name(made, &format!("{}_{b}", node.name))),
        },
        _ => Follower::Removed,
    };
    Ok(Some((
        kind,
        ChannelFold {
            conv: conv.id,
            follower: node.id,
            weight,
            bias: (bias_name, bias),
            then,
        },
    )))
}

/// A float attribute of the node `node` is the index of.
fn attribute_f32(model: &Model, node: &Node, name: &str) -> Option<f32> {
    crate::model::attributes::float(&model.graph().node[node.id.0], name)
}

/// Rewrites 2 and 3, one round: each Conv takes at most one fold.
fn fold_into_convs(model: &mut Model) -> Result<SimplifyReport, ModelError> {
    let graph = Graph::build(model);
    let mut report = SimplifyReport::default();
    let mut folds = Vec::new();
    let mut touched = HashSet::new();
    let mut made = HashSet::new();
    for node in graph.nodes() {
        let Some((kind, fold)) = channel_fold(model, &graph, node, &mut made)? else {
            continue;
        };
        if !touched.insert(fold.conv) {
            continue;
        }
        match kind {
            FoldKind::Add => report.bias_adds += 1,
            FoldKind::Mul => report.channel_muls += 1,
            FoldKind::HardSigmoid => report.hard_sigmoids += 1,
        }
        if let Follower::Clip { conv_output, .. } = &fold.then {
            report.unclipped.push(conv_output.clone());
        }
        folds.push(fold);
    }
    if folds.is_empty() {
        return Ok(report);
    }
    let opset = default_opset(model.proto()).unwrap_or(1);
    let Some(g) = model.proto_mut().graph.as_mut() else {
        return Ok(SimplifyReport::default());
    };
    let mut removed = HashSet::new();
    let mut candidates = HashSet::new();
    for fold in folds {
        apply_channel_fold(g, fold, opset, &mut removed, &mut candidates);
    }
    remove_nodes(g, &removed);
    drop_orphans(g, &candidates);
    Ok(report)
}

/// Writes one fold into `g`: the Conv's new weight and bias, and its follower removed or made a
/// Clip. The follower's inputs become candidate orphans.
fn apply_channel_fold(
    g: &mut GraphProto,
    fold: ChannelFold,
    opset: i64,
    removed: &mut HashSet<usize>,
    candidates: &mut HashSet<String>,
) {
    let ChannelFold {
        conv,
        follower,
        weight,
        bias: (bias_name, bias),
        then,
    } = fold;
    let weight_name = g.node[conv.0].input[1].clone();
    let dtype = weight.dtype();
    put_initializer(g, weight.to_proto(&weight_name));
    put_initializer(g, bias.to_proto(&bias_name));
    let conv_node = &mut g.node[conv.0];
    conv_node.input.resize(3, String::new());
    conv_node.input[2] = bias_name;
    match then {
        Follower::Removed => {
            let follower_node = &g.node[follower.0];
            let output = follower_node.output[0].clone();
            candidates.extend(follower_node.input.iter().cloned());
            g.node[conv.0].output[0] = output;
            removed.insert(follower.0);
        }
        Follower::Clip {
            conv_output,
            bounds,
        } => {
            g.node[conv.0].output[0] = conv_output.clone();
            let (inputs, attributes) = clip_bounds(g, bounds, dtype, opset);
            let clip = &mut g.node[follower.0];
            clip.op_type = Some(ops::CLIP.to_owned());
            clip.attribute = attributes;
            clip.input = std::iter::once(conv_output).chain(inputs).collect();
        }
    }
}

/// The bounds of a Clip to [0, 1] as its opset takes them: attributes before opset 11,
/// initializers of `dtype` (the Conv output's type) named `names` from it.
fn clip_bounds(
    g: &mut GraphProto,
    names: [String; 2],
    dtype: DataType,
    opset: i64,
) -> (Vec<String>, Vec<AttributeProto>) {
    use crate::model::proto::attribute_proto::AttributeType;
    let values = [0.0f32, 1.0];
    if opset < 11 {
        let attributes = ["min", "max"]
            .into_iter()
            .zip(values)
            .map(|(name, value)| AttributeProto {
                name: Some(name.to_owned()),
                f: Some(value),
                r#type: Some(AttributeType::Float as i32),
                ..Default::default()
            })
            .collect();
        return (Vec::new(), attributes);
    }
    for (name, value) in names.iter().zip(values) {
        let scalar = TensorArray::Float32(crate::model::tensor::array(vec![], vec![value]));
        g.initializer.push(scalar.cast_float(dtype).to_proto(name));
    }
    (names.to_vec(), Vec::new())
}

/// Rewrite 4: divisions by a finite, non-zero float constant whose dividend an elementwise op
/// writes, as multiplications by the constant's reciprocal (one per divisor). Returns the
/// rewritten nodes' names.
fn divisions_as_products(model: &mut Model) -> Result<Vec<String>, ModelError> {
    let graph = Graph::build(model);
    // Ordered, so that the file is the same every run.
    let mut reciprocals: BTreeMap<String, (String, TensorArray)> = BTreeMap::new();
    let mut rewrites = Vec::new();
    let mut made = HashSet::new();
    for node in graph.nodes() {
        if node.op_type != ops::DIV || !node.is_default_domain() || node.inputs.len() != 2 {
            continue;
        }
        let elementwise = graph.producer_of(&node.inputs[0]).is_some_and(|p| {
            p.is_default_domain() && ELEMENTWISE_DIVIDENDS.contains(&p.op_type.as_str())
        });
        if !elementwise {
            continue;
        }
        let divisor = &node.inputs[1];
        if !reciprocals.contains_key(divisor) {
            let Some(value) = constant(model, &graph, divisor)? else {
                continue;
            };
            let values = value.to_f32();
            let invertible = values.iter().all(|v| v.is_finite() && *v != 0.0);
            // float64 is not quantized (no Q/DQ type): its divisions gain nothing and would
            // lose precision through an f32 reciprocal.
            let quantizable = value.dtype().is_plain_float() && value.dtype() != DataType::Float64;
            if !quantizable || !invertible {
                continue;
            }
            let inverse = TensorArray::Float32(values.mapv(|v| (1.0 / f64::from(v)) as f32))
                .cast_float(value.dtype());
            let name = graph.fresh_name(&mut made, &format!("{divisor}_reciprocal"));
            reciprocals.insert(divisor.clone(), (name, inverse));
        }
        if let Some((reciprocal, _)) = reciprocals.get(divisor) {
            rewrites.push((node.id, reciprocal.clone(), node.name.clone()));
        }
    }
    let Some(g) = model.proto_mut().graph.as_mut() else {
        return Ok(Vec::new());
    };
    for (name, value) in reciprocals.values() {
        g.initializer.push(value.to_proto(name));
    }
    for (id, reciprocal, _) in &rewrites {
        let node = &mut g.node[id.0];
        node.op_type = Some(ops::MUL.to_owned());
        node.input[1] = reciprocal.clone();
    }
    let candidates = reciprocals.into_keys().collect();
    drop_orphans(g, &candidates);
    Ok(rewrites.into_iter().map(|(_, _, name)| name).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelBuilder;
    use ndarray::IxDyn;

    fn array(shape: &[usize], values: &[f32]) -> TensorArray {
        TensorArray::Float32(ArrayD::from_shape_vec(IxDyn(shape), values.to_vec()).unwrap())
    }

    fn stored(model: &Model, name: &str) -> Vec<f32> {
        let t = model.graph().initializer.iter().find(|t| t.name() == name);
        let t = t.unwrap_or_else(|| panic!("no initializer {name}"));
        model
            .tensor_array(t)
            .unwrap()
            .to_f32()
            .iter()
            .copied()
            .collect()
    }

    fn op_types(model: &Model) -> Vec<&str> {
        model.graph().node.iter().map(|n| n.op_type()).collect()
    }

    /// Conv (2 channels, 1×1) → Add(Reshape(bias)) → HardSigmoid → Mul by x → Div by 6.
    fn hard_swish_block(opset: i64) -> Model {
        let mut b = ModelBuilder::new(opset);
        b.input("x", DataType::Float32, &[1, 2, 4, 4]);
        b.initializer("w", array(&[2, 2, 1, 1], &[1.0, 2.0, 3.0, 4.0]));
        b.initializer("bias", array(&[2], &[0.5, -0.5]));
        b.initializer(
            "shape",
            TensorArray::Int64(ArrayD::from_shape_vec(IxDyn(&[4]), vec![1, -1, 1, 1]).unwrap()),
        );
        b.initializer("six", array(&[], &[6.0]));
        b.node("Conv", &["x", "w"], &["c"]).name("conv");
        b.node("Reshape", &["bias", "shape"], &["bias4"])
            .name("reshape");
        b.node("Add", &["c", "bias4"], &["cb"]).name("add");
        b.node("HardSigmoid", &["cb"], &["hs"])
            .name("hs")
            .attr_float("alpha", 0.25);
        b.node("Mul", &["x", "hs"], &["m"]).name("mul");
        b.node("Div", &["m", "six"], &["y"]).name("div");
        b.output("y", DataType::Float32, &[1, 2, 4, 4]);
        b.build()
    }

    #[test]
    fn a_hard_swish_block_becomes_conv_clip_mul_mul() {
        let mut model = hard_swish_block(13);
        let report = simplify(&mut model).unwrap();
        assert_eq!(
            report,
            SimplifyReport {
                reshapes: 1,
                bias_adds: 1,
                channel_muls: 0,
                hard_sigmoids: 1,
                unclipped: vec!["hs_unclipped".to_owned()],
                divisions: vec!["div".to_owned()],
            }
        );
        assert_eq!(op_types(&model), ["Conv", "Clip", "Mul", "Mul"]);
        // (w·x + bias)·0.25 + 0.5 per channel.
        assert_eq!(stored(&model, "w"), [0.25, 0.5, 0.75, 1.0]);
        assert_eq!(stored(&model, "conv_bias"), [0.625, 0.375]);
        let clip = &model.graph().node[1];
        assert_eq!(clip.input[0], "hs_unclipped");
        assert_eq!(clip.output[0], "hs");
        assert_eq!(stored(&model, &clip.input[1]), [0.0]);
        assert_eq!(stored(&model, &clip.input[2]), [1.0]);
        assert_eq!(model.graph().node[0].output[0], "hs_unclipped");
        let div = &model.graph().node[3];
        assert_eq!(
            (div.name(), div.input[1].as_str()),
            ("div", "six_reciprocal")
        );
        assert_eq!(stored(&model, "six_reciprocal"), [1.0 / 6.0]);
        // The reshaped bias, its shape and the divisor are read by nothing now.
        for gone in ["bias", "bias4", "shape", "six"] {
            assert!(
                model.graph().initializer.iter().all(|t| t.name() != gone),
                "{gone}"
            );
        }
    }

    #[test]
    fn before_opset_11_the_clip_takes_attributes() {
        let mut model = hard_swish_block(10);
        simplify(&mut model).unwrap();
        let clip = &model.graph().node[1];
        assert_eq!(clip.input, ["hs_unclipped"]);
        let bound = |name| crate::model::attributes::float(clip, name);
        assert_eq!((bound("min"), bound("max")), (Some(0.0), Some(1.0)));
    }

    #[test]
    fn shared_tensors_and_attention_divisions_stay() {
        let mut b = ModelBuilder::new(13);
        b.input("x", DataType::Float32, &[1, 2, 4, 4]);
        b.input("k", DataType::Float32, &[4, 4]);
        b.initializer("w", array(&[2, 2, 1, 1], &[1.0, 2.0, 3.0, 4.0]));
        b.initializer("b", array(&[1, 2, 1, 1], &[1.0, 2.0]));
        b.initializer("row", array(&[1, 1, 1, 4], &[1.0, 2.0, 3.0, 4.0]));
        b.initializer("eight", array(&[], &[8.0]));
        b.node("Conv", &["x", "w"], &["c"]).name("conv");
        // The Conv's output is read twice: no fold.
        b.node("Add", &["c", "b"], &["y1"]).name("add");
        b.node("Relu", &["c"], &["y2"]).name("relu");
        // Varies along the last axis, not the channels: no fold either way.
        b.node("Mul", &["y2", "row"], &["y3"]).name("mul");
        // Attention scores / √d: the dividend comes from a MatMul.
        b.node("MatMul", &["y3", "k"], &["s"]).name("scores");
        b.node("Div", &["s", "eight"], &["y4"]).name("scale");
        b.output("y1", DataType::Float32, &[1, 2, 4, 4]);
        b.output("y4", DataType::Float32, &[1, 2, 4, 4]);
        let mut model = b.build();
        let report = simplify(&mut model).unwrap();
        assert!(report.is_empty(), "{report:?}");
        assert_eq!(
            op_types(&model),
            ["Conv", "Add", "Relu", "Mul", "MatMul", "Div"]
        );
    }

    #[test]
    fn a_channel_mul_scales_weights_and_bias() {
        let mut b = ModelBuilder::new(13);
        b.input("x", DataType::Float32, &[1, 2, 4, 4]);
        b.initializer("w", array(&[2, 2, 1, 1], &[1.0, 2.0, 3.0, 4.0]));
        b.initializer("b", array(&[2], &[1.0, 1.0]));
        b.initializer("s", array(&[2, 1, 1], &[2.0, -1.0]));
        b.node("Conv", &["x", "w", "b"], &["c"]).name("conv");
        b.node("Mul", &["s", "c"], &["y"]).name("scale");
        b.output("y", DataType::Float32, &[1, 2, 4, 4]);
        let mut model = b.build();
        let report = simplify(&mut model).unwrap();
        assert_eq!(report.channel_muls, 1);
        assert_eq!(op_types(&model), ["Conv"]);
        assert_eq!(model.graph().node[0].output[0], "y");
        assert_eq!(stored(&model, "w"), [2.0, 4.0, -3.0, -4.0]);
        assert_eq!(stored(&model, "b"), [2.0, -1.0]);
    }

    #[test]
    fn reshape_targets_follow_onnx() {
        assert_eq!(reshape_target(&[2, 3], &[0, -1], false), Some(vec![2, 3]));
        assert_eq!(
            reshape_target(&[6], &[1, -1, 1, 1], false),
            Some(vec![1, 6, 1, 1])
        );
        assert_eq!(reshape_target(&[0, 3], &[0, 3], true), Some(vec![0, 3]));
        assert_eq!(reshape_target(&[6], &[4, -1], false), None);
        assert_eq!(reshape_target(&[6], &[-1, -1], false), None);
        assert_eq!(reshape_target(&[6], &[-2, 3], false), None);
    }
}
