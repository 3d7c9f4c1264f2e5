//! Phase 3 of the rewrite: weights and constant inputs quantized from their values (per
//! tensor, per channel or block-wise), each replaced by a DequantizeLinear.

use ndarray::{ArrayD, CowArray, IxDyn};
use rayon::prelude::*;

use super::tensors::{
    collect_quantized, dequantize, int_attr, node, scale_tensor, zero_point_tensor,
};
use super::{Rewriter, TensorParams};
use crate::model::proto::TensorProto;
use crate::model::{DataType, TensorArray};
use crate::quant::QuantError;
use crate::quant::int4::blocks::{BlockSpec, block_params, param_at};
use crate::quant::int4::choices::WeightTransform;
use crate::quant::int4::nbits::{Packed, pack};
use crate::quant::params::{WeightQuant, check_finite, weight_quant};
use crate::quant::plan::TensorRole;
use crate::quant::scale::{
    ScaleZp, adjust_weight_scale_for_bias, quantize_fp8, quantize_value, scale_zp_for, store_scales,
};
use crate::quant::weight_range::{Channels, least_error_params};
use crate::recipe::{QuantType, WeightRange};

/// A weight's quantized values (already the `{name}_quantized` initializer, so only the
/// packed bytes stay in memory) and parameters.
pub(super) struct QuantizedWeight {
    pub(super) values: TensorProto,
    pub(super) shape: Vec<usize>,
    pub(super) params: Vec<ScaleZp>,
    pub(super) scale_type: DataType,
    pub(super) axis: Option<usize>,
    pub(super) block_size: Option<usize>,
    /// The type the values were quantized to (their zero points take it too).
    pub(super) qtype: QuantType,
    /// The MatMulNBits form, when the recipe asks for it.
    packed: Option<Packed>,
}

/// The smallest and largest value of each slice along `axis` (of the whole tensor when
/// `None`): what per-channel scales are computed from. An empty slice gives (∞, −∞). Memory
/// is read in order (a MatMul weight's channels are its columns: walking them one by one
/// would stride through it), spans of it in parallel.
pub fn channel_extremes(values: &ArrayD<f32>, axis: Option<usize>) -> Vec<(f32, f32)> {
    let standard = values.as_standard_layout();
    let flat = standard.as_slice().unwrap_or(&[]);
    let shape = values.shape();
    let (channels, inner) = match axis.filter(|&a| a < values.ndim()) {
        Some(a) => (shape[a], shape[a + 1..].iter().product::<usize>()),
        None => (1, flat.len().clamp(1, 1 << 16)),
    };
    let empty = vec![(f32::INFINITY, f32::NEG_INFINITY); channels];
    if channels == 0 || inner == 0 {
        return empty;
    }
    let merge = |mut a: Vec<(f32, f32)>, b: Vec<(f32, f32)>| {
        for (x, y) in a.iter_mut().zip(b) {
            *x = (x.0.min(y.0), x.1.max(y.1));
        }
        a
    };
    flat.par_chunks(channels * inner)
        .fold(
            || empty.clone(),
            |mut acc, span| {
                if inner == 1 {
                    for ((lo, hi), &v) in acc.iter_mut().zip(span) {
                        *lo = lo.min(v);
                        *hi = hi.max(v);
                    }
                    return acc;
                }
                for (c, lane) in span.chunks(inner).enumerate() {
                    let (lo, hi) = &mut acc[c];
                    for &v in lane {
                        *lo = lo.min(v);
                        *hi = hi.max(v);
                    }
                }
                acc
            },
        )
        .reduce(|| empty.clone(), merge)
}

