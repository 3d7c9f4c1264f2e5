//! Why a QDQ model is as fast as it is: which kernels ONNX Runtime ran for it, read from its
//! per-node profile of one run. A Q/DQ group that an execution provider fuses runs as one
//! integer kernel (QLinearConv, MatMulInteger, ...); one it cannot fuse runs its Conv or
//! MatMul in float between standalone DequantizeLinear and QuantizeLinear nodes, which is
//! more work than the float model does (the CUDA provider has no such fusions at all).
//! Providers that compile the graph (TensorRT, OpenVINO, Vitis AI, QNN) run it as a few
//! subgraph kernels whose insides the profile does not show: those are counted as such, with
//! the model's nodes that ran inside them.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::model::{Graph, ops};

/// The provider ONNX Runtime names TensorRT by: nodes it takes run inside its engines.
const TENSORRT: &str = "TensorrtExecutionProvider";

/// Providers that compile the nodes they take into subgraphs of their own (each profiled as
/// one kernel), with the name people know them by.
const COMPILING: [(&str, &str); 4] = [
    (TENSORRT, "TensorRT"),
    ("OpenVINOExecutionProvider", "OpenVINO"),
    ("VitisAIExecutionProvider", "Vitis AI"),
    ("QNNExecutionProvider", "QNN"),
];

/// The subgraphs one compiling provider ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CompiledSubgraphs {
    /// The provider, as people name it (`OpenVINO`).
    pub provider: String,
    /// Subgraph kernels run.
    pub subgraphs: usize,
}

/// Kernels of one op run by one execution provider in one inference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelCount {
    /// ONNX Runtime's provider name (`CPUExecutionProvider`).
    pub provider: String,
    /// The kernel's op (`QLinearConv`, `DequantizeLinear`).
    pub op: String,
    /// Kernels run.
    pub count: usize,
}

/// What ran for a QDQ model, and what it means for its speed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelReport {
    /// Kernels by provider and op, most run first.
    pub kernels: Vec<KernelCount>,
    /// Conv/MatMul/Gemm nodes of the QDQ model fed by a DequantizeLinear.
    pub quantized_compute: usize,
    /// Integer kernels run (fused Q/DQ groups).
    pub integer_kernels: usize,
    /// Quantized Conv/MatMul/Gemm nodes that ran in float (not fused), by name.
    pub float_compute: Vec<String>,
    /// QuantizeLinear and DequantizeLinear kernels run on their own.
    pub standalone_qdq: usize,
    /// Nodes run inside TensorRT engines (which choose their own int8 kernels).
    pub tensorrt: usize,
    /// Subgraphs compiled by their provider, which chooses its own int8 kernels from the
    /// Q/DQ nodes inside.
    pub compiled: Vec<CompiledSubgraphs>,
    /// The model's nodes that ran inside compiled subgraphs: those of the QDQ model that ran
    /// as no kernel of their own.
    pub nodes_compiled: usize,
    /// Nodes of the QDQ model.
    pub nodes: usize,
    /// What to do about it, when the model runs mostly in float.
    pub hint: Option<String>,
}

/// Why a profile could not be read.
#[derive(Debug, thiserror::Error)]
#[error("ONNX Runtime's profile cannot be read: {0}")]
pub struct ProfileError(String);

/// One kernel's time in a run, from a profile of several runs.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelTime {
    /// The kernel's node, as ONNX Runtime names it (a fused node gets a name of its own).
    pub node: String,
    /// The kernel's op (`QLinearConv`).
    pub op: String,
    /// Its median microseconds over the runs profiled.
    pub us: f64,
}

/// Each kernel's median time over the runs of `profile`, in the order of the first run.
pub fn kernel_times(profile: &str) -> Result<Vec<KernelTime>, ProfileError> {
    let mut order: Vec<(String, String)> = Vec::new();
    let mut durations: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for run in kernel_runs(profile)? {
        let runs = durations.entry(run.node.clone()).or_default();
        if runs.is_empty() {
            order.push((run.node, run.op));
        }
        runs.push(run.us);
    }
    Ok(order
        .into_iter()
        .map(|(node, op)| {
            let mut runs = durations.remove(&node).unwrap_or_default();
            runs.sort_by(f64::total_cmp);
            let us = runs.get(runs.len() / 2).copied().unwrap_or(0.0);
            KernelTime { node, op, us }
        })
        .collect())
}

/// One kernel run of the profile.
struct KernelRun {
    node: String,
    op: String,
    provider: String,
    /// Its duration in microseconds (0 when the event has none).
    us: f64,
}

