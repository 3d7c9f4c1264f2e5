//! What each op family ([`crate::model::ops`]) does to a quantized node's tensors, per
//! placement policy and mode. Every op type the planner treats specially has its row in the op
//! table; the rest follow their policy's generic rule.

use super::{Exclusion, Planner, TensorRole};
use crate::model::Node;
use crate::model::ops::{self, Family};
use crate::recipe::{Placement, QuantMode, Recipe};

/// The op types `recipe` quantizes by default under its placement and mode.
pub fn default_op_types(recipe: &Recipe) -> Vec<&'static str> {
    match (recipe.mode, recipe.placement) {
        (QuantMode::Int4, _) => ops::INT4_OP_TYPES.to_vec(),
        (QuantMode::Fp8, _) => ops::FP8_OP_TYPES.to_vec(),
        (_, Placement::Ort) => ops::ORT_DEFAULT_OP_TYPES.to_vec(),
        (_, Placement::Tensorrt) => ops::TENSORRT_OP_TYPES.to_vec(),
    }
}

/// The op types `recipe` lists for quantization: its own list, else the defaults for its
/// placement and mode.
pub fn listed_op_types(recipe: &Recipe) -> Vec<&str> {
    if recipe.op_types_to_quantize.is_empty() {
        default_op_types(recipe)
    } else {
        recipe
            .op_types_to_quantize
            .iter()
            .map(String::as_str)
            .collect()
    }
}

/// The output-channel axis of a compute node's weight (per-channel scales run along it; see
/// [`ops::channel_axis`]).
pub fn weight_axis(node: &Node) -> usize {
    ops::channel_axis(
        &node.op_type,
        node.int_attribute("transB").unwrap_or(0) != 0,
    )
}

/// What a selected node does to its tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rule {
    /// int4: the rank-2 weight alone, block-wise.
    WeightOnly,
    /// Conv, ConvTranspose, Gemm, MatMul: activation, weight per channel, int32 bias.
    Weighted,
    /// onnxruntime: outputs share the data input's scale.
    SharedScale,
    /// onnxruntime: Relu/Clip, removed when the previous range makes them exact.
    FloorActivation,
    /// TensorRT: an Add's non-residual input only.
    TensorrtAdd,
    /// TensorRT: every input.
    TensorrtInputs,
    /// onnxruntime: every input (normalisation weights and biases as such) and the output.
    Inputs,
}

/// The rule for `op` under `recipe`'s mode and placement.
pub(super) fn rule(recipe: &Recipe, op: &str) -> Rule {
    if recipe.mode == QuantMode::Int4 {
        return Rule::WeightOnly;
    }
    match (recipe.placement, ops::family(op)) {
        (_, Family::Compute) => Rule::Weighted,
        (Placement::Ort, Family::SharedScale) => Rule::SharedScale,
        (Placement::Ort, Family::FloorActivation) => Rule::FloorActivation,
        (Placement::Ort, _) => Rule::Inputs,
        (Placement::Tensorrt, _) if op == ops::ADD => Rule::TensorrtAdd,
        (Placement::Tensorrt, _) => Rule::TensorrtInputs,
    }
}

