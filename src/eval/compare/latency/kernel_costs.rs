//! What each Conv/MatMul/Gemm costs in float and in int8, from ONNX Runtime's profiles of the
//! float and the QDQ model, so that a placement can keep in float the ones whose integer
//! kernel, with the Q/DQ and unfused ops it brings, is slower than their float kernel.
//!
//! Why segments: a quantized convolution costs more than its integer kernel. On the CPU
//! provider a Conv followed by hard-swish runs as one fused float kernel; quantized, it runs as
//! a QLinearConv, a standalone DequantizeLinear, the activation's own kernels and a
//! QuantizeLinear for the next layer (PP-LCNet's document orientation model: 100 us in float,
//! 350 us in int8 for one layer). Each compute kernel of a profile starts a segment that holds
//! every kernel run after it up to the next compute kernel (the ones before the first go to
//! the first); a node's float and int8 segments compare what the rest of the run pays for it.
//! The kernels are matched to the model's nodes by the names ONNX Runtime gives them: the
//! node's own, with `_token_N` when a fusion renamed it, or its output tensor's with `_nchwc`
//! when the NCHWc layout took it (then the fused activation's output, traced back to the
//! compute node).

use std::collections::BTreeMap;

use crate::eval::compare::latency::kernels::KernelTime;
use crate::model::ops;
use crate::model::{Graph, Node};

/// Ops that ONNX Runtime's CPU provider fuses into the compute kernel before them (their
/// output names the fused kernel).
const FUSED_AFTER_COMPUTE: [&str; 11] = [
    ops::RELU,
    ops::CLIP,
    ops::HARD_SIGMOID,
    ops::HARD_SWISH,
    ops::SIGMOID,
    ops::LEAKY_RELU,
    ops::TANH,
    ops::BATCH_NORMALIZATION,
    ops::ADD,
    ops::SUM,
    ops::MUL,
];

/// How far back a fused kernel's output is traced to its compute node.
const MAX_FUSED: usize = 3;

/// A compute node whose int8 segment costs more than its float one.
#[derive(Debug, Clone, PartialEq)]
pub struct SlowerInInt8 {
    /// The node (as the float model names it).
    pub node: String,
    /// Microseconds of its float segment.
    pub float_us: f64,
    /// Microseconds of its int8 segment.
    pub int8_us: f64,
}

/// The Conv/MatMul/Gemm nodes of `quantized` (names in the float model `graph`) whose int8
/// segment in `qdq_times` costs more than their float segment in `float_times`, the costliest
/// loss first. Nodes missing from either profile are left as they are.
pub fn slower_in_int8(
    graph: &Graph,
    float_times: &[KernelTime],
    qdq_times: &[KernelTime],
    quantized: &[String],
) -> Vec<SlowerInInt8> {
    let float = segment_costs(graph, float_times);
    let int8 = segment_costs(graph, qdq_times);
    let mut slower: Vec<SlowerInInt8> = quantized
        .iter()
        .filter_map(|node| {
            let (&float_us, &int8_us) = (float.get(node)?, int8.get(node)?);
            (int8_us > float_us).then(|| SlowerInInt8 {
                node: node.clone(),
                float_us,
                int8_us,
            })
        })
        .collect();
    slower.sort_by(|a, b| (b.int8_us - b.float_us).total_cmp(&(a.int8_us - a.float_us)));
    slower
}

/// Each compute node's segment of `times` (see the module docs), in microseconds.
pub fn segment_costs(graph: &Graph, times: &[KernelTime]) -> BTreeMap<String, f64> {
    let mut costs: BTreeMap<String, f64> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut leading = 0.0;
    for kernel in times {
        let node = ops::is_compute_kernel(&kernel.op)
            .then(|| compute_node(graph, &kernel.node))
            .flatten();
        if let Some(node) = node {
            let first = current.is_none();
            let cost = costs.entry(node.name.clone()).or_default();
            *cost += kernel.us;
            if first {
                *cost += leading;
            }
            current = Some(node.name.clone());
        } else if let Some(cost) = current.as_ref().and_then(|n| costs.get_mut(n)) {
            *cost += kernel.us;
        } else {
            leading += kernel.us;
        }
    }
    costs
}

/// The compute node a kernel named `kernel` runs (see the module docs for the names).
fn compute_node<'g>(graph: &'g Graph, kernel: &str) -> Option<&'g Node> {
    let base = kernel.split('/').next().unwrap_or(kernel);
    let untokened = strip_tokens(base);
    for name in [base, untokened] {
        if let Some(node) = graph.node_by_name(name).filter(|n| is_compute(n)) {
            return Some(node);
        }
        let tensor = name.strip_suffix("_nchwc").unwrap_or(name);
        if let Some(node) = traced_back(graph, tensor) {
            return Some(node);
        }
    }
    None
}