/// The kernel runs of a profile (Chrome trace JSON, ONNX Runtime's format).
fn kernel_runs(profile: &str) -> Result<Vec<KernelRun>, ProfileError> {
    let events: Vec<serde_json::Value> =
        serde_json::from_str(profile).map_err(|e| ProfileError(e.to_string()))?;
    Ok(events
        .iter()
        .filter(|e| e["cat"] == "Node")
        .filter_map(|e| {
            let node = e["name"].as_str()?.strip_suffix("_kernel_time")?;
            Some(KernelRun {
                node: node.to_owned(),
                op: e["args"]["op_name"].as_str()?.to_owned(),
                provider: e["args"]["provider"].as_str()?.to_owned(),
                us: e["dur"].as_f64().unwrap_or(0.0),
            })
        })
        .collect())
}

/// True for a kernel that computes on integers (a fused Q/DQ group).
fn is_integer(op: &str) -> bool {
    ops::is_integer_kernel(op)
}

/// The Conv/MatMul/Gemm nodes of `graph` with an input produced by a DequantizeLinear.
pub(crate) fn quantized_compute(graph: &Graph) -> BTreeSet<String> {
    graph
        .nodes()
        .iter()
        .filter(|n| ops::is_compute(&n.op_type))
        .filter(|n| {
            n.inputs.iter().any(|i| {
                graph
                    .producer_of(i)
                    .is_some_and(|p| p.op_type == ops::DEQUANTIZE_LINEAR)
            })
        })
        .map(|n| n.name.clone())
        .collect()
}

/// Reads the profile of one run of the QDQ model `graph` on `eps` (qdq-studio's names, for
/// the hint).
pub fn read_profile(
    profile: &str,
    graph: &Graph,
    eps: &[String],
) -> Result<KernelReport, ProfileError> {
    let runs = kernel_runs(profile)?;
    let compute = quantized_compute(graph);
    let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
    for run in &runs {
        *counts
            .entry((run.provider.clone(), run.op.clone()))
            .or_default() += 1;
    }
    let mut kernels: Vec<KernelCount> = counts
        .into_iter()
        .map(|((provider, op), count)| KernelCount {
            provider,
            op,
            count,
        })
        .collect();
    kernels.sort_by(|a, b| b.count.cmp(&a.count).then(a.op.cmp(&b.op)));
    let float_compute: BTreeSet<String> = runs
        .iter()
        .filter(|r| ops::is_compute(&r.op) && compute.contains(&r.node))
        .map(|r| r.node.clone())
        .collect();
    let mut report = KernelReport {
        kernels,
        quantized_compute: compute.len(),
        integer_kernels: runs.iter().filter(|r| is_integer(&r.op)).count(),
        float_compute: float_compute.into_iter().collect(),
        standalone_qdq: runs.iter().filter(|r| ops::is_quantizer(&r.op)).count(),
        tensorrt: runs.iter().filter(|r| r.provider == TENSORRT).count(),
        compiled: compiled_subgraphs(&runs),
        nodes_compiled: 0,
        nodes: graph.nodes().len(),
        hint: None,
    };
    if !report.compiled.is_empty() {
        let ran: BTreeSet<&str> = runs.iter().map(|r| r.node.as_str()).collect();
        report.nodes_compiled = graph
            .nodes()
            .iter()
            .filter(|n| !ran.contains(n.name.as_str()))
            .count();
    }
    report.hint = hint(&report, eps);
    Ok(report)
}

/// The subgraph kernels of each compiling provider in `runs`.
fn compiled_subgraphs(runs: &[KernelRun]) -> Vec<CompiledSubgraphs> {
    COMPILING
        .iter()
        .filter_map(|&(provider, name)| {
            let subgraphs = runs.iter().filter(|r| r.provider == provider).count();
            (subgraphs > 0).then(|| CompiledSubgraphs {
                provider: name.to_owned(),
                subgraphs,
            })
        })
        .collect()
}

/// A plain explanation when quantized compute ran in float.
fn hint(report: &KernelReport, eps: &[String]) -> Option<String> {
    if report.float_compute.is_empty() {
        return None;
    }
    let on = eps.first().map_or("cpu", String::as_str);
    let all = report.integer_kernels == 0;
    let what = if all {
        format!(
            "none of the {} quantized Conv/MatMul/Gemm ran as an integer kernel",
            report.quantized_compute
        )
    } else {
        format!(
            "{} of the {} quantized Conv/MatMul/Gemm ran in float",
            report.float_compute.len(),
            report.quantized_compute
        )
    };
    let advice = match on.split(':').next().unwrap_or(on) {
        "cuda" => {
            "the CUDA provider has no integer kernels for Q/DQ groups: run QDQ models with TensorRT (--eps trt), or give LLMs int4 weight-only MatMulNBits"
        }
        "dml" | "directml" => {
            "DirectML fuses only some Q/DQ patterns: int4 weight-only MatMulNBits is its fast path for LLMs"
        }
        _ => {
            "a Q/DQ group fuses only with 8-bit activations and weights (16-bit or excluded neighbours keep it in float)"
        }
    };
    Some(format!(
        "{what} on {on}: they ran between standalone DequantizeLinear/QuantizeLinear nodes, more work than the float model does; {advice}"
    ))
}

