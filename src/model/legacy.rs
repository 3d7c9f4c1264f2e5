//! Models older than opset 7, brought to opset 7 in memory when they are loaded.
//!
//! ONNX Runtime registers no kernel before opset 7 for Add, Sub, Mul, Div, Pow, Gemm, PRelu,
//! BatchNormalization, Dropout or AveragePool, so such a model (PyTorch's early exports, half of
//! ONNX's own `pytorch-converted` test models) could not even be calibrated. The changes up to
//! opset 7 are small and mechanical, and each is applied here:
//! - the `consumed_inputs` hint (dropped at opset 6) is removed everywhere;
//! - the broadcasting ops lose `broadcast` and `axis`; where the old rule aligned the second
//!   input at `axis` instead of at the end, it gets trailing 1-dims (numpy broadcasting, 7 on);
//! - Gemm loses `broadcast` (C was always broadcast to (M, N));
//! - PRelu's one-dimensional per-channel slope gets trailing 1-dims to broadcast over axis 1;
//! - BatchNormalization and Dropout lose `is_test` (inference is what a session runs);
//! - before 5, Reshape's `shape` attribute becomes its int64 input; before 4, Concat's missing
//!   `axis` is written as 1; before 2, Pad's `paddings` is called `pads`.
//!
//! A node that cannot be brought over (an Upsample before 7, a recurrent op with
//! `output_sequence`, Cast with a string type, the old Tile and Split, a subgraph) leaves the
//! model exactly as it was and says why, so the runtime's own refusal names the real opset.
//! Written by hand: no Rust crate converts opsets (ONNX's converter is C++ behind Python), and
//! this is graph rewriting, the product's core.

use std::collections::{HashMap, HashSet};

use super::TensorArray;
use super::graph::{is_default_domain, overridable_initializers};
use super::proto::attribute_proto::AttributeType;
use super::proto::type_proto::Value;
use super::proto::{AttributeProto, GraphProto, ModelProto, NodeProto, ValueInfoProto};
use crate::model::ops;

/// The oldest default-domain opset ONNX Runtime runs in full.
pub const RUNNABLE_OPSET: i64 = 7;

/// What loading did to a model older than [`RUNNABLE_OPSET`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LegacyOpset {
    /// Upgraded in memory (the file is untouched).
    Upgraded {
        /// The model's own opset.
        from: i64,
        /// Nodes whose attributes or inputs changed.
        nodes_changed: usize,
    },
    /// Left as it was.
    Kept {
        /// The model's own opset.
        from: i64,
        /// The node that stops the upgrade, and why.
        reason: String,
    },
}

impl LegacyOpset {
    /// One line for people.
    pub fn describe(&self) -> String {
        match self {
            LegacyOpset::Upgraded {
                from,
                nodes_changed,
            } => format!(
                "opset {from} upgraded to {RUNNABLE_OPSET} in memory ({nodes_changed} node(s) changed; ONNX Runtime runs nothing older)"
            ),
            LegacyOpset::Kept { from, reason } => {
                format!("opset {from} could not be upgraded to {RUNNABLE_OPSET}: {reason}")
            }
        }
    }
}

/// The broadcasting ops whose `broadcast`/`axis` attributes went away at opset 7.
const BROADCASTING: &[&str] = &[
    ops::ADD,
    ops::SUB,
    ops::MUL,
    ops::DIV,
    ops::POW,
    ops::AND,
    ops::OR,
    ops::XOR,
    ops::EQUAL,
    ops::GREATER,
    ops::LESS,
];

/// Brings `proto` to opset 7 when its default-domain opset is older: `None` when it needs
/// nothing, else the new model (or the reason it stays as it is) and what happened.
pub fn upgrade(proto: &ModelProto) -> Option<(Option<ModelProto>, LegacyOpset)> {
    let from = default_opset(proto).filter(|&v| v < RUNNABLE_OPSET)?;
    let mut out = proto.clone();
    let ir_version = out.ir_version();
    let graph = out.graph.as_mut()?;
    match Upgrader::new(graph, from, ir_version).run(graph) {
        Ok(nodes_changed) => {
            for opset in out
                .opset_import
                .iter_mut()
                .filter(|o| is_default_domain(o.domain()))
            {
                opset.version = Some(RUNNABLE_OPSET);
            }
            out.ir_version = Some(out.ir_version().max(3));
            Some((
                Some(out),
                LegacyOpset::Upgraded {
                    from,
                    nodes_changed,
                },
            ))
        }
        Err(reason) => Some((None, LegacyOpset::Kept { from, reason })),
    }
}