impl Planner<'_> {
    /// Applies `rule` to `node`: `Err` when the node turns out not to be quantizable.
    pub(super) fn apply(&mut self, rule: Rule, node: &Node) -> Result<(), Exclusion> {
        match rule {
            Rule::Inputs | Rule::FloorActivation | Rule::TensorrtAdd | Rule::TensorrtInputs
                if self.compute_only =>
            {
                let float = |t: &String| !t.is_empty() && (self.is_float)(t);
                if node.inputs.iter().chain(&node.outputs).any(float) {
                    Err(Exclusion::FloatInTransformer)
                } else {
                    Err(Exclusion::OpTypeNotQuantized)
                }
            }
            Rule::WeightOnly => self.weight_only(node),
            Rule::Weighted => {
                self.weighted(node);
                Ok(())
            }
            Rule::SharedScale => self.shared_scale(node),
            Rule::FloorActivation => self.floor_activation(node),
            Rule::TensorrtAdd => self.tensorrt_add(node),
            Rule::TensorrtInputs => {
                self.tensorrt_inputs(node);
                Ok(())
            }
            Rule::Inputs if self.unfusable(node) => Err(Exclusion::TensorsKeptFloat),
            Rule::Inputs => {
                self.inputs_and_output(node);
                Ok(())
            }
        }
    }

    /// The declared rank of `tensor` (an initializer's is always known).
    fn rank(&self, tensor: &str) -> Option<usize> {
        self.graph()
            .tensor(tensor)
            .and_then(|t| t.shape.as_ref())
            .map(Vec::len)
    }

    /// Weight-only: a rank-2 MatMul/Gemm weight, block-wise. Blocks run along the weight's
    /// rows, the reduced dimension when its output channels are its columns ([`weight_axis`]
    /// 1, `[K, N]`). A Gemm with `transB` holds `[N, K]`, where they would run along its
    /// output channels instead (one scale per input column for 128 outputs: a Gemm chain fell
    /// to 6 dB); int4's pre-processing stores a private such weight as `[K, N]`
    /// ([`crate::quant::gemm_layout`]), so one still transposed here is shared and stays float.
    fn weight_only(&mut self, node: &Node) -> Result<(), Exclusion> {
        let w = input(node, 1);
        if self.is_weight(&w) && self.rank(&w) == Some(2) && weight_axis(node) == 1 {
            self.set(&w, TensorRole::Weight { axis: Some(0) });
            Ok(())
        } else {
            Err(Exclusion::OpTypeNotQuantized)
        }
    }

    fn weighted(&mut self, node: &Node) {
        let op = node.op_type.as_str();
        let row = ops::info(op);
        let (x, w) = (input(node, 0), input(node, 1));
        self.set(&x, TensorRole::Activation);
        if self.is_weight(&w) {
            // A batched (rank > 2) MatMul weight goes per tensor: ONNX Runtime's integer
            // MatMul takes per-column parameters only for a 2-d weight (it refuses others at
            // run time), and onnxruntime's axis 1 would run along the reduced dimension.
            let batched = row.is_some_and(|r| r.batched_weight) && self.rank(&w) != Some(2);
            let axis = Some(weight_axis(node)).filter(|_| !batched);
            self.set(&w, TensorRole::Weight { axis });
            let bias = row.and_then(|r| r.bias);
            let b = bias.map(|i| input(node, i)).unwrap_or_default();
            if bias.is_some() && self.is_weight(&b) && self.mode() == QuantMode::Int8 {
                self.set(
                    &b,
                    TensorRole::Bias {
                        input: x,
                        weight: w,
                    },
                );
            }
        } else if self.mode() != QuantMode::Int4 {
            self.set(&w, TensorRole::Activation);
        }
        if self.quantize_outputs() {
            self.set(&node.outputs[0], TensorRole::Activation);
        }
    }

    fn shared_scale(&mut self, node: &Node) -> Result<(), Exclusion> {
        let data = input(node, ops::info(&node.op_type).map_or(0, |o| o.data_input));
        if !self.plan.roles.contains_key(&data) {
            return Err(Exclusion::OpTypeNotQuantized);
        }
        for out in node.outputs.iter().filter(|o| !o.is_empty()) {
            self.set(out, TensorRole::Shared(data.clone()));
        }
        Ok(())
    }

    /// A Relu or Clip: folded into the range before it when that is exact, else quantized on
    /// both sides; left in float when its input is not quantized (onnxruntime's rule: the
    /// Q/DQ pairs would only add work to a float path, and a Relu chain from a graph input
    /// has nothing to quantize).
    fn floor_activation(&mut self, node: &Node) -> Result<(), Exclusion> {
        let x = input(node, 0);
        if !self.plan.roles.contains_key(&x) {
            return Err(Exclusion::OpTypeNotQuantized);
        }
        let y = node.outputs[0].clone();
        // Dropping the node is exact when the quantized range of its input starts at zero
        // with the zero point at qmin: asymmetric activations of a Relu, or a Clip whose
        // minimum is 0 (never the symmetric-range trap that deletes a Relu).
        let floor_is_zero = node.op_type == ops::RELU || (self.clip_min)(node.id) == Some(0.0);
        let graph = self.graph();
        let removable = floor_is_zero
            && !self.recipe().symmetric_activations
            && self.plan.roles.get(&x) == Some(&TensorRole::Activation)
            && self.consumers(&x) == 1
            && !graph.tensor(&x).is_some_and(|t| t.is_output)
            && !graph.tensor(&y).is_some_and(|t| t.is_output);
        if removable && graph.tensor(&x).is_some_and(|t| t.producer.is_some()) {
            // As onnxruntime does, the producer then writes the Relu's output name, which
            // carries the Relu's (calibrated) range.
            if let Some(role) = self.plan.roles.remove(&x) {
                self.plan.roles.insert(y.clone(), role);
            }
            self.plan.removed.push((node.id, x, y));
        } else {
            self.set(&x, TensorRole::Activation);
            self.set(&y, TensorRole::Activation);
        }
        Ok(())
    }

    /// An Add of two activations is a residual join: only the non-residual input gets Q/DQ.
    /// An Add with a constant is a bias TensorRT fuses into the preceding layer: left alone.
    fn tensorrt_add(&mut self, node: &Node) -> Result<(), Exclusion> {
        let inputs: Vec<String> = (0..node.inputs.len()).map(|i| input(node, i)).collect();
        let activations = inputs.len() == 2 && !inputs.iter().any(|i| self.is_weight(i));
        let residual = self
            .residual_input(&inputs)
            .filter(|_| activations)
            .ok_or(Exclusion::OpTypeNotQuantized)?;
        self.set(&inputs[1 - residual], TensorRole::Activation);
        Ok(())
    }

    fn tensorrt_inputs(&mut self, node: &Node) {
        for x in (0..node.inputs.len()).map(|i| input(node, i)) {
            let role = if self.is_weight(&x) {
                TensorRole::ConstantActivation
            } else {
                TensorRole::Activation
            };
            self.set(&x, role);
        }
    }

    /// Under a target, an op whose integer form reads and writes quantized tensors only
    /// (ONNX Runtime's QLinear ops; the fusions of TensorRT, DirectML and OpenVINO) stays float
    /// when one of its float data inputs or its output stays float: no runtime fuses it then,
    /// and Q/DQ on its other tensors would add error and time for nothing (the rotary
    /// embedding's `q × cos` once the Cos table stays float, a mask's Add once the scores do).
    /// Recipes without a target keep onnxruntime's placement exactly.
    fn unfusable(&self, node: &Node) -> bool {
        if self.recipe().target.is_none() {
            return false;
        }
        let output = node.outputs.iter().take(1);
        node.inputs
            .iter()
            .chain(output)
            .filter(|t| !t.is_empty() && !self.is_weight(t) && (self.is_float)(t))
            .any(|t| self.stays_float(t))
    }

    fn inputs_and_output(&mut self, node: &Node) {
        let norm = ops::family(&node.op_type) == Family::Normalization;
        for (i, x) in (0..node.inputs.len()).map(|i| (i, input(node, i))) {
            let role = if norm && i == 1 && self.is_weight(&x) {
                TensorRole::Weight { axis: None }
            } else if norm && i == 2 && self.is_weight(&x) {
                TensorRole::Bias {
                    input: input(node, 0),
                    weight: input(node, 1),
                }
            } else if norm && i > 2 {
                continue;
            } else if self.is_weight(&x) {
                TensorRole::ConstantActivation
            } else {
                TensorRole::Activation
            };
            self.set(&x, role);
        }
        if self.quantize_outputs() {
            for out in node.outputs.iter().filter(|o| !o.is_empty()).take(1) {
                self.set(out, TensorRole::Activation);
            }
        }
    }

    /// For a residual `Add(a, b)`, the index of the input that comes from further back (the
    /// skip connection, produced earlier or a graph input), which TensorRT fuses without Q/DQ.
    fn residual_input(&self, inputs: &[String]) -> Option<usize> {
        let graph = self.graph();
        let order = graph.topological_order();
        let depth = |name: &str| -> Option<i64> {
            let tensor = graph.tensor(name)?;
            match tensor.producer {
                Some(p) => order.iter().position(|&id| id == p).map(|d| d as i64),
                None => Some(-1),
            }
        };
        match (depth(&inputs[0]), depth(&inputs[1])) {
            (Some(a), Some(b)) if a != b => Some(if a < b { 0 } else { 1 }),
            _ => None,
        }
    }
}

/// Input `i` of `node` (`""` when absent).
fn input(node: &Node, i: usize) -> String {
    node.inputs.get(i).cloned().unwrap_or_default()
}
