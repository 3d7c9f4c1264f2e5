//! What every input of every node of a QDQ variant reads, told in terms of the float model it
//! was made from: the float tensor itself, or a Q/DQ chain over a float tensor or a quantized
//! constant. Two variants that read the same thing at a place give equal keys, so the
//! switchable model holds each distinct chain once.
//!
//! The variants are read back from the quantizer's own output rather than re-derived from its
//! rules: whatever the plan decides (shared scales, ranges that change when a neighbour stays
//! in float, Relu/Clip folded into a range), the switchable model reproduces it.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use prost::Message;

use super::NotSwitchable;
use crate::model::proto::{NodeProto, TensorProto};
use crate::model::{Graph, Model};

/// A place that reads a tensor: one input of one node of the float model (by its index in the
/// graph's node list), or one graph output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Slot {
    /// `input` of the node at `node`.
    Input {
        /// The node's index in the float model's node list.
        node: usize,
        /// The input's position.
        input: usize,
    },
    /// The graph output at this position.
    Output(usize),
}

/// What a slot reads.
#[derive(Debug, Clone)]
pub(super) enum Source {
    /// A tensor of the float model, as it is.
    Float(String),
    /// A DequantizeLinear output.
    Dequantized(Dequantized),
}

/// A Q/DQ chain: DequantizeLinear over a quantized constant, or QuantizeLinear then
/// DequantizeLinear over a float tensor.
#[derive(Debug, Clone)]
pub(super) struct Dequantized {
    /// The float tensor quantized first (a tensor of the float model); `None` for a constant
    /// quantized ahead of time (a weight, a bias).
    pub input: Option<String>,
    /// The chain's nodes in order, as the variant wrote them.
    pub nodes: Vec<NodeProto>,
    /// The initializers the chain reads (scales, zero points, quantized values).
    pub initializers: Vec<TensorProto>,
}

/// The key two equal sources share.
pub(super) type SourceKey = Vec<u8>;

/// Every slot of one variant with the key and source it reads.
pub(super) type VariantSources = HashMap<Slot, (SourceKey, Source)>;

/// The float model a variant is read against: its graph and each node's index by name.
pub(super) struct Base<'a> {
    /// The float model's index.
    pub graph: &'a Graph,
    /// Node index by name.
    pub by_name: HashMap<&'a str, usize>,
}

impl<'a> Base<'a> {
    /// The index over `graph`.
    pub fn new(graph: &'a Graph) -> Self {
        let by_name = graph
            .nodes()
            .iter()
            .map(|n| (n.name.as_str(), n.id.0))
            .collect();
        Base { graph, by_name }
    }
}

/// Whether a node is a Q/DQ node the quantizer wrote.
fn is_qdq(node: &NodeProto) -> bool {
    matches!(node.op_type(), "QuantizeLinear" | "DequantizeLinear")
        && matches!(node.domain(), "" | "ai.onnx" | "com.microsoft")
}

/// Reads `variant` (a QDQ model quantized from `base`'s model) slot by slot. Slots the variant
/// does not have (a Relu folded away, an input an older opset carried as an attribute) read
/// their float tensor.
pub(super) fn read(base: &Base, variant: &Model) -> Result<VariantSources, NotSwitchable> {
    let reader = Reader::new(base, variant);
    let mut sources = float_sources(base);
    for node in &variant.graph().node {
        let Some(&index) = base.by_name.get(node.name()) else {
            if is_qdq(node) {
                continue;
            }
            return Err(NotSwitchable(format!(
                "the quantized model has a {} node ('{}') the float model lacks",
                node.op_type(),
                node.name()
            )));
        };
        let original = base.graph.node(crate::model::NodeId(index));
        if original.op_type != node.op_type() || node.input.len() > original.inputs.len() {
            return Err(NotSwitchable(format!(
                "node '{}' changed its op or inputs in the quantized model",
                node.name()
            )));
        }
        for (input, name) in node.input.iter().enumerate() {
            let slot = Slot::Input { node: index, input };
            sources.insert(slot, reader.resolve(name)?);
        }
    }
    let outputs = base.graph.outputs();
    for output in &variant.graph().output {
        let at = outputs
            .iter()
            .position(|o| o == output.name())
            .ok_or_else(|| NotSwitchable(format!("output '{}' is new", output.name())))?;
        sources.insert(Slot::Output(at), reader.resolve(output.name())?);
    }
    Ok(sources)
}

/// The float model's own sources: every slot reads its tensor as it is (the variant that
/// quantizes nothing).
pub(super) fn float_sources(base: &Base) -> VariantSources {
    let mut sources = VariantSources::new();
    for node in base.graph.nodes() {
        for (input, name) in node.inputs.iter().enumerate() {
            let slot = Slot::Input {
                node: node.id.0,
                input,
            };
            sources.insert(slot, float_source(name));
        }
    }
    for (at, name) in base.graph.outputs().iter().enumerate() {
        sources.insert(Slot::Output(at), float_source(name));
    }
    sources
}

