//! Local error per tensor: a node's own quantization measured with float inputs, told apart
//! from the cumulative error (everything upstream quantized too, [`crate::eval::tensor_error::tensors`]). A node
//! whose cumulative error is poor but whose local error is fine only carries an error made
//! upstream; the node with the poor local error is the cause.
//!
//! One session gives every node's local error at once: the float model, and beside it a copy
//! of each quantized node of the QDQ model whose inputs are the float model's tensors passed
//! through the node's own Q/DQ chains, its weights dequantized as in the QDQ model and its
//! output through a copy of the Q/DQ the QDQ model puts there. Each copy so carries its node's
//! quantization alone (inputs, weights, output). The errors are summed inside the graph by
//! qdq-studio's own operator ([`crate::eval::tensor_error::error_sums`]), which reads the copy's integer output
//! and the float tensor once, so a run hands back two sums per tensor rather than the
//! tensors (all in one output, gathered by a chain that also orders the run, [`gathered`]),
//! and runs with every graph optimization: ONNX Runtime's fused integer kernels
//! compute the copies as they would in deployment.

use std::collections::{BTreeMap, HashMap, HashSet};

use ort::session::Session;
use serde::Serialize;

use crate::eval::compare::EvalError;
use crate::model::builder::value_info;
use crate::model::infer::elem_types;
use crate::model::ops;
use crate::model::pinned::pin_sample_shapes;
use crate::model::proto::{ModelProto, NodeProto, OperatorSetIdProto, TensorProto};
use crate::model::{DataType, Graph, Model, NodeId, SessionModel, TensorKind};
use crate::quant::cpu_session_options;
use crate::quant::rescaled::ChannelFactors;
use crate::runtime::{EpSpec, Runtime, RuntimeError};
use crate::util::sqnr_db;

/// The suffix of every name the local model adds.
const SUFFIX: &str = "__qdq_studio_local";

/// The local error of one tensor.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LocalError {
    /// The float model's tensor name.
    pub tensor: String,
    /// SQNR (dB) of the float model's tensor against the value its producer computes from
    /// float inputs with only its own quantization.
    pub sqnr_db: f64,
}

/// A tensor whose local error is measured, and where the QDQ model computes it.
#[derive(Debug, Clone)]
pub enum Target {
    /// An activation quantized by a Q→DQ pair (the local value is the pair's input, as the
    /// copied producer computes it, through a copy of the pair).
    Pair {
        /// The float model's name of the tensor.
        float: String,
        /// The QuantizeLinear.
        q: NodeId,
        /// The DequantizeLinear reading it.
        dq: NodeId,
    },
    /// The output of a layer whose weight alone is quantized, named alike in both models.
    Output(String),
}

impl Target {
    /// The float model's name of the tensor.
    pub(crate) fn float(&self) -> &str {
        match self {
            Target::Pair { float, .. } => float,
            Target::Output(name) => name,
        }
    }
}

/// Why the local errors cannot be measured on a pair of models.
#[derive(Debug, thiserror::Error)]
pub enum LocalUnavailable {
    /// Both models keep weights in external files of different folders; one session reads
    /// external data from one folder.
    #[error(
        "both models keep their weights in external files of different folders, and one session reads them from one"
    )]
    ExternalFolders,
    /// The float model's opset cannot be raised to the QDQ model's.
    #[error("the float model cannot be raised to the QDQ model's opset: {0}")]
    Opset(String),
    /// The model could not be encoded.
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
}

impl From<LocalUnavailable> for EvalError {
    fn from(e: LocalUnavailable) -> Self {
        EvalError::LocalUnavailable(e.to_string())
    }
}

/// The float model with every quantized node's local copy and the in-graph error sums,
/// encoded for a session (see the module docs).
pub struct LocalModel {
    encoded: SessionModel,
    /// The float model's tensors measured.
    tensors: Vec<String>,
    /// The one graph output: per measured tensor, in the order of `tensors`, the pair
    /// `[Σ float², Σ error²]` ([`gathered`]); `None` when nothing is measured.
    output: Option<String>,
    /// The options its session takes (those of the QDQ model on the CPU).
    options: crate::runtime::SessionOptions,
    /// Bytes of the two models' initializers, which its session holds (a copy of each).
    weight_bytes: u64,
}

