//! [`ModelSummary`]: what `qdq-studio inspect` reports about a model, as plain data.

use std::path::PathBuf;

use serde::Serialize;

use crate::model::Model;
use crate::model::graph::{Graph, format_shape, qualified_op_type};
use crate::quant::ops::is_quantizable_by_default;

/// A graph input or output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ValueSummary {
    /// Tensor name.
    pub name: String,
    /// Element type name.
    pub dtype: String,
    /// Shape with symbolic dims kept, e.g. `[N, 3, 48, 192]`.
    pub shape: String,
}

/// One row of the op-type table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpTypeCount {
    /// `op_type`, or `domain::op_type` outside the default domain.
    pub op_type: String,
    /// Number of nodes.
    pub count: usize,
    /// True when onnxruntime's quantizer handles this op type by default.
    pub quantizable: bool,
}

/// An operator-set import.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpsetSummary {
    /// The domain (`ai.onnx` for the default one).
    pub domain: String,
    /// The version.
    pub version: i64,
}

/// A node whose attributes hold subgraphs (listed, not rewritten).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SubgraphSummary {
    /// The node's effective name.
    pub node: String,
    /// Its op type (If, Loop, Scan...).
    pub op_type: String,
    /// The attribute holding the body.
    pub attribute: String,
    /// Nodes in the body.
    pub nodes: usize,
}

/// Everything `inspect` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelSummary {
    /// The model file.
    pub path: Option<PathBuf>,
    /// ONNX IR version.
    pub ir_version: i64,
    /// Operator-set imports.
    pub opsets: Vec<OpsetSummary>,
    /// What loading did to a model older than opset 7 (upgraded in memory, or why not).
    pub legacy_opset: Option<String>,
    /// Producer name and version, as written.
    pub producer: String,
    /// Graph inputs fed by the user.
    pub inputs: Vec<ValueSummary>,
    /// Graph outputs.
    pub outputs: Vec<ValueSummary>,
    /// Node count of the main graph.
    pub node_count: usize,
    /// Node counts per op type, most frequent first.
    pub op_types: Vec<OpTypeCount>,
    /// Number of initializers.
    pub initializer_count: usize,
    /// Total initializer elements.
    pub parameters: u64,
    /// Total initializer bytes.
    pub parameter_bytes: u64,
    /// External data files.
    pub external_data_files: Vec<PathBuf>,
    /// Number of nodes quantizable by default (onnxruntime's op-type list).
    pub quantizable_nodes: usize,
    /// Their names, in topological order.
    pub quantizable_node_names: Vec<String>,
    /// Nodes the index named because they had no name.
    pub renamed_nodes: usize,
    /// Subgraph-holding nodes.
    pub subgraphs: Vec<SubgraphSummary>,
    /// Structural problems, one line each.
    pub problems: Vec<String>,
}

fn value_summary(graph: &Graph, name: &str) -> ValueSummary {
    let info = graph.tensor(name);
    ValueSummary {
        name: name.to_owned(),
        dtype: info.map_or_else(|| "?".to_owned(), |t| t.type_name()),
        shape: format_shape(info.and_then(|t| t.shape.as_deref())),
    }
}

impl ModelSummary {
    /// Summarises `model` through its index.
    pub fn of(model: &Model, graph: &Graph) -> ModelSummary {
        let proto = model.proto();
        let mut op_types: Vec<OpTypeCount> = graph
            .op_type_counts()
            .into_iter()
            .map(|(op_type, count)| {
                let (domain, op) = op_type.split_once("::").unwrap_or(("", op_type.as_str()));
                OpTypeCount {
                    quantizable: is_quantizable_by_default(domain, op),
                    op_type: op_type.clone(),
                    count,
                }
            })
            .collect();
        op_types.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then_with(|| a.op_type.cmp(&b.op_type))
        });
        let quantizable_node_names: Vec<String> = graph
            .topological_order()
            .iter()
            .map(|&id| graph.node(id))
            .filter(|n| is_quantizable_by_default(&n.domain, &n.op_type))
            .map(|n| n.name.clone())
            .collect();
        let subgraphs = graph
            .nodes()
            .iter()
            .flat_map(|n| {
                n.subgraphs
                    .iter()
                    .map(|(attribute, nodes)| SubgraphSummary {
                        node: n.name.clone(),
                        op_type: qualified_op_type(&n.domain, &n.op_type),
                        attribute: attribute.clone(),
                        nodes: *nodes,
                    })
            })
            .collect();
        let problems = graph.problems().iter().map(|p| p.describe(graph)).collect();
        let producer = format!("{} {}", proto.producer_name(), proto.producer_version())
            .trim()
            .to_owned();
        ModelSummary {
            path: model.path().map(PathBuf::from),
            ir_version: proto.ir_version(),
            opsets: proto
                .opset_import
                .iter()
                .map(|o| OpsetSummary {
                    domain: if o.domain().is_empty() {
                        "ai.onnx".to_owned()
                    } else {
                        o.domain().to_owned()
                    },
                    version: o.version(),
                })
                .collect(),
            legacy_opset: model.legacy_opset().map(|l| l.describe()),
            producer,
            inputs: graph
                .inputs()
                .iter()
                .map(|n| value_summary(graph, n))
                .collect(),
            outputs: graph
                .outputs()
                .iter()
                .map(|n| value_summary(graph, n))
                .collect(),
            node_count: graph.nodes().len(),
            op_types,
            initializer_count: model.graph().initializer.len(),
            parameters: graph.parameter_count(),
            parameter_bytes: graph.parameter_bytes(),
            external_data_files: model.external_files().to_vec(),
            quantizable_nodes: quantizable_node_names.len(),
            quantizable_node_names,
            renamed_nodes: graph.renamed().len(),
            subgraphs,
            problems,
        }
    }
}

/// Reads, indexes and checks the model at `path`, and summarises it.
pub fn inspect(path: &std::path::Path) -> Result<ModelSummary, super::WorkflowError> {
    let model = Model::load(path)?;
    let graph = Graph::build(&model);
    graph
        .check()
        .map_err(|source| super::WorkflowError::InvalidGraph {
            path: path.to_path_buf(),
            source: Box::new(source),
        })?;
    Ok(ModelSummary::of(&model, &graph))
}

/// What quantizing the model at `path` with `recipe` does, node by node and tensor by tensor
/// (see [`crate::quant::explain`]); `stats` decide float-ness and give ranges when given.
pub fn plan(
    path: &std::path::Path,
    recipe: &crate::recipe::Recipe,
    stats: Option<&crate::calib::CalibrationStats>,
) -> Result<crate::quant::Explanation, super::WorkflowError> {
    let model = Model::load(path)?;
    Ok(crate::quant::explain(&model, recipe, stats)?)
}