/// The scale and zero point of each channel of a weight quantized per channel or per tensor
/// (not block-wise), before any bias adjustment or storage rounding. Ranges always hold zero
/// (the zero point must be exact). With [`WeightRange::Mse`] each range is the shrunk one of
/// least squared error ([`crate::quant::weight_range`]); with [`WeightRange::Pow2`] each
/// scale is rounded up to a power of two ([`power_of_two`]).
pub fn weight_params(values: &ArrayD<f32>, how: &WeightQuant) -> Vec<ScaleZp> {
    let extremes = channel_extremes(values, how.axis);
    if how.range == WeightRange::Mse {
        let standard = values.as_standard_layout();
        let channels = Channels::along(values.shape(), how.axis);
        if let Some(flat) = standard.as_slice() {
            return least_error_params(flat, channels, &extremes, how);
        }
    }
    extremes
        .into_iter()
        .map(|(lo, hi)| {
            let (lo, hi) = (lo.min(0.0), hi.max(0.0));
            let p = scale_zp_for(lo, hi, how.qtype, how.symmetric, how.reduce_range);
            if how.range == WeightRange::Pow2 {
                power_of_two(p, lo, how)
            } else {
                p
            }
        })
        .collect()
}

/// `p` with its scale rounded up to the next power of two, so the grid still holds the range
/// (nothing clips) and an NPU can rescale by shifts. A symmetric grid keeps its zero point;
/// an asymmetric one places it again for the wider step, from the range's low end `lo`.
fn power_of_two(p: ScaleZp, lo: f32, how: &WeightQuant) -> ScaleZp {
    if !(p.scale.is_finite() && p.scale > 0.0) {
        return p;
    }
    let scale = 2f32.powi(p.scale.log2().ceil() as i32);
    if how.symmetric {
        return ScaleZp { scale, ..p };
    }
    let (qmin, qmax) = crate::quant::scale::qrange(how.qtype, how.reduce_range, false);
    let zero_point = (qmin as f32 - lo / scale).round() as i64;
    ScaleZp {
        scale,
        zero_point: zero_point.clamp(qmin, qmax),
    }
}

/// The parameters a per-channel or per-tensor weight is read back with (scales stored as
/// float32, no bias adjustment); `None` for block-wise and FP8 weights.
fn read_back_params(values: &ArrayD<f32>, how: &WeightQuant) -> Option<Vec<ScaleZp>> {
    if !how.channel_grid() {
        return None;
    }
    let mut params = weight_params(values, how);
    store_scales(&mut params, DataType::Float32, false);
    Some(params)
}

/// `values` (or `rounded`, GPTQ's values of the same shape) quantized and dequantized with
/// `params`, one per channel of `values`.
fn read_back(
    values: &ArrayD<f32>,
    rounded: Option<&ArrayD<f32>>,
    how: &WeightQuant,
    params: &[ScaleZp],
) -> ArrayD<f32> {
    let channels = Channels::along(values.shape(), how.axis);
    let source = rounded
        .filter(|r| r.shape() == values.shape())
        .unwrap_or(values);
    let mut out = source.as_standard_layout().into_owned();
    for (i, v) in out.iter_mut().enumerate() {
        let p = params[channels.of(i)];
        *v = crate::quant::scale::dequantize(how.quantize(*v, p), p);
    }
    out
}

/// A float32 weight as the runtime reads it back after per-channel or per-tensor
/// quantization (scales stored as float32, no bias adjustment). With `rounded` (GPTQ's
/// values, same shape), those are quantized with the parameters of `values`, as the rewrite
/// does. Block-wise and FP8 weights are not handled (`None`).
pub fn dequantized_weight(
    values: &ArrayD<f32>,
    rounded: Option<&ArrayD<f32>>,
    how: &WeightQuant,
) -> Option<ArrayD<f32>> {
    let params = read_back_params(values, how)?;
    Some(read_back(values, rounded, how, &params))
}

/// The read-back weight's rounding error, `dequantized − values`, where bias correction
/// measures it: zero at the values a clipped range (MSE weight ranges) clips, whose
/// clipping was chosen ([`WeightQuant::within_span`]). Same arguments and `None` as
/// [`dequantized_weight`].
pub fn rounding_error(
    values: &ArrayD<f32>,
    rounded: Option<&ArrayD<f32>>,
    how: &WeightQuant,
) -> Option<ArrayD<f32>> {
    let params = read_back_params(values, how)?;
    let channels = Channels::along(values.shape(), how.axis);
    let mut error = read_back(values, rounded, how, &params) - values;
    for (i, (e, &v)) in error.iter_mut().zip(values.iter()).enumerate() {
        if how.within_span(v, params[channels.of(i)]) != v {
            *e = 0.0;
        }
    }
    Some(error)
}