impl KernelReport {
    /// One line for people: compiled subgraphs, integer kernels against float ones, and the
    /// hint. Counts that are all zero are no finding and are not shown as one.
    pub fn line(&self) -> String {
        let own = self.integer_kernels + self.float_compute.len() + self.standalone_qdq;
        let kernels = format!(
            "{} integer kernel(s), {} of {} quantized Conv/MatMul/Gemm in float, {} standalone Q/DQ",
            self.integer_kernels,
            self.float_compute.len(),
            self.quantized_compute,
            self.standalone_qdq
        );
        let mut line = if self.compiled.is_empty() {
            if own == 0 {
                "no quantized kernel ran on its own (the profile names none of the model's Q/DQ or integer kernels)".to_owned()
            } else {
                kernels
            }
        } else {
            let subgraphs: Vec<String> = self
                .compiled
                .iter()
                .map(|c| format!("{} compiled {} subgraph(s)", c.subgraphs, c.provider))
                .collect();
            let mut line = format!(
                "{} of the model's {} node(s) ran inside {} (the provider picks its int8 kernels from the Q/DQ nodes inside; the profile does not show them)",
                self.nodes_compiled,
                self.nodes,
                subgraphs.join(" and ")
            );
            if own > 0 {
                line.push_str(&format!("; outside them: {kernels}"));
            }
            line
        };
        if let Some(hint) = &self.hint {
            line.push_str(": ");
            line.push_str(hint);
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, op: &str, provider: &str) -> String {
        format!(
            r#"{{"cat": "Node", "name": "{name}_kernel_time", "args": {{"op_name": "{op}", "provider": "{provider}"}}}}"#
        )
    }

    #[test]
    fn a_cuda_run_without_integer_kernels_gets_the_tensorrt_hint() {
        use crate::model::{DataType, ModelBuilder};
        let mut b = ModelBuilder::new(13);
        b.input("x", DataType::Float32, &[1, 4]);
        b.input("w", DataType::Int8, &[4, 4]);
        b.input("s", DataType::Float32, &[]);
        b.node("DequantizeLinear", &["w", "s"], &["wf"]).name("dq");
        b.node("MatMul", &["x", "wf"], &["y"]).name("mm");
        b.output("y", DataType::Float32, &[1, 4]);
        let graph = Graph::build(&b.build());
        let profile = format!(
            "[{}, {}, {{\"cat\": \"Session\", \"name\": \"model_run\"}}]",
            event("dq", "DequantizeLinear", "CUDAExecutionProvider"),
            event("mm", "MatMul", "CUDAExecutionProvider"),
        );
        let report = read_profile(&profile, &graph, &["cuda:0".to_owned()]).unwrap();
        assert_eq!(report.float_compute, ["mm"]);
        assert_eq!((report.integer_kernels, report.standalone_qdq), (0, 1));
        let hint = report.hint.unwrap();
        assert!(
            hint.contains("none of the 1 quantized") && hint.contains("TensorRT"),
            "{hint}"
        );
        assert!(read_profile("not json", &graph, &[]).is_err());
    }

    #[test]
    fn compiled_subgraphs_are_named_with_the_nodes_inside_never_a_line_of_zeros() {
        use crate::model::{DataType, ModelBuilder};
        let mut b = ModelBuilder::new(13);
        b.input("x", DataType::Float32, &[1, 4]);
        b.node("Relu", &["x"], &["r"]).name("relu");
        b.node("Sigmoid", &["r"], &["y"]).name("sigmoid");
        b.output("y", DataType::Float32, &[1, 4]);
        let graph = Graph::build(&b.build());
        let openvino = format!(
            "[{}]",
            event(
                "OpenVINOExecutionProvider_OpenVINO-EP-subgraph_1_0",
                "OpenVINO-EP-subgraph_1",
                "OpenVINOExecutionProvider"
            )
        );
        let report = read_profile(&openvino, &graph, &["openvino:CPU".to_owned()]).unwrap();
        assert_eq!(report.compiled.len(), 1);
        assert_eq!((report.nodes_compiled, report.nodes), (2, 2));
        let line = report.line();
        assert!(
            line.starts_with(
                "2 of the model's 2 node(s) ran inside 1 compiled OpenVINO subgraph(s)"
            ),
            "{line}"
        );
        assert!(!line.contains("0 integer kernel(s)"), "{line}");
        // One node left to the CPU: counted outside.
        let mixed = format!(
            "[{}, {}]",
            event("sub", "OpenVINO-EP-subgraph_1", "OpenVINOExecutionProvider"),
            event("sigmoid", "Sigmoid", "CPUExecutionProvider"),
        );
        let report = read_profile(&mixed, &graph, &[]).unwrap();
        assert_eq!(report.nodes_compiled, 1);
        // Nothing at all: said as such, not as zeros.
        let none = read_profile("[]", &graph, &[]).unwrap().line();
        assert!(none.starts_with("no quantized kernel ran"), "{none}");
    }
}
