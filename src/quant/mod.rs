//! Quantization: which ops are quantizable, scale/zero-point maths, pre-processing, placement
//! policies, graph rewriting into QDQ form, and the opset raise the output needs.

pub mod ops;
pub mod opset;
pub mod plan;
pub mod preprocess;
pub mod rewrite;
pub mod scale;

use std::collections::{BTreeMap, HashSet};

use crate::calib::stats::CalibrationStats;
use crate::model::proto::StringStringEntryProto;
use crate::model::{Graph, Model, ModelError};
use crate::recipe::{QuantMode, QuantType, Recipe, RecipeError};
use crate::runtime::{EpSpec, Optimization, Runtime, RuntimeError, SessionOptions};

pub use plan::{Exclusion, Plan, TensorRole};
pub use preprocess::PreprocessReport;
pub use rewrite::TensorParams;

/// Anything that stops a quantization.
#[derive(Debug, thiserror::Error)]
pub enum QuantError {
    /// The model could not be read or is broken.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The recipe is invalid for this model.
    #[error(transparent)]
    Recipe(#[from] RecipeError),
    /// A tensor to quantize has no usable range.
    #[error("tensor '{tensor}' has no range: {reason}")]
    MissingStats {
        /// The tensor.
        tensor: String,
        /// Why.
        reason: String,
    },
    /// The recipe selects nothing.
    #[error("nothing to quantize: no node of this model matches the recipe (op types: {op_types})")]
    NothingToQuantize {
        /// The op types of the model.
        op_types: String,
    },
    /// A weight holds NaN or Inf.
    #[error(
        "weight '{tensor}' holds {count} NaN/Inf value(s); fix the model or keep its node in float"
    )]
    NonFiniteWeight {
        /// The weight.
        tensor: String,
        /// How many values.
        count: usize,
    },
    /// The output needs a newer opset and raising it would change some nodes.
    #[error("the output needs opset {to} (the model has {from}), but raising it would change: {}", .blocking.join(", "))]
    OpsetRaise {
        /// The model's opset.
        from: i64,
        /// The opset needed.
        to: i64,
        /// The nodes that prevent it.
        blocking: Vec<String>,
    },
    /// The quantized model failed to load in ONNX Runtime.
    #[error("the quantized model does not load in ONNX Runtime: {0}")]
    Invalid(String),
    /// ONNX Runtime could not be used to check the output.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

/// The result of a quantization.
#[derive(Debug, Clone)]
pub struct Quantized {
    /// The QDQ model.
    pub model: Model,
    /// What pre-processing changed.
    pub preprocess: PreprocessReport,
    /// Names of the quantized nodes.
    pub quantized_nodes: Vec<String>,
    /// Nodes left in float, with the reason.
    pub excluded_nodes: BTreeMap<String, Exclusion>,
    /// Relu/Clip nodes folded into the previous range.
    pub removed_nodes: Vec<String>,
    /// Parameters of every quantized tensor.
    pub params: BTreeMap<String, TensorParams>,
    /// The opset raise applied, (from, to).
    pub opset_raised: Option<(i64, i64)>,
}

/// Writes every node's effective name into the model (unnamed ones get `OpType_N`), so
/// recipes can name them and the output keeps the names.
pub fn name_nodes(model: &mut Model) {
    let graph = Graph::build(model);
    if let Some(g) = model.proto_mut().graph.as_mut() {
        for renamed in graph.renamed() {
            g.node[renamed.id.0].name = Some(renamed.name.clone());
        }
    }
}

/// The opset the output needs for its Q/DQ nodes.
fn needed_opset(recipe: &Recipe, per_axis: bool) -> i64 {
    let types = [recipe.activation_type, recipe.weight_type];
    let wide = |t: &QuantType| {
        matches!(
            t,
            QuantType::Int16 | QuantType::Uint16 | QuantType::Int4 | QuantType::Uint4
        )
    };
    let mut needed = 13;
    if recipe.mode == QuantMode::Fp8 {
        needed = 19;
    }
    if recipe.mode == QuantMode::Int4
        || types.iter().any(wide)
        || recipe
            .tensor_overrides
            .values()
            .any(|o| o.dtype.as_ref().is_some_and(wide))
    {
        needed = 21;
    }
    if !per_axis && needed == 13 {
        needed = 10;
    }
    needed
}