/// True for the ops that make up a Q/DQ chain.
fn is_qdq(op: &str) -> bool {
    ops::is_quantizer(op)
}

/// A node of the default domain with one output and no attributes.
fn node(op: &str, inputs: Vec<String>, output: &str) -> NodeProto {
    NodeProto {
        op_type: Some(op.to_owned()),
        name: Some(format!("{output}_node")),
        input: inputs,
        output: vec![output.to_owned()],
        ..Default::default()
    }
}

/// What the copies of the QDQ model's nodes are made of, gathered walking back from each
/// measured tensor.
struct Copier<'a> {
    quant: &'a ModelProto,
    qg: &'a Graph,
    /// The float model's name of each QDQ-model activation that a node computes and the float
    /// model has: the copies read these from the float model.
    twins: HashMap<String, String>,
    initializers: HashMap<&'a str, &'a TensorProto>,
    /// Copied nodes, inputs before the nodes reading them.
    nodes: Vec<NodeProto>,
    copied: HashSet<NodeId>,
    copied_initializers: Vec<TensorProto>,
    initializer_names: HashSet<String>,
    /// Float tensors the copies read rescaled, with their factors per channel.
    input_scales: &'a HashMap<String, ChannelFactors>,
    /// Activations the copies recompute as the QDQ model does rather than read as float.
    recomputed: &'a HashSet<String>,
    /// Element types of the QDQ model's tensors.
    types: HashMap<String, i32>,
}

impl<'a> Copier<'a> {
    fn new(
        quant: &'a Model,
        qg: &'a Graph,
        fg: &Graph,
        rescaled: (&'a HashMap<String, ChannelFactors>, &'a HashSet<String>),
    ) -> Self {
        let (input_scales, recomputed) = rescaled;
        let types = elem_types(quant, qg);
        let twins = qg
            .tensors()
            .iter()
            .filter(|t| t.kind == TensorKind::Activation)
            .filter(|t| t.producer.is_some_and(|p| !is_qdq(&qg.node(p).op_type)))
            .filter(|t| {
                types
                    .get(&t.name)
                    .and_then(|&c| DataType::from_onnx(c).ok())
                    .is_some_and(DataType::is_plain_float)
            })
            .filter_map(|t| {
                let float = [
                    t.name.as_str(),
                    t.name.trim_end_matches("_QuantizeLinear_Input"),
                ]
                .into_iter()
                .find(|n| fg.tensor(n).is_some())?;
                Some((t.name.clone(), float.to_owned()))
            })
            .collect();
        let proto = quant.proto();
        let initializers = proto
            .graph
            .iter()
            .flat_map(|g| &g.initializer)
            .map(|t| (t.name(), t))
            .collect();
        Copier {
            quant: proto,
            qg,
            twins,
            initializers,
            nodes: Vec::new(),
            copied: HashSet::new(),
            copied_initializers: Vec::new(),
            initializer_names: HashSet::new(),
            input_scales,
            recomputed,
            types,
        }
    }

    /// The float tensor `float` as the copies read it: multiplied by its factors per channel
    /// when it is one of `input_scales` (once, however many copies read it).
    fn float_input(&mut self, quant_name: &str, float: String) -> String {
        let Some(factors) = self.input_scales.get(&float) else {
            return float;
        };
        let scaled = format!("{float}{SUFFIX}_rescaled");
        let factor = format!("{float}{SUFFIX}_factors");
        if self.initializer_names.insert(factor.clone()) {
            let dtype = self
                .types
                .get(quant_name)
                .and_then(|&c| DataType::from_onnx(c).ok())
                .unwrap_or(DataType::Float32);
            let tensor = crate::model::TensorArray::Float32(factors.array()).cast_float(dtype);
            self.copied_initializers.push(tensor.to_proto(&factor));
            self.nodes
                .push(node("Mul", vec![float.clone(), factor], &scaled));
        }
        scaled
    }

    /// The name a copy reads for the QDQ model's tensor `name`: the float model's tensor for
    /// an activation a node computes, else the copy of what makes it (a Q/DQ chain, a
    /// quantized weight), or the name itself (graph inputs, which both models share).
    fn resolve(&mut self, name: &str) -> String {
        if name.is_empty() {
            return String::new();
        }
        if self.recomputed.contains(name) {
            return self.computed(name);
        }
        if let Some(float) = self.twins.get(name).cloned() {
            return self.float_input(name, float);
        }
        self.computed(name)
    }

