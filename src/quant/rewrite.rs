//! Turning a [`Plan`] into a QDQ model: scales and zero points from the calibrated ranges,
//! quantized weights and biases, Q/DQ nodes with onnxruntime's names, consumers rewired.

use std::collections::{BTreeMap, HashMap, HashSet};

use ndarray::{ArrayD, Axis};
use rayon::prelude::*;

use super::QuantError;
use super::plan::{Plan, TensorRole};
use super::scale::{
    ScaleZp, adjust_weight_scale_for_bias, quantize_bias, quantize_fp8, quantize_value,
    scale_zp_for,
};
use crate::calib::range::{self, RangeMethod, RangeTarget};
use crate::calib::stats::CalibrationStats;
use crate::model::proto::{AttributeProto, NodeProto, TensorProto, attribute_proto::AttributeType};
use crate::model::tensor::array;
use crate::model::{Graph, Model, TensorArray};
use crate::recipe::{QuantMode, QuantType, Recipe};

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
}

/// What the rewrite produced besides the model.
#[derive(Debug, Clone, Default)]
pub struct RewriteOutput {
    /// Parameters of every quantized tensor, by its float name.
    pub params: BTreeMap<String, TensorParams>,
    /// Whether any per-channel or block-wise DequantizeLinear was written.
    pub per_axis: bool,
}

/// The integer grid an activation of `qtype` is quantized to (what its range is chosen for).
pub fn qtype_range_target(qtype: QuantType, symmetric: bool) -> RangeTarget {
    let (lo, hi) = super::scale::qrange(qtype, false, symmetric);
    RangeTarget {
        steps: (hi - lo) as u32,
        symmetric,
    }
}

/// The array a quantized tensor is stored as (`values` for integer types, `fp8` bits for
/// float8; the length always matches `shape`).
fn quantized_array(values: &[i64], fp8: &[u8], qtype: QuantType, shape: &[usize]) -> TensorArray {
    let shape = shape.to_vec();
    match qtype {
        QuantType::Uint8 => {
            TensorArray::Uint8(array(shape, values.iter().map(|&v| v as u8).collect()))
        }
        QuantType::Int8 => {
            TensorArray::Int8(array(shape, values.iter().map(|&v| v as i8).collect()))
        }
        QuantType::Uint16 => {
            TensorArray::Uint16(array(shape, values.iter().map(|&v| v as u16).collect()))
        }
        QuantType::Int16 => {
            TensorArray::Int16(array(shape, values.iter().map(|&v| v as i16).collect()))
        }
        QuantType::Int4 => {
            TensorArray::Int4(array(shape, values.iter().map(|&v| v as i8).collect()))
        }
        QuantType::Uint4 => {
            TensorArray::Uint4(array(shape, values.iter().map(|&v| v as u8).collect()))
        }
        QuantType::Float8e4m3fn => TensorArray::Float8E4M3FN(array(
            shape,
            fp8.iter().map(|&b| float8::F8E4M3::from_bits(b)).collect(),
        )),
    }
}

/// Zero points as a tensor of the quantized type.
fn zero_point_tensor(
    name: &str,
    params: &[ScaleZp],
    qtype: QuantType,
    per_axis_shape: Option<Vec<usize>>,
) -> TensorProto {
    let values: Vec<i64> = params.iter().map(|p| p.zero_point).collect();
    let shape = per_axis_shape.unwrap_or_else(|| {
        if values.len() == 1 {
            vec![]
        } else {
            vec![values.len()]
        }
    });
    quantized_array(&values, &vec![0u8; values.len()], qtype, &shape).to_proto(name)
}

fn scale_tensor(name: &str, params: &[ScaleZp], shape: Option<Vec<usize>>) -> TensorProto {
    let values: Vec<f32> = params.iter().map(|p| p.scale).collect();
    let shape = shape.unwrap_or_else(|| {
        if values.len() == 1 {
            vec![]
        } else {
            vec![values.len()]
        }
    });
    TensorArray::Float32(array(shape, values)).to_proto(name)
}

fn node(
    op: &str,
    name: &str,
    inputs: Vec<String>,
    outputs: Vec<String>,
    attributes: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        op_type: Some(op.to_owned()),
        name: Some(name.to_owned()),
        input: inputs,
        output: outputs,
        attribute: attributes,
        ..Default::default()
    }
}