/// A float tensor as a keyed source.
pub(super) fn float_source(name: &str) -> (SourceKey, Source) {
    let mut key = b"f".to_vec();
    key.extend_from_slice(name.as_bytes());
    (key, Source::Float(name.to_owned()))
}

/// Looks up a variant's producers and initializers.
struct Reader<'a> {
    base: &'a Base<'a>,
    producers: HashMap<&'a str, &'a NodeProto>,
    initializers: HashMap<&'a str, &'a TensorProto>,
}

impl<'a> Reader<'a> {
    fn new(base: &'a Base<'a>, variant: &'a Model) -> Self {
        let graph = variant.graph();
        let producers = graph
            .node
            .iter()
            .flat_map(|n| n.output.iter().map(move |o| (o.as_str(), n)))
            .collect();
        let initializers = graph.initializer.iter().map(|t| (t.name(), t)).collect();
        Reader {
            base,
            producers,
            initializers,
        }
    }

    /// What the variant's tensor `name` is, as a source.
    fn resolve(&self, name: &str) -> Result<(SourceKey, Source), NotSwitchable> {
        if name.is_empty() {
            return Ok(float_source(name));
        }
        match self.producers.get(name) {
            Some(dq) if is_qdq(dq) && dq.op_type() == "DequantizeLinear" => self.dequantized(dq),
            Some(q) if is_qdq(q) => Err(NotSwitchable(format!(
                "'{name}' is read while still quantized"
            ))),
            _ => Ok(float_source(&self.float_name(name)?)),
        }
    }

    /// The float model's name for the variant's float tensor `name`: the same name when the
    /// float model has it (a Relu folded into a range leaves its producer writing its output,
    /// whose quantized values the fold keeps exactly), else the output of the node that
    /// writes it (a graph output's producer renamed to feed the output's Q/DQ pair).
    fn float_name(&self, name: &str) -> Result<String, NotSwitchable> {
        if self.base.graph.tensor(name).is_some() {
            return Ok(name.to_owned());
        }
        let unknown = || NotSwitchable(format!("tensor '{name}' has no float counterpart"));
        let producer = self.producers.get(name).ok_or_else(unknown)?;
        let &index = self.base.by_name.get(producer.name()).ok_or_else(unknown)?;
        let at = producer
            .output
            .iter()
            .position(|o| o == name)
            .ok_or_else(unknown)?;
        let original = self.base.graph.node(crate::model::NodeId(index));
        original.outputs.get(at).cloned().ok_or_else(unknown)
    }

    /// A DequantizeLinear over a quantized constant or over a QuantizeLinear of a float
    /// tensor.
    fn dequantized(&self, dq: &'a NodeProto) -> Result<(SourceKey, Source), NotSwitchable> {
        let quantized = dq.input.first().map(String::as_str).unwrap_or_default();
        let (input, nodes) = if self.initializers.contains_key(quantized) {
            (None, vec![dq])
        } else {
            match self.producers.get(quantized) {
                Some(q) if is_qdq(q) && q.op_type() == "QuantizeLinear" => {
                    let float = q.input.first().map(String::as_str).unwrap_or_default();
                    (Some(self.float_name(float)?), vec![*q, dq])
                }
                _ => {
                    return Err(NotSwitchable(format!(
                        "DequantizeLinear '{}' reads neither a constant nor a QuantizeLinear",
                        dq.name()
                    )));
                }
            }
        };
        let mut key = b"d".to_vec();
        key.extend_from_slice(input.as_deref().unwrap_or_default().as_bytes());
        let mut initializers = Vec::new();
        for node in &nodes {
            key.extend_from_slice(node.op_type().as_bytes());
            key.extend_from_slice(node.domain().as_bytes());
            for attribute in &node.attribute {
                attribute
                    .encode(&mut key)
                    .map_err(|e| NotSwitchable(e.to_string()))?;
            }
            for name in &node.input {
                let Some(tensor) = self.initializers.get(name.as_str()) else {
                    continue;
                };
                key.push(b'|');
                key.extend_from_slice(&content_hash(tensor).to_le_bytes());
                if !initializers.iter().any(|t: &TensorProto| t.name() == name) {
                    initializers.push((*tensor).clone());
                }
            }
        }
        let nodes = nodes.into_iter().cloned().collect();
        Ok((
            key,
            Source::Dequantized(Dequantized {
                input,
                nodes,
                initializers,
            }),
        ))
    }
}

/// A hash of a tensor's type, shape and values (its name aside).
fn content_hash(tensor: &TensorProto) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    tensor.dims.hash(&mut hasher);
    tensor.data_type.hash(&mut hasher);
    tensor.raw_data.hash(&mut hasher);
    tensor.int32_data.hash(&mut hasher);
    tensor.int64_data.hash(&mut hasher);
    tensor.uint64_data.hash(&mut hasher);
    tensor.string_data.hash(&mut hasher);
    for f in &tensor.float_data {
        f.to_bits().hash(&mut hasher);
    }
    for d in &tensor.double_data {
        d.to_bits().hash(&mut hasher);
    }
    for entry in &tensor.external_data {
        entry.key.hash(&mut hasher);
        entry.value.hash(&mut hasher);
    }
    hasher.finish()
}