/// `name` without the `_token_N` suffixes ONNX Runtime adds to keep fused nodes' names unique.
fn strip_tokens(mut name: &str) -> &str {
    while let Some((head, tail)) = name.rsplit_once("_token_") {
        if tail.is_empty() || !tail.bytes().all(|b| b.is_ascii_digit()) {
            break;
        }
        name = head;
    }
    name
}

/// The compute node that writes `tensor`, through up to [`MAX_FUSED`] fused ops after it.
fn traced_back<'g>(graph: &'g Graph, tensor: &str) -> Option<&'g Node> {
    let mut node = graph.producer_of(tensor)?;
    for _ in 0..MAX_FUSED {
        if is_compute(node) {
            return Some(node);
        }
        if !FUSED_AFTER_COMPUTE.contains(&node.op_type.as_str()) {
            return None;
        }
        node = node
            .inputs
            .iter()
            .filter_map(|i| graph.producer_of(i))
            .find(|p| is_compute(p) || FUSED_AFTER_COMPUTE.contains(&p.op_type.as_str()))?;
    }
    is_compute(node).then_some(node)
}

/// True for the model's Conv/ConvTranspose/MatMul/Gemm nodes.
fn is_compute(node: &Node) -> bool {
    ops::is_compute(&node.op_type)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DataType, ModelBuilder, TensorArray};

    fn time(node: &str, op: &str, us: f64) -> KernelTime {
        KernelTime {
            node: node.to_owned(),
            op: op.to_owned(),
            us,
        }
    }

    /// Two convolutions with hard-swish after each: the float profile fuses the activation
    /// (the kernel named by its output), the int8 one runs it alone between Q/DQ.
    #[test]
    fn segments_charge_each_conv_with_what_its_quantization_brings() {
        let mut b = ModelBuilder::new(13);
        b.input("x", DataType::Float32, &[1, 4, 8, 8]);
        let w = ndarray::ArrayD::from_elem(ndarray::IxDyn(&[4, 4, 1, 1]), 0.5f32);
        b.initializer("w", TensorArray::Float32(w));
        b.node("Conv", &["x", "w"], &["c1"]).name("conv1");
        b.node("HardSwish", &["c1"], &["h1"]).name("hs1");
        b.node("Conv", &["h1", "w"], &["c2"]).name("conv2");
        b.node("HardSwish", &["c2"], &["y"]).name("hs2");
        b.output("y", DataType::Float32, &[1, 4, 8, 8]);
        let graph = Graph::build(&b.build());
        let float = [
            time("ReorderInput", "ReorderInput", 5.0),
            time("h1_nchwc", "Conv", 100.0),
            time("y_nchwc_token_3", "Conv", 50.0),
            time("ReorderOutput", "ReorderOutput", 5.0),
        ];
        let int8 = [
            time("x_QuantizeLinear", "QuantizeLinear", 10.0),
            time("conv1_token_7", "QLinearConv", 60.0),
            time("c1_DequantizeLinear", "DequantizeLinear", 30.0),
            time("HardSigmoid_11", "HardSigmoid", 20.0),
            time("Mul_12", "Mul", 20.0),
            time("h1_QuantizeLinear", "QuantizeLinear", 20.0),
            time("conv2", "QLinearConv", 20.0),
            time("c2_DequantizeLinear", "DequantizeLinear", 5.0),
        ];
        let costs = segment_costs(&graph, &float);
        assert_eq!(costs["conv1"], 105.0);
        assert_eq!(costs["conv2"], 55.0);
        let costs = segment_costs(&graph, &int8);
        assert_eq!((costs["conv1"], costs["conv2"]), (160.0, 25.0));
        let names = ["conv1".to_owned(), "conv2".to_owned()];
        let slower = slower_in_int8(&graph, &float, &int8, &names);
        assert_eq!(
            slower,
            [SlowerInInt8 {
                node: "conv1".to_owned(),
                float_us: 105.0,
                int8_us: 160.0
            }]
        );
        // An activation's own kernel does not start a segment, nor does a name of no node.
        let pool = [time("h1_nchwc", "Relu", 9.0), time("zzz", "Conv", 9.0)];
        assert!(segment_costs(&graph, &pool).is_empty());
    }

    #[test]
    fn fusion_tokens_are_stripped_only_when_numeric() {
        assert_eq!(strip_tokens("Conv.0_token_28"), "Conv.0");
        assert_eq!(strip_tokens("a_token_1_token_22"), "a");
        assert_eq!(strip_tokens("a_token_x"), "a_token_x");
        assert_eq!(strip_tokens("a_token_"), "a_token_");
    }
}
