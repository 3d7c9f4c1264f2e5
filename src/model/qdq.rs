//! The Q/DQ structure of a quantized model as a reader sees it, whichever tool wrote it
//! (qdq-studio, onnxruntime, ModelOpt, Quark): which QuantizeLinear/DequantizeLinear nodes
//! stand for "this tensor is quantized" and with what type, scales and zero points.
//!
//! A DequantizeLinear over a constant (a quantized weight or bias), and a QuantizeLinear whose
//! every consumer is a DequantizeLinear (a quantized activation), are *folded*: a view draws
//! them as a badge on the edge or node they sit on, as Netron draws initializers. Anything else
//! (a Q feeding an integer op, a DQ of an integer graph input) stays an ordinary node.

use std::collections::HashMap;

use super::{DataType, Graph, Model, Node, NodeId};
use crate::model::ops;

/// Ops whose integer form (QLinearAdd, QLinearMul, QLinearConcat) reads every input quantized:
/// with one input float, ONNX Runtime runs them in float (TensorRT's residual Add, whose
/// residual input is float by design, runs in its convolution's epilogue).
const ALL_INPUTS_QUANTIZED: &[&str] = &[ops::ADD, ops::MUL, ops::CONCAT];

/// How one tensor is quantized: read off its DequantizeLinear.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantParams {
    /// The quantized element type (int8, uint8, int4, float8 …), when known.
    pub dtype: Option<DataType>,
    /// The scales (one per tensor, per channel or per block); empty when the scale is not a
    /// constant of the model.
    pub scales: Vec<f32>,
    /// The zero points, as many as the scales (empty: zero).
    pub zero_points: Vec<f32>,
    /// The channel axis when there are several scales.
    pub axis: Option<i64>,
    /// The block size of block-wise quantization.
    pub block_size: Option<i64>,
}

impl QuantParams {
    /// The element type's short name for a badge (`u8`, `i8`, `i4`, `f8`…).
    pub fn short_type(&self) -> String {
        match self.dtype {
            Some(DataType::Uint8) => "u8".to_owned(),
            Some(DataType::Int8) => "i8".to_owned(),
            Some(DataType::Uint16) => "u16".to_owned(),
            Some(DataType::Int16) => "i16".to_owned(),
            Some(DataType::Int4) => "i4".to_owned(),
            Some(DataType::Uint4) => "u4".to_owned(),
            Some(d) if d.is_float() => "f8".to_owned(),
            Some(d) => d.name().to_owned(),
            None => "q".to_owned(),
        }
    }

    /// True for one scale per channel or block.
    pub fn per_channel(&self) -> bool {
        self.scales.len() > 1
    }

    /// A one-line description: `uint8 · scale 0.0235 · zero point 128`, or for several scales
    /// `int8 · per channel (axis 0, 64) · scale 0.0012–0.021 · zero point 0`.
    pub fn describe(&self) -> String {
        let dtype = self.dtype.map_or("quantized", DataType::name);
        let granularity = match (self.scales.len(), self.block_size) {
            (0 | 1, _) => String::new(),
            (n, Some(block)) => format!(" · blocks of {block} (axis {}, {n})", self.axis_text()),
            (n, None) => format!(" · per channel (axis {}, {n})", self.axis_text()),
        };
        let scale = match extent(&self.scales) {
            None => "scale computed in the graph".to_owned(),
            Some((lo, hi)) if lo == hi => format!("scale {}", number(lo)),
            Some((lo, hi)) => format!("scale {}–{}", number(lo), number(hi)),
        };
        let zero = match extent(&self.zero_points) {
            None => "zero point 0".to_owned(),
            Some((lo, hi)) if lo == hi => format!("zero point {}", number(lo)),
            Some((lo, hi)) => format!("zero points {}–{}", number(lo), number(hi)),
        };
        format!("{dtype}{granularity} · {scale} · {zero}")
    }

    fn axis_text(&self) -> String {
        self.axis.map_or("1".to_owned(), |a| a.to_string())
    }
}