    /// The copy of `name` as the QDQ model computes it (its producer copied even when the
    /// float model has the tensor: the measured tensors themselves).
    fn computed(&mut self, name: &str) -> String {
        if let Some(init) = self.initializers.get(name).copied() {
            let copy = format!("{name}{SUFFIX}");
            if self.initializer_names.insert(copy.clone()) {
                let mut init = init.clone();
                init.name = Some(copy.clone());
                self.copied_initializers.push(init);
            }
            return copy;
        }
        match self.qg.tensor(name).and_then(|t| t.producer) {
            Some(id) => {
                self.copy_node(id);
                format!("{name}{SUFFIX}")
            }
            None => name.to_owned(),
        }
    }

    /// Copies node `id` after its inputs, every name it writes suffixed.
    fn copy_node(&mut self, id: NodeId) {
        if !self.copied.insert(id) {
            return;
        }
        let quant = self.quant;
        let Some(original) = quant.graph.as_ref().and_then(|g| g.node.get(id.0)) else {
            return;
        };
        let inputs: Vec<String> = original.input.iter().map(|i| self.resolve(i)).collect();
        self.nodes.push(self.renamed(original, inputs));
    }

    /// `original` reading `inputs`, its outputs and name suffixed.
    fn renamed(&self, original: &NodeProto, inputs: Vec<String>) -> NodeProto {
        let mut copy = original.clone();
        copy.input = inputs;
        for output in copy.output.iter_mut().filter(|o| !o.is_empty()) {
            output.push_str(SUFFIX);
        }
        copy.name = Some(format!("{}{SUFFIX}", original.name()));
        copy
    }

    /// The local value of `target`: its copy, read as the pair's integer output when the
    /// error-sum operator can dequantize it ([`Copier::dequantizer`]), else as float.
    fn target(&mut self, target: &Target, index: usize) -> Option<Local> {
        match target {
            Target::Output(name) => Some(Local::Float(self.computed(name))),
            Target::Pair { q, dq, .. } => {
                let quant = self.quant;
                let graph = quant.graph.as_ref()?;
                let (q, dq) = (graph.node.get(q.0)?, graph.node.get(dq.0)?);
                // The pair's input as its producer computes it, not the float model's.
                let mut q_inputs = vec![self.computed(q.input.first()?)];
                q_inputs.extend(q.input.iter().skip(1).map(|i| self.resolve(i)));
                let mut dq_inputs: Vec<String> = dq.input.iter().map(|i| self.resolve(i)).collect();
                if dq_inputs.is_empty() {
                    return None;
                }
                let quantized = format!("qdq_studio_local_q{index}");
                let local = format!("qdq_studio_local_v{index}");
                let mut q_copy = q.clone();
                q_copy.input = q_inputs;
                q_copy.output = vec![quantized.clone()];
                q_copy.name = Some(format!("qdq_studio_local_Q{index}"));
                self.nodes.push(q_copy);
                if self.dequantizer(q, dq) {
                    dq_inputs.truncate(3);
                    return Some(Local::Quantized {
                        values: quantized,
                        dequantize: dq_inputs.split_off(1),
                    });
                }
                dq_inputs[0] = quantized;
                let mut dq_copy = dq.clone();
                dq_copy.input = dq_inputs;
                dq_copy.output = vec![local.clone()];
                dq_copy.name = Some(format!("qdq_studio_local_DQ{index}"));
                self.nodes.push(dq_copy);
                Some(Local::Float(local))
            }
        }
    }
}

/// A measured tensor's local value as the error sums read it.
enum Local {
    /// A float tensor of the float model's type.
    Float(String),
    /// A pair's integer output and the copied scale and zero point that dequantize it.
    Quantized {
        values: String,
        dequantize: Vec<String>,
    },
}

