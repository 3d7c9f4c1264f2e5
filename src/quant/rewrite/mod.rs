//! Turning a [`Plan`] into a QDQ model: scales and zero points from the calibrated ranges,
//! quantized weights and biases, Q/DQ nodes with onnxruntime's names, consumers rewired.
//!
//! A [`Rewriter`] runs the phases in order, one file each: activation parameters
//! ([`activations`]), weights ([`weights`]), biases ([`biases`]), Q/DQ pairs ([`qdq`]); they
//! collect [`Edits`] that [`assemble`] applies to the graph at the end.

mod activations;
mod assemble;
mod awq;
mod biases;
mod qdq;
mod tensors;
mod weights;

use std::collections::{BTreeMap, HashMap, HashSet};

use ndarray::ArrayD;

use super::QuantError;
use super::int4::choices::Int4Choices;
use super::plan::{Plan, TensorRole};
use super::scale::ScaleZp;
use crate::calib::stats::CalibrationStats;
use crate::model::infer::elem_types;
use crate::model::proto::{NodeProto, TensorProto};
use crate::model::{DataType, Graph, Model, TensorArray};
use crate::recipe::{QuantType, Recipe};

pub use super::params::qtype_range_target;
pub(crate) use tensors::{int_attr, node, scale_tensor, zero_point_tensor};
pub use weights::{channel_extremes, dequantized_weight, rounding_error, weight_params};

/// Quantization parameters of one tensor (one entry per channel when per-channel).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorParams {
    /// The quantized type.
    pub qtype: QuantType,
    /// Scale and zero point per channel (one entry when per-tensor).
    pub params: Vec<ScaleZp>,
    /// Channel axis when per-channel.
    pub axis: Option<usize>,
    /// Block size when block-wise (int4 weights).
    pub block_size: Option<usize>,
    /// The range the parameters came from (activations).
    pub range: Option<(f32, f32)>,
    /// The scale's element type: the tensor's own float type (float16 and bfloat16 tensors
    /// get scales of their type, which Q/DQ requires; everything else float32).
    pub scale_type: DataType,
}

/// What the rewrite produced besides the model.
#[derive(Debug, Clone, Default)]
pub struct RewriteOutput {
    /// Parameters of every quantized tensor, by its float name.
    pub params: BTreeMap<String, TensorParams>,
    /// Whether any per-channel or block-wise DequantizeLinear was written.
    pub per_axis: bool,
    /// Whether any scale is float16 or bfloat16 (Q/DQ takes those from opset 19).
    pub half_scales: bool,
}

/// What the phases decide, applied to the graph by [`Edits::assemble`].
#[derive(Default)]
struct Edits {
    out: RewriteOutput,
    /// Scales, zero points and quantized values to add.
    new_initializers: Vec<TensorProto>,
    /// DequantizeLinear nodes of weights and biases (first in the node list).
    weight_dq: Vec<NodeProto>,
    /// Inputs to rewire: float tensor → the DequantizeLinear output that replaces it.
    replaced_inputs: HashMap<String, String>,
    /// Float weights replaced (dropped unless a float node still reads them).
    drop_initializers: HashSet<String>,
    /// Biases, replaced by a DequantizeLinear writing the same name: always dropped.
    drop_biases: HashSet<String>,
    /// The Q/DQ pair to emit after the producer of each tensor.
    qdq_after: HashMap<String, Vec<NodeProto>>,
    /// Graph outputs whose producer now writes `{name}_QuantizeLinear_Input`.
    renamed_outputs: HashMap<String, String>,
    /// Initializers whose values change (AWQ scales folded into them), by name.
    replace_initializers: HashMap<String, TensorProto>,
    /// One node's input rewired: (node index, input index) → the new tensor.
    node_inputs: HashMap<(usize, usize), String>,
    /// Nodes replaced whole (MatMul → MatMulNBits), by node index.
    replace_nodes: HashMap<usize, NodeProto>,
}