/// Smallest and largest of `values`.
fn extent(values: &[f32]) -> Option<(f32, f32)> {
    let first = *values.first()?;
    Some(
        values
            .iter()
            .fold((first, first), |(lo, hi), &v| (lo.min(v), hi.max(v))),
    )
}

/// A number as people read a scale: four significant digits.
fn number(v: f32) -> String {
    if v == v.trunc() && v.abs() < 1e6 {
        format!("{v:.0}")
    } else {
        format!("{v:.4e}")
            .parse::<f32>()
            .map_or_else(|_| v.to_string(), |r| format!("{r}"))
    }
}

/// What a dequantized tensor stands for.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantizedRead {
    /// The tensor the chain starts from: the float tensor a QuantizeLinear quantizes (an
    /// activation, a graph input, a float weight), or the quantized constant a lone
    /// DequantizeLinear reads.
    pub source: String,
    /// True when `source` is a constant of the model (a weight, a bias).
    pub constant: bool,
    /// How it is quantized.
    pub params: QuantParams,
    /// The folded nodes: the QuantizeLinear (if any), then the DequantizeLinear.
    pub nodes: Vec<NodeId>,
}

/// The Q/DQ structure of a model (empty for a float model).
#[derive(Debug, Clone, Default)]
pub struct QdqStructure {
    /// DequantizeLinear outputs that are folded, and what each stands for.
    reads: HashMap<String, QuantizedRead>,
    /// Each float tensor quantized where it is produced, and one folded DequantizeLinear
    /// output standing for it (a key of `reads`).
    produced: HashMap<String, String>,
    /// Folded nodes, by node id.
    folded: Vec<bool>,
    /// Nodes that compute on quantized values, by node id (see [`QdqStructure::runs_quantized`]).
    quantized: Vec<bool>,
    /// Nodes that run on integers themselves (QLinearConv, MatMulInteger, MatMulNBits …).
    integer_ops: usize,
}

/// Op types that compute on quantized values directly (the QOperator format, weight-only
/// kernels): a model holding them is quantized even without Q/DQ pairs.
fn is_integer_op(node: &Node) -> bool {
    node.op_type.starts_with("QLinear")
        || matches!(
            node.op_type.as_str(),
            ops::CONV_INTEGER
                | ops::MAT_MUL_INTEGER
                | ops::MAT_MUL_N_BITS
                | ops::DYNAMIC_QUANTIZE_LINEAR
        )
}

/// The QuantizeLinear, DequantizeLinear and integer nodes of `graph`, counted by op type: a
/// model with any is quantized already.
pub fn quantized_op_counts(graph: &Graph) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for node in graph.nodes() {
        let qdq = ops::is_quantizer(&node.op_type) && qdq_domain(&node.domain);
        if qdq || is_integer_op(node) {
            *counts.entry(node.op_type.clone()).or_insert(0) += 1;
        }
    }
    counts
}

/// Domains whose QuantizeLinear/DequantizeLinear are the standard ones: ONNX's, onnxruntime's
/// contrib ops (16-bit and int4 types before opset 21) and TensorRT's (ModelOpt's FP8/INT4).
fn qdq_domain(domain: &str) -> bool {
    matches!(domain, "" | "ai.onnx" | "com.microsoft" | "trt")
}

impl QdqStructure {
    /// Reads the Q/DQ structure of `model` (indexed as `graph`); `has_qdq_form(domain,
    /// op_type)` says which op types count as quantized nodes when they read or write a
    /// quantized tensor (the quantizer's op list).
    pub fn read(
        model: &Model,
        graph: &Graph,
        has_qdq_form: fn(&str, &str) -> bool,
    ) -> QdqStructure {
        Self::read_for(model, graph, has_qdq_form, false)
    }