impl Copier<'_> {
    /// Whether the error-sum operator can read the integer output of the pair `q`→`dq`
    /// itself: a float32 scale of one value and an 8- or 16-bit integer output (its zero
    /// point's type, or uint8 when the pair has none and no other output type is set).
    fn dequantizer(&self, q: &NodeProto, dq: &NodeProto) -> bool {
        let initializer = |i: usize| {
            dq.input
                .get(i)
                .filter(|name| !name.is_empty())
                .and_then(|name| self.initializers.get(name.as_str()))
        };
        let single = |t: &TensorProto| t.dims.iter().product::<i64>() == 1;
        let Some(scale) = initializer(1) else {
            return false;
        };
        let integer = match initializer(2) {
            Some(zero) => single(zero).then(|| zero.data_type()),
            None if q.attribute.iter().all(|a| a.name() != "output_dtype") => {
                Some(DataType::Uint8.to_onnx())
            }
            None => None,
        };
        let readable = [
            DataType::Uint8,
            DataType::Int8,
            DataType::Uint16,
            DataType::Int16,
        ]
        .map(DataType::to_onnx);
        scale.data_type() == DataType::Float32.to_onnx()
            && single(scale)
            && integer.is_some_and(|t| readable.contains(&t))
    }
}

/// The nodes summing the error of `local` against the float tensor `float` into the pair
/// `sums` ([`crate::eval::tensor_error::error_sums`]). Unless the tensor is known to be float32 (`float32`
/// false), the float tensor and a float local value are cast to float32 first, which the
/// operator reads (a float16 model's sums then do not overflow either).
fn error_sums(float: &str, local: Local, index: usize, float32: bool) -> (Vec<NodeProto>, String) {
    let name = |what: &str| format!("qdq_studio_local_{what}{index}");
    let sums = name("sums");
    let mut nodes = Vec::new();
    let mut to_f32 = |input: String, output: String| match float32 {
        true => input,
        false => {
            let mut cast = node("Cast", vec![input], &output);
            cast.attribute
                .push(crate::quant::rewrite::int_attr("to", 1));
            nodes.push(cast);
            output
        }
    };
    let float = to_f32(float.to_owned(), name("f"));
    let mut inputs = vec![float];
    match local {
        Local::Float(local) => inputs.push(to_f32(local, name("l"))),
        Local::Quantized { values, dequantize } => {
            inputs.push(values);
            inputs.extend(dequantize);
        }
    }
    let mut sum = node(crate::eval::tensor_error::error_sums::OP, inputs, &sums);
    sum.domain = Some(crate::eval::tensor_error::error_sums::DOMAIN.to_owned());
    nodes.push(sum);
    (nodes, sums)
}

/// The float model's `nodes` with each of `added` placed as soon as its inputs are computed
/// (`available` holds the graph inputs and initializers), rather than all at the end: the
/// float tensors are then not all alive to the graph's end, and ONNX Runtime plans the
/// session in 1.5 s rather than 2.4 s on PP-OCR rec (measured). `added` is in dependency
/// order among itself.
fn interleaved(
    nodes: Vec<NodeProto>,
    added: Vec<NodeProto>,
    mut available: HashSet<String>,
) -> Vec<NodeProto> {
    available.insert(String::new());
    let mut order = Interleaving {
        missing: Vec::with_capacity(added.len()),
        waiting: HashMap::new(),
        ready: std::collections::VecDeque::new(),
        added: Vec::with_capacity(added.len()),
        out: Vec::with_capacity(nodes.len() + added.len()),
    };
    for (j, node) in added.into_iter().enumerate() {
        let absent: HashSet<&String> = node
            .input
            .iter()
            .filter(|t| !available.contains(*t))
            .collect();
        order.missing.push(absent.len());
        for tensor in absent {
            order.waiting.entry(tensor.clone()).or_default().push(j);
        }
        if order.missing[j] == 0 {
            order.ready.push_back(j);
        }
        order.added.push(Some(node));
    }
    order.drain();
    for node in nodes {
        order.emit(node);
        order.drain();
    }
    // Nodes whose inputs never appeared (a tensor neither model computes) go last, where
    // ONNX Runtime names what is missing.
    let Interleaving { mut out, added, .. } = order;
    out.extend(added.into_iter().flatten());
    out
}

/// The state of [`interleaved`]: added nodes waiting on tensors, those ready, and the order.
struct Interleaving {
    missing: Vec<usize>,
    waiting: HashMap<String, Vec<usize>>,
    ready: std::collections::VecDeque<usize>,
    added: Vec<Option<NodeProto>>,
    out: Vec<NodeProto>,
}