/// `values` quantized with one parameter per slice along `axis` (or one in all), straight
/// into the storage type.
fn quantize_array(values: &ArrayD<f32>, params: &[ScaleZp], how: &WeightQuant) -> TensorArray {
    let (axis, qtype) = (how.axis, how.qtype);
    let shape = values.shape().to_vec();
    let standard = values.as_standard_layout();
    let flat = standard.as_slice().unwrap_or(&[]);
    let (inner, channels) = match axis {
        Some(axis) => (shape[axis + 1..].iter().product::<usize>(), shape[axis]),
        None => (1, 1),
    };
    // A row is one slice across every channel (per-channel), or a span of the whole
    // (per-tensor); column `col` of a row belongs to channel `col / inner`.
    let row_len = if axis.is_some() {
        channels * inner
    } else {
        1 << 14
    };
    let param_of = |col: usize| -> ScaleZp {
        match axis {
            Some(_) if inner == 1 => params[col],
            Some(_) => params[col / inner],
            None => params[0],
        }
    };
    if qtype == QuantType::Float8e4m3fn {
        return collect_quantized(qtype, &shape, row_len, |row, col| {
            i64::from(quantize_fp8(flat[row * row_len + col], param_of(col).scale))
        });
    }
    collect_quantized(qtype, &shape, row_len, |row, col| {
        how.quantize(flat[row * row_len + col], param_of(col))
    })
}

/// Per-channel (or per-tensor) quantization; `bias_adjust` is the input scale and the bias
/// values when an int32 bias follows (onnxruntime's weight-scale adjustment). Scales are
/// stored in `scale_type` and the values quantized with the stored scales: `rounded`'s
/// (GPTQ's) when given, else `values`'.
fn quantize_weight(
    name: &str,
    values: &ArrayD<f32>,
    rounded: Option<&ArrayD<f32>>,
    how: &WeightQuant,
    bias_adjust: Option<(f32, Vec<f32>)>,
    scale_type: DataType,
) -> Result<QuantizedWeight, QuantError> {
    check_finite(name, values)?;
    let qtype = how.qtype;
    let mut params = weight_params(values, how);
    // onnxruntime's int32-bias adjustment: per channel against that channel's |bias|,
    // per tensor against the whole bias's magnitude (zero included).
    let mut adjusted = false;
    if let Some((input_scale, bias)) = bias_adjust
        && matches!(qtype, QuantType::Int8 | QuantType::Int16)
        && params.iter().all(|p| p.zero_point == 0)
    {
        let per_channel = params.len() > 1 && params.len() == bias.len();
        let whole = bias.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (c, p) in params.iter_mut().enumerate() {
            let magnitude = if per_channel { bias[c].abs() } else { whole };
            let raised = adjust_weight_scale_for_bias(p.scale, input_scale, magnitude, per_channel);
            adjusted |= raised != p.scale;
            p.scale = raised;
        }
    }
    store_scales(&mut params, scale_type, adjusted);
    Ok(QuantizedWeight {
        values: quantize_array(rounded.unwrap_or(values), &params, how)
            .to_proto(&format!("{name}_quantized")),
        shape: values.shape().to_vec(),
        params,
        scale_type,
        axis: how.axis,
        block_size: None,
        qtype,
        packed: None,
    })
}

/// `values` (`[k, n]`, or any rank for column divisors alone, which divide the last axis)
/// with the row scales and column divisors of an int4 search or SmoothQuant applied.
pub(super) fn transformed<'v>(
    values: &'v ArrayD<f32>,
    transform: Option<&WeightTransform>,
) -> CowArray<'v, f32, IxDyn> {
    let Some(t) = transform else {
        return values.as_standard_layout();
    };
    let mut out = values.as_standard_layout().into_owned();
    let n = out.shape().last().copied().unwrap_or(1).max(1);
    let Some(flat) = out.as_slice_mut() else {
        return out.into();
    };
    for (i, row) in flat.chunks_mut(n).enumerate() {
        let f = t.row_scale.as_ref().map_or(1.0, |s| s[i]);
        for (j, v) in row.iter_mut().enumerate() {
            let d = t.column_divisor.as_ref().map_or(1.0, |c| c[j]);
            *v = *v * f / d;
        }
    }
    out.into()
}