/// The default-domain opset of a model (`None` when it does not import it).
pub fn default_opset(proto: &ModelProto) -> Option<i64> {
    proto
        .opset_import
        .iter()
        .find(|o| is_default_domain(o.domain()))
        .map(|o| o.version())
}

/// Ops whose first output has the rank of their first input.
const RANK_KEEPING: &[&str] = &[
    ops::ABS,
    ops::AVERAGE_POOL,
    ops::BATCH_NORMALIZATION,
    ops::CAST,
    ops::CEIL,
    ops::CLIP,
    ops::CONCAT,
    ops::CONV,
    ops::CONV_TRANSPOSE,
    ops::DROPOUT,
    ops::ELU,
    ops::EXP,
    ops::FLOOR,
    ops::GLOBAL_AVERAGE_POOL,
    ops::GLOBAL_MAX_POOL,
    ops::HARD_SIGMOID,
    ops::IDENTITY,
    ops::INSTANCE_NORMALIZATION,
    ops::LEAKY_RELU,
    ops::LOG,
    ops::LOG_SOFTMAX,
    ops::LRN,
    ops::MAX_POOL,
    ops::NEG,
    ops::NOT,
    ops::PAD,
    ops::P_RELU,
    ops::RECIPROCAL,
    ops::RELU,
    ops::SELU,
    ops::SIGMOID,
    ops::SOFTMAX,
    ops::SOFTPLUS,
    ops::SOFTSIGN,
    ops::SQRT,
    ops::TANH,
    ops::TRANSPOSE,
];

/// Declared shapes (dims unknown as `None`), ranks found so far and the names already taken.
struct Upgrader {
    from: i64,
    /// Initializers a caller may override (graph inputs too, IR 4 on): never copied.
    overridable: HashSet<String>,
    shapes: HashMap<String, Vec<Option<i64>>>,
    ranks: HashMap<String, usize>,
    taken: HashSet<String>,
    new_initializers: Vec<super::proto::TensorProto>,
}

impl Upgrader {
    fn new(graph: &GraphProto, from: i64, ir_version: i64) -> Self {
        let mut shapes = HashMap::new();
        for info in graph
            .input
            .iter()
            .chain(&graph.value_info)
            .chain(&graph.output)
        {
            if let Some(shape) = declared_shape(info) {
                shapes.insert(info.name().to_owned(), shape);
            }
        }
        for init in &graph.initializer {
            shapes.insert(
                init.name().to_owned(),
                init.dims.iter().map(|&d| Some(d)).collect(),
            );
        }
        let taken = graph
            .node
            .iter()
            .flat_map(|n| n.input.iter().chain(&n.output).cloned())
            .chain(graph.initializer.iter().map(|t| t.name().to_owned()))
            .chain(graph.input.iter().map(|i| i.name().to_owned()))
            .collect();
        let overridable = overridable_initializers(graph, ir_version)
            .into_iter()
            .map(str::to_owned)
            .collect();
        let ranks = shapes.iter().map(|(k, v)| (k.clone(), v.len())).collect();
        Upgrader {
            from,
            overridable,
            ranks,
            shapes,
            taken,
            new_initializers: Vec::new(),
        }
    }

    /// Rewrites every node of `graph`; the number changed, or why one cannot be.
    fn run(mut self, graph: &mut GraphProto) -> Result<usize, String> {
        let mut nodes = Vec::with_capacity(graph.node.len());
        let mut changed = 0;
        for mut node in std::mem::take(&mut graph.node) {
            if !is_default_domain(node.domain()) {
                nodes.push(node);
                continue;
            }
            let before = node.clone();
            let mut added = self
                .node(&mut node, graph)
                .map_err(|why| format!("node '{}' ({}): {why}", node.name(), node.op_type()))?;
            changed += usize::from(before != node);
            self.record_rank(&before);
            nodes.append(&mut added);
            nodes.push(node);
        }
        graph.node = nodes;
        graph.initializer.append(&mut self.new_initializers);
        Ok(changed)
    }