    /// [`Self::read`] for a runtime that may fuse an Add reading one quantized input and one
    /// float into its producer's epilogue (`epilogue_adds`: TensorRT's residual Add, which
    /// its placement gives Q/DQ on the non-residual input only); such an Add then computes
    /// quantized, as the plan that placed it says.
    pub fn read_for(
        model: &Model,
        graph: &Graph,
        has_qdq_form: fn(&str, &str) -> bool,
        epilogue_adds: bool,
    ) -> QdqStructure {
        let mut structure = QdqStructure {
            reads: HashMap::new(),
            produced: HashMap::new(),
            folded: vec![false; graph.nodes().len()],
            quantized: Vec::new(),
            integer_ops: graph.nodes().iter().filter(|n| is_integer_op(n)).count(),
        };
        for dq in graph
            .nodes()
            .iter()
            .filter(|n| n.op_type == ops::DEQUANTIZE_LINEAR && qdq_domain(&n.domain))
        {
            let (Some(input), Some(output)) = (dq.inputs.first(), dq.outputs.first()) else {
                continue;
            };
            let Some((source, nodes)) = chain(graph, dq, input) else {
                continue;
            };
            for id in &nodes {
                structure.folded[id.0] = true;
            }
            let read = QuantizedRead {
                constant: graph.is_constant(&source),
                source,
                params: params(model, graph, dq),
                nodes,
            };
            structure.reads.insert(output.clone(), read);
        }
        structure.produced = structure
            .reads
            .iter()
            .filter(|(_, r)| !r.constant)
            .map(|(output, r)| (r.source.clone(), output.clone()))
            .collect();
        let quantized = graph
            .nodes()
            .iter()
            .map(|n| structure.computes_quantized(n, has_qdq_form, epilogue_adds))
            .collect();
        structure.quantized = quantized;
        structure
    }

    /// True when `node` computes on quantized values: an integer op, or a node of an op type
    /// with a QDQ form (`has_qdq_form`: the quantizer's list) that reads a dequantized tensor
    /// (every input, for [`ALL_INPUTS_QUANTIZED`]: a residual Add reading a quantized stream
    /// and a float one runs in float, unless `epilogue_adds`, see [`Self::read_for`]).
    /// A node that merely reads a quantized tensor another consumer needed (a Shape, a Div, a
    /// ReduceSum) computes in float, and so does one that only writes a tensor its consumer
    /// quantizes (a LayerNorm or Transpose before a MatMul whose inputs alone are quantized,
    /// as ModelOpt and the transformer placement leave them).
    fn computes_quantized(
        &self,
        node: &Node,
        has_qdq_form: fn(&str, &str) -> bool,
        epilogue_adds: bool,
    ) -> bool {
        if self.is_folded(node.id) {
            return false;
        }
        if is_integer_op(node) {
            return true;
        }
        let reads_all = || {
            node.inputs
                .iter()
                .filter(|i| !i.is_empty())
                .all(|i| self.reads.contains_key(i))
        };
        has_qdq_form(&node.domain, &node.op_type)
            && self.quantized_inputs(node).next().is_some()
            && (!ALL_INPUTS_QUANTIZED.contains(&node.op_type.as_str())
                || reads_all()
                || (epilogue_adds && node.op_type == ops::ADD))
    }

    /// True when the model is quantized: it has folded Q/DQ pairs or integer ops.
    pub fn is_quantized(&self) -> bool {
        !self.reads.is_empty() || self.integer_ops > 0
    }

    /// True when `node` is folded into an edge or a node.
    pub fn is_folded(&self, node: NodeId) -> bool {
        self.folded.get(node.0).copied().unwrap_or(false)
    }

    /// What the folded DequantizeLinear output `tensor` stands for.
    pub fn read_of(&self, tensor: &str) -> Option<&QuantizedRead> {
        self.reads.get(tensor)
    }

    /// The tensor a node's input `tensor` stands for: the start of its Q/DQ chain, else itself.
    pub fn source_of<'a>(&'a self, tensor: &'a str) -> &'a str {
        self.reads.get(tensor).map_or(tensor, |r| r.source.as_str())
    }