/// Block-wise quantization along axis 0 of a rank-2 weight (int4 weight-only), scales
/// stored in `scale_type`: each block of rows gets one parameter per column ([`blocks`]),
/// shrunk by AWQ-clip's ratios in `clip`; `values` come with the searches' transform
/// applied. With `nbits`, the values are packed for MatMulNBits instead of stored as an
/// int4 tensor. `rounded` (GPTQ's values) are quantized instead of `values` when given,
/// with `values`' parameters.
fn quantize_blockwise(
    name: &str,
    values: &ArrayD<f32>,
    rounded: Option<&ArrayD<f32>>,
    how: &WeightQuant,
    clip: Option<&[f32]>,
    scale_type: DataType,
    nbits: bool,
) -> Result<QuantizedWeight, QuantError> {
    check_finite(name, values)?;
    let block = how.block_size.unwrap_or(1);
    let values = values.as_standard_layout();
    let (k, n) = (values.shape()[0], values.shape()[1]);
    let flat = values.as_slice().unwrap_or(&[]);
    let spec = BlockSpec {
        block,
        qtype: how.qtype,
        symmetric: how.symmetric,
    };
    let mut params = block_params(flat, k, n, spec, clip);
    store_scales(&mut params, scale_type, false);
    let rounded = rounded.map(|r| r.as_standard_layout());
    let flat = match rounded.as_ref().and_then(|r| r.as_slice()) {
        Some(r) if r.len() == flat.len() => r,
        _ => flat,
    };
    let quantize = |row: usize, col: usize| {
        quantize_value(
            flat[row * n + col],
            param_at(&params, spec, n, row, col),
            how.qtype,
        )
    };
    let (stored, packed) = if nbits {
        // One byte per value (4-bit values lie in [-8, 15]) until they are packed.
        let codes: Vec<i8> = (0..k * n).map(|i| quantize(i / n, i % n) as i8).collect();
        let packed = pack(&codes, k, n, block, &params, how.qtype);
        (TensorProto::default(), Some(packed))
    } else {
        let quantized = collect_quantized(how.qtype, &[k, n], n, quantize);
        (quantized.to_proto(&format!("{name}_quantized")), None)
    };
    Ok(QuantizedWeight {
        values: stored,
        shape: vec![k, n],
        params,
        scale_type,
        axis: Some(0),
        block_size: Some(block),
        qtype: how.qtype,
        packed,
    })
}