    /// Upgrades one node in place; returns nodes to insert before it.
    fn node(&mut self, node: &mut NodeProto, graph: &GraphProto) -> Result<Vec<NodeProto>, String> {
        if node
            .attribute
            .iter()
            .any(|a| a.g.is_some() || !a.graphs.is_empty())
        {
            return Err("it holds a subgraph, which this upgrade does not enter".to_owned());
        }
        remove(node, "consumed_inputs");
        let op = node.op_type().to_owned();
        match op.as_str() {
            op if BROADCASTING.contains(&op) => return self.broadcasting(node, graph),
            ops::GEMM => {
                remove(node, "broadcast");
            }
            ops::P_RELU => return self.prelu(node, graph),
            ops::BATCH_NORMALIZATION | ops::DROPOUT => {
                remove(node, "is_test");
            }
            ops::UPSAMPLE => return Err("Upsample before opset 7 has no opset-7 form".to_owned()),
            ops::RNN | ops::GRU | ops::LSTM if has(node, "output_sequence") => {
                return Err("output_sequence was removed at opset 7".to_owned());
            }
            "Cast"
                if node
                    .attribute
                    .iter()
                    .any(|a| a.name() == "to" && a.s.is_some()) =>
            {
                return Err("its target type is a string (Cast before opset 6)".to_owned());
            }
            ops::TILE if self.from < 6 && node.input.len() > 2 => {
                return Err("Tile before opset 6 took tiles and axis inputs".to_owned());
            }
            ops::SPLIT if self.from < 2 && node.input.len() > 1 => {
                return Err("Split before opset 2 took split sizes as an input".to_owned());
            }
            ops::RESHAPE if self.from < 5 => self.reshape(node),
            ops::CONCAT if self.from < 4 && !has(node, "axis") => {
                node.attribute.push(int_attribute("axis", 1));
            }
            ops::PAD if self.from < 2 => {
                for a in node.attribute.iter_mut().filter(|a| a.name() == "paddings") {
                    a.name = Some("pads".to_owned());
                }
            }
            _ => {}
        }
        Ok(Vec::new())
    }

    /// The old rule aligned B with A at `axis`; numpy aligns at the end, so B gets the
    /// trailing 1-dims it lacks.
    fn broadcasting(
        &mut self,
        node: &mut NodeProto,
        graph: &GraphProto,
    ) -> Result<Vec<NodeProto>, String> {
        let broadcast = int(node, "broadcast").unwrap_or(0);
        let axis = int(node, "axis");
        remove(node, "broadcast");
        remove(node, "axis");
        let (Some(axis), 1) = (axis, broadcast) else {
            return Ok(Vec::new());
        };
        let (Some(a), Some(b)) = (node.input.first(), node.input.get(1)) else {
            return Ok(Vec::new());
        };
        let rank = |name: &str| self.ranks.get(name).copied();
        let (Some(rank_a), Some(rank_b)) = (rank(a), rank(b)) else {
            return Err(format!(
                "it broadcasts along axis {axis} and the ranks of '{a}' and '{b}' are not declared"
            ));
        };
        let axis = if axis < 0 { axis + rank_a as i64 } else { axis };
        let trailing = rank_a as i64 - axis - rank_b as i64;
        if axis < 0 || trailing < 0 {
            return Err(format!(
                "axis {axis} does not fit ranks {rank_a} and {rank_b}"
            ));
        }
        self.trailing_ones(node, 1, trailing as usize, graph)
    }

    /// A one-dimensional slope of C values applied per channel (axis 1) of a rank-r input.
    fn prelu(
        &mut self,
        node: &mut NodeProto,
        graph: &GraphProto,
    ) -> Result<Vec<NodeProto>, String> {
        let (Some(x), Some(slope)) = (node.input.first(), node.input.get(1)) else {
            return Ok(Vec::new());
        };
        let Some(shape) = self.shapes.get(slope) else {
            return Err(format!("the shape of its slope '{slope}' is not declared"));
        };
        let per_channel = shape.len() == 1 && shape[0] != Some(1);
        if !per_channel {
            return Ok(Vec::new());
        }
        let Some(rank) = self.ranks.get(x).copied() else {
            return Err(format!("the rank of its input '{x}' is not declared"));
        };
        self.trailing_ones(node, 1, rank.saturating_sub(2), graph)
    }