impl Interleaving {
    /// Places `node`, readying the added nodes that waited on its outputs.
    fn emit(&mut self, node: NodeProto) {
        for output in &node.output {
            for j in self.waiting.remove(output).unwrap_or_default() {
                self.missing[j] -= 1;
                if self.missing[j] == 0 {
                    self.ready.push_back(j);
                }
            }
        }
        self.out.push(node);
    }

    /// Places every added node that is ready (and those it readies).
    fn drain(&mut self) {
        while let Some(j) = self.ready.pop_front() {
            if let Some(node) = self.added[j].take() {
                self.emit(node);
            }
        }
    }
}

/// Folds into a tensor's error sums the QuantizeLinear that quantizes the same float tensor
/// by the same scale and zero point for the copies reading it: the sums' node becomes
/// `ErrorSumsAndQuantize` ([`crate::eval::tensor_error::error_sums`]), which writes that quantizer's output, and
/// the quantizer is dropped from `copies`. The float tensor is then read once for both (the
/// quantizers and the sums were each bound by reading it: PP-OCR rec's 365 QuantizeLinear
/// took 14 ms a sample and its 339 sums 15 ms). A quantizer is folded only when it is plain
/// (no attribute: per-tensor, the integer type of its zero point or uint8) and its inputs
/// name exactly the float tensor, scale and zero point the sums read; any other stays.
fn fuse_quantizers(
    copies: &mut Vec<NodeProto>,
    sums: &mut [NodeProto],
    initializers: &[TensorProto],
) {
    let mut quantizers: HashMap<&[String], usize> = HashMap::new();
    for (i, q) in copies.iter().enumerate() {
        let plain = q.op_type() == ops::QUANTIZE_LINEAR
            && q.domain().is_empty()
            && q.attribute.is_empty()
            && (2..=3).contains(&q.input.len())
            && q.output.len() == 1;
        if plain {
            quantizers.entry(&q.input).or_insert(i);
        }
    }
    // The integer type of a zero point (uint8 without one, as QuantizeLinear's default).
    let types: HashMap<&str, i32> = initializers
        .iter()
        .map(|t| (t.name(), t.data_type()))
        .collect();
    let integer = |zero: Option<&String>| match zero {
        None => Some(DataType::Uint8),
        Some(name) => types
            .get(name.as_str())
            .and_then(|&t| DataType::from_onnx(t).ok()),
    };
    let mut folded = HashSet::new();
    for sum in sums
        .iter_mut()
        .filter(|n| n.op_type() == crate::eval::tensor_error::error_sums::OP)
    {
        // [float, integer local value, scale, zero point?]: the quantizer's inputs are the
        // float tensor with that scale and zero point.
        if !(3..=4).contains(&sum.input.len()) {
            continue;
        }
        let mut inputs = vec![sum.input[0].clone()];
        inputs.extend(sum.input[2..].iter().cloned());
        let Some(&i) = quantizers.get(inputs.as_slice()) else {
            continue;
        };
        let Some(op) = integer(sum.input.get(3))
            .and_then(crate::eval::tensor_error::error_sums::quantizing_op)
        else {
            continue;
        };
        if folded.insert(i) {
            sum.op_type = Some(op.to_owned());
            sum.output.push(copies[i].output[0].clone());
        }
    }
    let mut index = 0;
    copies.retain(|_| {
        index += 1;
        !folded.contains(&(index - 1))
    });
}