impl Rewriter<'_> {
    /// The weights and constants of the plan, sorted by name.
    fn weight_names(&self) -> Vec<&String> {
        let mut names: Vec<&String> = self
            .plan
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
        names.sort();
        names
    }

    /// The input scale and bias values a weight's scales are adjusted for, when an int32 bias
    /// reads it.
    fn bias_adjust(&self, weight: &str) -> Option<(f32, Vec<f32>)> {
        let (input, bias) = self.bias_of.get(weight)?;
        let input_scale = self.edits.out.params.get(*input)?.params[0].scale;
        let b = self.float_value(bias).ok()?;
        Some((input_scale, b.iter().copied().collect()))
    }

    /// Quantizes one weight or constant; `None` when the plan's decision leaves it alone.
    /// The float values live only while it runs.
    fn quantize_one(&self, name: &str) -> Result<Option<QuantizedWeight>, QuantError> {
        let values = self.float_value(name)?;
        let role = &self.plan.roles[name];
        let Some(how) = weight_quant(self.recipe, name, role, values.ndim()) else {
            return Ok(None);
        };
        let scale_type = self.float_type(name);
        // The searches' row scales, and the divisions folded into constants and producing
        // weights (see `awq_scales`), applied once for every form.
        let transform = self.int4.transforms.get(name);
        let values = match transform {
            Some(_) => transformed(&values, transform).into_owned(),
            None => values,
        };
        // GPTQ's values (never with a transform: GPTQ leaves rescaled weights alone).
        let rounded = self.int4.rounding.get(name).filter(|_| transform.is_none());
        let q = match (how.block_size, role) {
            (Some(_), _) => quantize_blockwise(
                name,
                &values,
                rounded,
                &how,
                transform.and_then(|t| t.clip.as_deref()),
                scale_type,
                self.nbits_readers(name).is_some(),
            )?,
            (None, TensorRole::Weight { .. }) => quantize_weight(
                name,
                &values,
                rounded,
                &how,
                self.bias_adjust(name),
                scale_type,
            )?,
            (None, _) => quantize_weight(name, &values, None, &how, None, scale_type)?,
        };
        // The float weight has been read for good: its mapped pages need not stay resident.
        if let Some(tensor) = self.initializers.get(name) {
            self.model.release_pages(tensor);
        }
        Ok(Some(q))
    }

    /// Phase 3: every weight and constant input, quantized in parallel (they are
    /// independent) and emitted in name order.
    pub(super) fn weights(&mut self) -> Result<(), QuantError> {
        let names = self.weight_names();
        let quantized: Vec<(String, QuantizedWeight)> = names
            .par_iter()
            .filter_map(|&name| match self.quantize_one(name) {
                Ok(Some(q)) => Some(Ok((name.clone(), q))),
                Ok(None) => None,
                Err(e) => Some(Err(e)),
            })
            .collect::<Result<_, QuantError>>()?;
        for (name, q) in quantized {
            self.emit_weight(&name, q);
        }
        Ok(())
    }

    /// Writes one quantized weight: its initializers and DequantizeLinear, and its consumers
    /// rewired to the DequantizeLinear's output.
    fn emit_weight(&mut self, name: &str, mut q: QuantizedWeight) {
        if let Some(packed) = q.packed.take() {
            self.emit_nbits(name, q, packed);
            return;
        }
        // ModelOpt's `rtn`: the float weight stays, behind a QuantizeLinear.
        let fake = q.block_size.is_some() && self.keeps_float_weights();
        let shape = q.shape.as_slice();
        let qtype = q.qtype;
        let scale_shape = q.block_size.map(|b| vec![shape[0].div_ceil(b), shape[1]]);
        let per_axis = q.axis.is_some() && q.params.len() > 1 || q.block_size.is_some();
        let edits = &mut self.edits;
        edits.out.per_axis |= per_axis;
        if !fake {
            edits.new_initializers.push(q.values);
        }
        edits.new_initializers.push(scale_tensor(
            &format!("{name}_scale"),
            &q.params,
            scale_shape.clone(),
            q.scale_type,
        ));
        edits.new_initializers.push(zero_point_tensor(
            &format!("{name}_zero_point"),
            &q.params,
            qtype,
            scale_shape,
        ));
        let mut attributes = Vec::new();
        if per_axis && let Some(axis) = q.axis {
            attributes.push(int_attr("axis", axis as i64));
        }
        if let Some(block) = q.block_size {
            attributes.push(int_attr("block_size", block as i64));
        }
        let dq_output = format!("{name}_DequantizeLinear_Output");
        if fake {
            edits.weight_dq.push(node(
                "QuantizeLinear",
                &format!("{name}_QuantizeLinear"),
                vec![
                    name.to_owned(),
                    format!("{name}_scale"),
                    format!("{name}_zero_point"),
                ],
                vec![format!("{name}_quantized")],
                attributes.clone(),
            ));
        }
        edits.weight_dq.push(dequantize(
            &format!("{name}_DequantizeLinear"),
            [
                format!("{name}_quantized"),
                format!("{name}_scale"),
                format!("{name}_zero_point"),
            ],
            dq_output.clone(),
            attributes,
        ));
        edits.replaced_inputs.insert(name.to_owned(), dq_output);
        if !fake {
            edits.drop_initializers.insert(name.to_owned());
        }
        edits.out.params.insert(
            name.to_owned(),
            TensorParams {
                qtype,
                params: q.params,
                axis: q.axis.filter(|_| per_axis),
                block_size: q.block_size,
                range: None,
                scale_type: q.scale_type,
            },
        );
    }
}