fn int_attr(name: &str, value: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.to_owned()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(value),
        ..Default::default()
    }
}

/// Per-channel (or per-tensor) weight quantization.
struct QuantizedWeight {
    values: TensorArray,
    params: Vec<ScaleZp>,
    axis: Option<usize>,
    block_size: Option<usize>,
}

fn check_finite(name: &str, values: &ArrayD<f32>) -> Result<(), QuantError> {
    match values.iter().filter(|v| !v.is_finite()).count() {
        0 => Ok(()),
        bad => Err(QuantError::NonFiniteWeight {
            tensor: name.to_owned(),
            count: bad,
        }),
    }
}

fn quantize_array(
    values: &ArrayD<f32>,
    params: &[ScaleZp],
    axis: Option<usize>,
    qtype: QuantType,
) -> TensorArray {
    let shape = values.shape().to_vec();
    let param_of = |index: usize| -> ScaleZp {
        match axis {
            Some(axis) => {
                let inner: usize = shape[axis + 1..].iter().product();
                params[(index / inner) % shape[axis]]
            }
            None => params[0],
        }
    };
    if qtype == QuantType::Float8e4m3fn {
        let bits: Vec<u8> = values
            .iter()
            .enumerate()
            .map(|(i, &v)| quantize_fp8(v, param_of(i).scale))
            .collect();
        return quantized_array(&[], &bits, qtype, &shape);
    }
    let q: Vec<i64> = values
        .as_standard_layout()
        .iter()
        .enumerate()
        .map(|(i, &v)| quantize_value(v, param_of(i), qtype))
        .collect();
    quantized_array(&q, &[], qtype, &shape)
}

fn quantize_weight(
    name: &str,
    values: &ArrayD<f32>,
    axis: Option<usize>,
    qtype: QuantType,
    symmetric: bool,
    reduce_range: bool,
    bias_adjust: Option<(f32, Vec<f32>)>,
) -> Result<QuantizedWeight, QuantError> {
    check_finite(name, values)?;
    let axis = axis.filter(|&a| a < values.ndim() && values.ndim() > 1);
    let ranges: Vec<(f32, f32)> = match axis {
        Some(a) => values
            .axis_iter(Axis(a))
            .map(|lane| {
                lane.iter()
                    .fold((0f32, 0f32), |(lo, hi), &v| (lo.min(v), hi.max(v)))
            })
            .collect(),
        None => vec![
            values
                .iter()
                .fold((0f32, 0f32), |(lo, hi), &v| (lo.min(v), hi.max(v))),
        ],
    };
    let mut params: Vec<ScaleZp> = ranges
        .iter()
        .map(|&(lo, hi)| scale_zp_for(lo, hi, qtype, symmetric, reduce_range))
        .collect();
    // onnxruntime's int32-bias adjustment: per channel against that channel's |bias|,
    // per tensor against the whole bias's magnitude (zero included).
    if let Some((input_scale, bias)) = bias_adjust
        && matches!(qtype, QuantType::Int8 | QuantType::Int16)
        && params.iter().all(|p| p.zero_point == 0)
    {
        let per_channel = params.len() > 1 && params.len() == bias.len();
        let whole = bias.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (c, p) in params.iter_mut().enumerate() {
            let magnitude = if per_channel { bias[c].abs() } else { whole };
            p.scale = adjust_weight_scale_for_bias(p.scale, input_scale, magnitude, per_channel);
        }
    }
    Ok(QuantizedWeight {
        values: quantize_array(values, &params, axis, qtype),
        params,
        axis,
        block_size: None,
    })
}