/// The nodes gathering every tensor's pair of sums, `pairs` in order, into one output, and
/// its name (`None` for no pairs): one Concat of every pair, followed by one pair more, the
/// end of a chain of Maxes through the pairs in order (each link the Max of the link before
/// and the next pair), whose values are not read.
///
/// The chain sets the order the session runs the nodes in. ONNX Runtime orders them by a
/// depth-first walk back from the graph's leaves, the leaf placed last first, each node's
/// inputs taken latest placed first. With each pair an output of its own, the last pair's
/// leaf came first: the whole float model ran before any copy, every float tensor stayed
/// alive to its sums at the end, and the nodes read them back from memory rather than cache
/// (PP-OCR rec: 123 ms a sample, the float model's Adds at 4 times their cost alone). The
/// Concat, placed last, is the one leaf; the chain's end is its latest placed input, and
/// each link reaches the pairs before its own first: the session measures tensor after
/// tensor as the float model computes them (85 ms a sample, ONNX Runtime's profile). Each
/// link holds one pair, so the nodes grow with the tensors measured, not their square.
fn gathered(pairs: &[String]) -> (Vec<NodeProto>, Option<String>) {
    let Some(first) = pairs.first() else {
        return (Vec::new(), None);
    };
    let mut nodes = Vec::new();
    let mut link = first.clone();
    for (i, pair) in pairs.iter().enumerate().skip(1) {
        let output = format!("qdq_studio_local_order{i}");
        nodes.push(node("Max", vec![link, pair.clone()], &output));
        link = output;
    }
    let output = "qdq_studio_local_gathered";
    let mut inputs = pairs.to_vec();
    inputs.push(link);
    let mut concat = node("Concat", inputs, output);
    concat
        .attribute
        .push(crate::quant::rewrite::int_attr("axis", 0));
    nodes.push(concat);
    (nodes, Some(output.to_owned()))
}

/// Every opset the two models import, each at the higher version.
fn merged_imports(
    float: &ModelProto,
    quant: &ModelProto,
) -> Vec<crate::model::proto::OperatorSetIdProto> {
    let mut merged = float.opset_import.clone();
    for import in &quant.opset_import {
        let domain = |d: &str| if d == "ai.onnx" { "" } else { d }.to_owned();
        match merged
            .iter_mut()
            .find(|m| domain(m.domain()) == domain(import.domain()))
        {
            Some(m) => m.version = Some(m.version().max(import.version())),
            None => merged.push(import.clone()),
        }
    }
    merged
}

/// The float tensors whose rank a run must show before the float model's opset can be raised
/// to the QDQ model's (empty when the graph says all it takes).
pub fn unranked_tensors(float: &Model, fg: &Graph, quant: &Model) -> Vec<String> {
    let default = |m: &Model| crate::quant::opset::default_opset(m.proto()).unwrap_or(1);
    let (from, to) = (default(float), default(quant));
    match from < to {
        true => crate::quant::opset::unranked_inputs(fg, from, to),
        false => Vec::new(),
    }
}