    /// How `tensor` is quantized where it is produced (a QuantizeLinear folded on it), if it is.
    pub fn quantization_of(&self, tensor: &str) -> Option<&QuantParams> {
        let output = self.produced.get(tensor)?;
        self.reads.get(output).map(|r| &r.params)
    }

    /// The quantized inputs of `node`: (input position, what it reads).
    pub fn quantized_inputs<'a>(
        &'a self,
        node: &'a Node,
    ) -> impl Iterator<Item = (usize, &'a QuantizedRead)> + 'a {
        node.inputs
            .iter()
            .enumerate()
            .filter_map(|(i, t)| self.reads.get(t).map(|r| (i, r)))
    }

    /// True when `node` computes on quantized values (see `computes_quantized`). Folded nodes
    /// are not counted.
    pub fn runs_quantized(&self, node: &Node) -> bool {
        match self.quantized.get(node.id.0) {
            Some(&quantized) => quantized,
            None => is_integer_op(node) && !self.is_folded(node.id),
        }
    }

    /// The nodes of `graph` (the graph this was read from) that compute on quantized values.
    pub fn quantized_nodes<'g>(&'g self, graph: &'g Graph) -> impl Iterator<Item = &'g Node> {
        graph.nodes().iter().filter(|n| self.runs_quantized(n))
    }

    /// Folded activation pairs (QuantizeLinear → DequantizeLinear over a computed tensor).
    pub fn activation_pairs(&self) -> usize {
        self.reads.values().filter(|r| !r.constant).count()
    }

    /// Folded quantized constants (weights, biases).
    pub fn quantized_constants(&self) -> usize {
        self.reads.values().filter(|r| r.constant).count()
    }
}

/// The chain behind DequantizeLinear `dq` reading `input`, when it folds: the tensor it starts
/// from and the nodes to fold.
fn chain(graph: &Graph, dq: &Node, input: &str) -> Option<(String, Vec<NodeId>)> {
    let info = graph.tensor(input)?;
    if info.kind.is_constant() {
        return Some((input.to_owned(), vec![dq.id]));
    }
    let q = graph.node(info.producer?);
    let only_dequantized = info
        .consumers
        .iter()
        .all(|&c| graph.node(c).op_type == ops::DEQUANTIZE_LINEAR);
    if q.op_type != ops::QUANTIZE_LINEAR
        || !qdq_domain(&q.domain)
        || info.is_output
        || !only_dequantized
    {
        return None;
    }
    Some((q.inputs.first()?.clone(), vec![q.id, dq.id]))
}