/// Block-wise weight quantization along `axis` 0 of a rank-2 weight (int4 weight-only).
fn quantize_blockwise(
    name: &str,
    values: &ArrayD<f32>,
    qtype: QuantType,
    block: usize,
    symmetric: bool,
) -> Result<QuantizedWeight, QuantError> {
    check_finite(name, values)?;
    let (k, n) = (values.shape()[0], values.shape()[1]);
    let blocks = k.div_ceil(block);
    let mut params = Vec::with_capacity(blocks * n);
    for b in 0..blocks {
        for col in 0..n {
            let (mut lo, mut hi) = (0f32, 0f32);
            for row in b * block..((b + 1) * block).min(k) {
                lo = lo.min(values[[row, col]]);
                hi = hi.max(values[[row, col]]);
            }
            params.push(scale_zp_for(lo, hi, qtype, symmetric, false));
        }
    }
    let mut q = Vec::with_capacity(k * n);
    for row in 0..k {
        for col in 0..n {
            q.push(quantize_value(
                values[[row, col]],
                params[(row / block) * n + col],
                qtype,
            ));
        }
    }
    Ok(QuantizedWeight {
        values: quantized_array(&q, &[], qtype, &[k, n]),
        params,
        axis: Some(0),
        block_size: Some(block),
    })
}

/// The calibrated range of an activation, after the recipe's overrides and fix-ups.
fn activation_range(
    name: &str,
    recipe: &Recipe,
    stats: Option<&CalibrationStats>,
    target: RangeTarget,
    softmax_outputs: &HashSet<String>,
) -> Result<(f32, f32), QuantError> {
    if let Some(r) = recipe.fixed_range(name) {
        return Ok((r.lo, r.hi));
    }
    if softmax_outputs.contains(name) {
        return Ok((0.0, 1.0));
    }
    let Some(stats) = stats else {
        return Err(QuantError::MissingStats {
            tensor: name.to_owned(),
            reason: "no calibration statistics were given".to_owned(),
        });
    };
    let Some(s) = stats.tensors.get(name) else {
        return Err(QuantError::MissingStats {
            tensor: name.to_owned(),
            reason:
                "it was not calibrated (calibrate again with this model, or keep its node in float)"
                    .to_owned(),
        });
    };
    let method: RangeMethod = recipe
        .tensor_overrides
        .get(name)
        .and_then(|o| o.method)
        .unwrap_or(recipe.calibration_method);
    range::compute(s, &method, target, stats.info.ort_parity)
        .map(|r| (r.lo, r.hi))
        .map_err(|e| QuantError::MissingStats {
            tensor: name.to_owned(),
            reason: e.to_string(),
        })
}