    /// Gives input `at` of `node` `count` trailing 1-dims: an initializer is copied with the
    /// new dims (the data is the same), anything else goes through an Unsqueeze.
    fn trailing_ones(
        &mut self,
        node: &mut NodeProto,
        at: usize,
        count: usize,
        graph: &GraphProto,
    ) -> Result<Vec<NodeProto>, String> {
        if count == 0 {
            return Ok(Vec::new());
        }
        let name = node.input[at].clone();
        let rank = self.ranks.get(&name).copied().unwrap_or(0);
        let renamed = self.fresh(&format!("{name}_unsqueezed"));
        node.input[at] = renamed.clone();
        if !self.overridable.contains(&name)
            && let Some(init) = graph.initializer.iter().find(|t| t.name() == name)
        {
            let mut copy = init.clone();
            copy.name = Some(renamed);
            copy.dims.extend(std::iter::repeat_n(1, count));
            self.new_initializers.push(copy);
            return Ok(Vec::new());
        }
        let axes: Vec<i64> = (rank..rank + count).map(|a| a as i64).collect();
        let mut unsqueeze = NodeProto {
            op_type: Some("Unsqueeze".to_owned()),
            input: vec![name],
            output: vec![renamed],
            ..Default::default()
        };
        if !node.name().is_empty() {
            unsqueeze.name = Some(self.fresh(&format!("{}_unsqueeze", node.name())));
        }
        unsqueeze.attribute.push(AttributeProto {
            name: Some("axes".to_owned()),
            r#type: Some(AttributeType::Ints as i32),
            ints: axes,
            ..Default::default()
        });
        Ok(vec![unsqueeze])
    }

    /// Records the rank of `node`'s first output (as the old op computes it) where it follows
    /// from its inputs' ranks, so later nodes without declared shapes can be upgraded.
    fn record_rank(&mut self, node: &NodeProto) {
        let Some(out) = node.output.first() else {
            return;
        };
        let rank_of = |i: usize| node.input.get(i).and_then(|n| self.ranks.get(n)).copied();
        let op = node.op_type();
        let rank = match op {
            // The old broadcast keeps A's shape; the new one takes the larger rank.
            _ if BROADCASTING.contains(&op) => match (rank_of(0), rank_of(1)) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (Some(a), None) if int(node, "broadcast") == Some(1) => Some(a),
                _ => None,
            },
            _ if RANK_KEEPING.contains(&op) => rank_of(0),
            ops::GEMM | ops::FLATTEN => Some(2),
            ops::MAT_MUL => rank_of(0).zip(rank_of(1)).map(|(a, b)| a.max(b)),
            ops::RESHAPE => match ints(node, "shape") {
                Some(shape) => Some(shape.len()),
                None => node
                    .input
                    .get(1)
                    .and_then(|s| self.shapes.get(s))
                    .and_then(|s| s.first().copied().flatten())
                    .map(|n| n as usize),
            },
            ops::UNSQUEEZE => rank_of(0).zip(ints(node, "axes")).map(|(r, a)| r + a.len()),
            ops::SQUEEZE => rank_of(0)
                .zip(ints(node, "axes"))
                .map(|(r, a)| r.saturating_sub(a.len())),
            _ => None,
        };
        if let Some(rank) = rank {
            self.ranks.entry(out.clone()).or_insert(rank);
        }
    }

    /// Reshape-1's `shape` attribute becomes the int64 input Reshape-5 reads.
    fn reshape(&mut self, node: &mut NodeProto) {
        let Some(at) = node.attribute.iter().position(|a| a.name() == "shape") else {
            return;
        };
        let values = node.attribute.remove(at).ints;
        let name = self.fresh(&format!("{}_shape", node.name()));
        let tensor = TensorArray::Int64(super::tensor::array(vec![values.len()], values));
        self.new_initializers.push(tensor.to_proto(&name));
        node.input.truncate(1);
        node.input.push(name);
    }

    /// `base`, or `base_N`, whichever no tensor is called yet.
    fn fresh(&mut self, base: &str) -> String {
        let mut name = base.to_owned();
        let mut n = 1;
        while self.taken.contains(&name) {
            name = format!("{base}_{n}");
            n += 1;
        }
        self.taken.insert(name.clone());
        name
    }
}

fn declared_shape(info: &ValueInfoProto) -> Option<Vec<Option<i64>>> {
    let Some(Value::TensorType(t)) = info.r#type.as_ref()?.value.as_ref() else {
        return None;
    };
    let dims = &t.shape.as_ref()?.dim;
    Some(
        dims.iter()
            .map(|d| match d.value {
                Some(super::proto::tensor_shape_proto::dimension::Value::DimValue(v)) => Some(v),
                _ => None,
            })
            .collect(),
    )
}