impl LocalModel {
    /// The local model measuring `targets` of `quant` (indexed by `qg`) against `float`
    /// (indexed by `fg`), `models` in that order. The activations the quantizer rescaled on
    /// purpose reach the copies at the QDQ model's scale: `rescaled.0` multiplies a float
    /// tensor by its factors per channel (also the reference a rescaled target is measured
    /// against), `rescaled.1` names those whose
    /// producer is copied from the QDQ model instead of read from the float one.
    /// `ranks` gives the rank of a float tensor seen in a run, for raising the float model's
    /// opset where the graph does not say it (Softmax's axis semantics changed at 13).
    /// `sample_shapes` is the shape of one sample of each input in every batch the model
    /// will run on, pinned in its inputs ([`pin_sample_shapes`]: its session opens several
    /// times faster).
    pub fn build(
        models: (&Model, &Graph, &Model, &Graph),
        targets: &[Target],
        rescaled: (&HashMap<String, ChannelFactors>, &HashSet<String>),
        ranks: &dyn Fn(&str) -> Option<usize>,
        sample_shapes: &BTreeMap<String, Vec<usize>>,
    ) -> Result<Self, LocalUnavailable> {
        let (float, fg, quant, qg) = models;
        let external_folder = match (float.to_session_proto().1, quant.to_session_proto().1) {
            (Some(a), Some(b)) if a != b => return Err(LocalUnavailable::ExternalFolders),
            (a, b) => a.or(b),
        };
        let mut proto = float.proto().clone();
        let to = crate::quant::opset::default_opset(quant.proto()).unwrap_or(1);
        crate::quant::opset::raise(&mut proto, fg, to, ranks)
            .map_err(|e| LocalUnavailable::Opset(e.to_string()))?;
        pin_sample_shapes(&mut proto, sample_shapes);
        proto.opset_import = merged_imports(&proto, quant.proto());
        proto.opset_import.push(OperatorSetIdProto {
            domain: Some(crate::eval::tensor_error::error_sums::DOMAIN.to_owned()),
            version: Some(1),
        });
        proto.ir_version = proto.ir_version.max(quant.proto().ir_version);
        let mut copier = Copier::new(quant, qg, fg, rescaled);
        let float_types = elem_types(float, fg);
        let mut sums = Vec::new();
        let (mut tensors, mut outputs) = (Vec::new(), Vec::new());
        for (i, target) in targets.iter().enumerate() {
            let Some(local) = copier.target(target, i) else {
                continue;
            };
            let float32 = float_types.get(target.float()) == Some(&DataType::Float32.to_onnx());
            // A rescaled tensor is measured against the float one at the QDQ model's scale.
            let reference = copier.float_input(target.float(), target.float().to_owned());
            let (nodes, pair) = error_sums(&reference, local, i, float32);
            sums.extend(nodes);
            tensors.push(target.float().to_owned());
            outputs.push(pair);
        }
        let graph = proto.graph.get_or_insert_with(Default::default);
        graph.initializer.append(&mut copier.copied_initializers);
        let mut added = std::mem::take(&mut copier.nodes);
        fuse_quantizers(&mut added, &mut sums, &graph.initializer);
        added.extend(sums);
        let available = graph
            .input
            .iter()
            .map(|i| i.name().to_owned())
            .chain(graph.initializer.iter().map(|i| i.name().to_owned()))
            .collect();
        graph.node = interleaved(std::mem::take(&mut graph.node), added, available);
        let (chain, output) = gathered(&outputs);
        graph.node.extend(chain);
        // Every pair and the chain's end ([`gathered`]).
        let values = i64::try_from(2 * outputs.len() + 2).unwrap_or(i64::MAX);
        graph.output = output
            .iter()
            .map(|name| value_info(name, DataType::Float64, &[values]))
            .collect();
        Ok(LocalModel {
            encoded: SessionModel::encode(proto, external_folder)?,
            tensors,
            output,
            options: cpu_session_options(quant),
            weight_bytes: float.initializer_bytes() + quant.initializer_bytes(),
        })
    }

    /// Whether it measures nothing.
    pub fn is_empty(&self) -> bool {
        self.output.is_none()
    }

    /// A session over the local model, with the QDQ model's CPU options (every graph
    /// optimization, but for float8) on `intra_threads` threads (0: ONNX Runtime's default).
    pub fn session(
        &self,
        runtime: &Runtime,
        eps: &[EpSpec],
        intra_threads: usize,
    ) -> Result<Session, EvalError> {
        let operators =
            crate::eval::tensor_error::error_sums::domain().map_err(RuntimeError::from)?;
        let options = crate::runtime::SessionOptions {
            intra_threads,
            ..self.options
        };
        Ok(runtime.session_with_operators(&self.encoded, eps, options, operators)?)
    }

    /// How many sessions of this model to run side by side on `eps`: one per core on the
    /// CPU (up to 8, each on one thread) as far as the memory available holds each
    /// session's weights twice (its copy and the kernels' prepacked one), one on
    /// accelerators.
    pub fn workers(&self, eps: &[EpSpec]) -> usize {
        crate::eval::compare::batch_workers::cpu_workers(eps, || {
            self.weight_bytes.saturating_mul(2)
        })
    }

    /// Runs `session` (over this model) on a batch: the batch's `[Σ float², Σ error²]` of
    /// each measured tensor, in the order of [`LocalModel::sums`].
    pub fn run(
        &self,
        session: &mut Session,
        inputs: &[(String, ort::value::DynValue)],
        batch: usize,
    ) -> Result<Vec<[f64; 2]>, EvalError> {
        let failed = |reason: String| EvalError::Run {
            batch,
            model: "local",
            reason,
        };
        let out = session
            .run(crate::runtime::value::session_inputs(inputs))
            .map_err(|e| failed(e.to_string()))?;
        let Some(name) = &self.output else {
            return Ok(Vec::new());
        };
        let (_, values) = out
            .get(name.as_str())
            .ok_or_else(|| failed(format!("the session gave no output {name}")))?
            .try_extract_tensor::<f64>()
            .map_err(|e| failed(e.to_string()))?;
        // Every pair, then the end of the chain that ordered the run ([`gathered`]).
        let (pairs, rest) = values.as_chunks::<2>();
        match pairs.split_last() {
            Some((_, pairs)) if pairs.len() == self.tensors.len() && rest.is_empty() => {
                Ok(pairs.to_vec())
            }
            _ => Err(failed(format!(
                "{} sums for {} tensors",
                values.len(),
                self.tensors.len()
            ))),
        }
    }

