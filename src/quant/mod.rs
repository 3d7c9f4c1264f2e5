//! Quantization: which ops are quantizable, scale/zero-point maths, pre-processing, placement
//! policies, graph rewriting into QDQ form, and the opset raise the output needs.

pub mod bias_correction;
pub mod channel_factors;
pub mod equalize;
pub mod explain;
pub mod gemm_layout;
pub mod gptq;
pub mod int4;
pub mod kernel_pairs;
pub mod layers;
pub mod layerwise;
pub mod memory;
pub mod mixed;
pub mod norms;
pub mod ops;
pub mod opset;
pub mod outlier_rows;
pub mod params;
pub mod plan;
pub mod precision;
pub mod prepare;
pub mod preprocess;
pub mod rescaled;
pub mod rewrite;
pub mod saturation;
pub mod scale;
pub mod simplify;
pub mod smooth;
pub mod weight_range;

use std::collections::{BTreeMap, BTreeSet};

use crate::calib::stats::CalibrationStats;
use crate::jobs::JobContext;
use crate::model::proto::StringStringEntryProto;
use crate::model::{Graph, Model, ModelError};
use crate::recipe::{QuantMode, QuantType, Recipe, RecipeError};
use crate::runtime::{EpSpec, Optimization, Runtime, RuntimeError, SessionOptions};

pub use explain::{Explanation, NodeDecision, explain, explain_prepared};
pub use plan::{Exclusion, Plan, PlanFacts, TensorRole};
pub use prepare::{Prepared, name_nodes};
pub use preprocess::PreprocessReport;
pub use rewrite::TensorParams;

/// Anything that stops a quantization.
#[derive(Debug, thiserror::Error)]
pub enum QuantError {
    /// The model could not be read or is broken.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The model is quantized already (its Q/DQ and integer nodes, counted by op type).
    #[error("already quantized: {0}; quantize the float model, or open it to inspect and compare")]
    AlreadyQuantized(String),
    /// The recipe is invalid for this model.
    #[error(transparent)]
    Recipe(#[from] RecipeError),
    /// The statistics do not fit the recipe.
    #[error("{0}")]
    StatsMismatch(String),
    /// A tensor to quantize has no usable range.
    #[error("tensor '{tensor}' has no range: {reason}")]
    MissingStats {
        /// The tensor.
        tensor: String,
        /// Why.
        reason: String,
    },
    /// The user cancelled (during a search).
    #[error("cancelled")]
    Cancelled,
    /// The plan quantizes nothing.
    #[error("nothing to quantize: {why}")]
    NothingToQuantize {
        /// Why, naming the model's op types.
        why: String,
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
    /// The quantization would need more memory than there is.
    #[error(
        "quantizing needs about {} of memory (the quantized weights, ONNX Runtime's copy of them for the load check, the largest weight being read) and {} is available; free memory, or quantize fewer nodes",
        crate::util::format_bytes(*.needed),
        crate::util::format_bytes(*.available)
    )]
    Memory {
        /// Bytes the estimate needs at least.
        needed: u64,
        /// Bytes available.
        available: u64,
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
    /// Tensors the recipe would have quantized that automatic precision kept in float.
    pub kept_float: BTreeMap<String, precision::KeptReason>,
    /// Weights automatic precision gave 7 bits against kernel saturation.
    pub seven_bit_weights: BTreeSet<String>,
    /// The 8-bit weights a CPU without VNNI may still saturate on
    /// ([`saturation::saturation_prone_weights`]).
    pub saturation_prone_weights: BTreeSet<String>,
    /// What the int4 search did (empty for other modes and methods).
    pub int4: int4::Int4Report,
    /// One line on what SmoothQuant smoothed, when it did.
    pub smoothing: Option<String>,
    /// What bias correction did, when the recipe asks for it.
    pub bias_correction: Option<bias_correction::BiasCorrectionReport>,
    /// What GPTQ rounded, when the recipe asks for it.
    pub gptq: Option<gptq::GptqReport>,
}

impl Quantized {
    /// How many nodes of each op type were quantized (`original` indexes the float model).
    pub fn quantized_by_op_type(&self, original: &Graph) -> BTreeMap<String, usize> {
        count_by_op_type(original, &self.quantized_nodes)
    }