fn has(node: &NodeProto, name: &str) -> bool {
    node.attribute.iter().any(|a| a.name() == name)
}

fn int(node: &NodeProto, name: &str) -> Option<i64> {
    node.attribute
        .iter()
        .find(|a| a.name() == name)
        .map(|a| a.i())
}

fn ints(node: &NodeProto, name: &str) -> Option<Vec<i64>> {
    node.attribute
        .iter()
        .find(|a| a.name() == name)
        .map(|a| a.ints.clone())
}

fn remove(node: &mut NodeProto, name: &str) {
    node.attribute.retain(|a| a.name() != name);
}

fn int_attribute(name: &str, value: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.to_owned()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(value),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DataType, ModelBuilder};

    fn upgraded(b: &ModelBuilder) -> (Option<ModelProto>, LegacyOpset) {
        upgrade(b.build().proto()).expect("an old opset is looked at")
    }

    fn op_count(proto: &ModelProto, op: &str) -> usize {
        let nodes = &proto.graph.as_ref().expect("graph").node;
        nodes.iter().filter(|n| n.op_type() == op).count()
    }

    #[test]
    fn new_models_are_left_alone() {
        let mut b = ModelBuilder::new(7);
        b.input("x", DataType::Float32, &[1]);
        b.node("Relu", &["x"], &["y"]);
        b.output("y", DataType::Float32, &[1]);
        assert!(upgrade(b.build().proto()).is_none());
    }

    #[test]
    fn old_attributes_move_and_ranks_follow_through_the_graph() {
        let mut b = ModelBuilder::new(3);
        b.input("x", DataType::Float32, &[2, 3, 4]);
        b.input("z", DataType::Float32, &[3]);
        b.node("Relu", &["x"], &["r"])
            .name("relu")
            .attr_ints("consumed_inputs", &[0]);
        // r's rank (3) is known only through the Relu: z needs one trailing 1-dim.
        b.node("Mul", &["r", "z"], &["m"])
            .name("mul")
            .attr_int("broadcast", 1)
            .attr_int("axis", 1);
        b.node("Reshape", &["m"], &["flat"])
            .name("reshape")
            .attr_ints("shape", &[6, 4]);
        b.node("Concat", &["flat", "flat"], &["y"]).name("concat");
        b.output("y", DataType::Float32, &[12, 4]);
        let (proto, outcome) = upgraded(&b);
        let proto = proto.expect("upgraded");
        assert_eq!(
            outcome,
            LegacyOpset::Upgraded {
                from: 3,
                nodes_changed: 4
            }
        );
        assert_eq!(op_count(&proto, "Unsqueeze"), 1);
        let graph = proto.graph.as_ref().expect("graph");
        let mul = graph.node.iter().find(|n| n.name() == "mul").expect("mul");
        assert!(mul.attribute.is_empty());
        assert_eq!(mul.input[1], "z_unsqueezed");
        let reshape = graph
            .node
            .iter()
            .find(|n| n.name() == "reshape")
            .expect("reshape");
        assert_eq!(reshape.input.len(), 2);
        assert!(
            graph
                .initializer
                .iter()
                .any(|t| t.name() == reshape.input[1])
        );
        let concat = graph
            .node
            .iter()
            .find(|n| n.name() == "concat")
            .expect("concat");
        assert_eq!(int(concat, "axis"), Some(1));
        assert_eq!(default_opset(&proto), Some(RUNNABLE_OPSET));
    }

    #[test]
    fn a_node_without_an_opset_7_form_keeps_the_model_as_it_was() {
        let mut b = ModelBuilder::new(6);
        b.input("x", DataType::Float32, &[1, 1, 2, 2]);
        b.node("Upsample", &["x"], &["y"])
            .name("up")
            .attr_float("height_scale", 2.0)
            .attr_float("width_scale", 2.0);
        b.output("y", DataType::Float32, &[1, 1, 4, 4]);
        let (proto, outcome) = upgraded(&b);
        assert!(proto.is_none());
        assert_eq!(
            outcome.describe(),
            "opset 6 could not be upgraded to 7: node 'up' (Upsample): Upsample before opset 7 has no opset-7 form"
        );
    }
}