/// The phases' shared inputs and the edits they collect.
struct Rewriter<'a> {
    model: &'a Model,
    graph: &'a Graph,
    /// What the int4 searches decided (empty otherwise).
    int4: &'a Int4Choices,
    plan: &'a Plan,
    recipe: &'a Recipe,
    stats: Option<&'a CalibrationStats>,
    softmax: HashSet<String>,
    initializers: HashMap<&'a str, &'a TensorProto>,
    /// weight → (its node's activation input, its bias), for the int32-bias adjustment.
    bias_of: HashMap<&'a str, (&'a str, &'a str)>,
    /// Element type codes, declared or inferred, of the graph's tensors.
    types: HashMap<String, i32>,
    edits: Edits,
}

impl<'a> Rewriter<'a> {
    fn new(
        model: &'a Model,
        graph: &'a Graph,
        int4: &'a Int4Choices,
        plan: &'a Plan,
        recipe: &'a Recipe,
        stats: Option<&'a CalibrationStats>,
    ) -> Self {
        let bias_of = plan
            .roles
            .iter()
            .filter_map(|(b, r)| match r {
                TensorRole::Bias { input, weight } => {
                    Some((weight.as_str(), (input.as_str(), b.as_str())))
                }
                _ => None,
            })
            .collect();
        Rewriter {
            model,
            graph,
            int4,
            plan,
            recipe,
            stats,
            softmax: super::params::softmax_outputs(graph),
            initializers: model
                .graph()
                .initializer
                .iter()
                .map(|t| (t.name(), t))
                .collect(),
            bias_of,
            types: elem_types(model, graph),
            edits: Edits::default(),
        }
    }

    /// The float type of tensor `name`, which its scale takes: float16 or bfloat16 when the
    /// model declares or implies it (or calibration saw it), float32 otherwise.
    fn float_type(&self, name: &str) -> DataType {
        let code = self
            .initializers
            .get(name)
            .map(|t| t.data_type())
            .or_else(|| self.types.get(name).copied());
        let seen = || self.stats?.tensors.get(name)?.dtype;
        match code.map(DataType::from_onnx) {
            Some(Ok(t)) => half_or_f32(t),
            _ => seen().map_or(DataType::Float32, half_or_f32),
        }
    }

    /// The values of initializer `name`, in their own type.
    fn initializer_array(&self, name: &str) -> Result<TensorArray, QuantError> {
        let tensor = self
            .initializers
            .get(name)
            .ok_or_else(|| QuantError::MissingStats {
                tensor: name.to_owned(),
                reason: "expected an initializer".to_owned(),
            })?;
        Ok(self.model.tensor_array(tensor)?)
    }

    /// The values of initializer `name` as f32.
    fn float_value(&self, name: &str) -> Result<ArrayD<f32>, QuantError> {
        Ok(self.initializer_array(name)?.into_f32())
    }
}

/// `t` when it is a half-precision float, float32 otherwise.
fn half_or_f32(t: DataType) -> DataType {
    match t {
        DataType::Float16 | DataType::BFloat16 => t,
        _ => DataType::Float32,
    }
}

/// Applies the plan to `model` (already pre-processed, nodes named; `graph` indexes it).
pub fn rewrite(
    model: &mut Model,
    graph: &Graph,
    plan: &Plan,
    recipe: &Recipe,
    stats: Option<&CalibrationStats>,
    int4: &Int4Choices,
) -> Result<RewriteOutput, QuantError> {
    let edits = {
        let mut rewriter = Rewriter::new(model, graph, int4, plan, recipe, stats);
        rewriter.activation_params()?;
        rewriter.shared_params();
        rewriter.weights()?;
        rewriter.awq_scales()?;
        rewriter.biases()?;
        rewriter.qdq_pairs();
        let mut edits = rewriter.edits;
        edits.out.half_scales |= edits
            .out
            .params
            .values()
            .any(|p| p.scale_type != DataType::Float32);
        edits
    };
    Ok(edits.assemble(model, graph, plan))
}