/// Applies the plan to `model` (already pre-processed, nodes named).
pub fn rewrite(
    model: &mut Model,
    graph: &Graph,
    plan: &Plan,
    recipe: &Recipe,
    stats: Option<&CalibrationStats>,
) -> Result<RewriteOutput, QuantError> {
    let mut out = RewriteOutput::default();
    let softmax_outputs: HashSet<String> = graph
        .nodes()
        .iter()
        .filter(|n| n.op_type == "Softmax")
        .flat_map(|n| n.outputs.first().cloned())
        .collect();
    // Removed Relu/Clip: their input takes their output's range.
    let removed_range: HashMap<String, String> = plan
        .removed
        .iter()
        .map(|(_, x, y)| (x.clone(), y.clone()))
        .collect();
    let activation_qtype = |name: &str| {
        recipe
            .tensor_overrides
            .get(name)
            .and_then(|o| o.dtype)
            .unwrap_or(recipe.activation_type)
    };

    // 1. Activations with their own parameters.
    for (name, role) in &plan.roles {
        if *role != TensorRole::Activation {
            continue;
        }
        let qtype = activation_qtype(name);
        let symmetric = recipe.symmetric_activations || qtype == QuantType::Float8e4m3fn;
        let target = qtype_range_target(qtype, symmetric);
        let source = removed_range
            .get(name)
            .map_or(name.as_str(), String::as_str);
        let (lo, hi) = activation_range(source, recipe, stats, target, &softmax_outputs)?;
        let p = scale_zp_for(lo, hi, qtype, symmetric, false);
        out.params.insert(
            name.clone(),
            TensorParams {
                qtype,
                params: vec![p],
                axis: None,
                block_size: None,
                range: Some((lo, hi)),
            },
        );
    }
    // 2. Shared-scale activations (chains resolve in topological order).
    for _ in 0..plan.roles.len() {
        let mut changed = false;
        for (name, role) in &plan.roles {
            if let TensorRole::Shared(source) = role
                && !out.params.contains_key(name)
                && let Some(p) = out.params.get(source).cloned()
            {
                out.params.insert(name.clone(), p);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }

    let proto_graph = model.graph().clone();
    let initializers: HashMap<&str, &TensorProto> = proto_graph
        .initializer
        .iter()
        .map(|t| (t.name(), t))
        .collect();
    let float_value = |name: &str| -> Result<ArrayD<f32>, QuantError> {
        let tensor = initializers
            .get(name)
            .ok_or_else(|| QuantError::MissingStats {
                tensor: name.to_owned(),
                reason: "expected an initializer".to_owned(),
            })?;
        Ok(model.tensor_array(tensor)?.to_f32())
    };

    // 3. Weights and constant activations, then biases.
    let mut new_initializers: Vec<TensorProto> = Vec::new();
    let mut weight_dq: Vec<NodeProto> = Vec::new();
    let mut replaced_inputs: HashMap<String, String> = HashMap::new();
    let mut drop_initializers: HashSet<String> = HashSet::new();
    // Biases are replaced by a DequantizeLinear writing the same name: always dropped.
    let mut drop_biases: HashSet<String> = HashSet::new();
    let bias_of: HashMap<&str, (&str, &str)> = plan
        .roles
        .iter()
        .filter_map(|(b, r)| match r {
            TensorRole::Bias { input, weight } => {
                Some((weight.as_str(), (input.as_str(), b.as_str())))
            }
            _ => None,
        })
        .collect();
    let mut weight_names: Vec<&String> = plan
        .roles
        .iter()
        .filter(|(_, r)| {
            matches!(
                r,
                TensorRole::Weight { .. } | TensorRole::ConstantActivation
            )
        })
        .map(|(n, _)| n)
        .collect();
    weight_names.sort();
    // Weights are independent: quantize them in parallel, then emit in name order.
    let quantized_weights: Vec<(&String, ArrayD<f32>, QuantizedWeight)> = weight_names
        .par_iter()
        .filter_map(|&name| {
            let result = (|| -> Result<Option<(ArrayD<f32>, QuantizedWeight)>, QuantError> {
                let values = float_value(name)?;
                let q = match &plan.roles[name] {
                    TensorRole::Weight { .. } if recipe.mode == QuantMode::Int4 => {
                        if values.ndim() != 2 {
                            return Ok(None);
                        }
                        quantize_blockwise(
                            name,
                            &values,
                            recipe.weight_type,
                            recipe.block_size,
                            recipe.symmetric_weights,
                        )?
                    }
                    TensorRole::Weight { axis } => {
                        let axis = if recipe.per_channel { *axis } else { None };
                        let per_channel =
                            axis.is_some_and(|a| a < values.ndim() && values.ndim() > 1);
                        let symmetric = recipe.symmetric_weights
                            || per_channel
                            || recipe.weight_type == QuantType::Float8e4m3fn;
                        let bias_adjust = bias_of.get(name.as_str()).and_then(|(input, bias)| {
                            let input_scale = out.params.get(*input)?.params[0].scale;
                            let b = float_value(bias).ok()?;
                            Some((input_scale, b.iter().copied().collect()))
                        });
                        quantize_weight(
                            name,
                            &values,
                            axis,
                            recipe.weight_type,
                            symmetric,
                            recipe.reduce_range,
                            bias_adjust,
                        )?
                    }
                    _ => {
                        let qtype = activation_qtype(name);
                        let symmetric =
                            recipe.symmetric_activations || qtype == QuantType::Float8e4m3fn;
                        quantize_weight(name, &values, None, qtype, symmetric, false, None)?
                    }
                };
                Ok(Some((values, q)))
            })();
            match result {
                Ok(Some((values, q))) => Some(Ok((name, values, q))),
                Ok(None) => None,
                Err(e) => Some(Err(e)),
            }
        })
        .collect::<Result<_, QuantError>>()?;
    for (name, values, q) in quantized_weights {
        let qtype = match &plan.roles[name] {
            TensorRole::ConstantActivation => activation_qtype(name),
            _ => recipe.weight_type,
        };
        let shape = q
            .block_size
            .map(|b| vec![values.shape()[0].div_ceil(b), values.shape()[1]]);
        let per_axis = q.axis.is_some() && q.params.len() > 1 || q.block_size.is_some();
        out.per_axis |= per_axis;
        new_initializers.push(q.values.to_proto(&format!("{name}_quantized")));
        new_initializers.push(scale_tensor(
            &format!("{name}_scale"),
            &q.params,
            shape.clone(),
        ));
        new_initializers.push(zero_point_tensor(
            &format!("{name}_zero_point"),
            &q.params,
            qtype,
            shape,
        ));
        let mut attributes = Vec::new();
        if per_axis && let Some(axis) = q.axis {
            attributes.push(int_attr("axis", axis as i64));
        }
        if let Some(block) = q.block_size {
            attributes.push(int_attr("block_size", block as i64));
        }
        let dq_output = format!("{name}_DequantizeLinear_Output");
        weight_dq.push(node(
            "DequantizeLinear",
            &format!("{name}_DequantizeLinear"),
            vec![
                format!("{name}_quantized"),
                format!("{name}_scale"),
                format!("{name}_zero_point"),
            ],
            vec![dq_output.clone()],
            attributes,
        ));
        replaced_inputs.insert(name.clone(), dq_output);
        drop_initializers.insert(name.clone());
        out.params.insert(
            name.clone(),
            TensorParams {
                qtype,
                params: q.params,
                axis: q.axis.filter(|_| per_axis),
                block_size: q.block_size,
                range: None,
            },
        );
    }
    for (bias, role) in &plan.roles {
        let TensorRole::Bias { input, weight } = role else {
            continue;
        };
        let (Some(input_params), Some(weight_params)) =
            (out.params.get(input), out.params.get(weight))
        else {
            continue;
        };
        let values = float_value(bias)?;
        check_finite(bias, &values)?;
        let input_scale = input_params.params[0].scale;
        let channels = values.len();
        let scales: Vec<f32> = (0..channels)
            .map(|c| {
                input_scale
                    * weight_params.params[if weight_params.params.len() == channels {
                        c
                    } else {
                        0
                    }]
                    .scale
            })
            .collect();
        let q: Vec<i32> = values
            .iter()
            .zip(&scales)
            .map(|(&b, &s)| quantize_bias(b, s))
            .collect();
        let per_channel = weight_params.params.len() > 1;
        let bias_params: Vec<ScaleZp> = if per_channel {
            scales
                .iter()
                .map(|&s| ScaleZp {
                    scale: s,
                    zero_point: 0,
                })
                .collect()
        } else {
            vec![ScaleZp {
                scale: scales[0],
                zero_point: 0,
            }]
        };
        new_initializers.push(
            TensorArray::Int32(array(values.shape().to_vec(), q))
                .to_proto(&format!("{bias}_quantized")),
        );
        new_initializers.push(scale_tensor(
            &format!("{bias}_quantized_scale"),
            &bias_params,
            None,
        ));
        let zeros: Vec<i32> = vec![0; bias_params.len()];
        let zero_shape = if zeros.len() == 1 {
            vec![]
        } else {
            vec![zeros.len()]
        };
        new_initializers.push(
            TensorArray::Int32(array(zero_shape, zeros))
                .to_proto(&format!("{bias}_quantized_zero_point")),
        );
        let mut attributes = Vec::new();
        if per_channel {
            attributes.push(int_attr("axis", 0));
            out.per_axis = true;
        }
        // The bias DQ keeps the bias's own name, so its consumer is unchanged.
        weight_dq.push(node(
            "DequantizeLinear",
            &format!("{bias}_DequantizeLinear"),
            vec![
                format!("{bias}_quantized"),
                format!("{bias}_quantized_scale"),
                format!("{bias}_quantized_zero_point"),
            ],
            vec![bias.clone()],
            attributes,
        ));
        drop_biases.insert(bias.clone());
    }

    // 4. Activation scales and zero points, and the Q/DQ pairs.
    let mut written_scales: HashSet<String> = HashSet::new();
    let activation_names: Vec<&String> = plan
        .roles
        .iter()
        .filter(|(_, r)| matches!(r, TensorRole::Activation | TensorRole::Shared(_)))
        .map(|(n, _)| n)
        .filter(|n| out.params.contains_key(*n))
        .collect();
    let scale_source = |name: &str| -> String {
        let mut current = name.to_owned();
        while let Some(TensorRole::Shared(source)) = plan.roles.get(&current) {
            current = source.clone();
        }
        current
    };
    let mut qdq_after: HashMap<String, Vec<NodeProto>> = HashMap::new();
    let graph_outputs: HashSet<String> = proto_graph
        .output
        .iter()
        .map(|o| o.name().to_owned())
        .collect();
    let mut renamed_outputs: HashMap<String, String> = HashMap::new();
    for name in activation_names {
        let source = scale_source(name);
        let params = &out.params[name];
        if written_scales.insert(source.clone()) {
            new_initializers.push(scale_tensor(
                &format!("{source}_scale"),
                &params.params,
                None,
            ));
            new_initializers.push(zero_point_tensor(
                &format!("{source}_zero_point"),
                &params.params,
                params.qtype,
                None,
            ));
        }
        let is_output = graph_outputs.contains(name);
        let q_input = if is_output {
            format!("{name}_QuantizeLinear_Input")
        } else {
            name.clone()
        };
        if is_output {
            renamed_outputs.insert(name.clone(), q_input.clone());
        }
        let dq_output = if is_output {
            name.clone()
        } else {
            format!("{name}_DequantizeLinear_Output")
        };
        let pair = vec![
            node(
                "QuantizeLinear",
                &format!("{name}_QuantizeLinear"),
                vec![
                    q_input,
                    format!("{source}_scale"),
                    format!("{source}_zero_point"),
                ],
                vec![format!("{name}_QuantizeLinear_Output")],
                vec![],
            ),
            node(
                "DequantizeLinear",
                &format!("{name}_DequantizeLinear"),
                vec![
                    format!("{name}_QuantizeLinear_Output"),
                    format!("{source}_scale"),
                    format!("{source}_zero_point"),
                ],
                vec![dq_output.clone()],
                vec![],
            ),
        ];
        qdq_after.entry(name.clone()).or_default().extend(pair);
        if !is_output {
            replaced_inputs.insert(name.clone(), dq_output);
        }
    }

    // 5. Rebuild the node list in topological order.
    let removed: HashSet<usize> = plan.removed.iter().map(|(id, _, _)| id.0).collect();
    // A removed Relu/Clip's producer writes the removed node's output name instead.
    let producer_renames: HashMap<String, String> = plan
        .removed
        .iter()
        .map(|(_, x, y)| (x.clone(), y.clone()))
        .collect();
    let mut nodes: Vec<NodeProto> = weight_dq;
    for input in graph.inputs() {
        if let Some(pair) = qdq_after.remove(input) {
            nodes.extend(pair);
        }
    }
    for &id in graph.topological_order() {
        if removed.contains(&id.0) {
            continue;
        }
        let mut n = proto_graph.node[id.0].clone();
        for input in &mut n.input {
            if input.is_empty() {
                continue;
            }
            if let Some(replacement) = replaced_inputs.get(input.as_str()) {
                *input = replacement.clone();
            }
        }
        let mut after = Vec::new();
        for output in &mut n.output {
            if let Some(renamed) = producer_renames.get(output.as_str()) {
                *output = renamed.clone();
            }
            if let Some(pair) = qdq_after.remove(output.as_str()) {
                after.extend(pair);
            }
            if let Some(renamed) = renamed_outputs.get(output.as_str()) {
                *output = renamed.clone();
            }
        }
        nodes.push(n);
        nodes.extend(after);
    }
    // A removed Relu/Clip whose output was a graph output cannot happen (plan refuses it).
    let Some(g) = model.proto_mut().graph.as_mut() else {
        return Ok(out);
    };
    g.node = nodes;
    // Float weights stay only where a non-quantized node still reads them.
    let still_read: HashSet<String> = g
        .node
        .iter()
        .flat_map(|n| n.input.iter().cloned())
        .collect();
    // Constant inputs of removed Relu/Clip nodes (Clip's min/max) are now unread.
    let removed_inputs: HashSet<String> = plan
        .removed
        .iter()
        .flat_map(|(id, _, _)| proto_graph.node[id.0].input.iter().skip(1).cloned())
        .collect();
    let dropped = |name: &str| {
        drop_biases.contains(name)
            || ((drop_initializers.contains(name) || removed_inputs.contains(name))
                && !still_read.contains(name))
    };
    g.initializer.retain(|t| !dropped(t.name()));
    // Old models list initializers as graph inputs too: a dropped one must not stay an input.
    g.input.retain(|i| !dropped(i.name()));
    g.initializer.extend(new_initializers);
    Ok(out)
}