/// The quantization `dq` applies: its scale and zero point constants, its axis and block size,
/// and the element type of what it reads.
fn params(model: &Model, graph: &Graph, dq: &Node) -> QuantParams {
    let values = |position: usize| -> Vec<f32> {
        dq.inputs
            .get(position)
            .filter(|t| !t.is_empty() && graph.is_constant(t))
            .and_then(|t| model.weight(t).ok().flatten())
            .map(|a| a.to_f32().iter().copied().collect())
            .unwrap_or_default()
    };
    let scales = values(1);
    let zero_points = values(2);
    let dtype = dq
        .inputs
        .first()
        .and_then(|t| graph.tensor(t))
        .and_then(|t| t.elem_type)
        .or_else(|| {
            dq.inputs
                .get(2)
                .and_then(|t| graph.tensor(t))
                .and_then(|t| t.elem_type)
        })
        .and_then(|code| DataType::from_onnx(code).ok());
    let several = scales.len() > 1;
    QuantParams {
        dtype,
        axis: several.then(|| dq.int_attribute("axis").unwrap_or(1)),
        block_size: dq.int_attribute("block_size").filter(|&b| b > 0),
        scales,
        zero_points,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ModelBuilder, TensorArray};
    use ndarray::{ArrayD, IxDyn};

    fn scalar_f32(v: f32) -> TensorArray {
        TensorArray::Float32(ArrayD::from_elem(IxDyn(&[]), v))
    }

    /// x → Q → DQ → Conv(W: DQ of int8 per channel) → y, y → Q → DQ → Relu, and a Q whose
    /// output is a graph output (not folded).
    fn qdq_model() -> Model {
        let mut b = ModelBuilder::new(13);
        b.input("x", DataType::Float32, &[1, 2, 4, 4]);
        b.initializer("s", scalar_f32(0.5));
        b.initializer("z", TensorArray::Uint8(ArrayD::from_elem(IxDyn(&[]), 128)));
        b.initializer(
            "w_q",
            TensorArray::Int8(ArrayD::from_elem(IxDyn(&[3, 2, 1, 1]), 1)),
        );
        b.initializer(
            "w_s",
            TensorArray::Float32(ArrayD::from_shape_vec(IxDyn(&[3]), vec![0.1, 0.2, 0.4]).unwrap()),
        );
        b.node("QuantizeLinear", &["x", "s", "z"], &["x_q"])
            .name("q_x");
        b.node("DequantizeLinear", &["x_q", "s", "z"], &["x_dq"])
            .name("dq_x");
        b.node("DequantizeLinear", &["w_q", "w_s"], &["w"])
            .name("dq_w")
            .attr_int("axis", 0);
        b.node("Conv", &["x_dq", "w"], &["y"]).name("conv");
        b.node("QuantizeLinear", &["y", "s", "z"], &["y_q"])
            .name("q_y");
        b.node("DequantizeLinear", &["y_q", "s", "z"], &["y_dq"])
            .name("dq_y");
        b.node("Relu", &["y_dq"], &["r"]).name("relu");
        b.node("QuantizeLinear", &["r", "s", "z"], &["out"])
            .name("q_out");
        b.output("out", DataType::Uint8, &[1, 3, 4, 4]);
        b.build()
    }

    #[test]
    fn pairs_and_weights_fold_and_carry_their_parameters() {
        let model = qdq_model();
        let graph = Graph::build(&model);
        let s = QdqStructure::read(&model, &graph, |_, op| op != "QuantizeLinear");
        let id = |name: &str| graph.node_by_name(name).unwrap().id;
        assert!(s.is_quantized());
        assert_eq!((s.activation_pairs(), s.quantized_constants()), (2, 1));
        for folded in ["q_x", "dq_x", "dq_w", "q_y", "dq_y"] {
            assert!(s.is_folded(id(folded)), "{folded}");
        }
        for kept in ["conv", "relu", "q_out"] {
            assert!(!s.is_folded(id(kept)), "{kept}");
        }
        assert_eq!(s.source_of("x_dq"), "x");
        assert_eq!(s.source_of("y_dq"), "y");
        assert_eq!(s.source_of("r"), "r");
        let weight = s.read_of("w").unwrap();
        assert!(weight.constant);
        assert_eq!(weight.params.dtype, Some(DataType::Int8));
        assert_eq!(weight.params.axis, Some(0));
        assert_eq!(weight.params.short_type(), "i8");
        assert_eq!(
            weight.params.describe(),
            "int8 · per channel (axis 0, 3) · scale 0.1–0.4 · zero point 0"
        );
        let y = s.quantization_of("y").unwrap();
        assert_eq!(y.describe(), "uint8 · scale 0.5 · zero point 128");
        assert!(s.runs_quantized(graph.node(id("conv"))));
        assert!(s.runs_quantized(graph.node(id("relu"))));
        assert!(!s.runs_quantized(graph.node(id("q_out"))));
        assert_eq!(s.quantized_inputs(graph.node(id("conv"))).count(), 2);
    }

    #[test]
    fn a_float_model_has_no_structure() {
        let mut b = ModelBuilder::new(13);
        b.input("x", DataType::Float32, &[1, 4]);
        b.node("Relu", &["x"], &["y"]);
        b.output("y", DataType::Float32, &[1, 4]);
        let model = b.build();
        let s = QdqStructure::read(&model, &Graph::build(&model), |_, _| true);
        assert!(!s.is_quantized());
        assert_eq!(s.source_of("x"), "x");
    }
}