/// Quantizes `model` as `recipe` says, using `stats` for activation ranges.
pub fn quantize(
    model: &Model,
    stats: Option<&CalibrationStats>,
    recipe: &Recipe,
) -> Result<Quantized, QuantError> {
    let original = Graph::build(model);
    original.check()?;
    recipe.check_against(&original)?;
    let mut named = model.clone();
    name_nodes(&mut named);
    let (mut work, mut preprocess) = preprocess::preprocess(&named, &recipe.preprocessing)?;
    if recipe.preprocessing.write_observed_shapes
        && let Some(stats) = stats
    {
        preprocess.shapes_written = preprocess::write_observed_shapes(&mut work, stats);
    }
    let graph = Graph::build(&work);
    graph.check()?;
    let calibrated: HashSet<&str> = stats
        .map(|s| s.tensors.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let clip_min = |id: crate::model::NodeId| -> Option<f32> {
        let node = &work.graph().node[id.0];
        match node.input.get(1).filter(|m| !m.is_empty()) {
            Some(min) => work
                .weight(min)
                .ok()
                .flatten()
                .and_then(|a| a.to_f32().iter().next().copied()),
            None => node
                .attribute
                .iter()
                .find(|a| a.name() == "min")
                .map(|a| a.f())
                .or(Some(f32::MIN)),
        }
    };
    let plan = plan::plan(&graph, recipe, &calibrated, &clip_min);
    if plan.quantized.is_empty() || plan.roles.is_empty() {
        return Err(QuantError::NothingToQuantize {
            op_types: graph
                .op_type_counts()
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    let rewritten = rewrite::rewrite(&mut work, &graph, &plan, recipe, stats)?;
    let observed_rank = |tensor: &str| -> Option<usize> {
        stats?.tensors.get(tensor)?.shapes.first().map(Vec::len)
    };
    let opset_raised = opset::raise(
        work.proto_mut(),
        &graph,
        needed_opset(recipe, rewritten.per_axis),
        &observed_rank,
    )?;
    let proto = work.proto_mut();
    proto
        .metadata_props
        .retain(|p| !p.key().starts_with("qdq_studio."));
    proto.metadata_props.push(StringStringEntryProto {
        key: Some("qdq_studio.recipe".to_owned()),
        value: Some(recipe.to_toml()),
    });
    proto.metadata_props.push(StringStringEntryProto {
        key: Some("qdq_studio.version".to_owned()),
        value: Some(env!("CARGO_PKG_VERSION").to_owned()),
    });
    Ok(Quantized {
        model: work,
        preprocess,
        quantized_nodes: plan
            .quantized
            .iter()
            .map(|&id| graph.node(id).name.clone())
            .collect(),
        excluded_nodes: plan
            .excluded
            .iter()
            .map(|(&id, r)| (graph.node(id).name.clone(), r.clone()))
            .collect(),
        removed_nodes: plan
            .removed
            .iter()
            .map(|(id, _, _)| graph.node(*id).name.clone())
            .collect(),
        params: rewritten.params,
        opset_raised,
    })
}

/// The session options a quantized model runs with on the CPU (FP8 models need basic
/// optimizations only; see [`Optimization::Basic`]).
pub fn cpu_session_options(model: &Model) -> SessionOptions {
    let fp8 = model
        .graph()
        .initializer
        .iter()
        .any(|t| t.data_type() == crate::model::DataType::Float8E4M3FN.to_onnx());
    SessionOptions {
        optimization: if fp8 {
            Optimization::Basic
        } else {
            Optimization::All
        },
        ..SessionOptions::default()
    }
}

/// Opens the model in an ONNX Runtime session on the CPU: a saved model must load.
pub fn verify_loads(model: &Model, runtime: &Runtime) -> Result<(), QuantError> {
    let bytes = model.to_bytes()?;
    runtime
        .session_from_bytes(&bytes, &[EpSpec::Cpu], cpu_session_options(model))
        .map(|_| ())
        .map_err(|e| QuantError::Invalid(e.to_string()))
}