    /// Empty sums for this model's measured tensors.
    pub fn sums(&self) -> LocalSums {
        LocalSums {
            tensors: self.tensors.clone(),
            sums: vec![[0.0; 2]; self.tensors.len()],
        }
    }
}

/// Running Σ float² and Σ error² of every measured tensor over the batches seen.
pub struct LocalSums {
    tensors: Vec<String>,
    sums: Vec<[f64; 2]>,
}

impl LocalSums {
    /// Adds one batch's sums ([`LocalModel::run`]).
    pub fn add(&mut self, batch: &[[f64; 2]]) {
        for (sum, [signal, noise]) in self.sums.iter_mut().zip(batch) {
            sum[0] += signal;
            sum[1] += noise;
        }
    }

    /// The local error of every tensor that was seen, one per tensor, in `order` (the float
    /// graph's position of each tensor).
    pub fn finish(self, order: &HashMap<&str, usize>) -> Vec<LocalError> {
        let mut errors: Vec<LocalError> = self
            .tensors
            .into_iter()
            .zip(self.sums)
            .filter(|(_, s)| s[0] > 0.0 || s[1] > 0.0)
            .map(|(tensor, s)| LocalError {
                tensor,
                sqnr_db: sqnr_db(s[0], s[1]),
            })
            .collect();
        crate::eval::tensor_error::tensor_order::in_graph_order(&mut errors, order, |e| &e.tensor);
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(op: &str, inputs: &[&str], output: &str) -> NodeProto {
        node(op, inputs.iter().map(|s| s.to_string()).collect(), output)
    }

    #[test]
    fn the_pairs_are_gathered_by_a_concat_whose_last_input_chains_through_them_in_order() {
        assert_eq!(gathered(&[]), (Vec::new(), None));
        let links = |pairs: &[&str]| -> Vec<(String, String, Vec<String>)> {
            let pairs: Vec<String> = pairs.iter().map(|p| p.to_string()).collect();
            let (nodes, output) = gathered(&pairs);
            assert_eq!(output.as_deref(), Some("qdq_studio_local_gathered"));
            nodes
                .iter()
                .map(|n| (n.op_type().to_owned(), n.output[0].clone(), n.input.clone()))
                .collect()
        };
        let owned = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(
            links(&["s0"]),
            [(
                "Concat".to_owned(),
                "qdq_studio_local_gathered".to_owned(),
                owned(&["s0", "s0"])
            )]
        );
        assert_eq!(
            links(&["s0", "s1", "s2"]),
            [
                (
                    "Max".to_owned(),
                    "qdq_studio_local_order1".to_owned(),
                    owned(&["s0", "s1"])
                ),
                (
                    "Max".to_owned(),
                    "qdq_studio_local_order2".to_owned(),
                    owned(&["qdq_studio_local_order1", "s2"])
                ),
                (
                    "Concat".to_owned(),
                    "qdq_studio_local_gathered".to_owned(),
                    owned(&["s0", "s1", "s2", "qdq_studio_local_order2"])
                ),
            ]
        );
    }

    #[test]
    fn added_nodes_follow_as_soon_as_their_inputs_are_computed() {
        let float = vec![
            named("Relu", &["x"], "a"),
            named("Relu", &["a"], "b"),
            named("Relu", &["b"], "y"),
        ];
        let added = vec![
            named("Neg", &["a", "w"], "c"),
            named("Sub", &["c", "b"], "d"),
            named("Abs", &["w"], "e"),
            named("Abs", &["nowhere"], "f"),
        ];
        let available = ["x", "w"].map(String::from).into_iter().collect();
        let order: Vec<String> = interleaved(float, added, available)
            .iter()
            .map(|n| n.output[0].clone())
            .collect();
        assert_eq!(order, ["e", "a", "c", "b", "d", "y", "f"]);
    }
}