    /// How many nodes of each op type were left float for being in a transformer
    /// ([`Exclusion::FloatInTransformer`]; `original` indexes the float model).
    pub fn float_in_transformer_by_op_type(&self, original: &Graph) -> BTreeMap<String, usize> {
        let names = self
            .excluded_nodes
            .iter()
            .filter(|(_, why)| **why == Exclusion::FloatInTransformer)
            .map(|(name, _)| name);
        count_by_op_type(original, names)
    }
}

/// How many of the nodes `names` (of `original`) each op type has.
fn count_by_op_type<'a>(
    original: &Graph,
    names: impl IntoIterator<Item = &'a String>,
) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for node in names.into_iter().filter_map(|n| original.node_by_name(n)) {
        *counts.entry(node.op_type.clone()).or_insert(0) += 1;
    }
    counts
}

/// The opset the output needs for its Q/DQ nodes.
/// The opset per-tensor output is raised to when the model's is lower (10 when a node blocks
/// the raise to 11).
const PREFERRED_PER_TENSOR_OPSET: i64 = 11;

/// Q/DQ takes float16 and bfloat16 tensors and scales from opset 19.
const HALF_SCALES_OPSET: i64 = 19;

fn needed_opset(recipe: &Recipe, per_axis: bool, half_scales: bool) -> i64 {
    let types = [recipe.activation_type, recipe.weight_type];
    let wide = |t: &QuantType| {
        matches!(
            t,
            QuantType::Int16 | QuantType::Uint16 | QuantType::Int4 | QuantType::Uint4
        )
    };
    let mut needed = 13;
    if recipe.mode == QuantMode::Fp8 || half_scales {
        needed = HALF_SCALES_OPSET;
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
    // Per-tensor Q/DQ runs from opset 10, but ONNX Runtime's own optimizer quantizes a float
    // Conv bias next to Q/DQ with a Round node, which needs 11: an opset-10 output fails to
    // load there. 11 is also onnxruntime's quantizer's floor for older models.
    if !per_axis && needed == 13 {
        needed = PREFERRED_PER_TENSOR_OPSET;
    }
    needed
}

/// Quantizes `model` as `recipe` says, using `stats` for activation ranges.
pub fn quantize(
    model: &Model,
    stats: Option<&CalibrationStats>,
    recipe: &Recipe,
) -> Result<Quantized, QuantError> {
    quantize_with(model, stats, recipe, &JobContext::silent())
}

/// An error when `graph` is quantized already: its Q/DQ would be quantized again (ONNX
/// Runtime then refuses the output for its duplicate node names).
pub fn refuse_quantized(graph: &Graph) -> Result<(), QuantError> {
    let counts = crate::model::qdq::quantized_op_counts(graph);
    if counts.is_empty() {
        return Ok(());
    }
    let listed: Vec<String> = counts
        .iter()
        .map(|(op, count)| format!("{count} {op}"))
        .collect();
    Err(QuantError::AlreadyQuantized(listed.join(", ")))
}

/// Bytes quantizing `model` with `recipe` needs at least, and a session over the result
/// with it (see [`memory::estimate`]): what one more quantization running at once costs.
pub fn memory_needed(
    model: &Model,
    stats: Option<&CalibrationStats>,
    recipe: &Recipe,
) -> Result<u64, QuantError> {
    let prepared = Prepared::new(model, &recipe.prepared_options())?;
    let Guarded {
        recipe: effective,
        plan,
        ..
    } = guarded(&prepared, recipe, stats);
    let plan = check_plan(&prepared, &effective, plan, stats)?;
    Ok(memory::estimate(&prepared.model, &plan, &effective))
}

/// [`quantize`], reporting the int4 search's progress to `ctx` and stopping with
/// [`QuantError::Cancelled`] when it is cancelled.
pub fn quantize_with(
    model: &Model,
    stats: Option<&CalibrationStats>,
    recipe: &Recipe,
    ctx: &JobContext,
) -> Result<Quantized, QuantError> {
    let original = Graph::build(model);
    original.check()?;
    refuse_quantized(&original)?;
    recipe.check_against(&original)?;
    let mut prepared = Prepared::new(model, &recipe.prepared_options())?;
    if recipe.preprocessing.write_observed_shapes
        && let Some(stats) = stats
    {
        prepared.record_observed_shapes(stats);
    }
    prepared.graph.check()?;
    check_equalization(recipe, stats)?;
    check_simplification(&prepared, stats)?;
    check_layerwise(recipe, stats)?;
    let gptq::Rounded {
        rounding,
        report: gptq_report,
    } = gptq::round(&prepared, recipe, stats, ctx)?.unwrap_or_default();
    let gptq = recipe.gptq.then_some(gptq_report);
    let bias_correction = bias_correction::apply(&mut prepared, recipe, stats, &rounding)?;
    let Guarded {
        recipe: effective,
        plan,
        kept_float,
        seven_bit_weights,
    } = guarded(&prepared, recipe, stats);
    let user_recipe = recipe;
    let recipe = &effective;
    let plan = check_plan(&prepared, recipe, plan, stats)?;
    let saturation_prone_weights = saturation::saturation_prone_weights(&prepared, recipe, &plan);
    memory::check(
        memory::estimate(&prepared.model, &plan, recipe),
        crate::util::available_memory(),
    )?;
    // Weight transforms and activation scales: the int4 searches' or SmoothQuant's (the
    // recipe allows one or the other).
    let mut scaling = int4::choose(&prepared, &plan, recipe, stats, ctx)?;
    scaling.fold_into_producers();
    let smoothed = smooth::choices(&prepared, &plan, recipe, stats)?;
    let smoothing = smooth::summary(&smoothed, recipe);
    if !smoothed.scales.is_empty() {
        scaling = smoothed;
    }
    scaling.rounding = rounding;
    let Prepared {
        model: mut work,
        graph,
        report: preprocess,
        ..
    } = prepared;
    let rewritten = rewrite::rewrite(&mut work, &graph, &plan, recipe, stats, &scaling)?;
    let observed_rank = |tensor: &str| -> Option<usize> {
        stats?.tensors.get(tensor)?.shapes.first().map(Vec::len)
    };
    let needed = needed_opset(recipe, rewritten.per_axis, rewritten.half_scales);
    let opset_raised = match opset::raise(work.proto_mut(), &graph, needed, &observed_rank) {
        // 11 is preferred for ONNX Runtime's sake, 10 is what Q/DQ needs (a refused raise
        // leaves the model as it was).
        Err(QuantError::OpsetRaise { .. }) if needed == PREFERRED_PER_TENSOR_OPSET => {
            opset::raise(work.proto_mut(), &graph, 10, &observed_rank)?
        }
        raised => raised?,
    };
    stamp_recipe(&mut work, user_recipe);
    let mut rescaled = rescaled::rescaled_tensors(&graph, &preprocess.equalized, &scaling.scales);
    rescaled.add_unmatched(&preprocess.simplified.unclipped);
    rescaled::stamp(&mut work, &rescaled);
    let name = |id: &crate::model::NodeId| graph.node(*id).name.clone();
    Ok(Quantized {
        model: work,
        preprocess,
        quantized_nodes: plan.quantized.iter().map(name).collect(),
        excluded_nodes: plan
            .excluded
            .iter()
            .map(|(id, r)| (name(id), r.clone()))
            .collect(),
        removed_nodes: plan.removed.iter().map(|(id, _, _)| name(id)).collect(),
        params: rewritten.params,
        opset_raised,
        kept_float,
        seven_bit_weights,
        saturation_prone_weights,
        int4: scaling.report,
        smoothing,
        bias_correction,
        gptq,
    })
}

/// An error when the statistics were gathered on the model with cross-layer equalization
/// and the recipe quantizes it without, or the other way round: the equalized activations
/// have other ranges.
fn check_equalization(recipe: &Recipe, stats: Option<&CalibrationStats>) -> Result<(), QuantError> {
    let Some(stats) = stats else {
        return Ok(());
    };
    match (recipe.preprocessing.equalize, stats.info.equalized) {
        (true, false) => Err(QuantError::StatsMismatch(
            "the recipe equalizes layers (cle) but the statistics were calibrated without it: calibrate again with cle on".to_owned(),
        )),
        (false, true) => Err(QuantError::StatsMismatch(
            "the statistics were calibrated with cross-layer equalization (cle): quantize with cle on, or calibrate again without it".to_owned(),
        )),
        _ => Ok(()),
    }
}

/// An error when simplification folded HardSigmoids into their Convs and the statistics do
/// not hold the tensors those Convs write now: they were calibrated on the model unsimplified
/// (`--no_simplify`, an older version, another tool's cache).
fn check_simplification(
    prepared: &Prepared,
    stats: Option<&CalibrationStats>,
) -> Result<(), QuantError> {
    let Some(stats) = stats else {
        return Ok(());
    };
    let simplified = &prepared.report.simplified;
    let missing = simplified
        .unclipped
        .iter()
        .filter(|t| !stats.tensors.contains_key(*t))
        .count();
    match simplified.summary() {
        Some(what) if missing > 0 => Err(QuantError::StatsMismatch(format!(
            "the recipe simplifies this model ({what}) but the statistics were calibrated without it ({missing} folded HardSigmoid input(s) not measured): calibrate again, or quantize with --no_simplify"
        ))),
        _ => Ok(()),
    }
}

/// An error when the recipe chooses ranges layer-wise and the statistics hold no choice.
fn check_layerwise(recipe: &Recipe, stats: Option<&CalibrationStats>) -> Result<(), QuantError> {
    match stats {
        Some(stats) if recipe.layerwise_range && !stats.info.layerwise_ranges => {
            Err(QuantError::StatsMismatch(
                "layer-wise ranges need statistics calibrated with them on (each activation's measured choice): calibrate again with layerwise_range".to_owned(),
            ))
        }
        _ => Ok(()),
    }
}

/// What automatic precision does to a recipe for one model.
#[derive(Debug, Clone)]
pub struct Guarded {
    /// The recipe with the kept tensors and 7-bit weights as overrides.
    pub recipe: Recipe,
    /// The plan under that recipe (the 7-bit overrides change no role, only the bits).
    pub plan: Plan,
    /// The tensors kept in float that the recipe alone would have quantized, and why.
    pub kept_float: BTreeMap<String, precision::KeptReason>,
    /// The weights given 7 bits against kernel saturation (see [`saturation`]).
    pub seven_bit_weights: BTreeSet<String>,
}

/// The recipe with automatic precision applied: the tensors it keeps in float, the node
/// precisions as tensor types ([`mixed`]), then the saturation guard's 7-bit weights among the
/// 8-bit weights still quantized.
pub fn guarded(prepared: &Prepared, recipe: &Recipe, stats: Option<&CalibrationStats>) -> Guarded {
    let recipe = &layerwise::with_chosen_ranges(recipe, stats);
    let mut kept = precision::kept_in_float(prepared, recipe, stats);
    let unguarded = prepared.plan(recipe, stats);
    // Only what would be quantized like an activation: a weight holding Inf stays an error.
    kept.retain(|name, _| {
        unguarded
            .roles
            .get(name)
            .is_some_and(TensorRole::is_activation_like)
    });
    for name in smooth::folded_constants(prepared, &unguarded, recipe, stats) {
        kept.insert(name, precision::KeptReason::Smoothed);
    }
    let kept_recipe = mixed::with_node_precision(prepared, &precision::with_kept(recipe, &kept));
    let plan = if kept.is_empty() {
        unguarded
    } else {
        prepared.plan(&kept_recipe, stats)
    };
    let seven_bit_weights = saturation::seven_bit_weights(prepared, &kept_recipe, &plan);
    Guarded {
        recipe: saturation::with_seven_bits(&kept_recipe, &seven_bit_weights),
        plan,
        kept_float: kept,
        seven_bit_weights,
    }
}

/// `plan`, or an error when it quantizes nothing.
fn check_plan(
    prepared: &Prepared,
    recipe: &Recipe,
    plan: Plan,
    stats: Option<&CalibrationStats>,
) -> Result<Plan, QuantError> {
    refuse_empty_plan(prepared, recipe, &plan, stats)?;
    Ok(plan)
}

/// The error quantizing ends with when `plan` quantizes nothing, saying why (float-ness of
/// tensors as `stats` show it): raised before a calibration too, which could not change it.
pub fn refuse_empty_plan(
    prepared: &Prepared,
    recipe: &Recipe,
    plan: &Plan,
    stats: Option<&CalibrationStats>,
) -> Result<(), QuantError> {
    if plan.quantized.is_empty() || plan.roles.is_empty() {
        let is_float = |t: &str| prepared.is_float(t, stats);
        return Err(QuantError::NothingToQuantize {
            why: nothing_quantized(&prepared.graph, recipe, plan, &is_float),
        });
    }
    Ok(())
}

/// Why a plan quantizes nothing: the recipe selects none of the model's op types, or the
/// selected nodes have no tensor Q/DQ can take, or they only pass on a producer's scale.
fn nothing_quantized(
    graph: &Graph,
    recipe: &Recipe,
    plan: &Plan,
    is_float: &dyn Fn(&str) -> bool,
) -> String {
    let listed = plan::listed_op_types(recipe);
    let selected =
        |t: &str| listed.contains(&t) && !recipe.op_types_to_exclude.iter().any(|e| e == t);
    let all: Vec<String> = graph.op_type_counts().into_keys().collect();
    let chosen: Vec<&String> = all.iter().filter(|t| selected(t)).collect();
    let join = |v: &[&String]| v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
    if chosen.is_empty() {
        return format!(
            "the recipe selects none of this model's op types ({})",
            all.join(", ")
        );
    }
    let left_out = graph
        .nodes()
        .iter()
        .filter(|n| chosen.contains(&&n.op_type))
        .all(|n| {
            matches!(
                plan.excluded.get(&n.id),
                Some(
                    plan::Exclusion::NodeExcluded
                        | plan::Exclusion::NotSelected
                        | plan::Exclusion::OutsideSubgraph
                )
            )
        });
    if left_out {
        return format!(
            "the recipe's node lists (nodes to exclude, nodes to quantize, subgraph range) leave out every node of the selected op types ({})",
            join(&chosen)
        );
    }
    let any_float = graph
        .nodes()
        .iter()
        .filter(|n| chosen.contains(&&n.op_type))
        .flat_map(|n| n.inputs.iter().chain(&n.outputs))
        .any(|t| !t.is_empty() && is_float(t));
    if !any_float {
        return format!(
            "the selected nodes ({}) read and write no float32 or float16 tensor (float64 and integers stay as they are)",
            join(&chosen)
        );
    }
    if recipe.mode == QuantMode::Int4 {
        return format!(
            "int4 weight-only quantizes the constant rank-2 weights of MatMul and Gemm (with transB, only a weight no other node reads), and the selected nodes ({}) have none",
            join(&chosen)
        );
    }
    format!(
        "the selected nodes ({}) only pass on the scale of a quantized producer, and none has one here; the model's op types: {}",
        join(&chosen),
        all.join(", ")
    )
}

/// Records the recipe and the app's version in the model's `metadata_props` (replacing an
/// earlier run's).
fn stamp_recipe(model: &mut Model, recipe: &Recipe) {
    let proto = model.proto_mut();
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
}

/// The recipe a model made by this tool carries (see [`stamp_recipe`]); `None` for other
/// models, or a stamp this build cannot read.
pub fn stamped_recipe(model: &Model) -> Option<Recipe> {
    model
        .proto()
        .metadata_props
        .iter()
        .find(|p| p.key() == "qdq_studio.recipe")
        .and_then(|p| Recipe::from_toml(p.value(), "the model's recipe").ok())
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
    let encoded = model.to_session_model()?;
    let options = SessionOptions {
        prepacking: false,
        arena: false,
        ..cpu_session_options(model)
    };
    let opened = runtime
        .session_from_model(&encoded, &[EpSpec::Cpu], options)
        .map(drop);
    drop(encoded);
    crate::util::return_freed_memory();
    opened.map_err(|e| QuantError::Invalid(e.to_string()))
}
