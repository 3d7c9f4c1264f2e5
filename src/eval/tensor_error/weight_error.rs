//! Per-weight error: every quantized weight of a QDQ model dequantized as the runtime reads
//! it (DequantizeLinear per tensor, per channel or block-wise, on stored integers or on a
//! QuantizeLinear of the float weight; MatMulNBits' packed blocks), against the float weight.
//!
//! Quantizers may scale a weight's input rows (AWQ, SmoothQuant) or output columns (a
//! following layer's SmoothQuant divisor, equalization) by factors that a neighbouring op
//! undoes. Those factors change no output, so they are taken out and the error is that of the
//! weight the layer effectively computes with: exactly where qdq-studio recorded them in the
//! QDQ model ([`ChannelFactors`] of the activations the layer reads and writes), else, for a
//! 2-D weight that was evidently rescaled (fitting a factor per row and per column gains more
//! than [`RESCALE_GAIN_DB`]), fitted by least squares.

use std::collections::HashMap;

use ndarray::ArrayD;
use rayon::prelude::*;
use serde::Serialize;

use crate::eval::compare::EvalError;
use crate::model::ops;
use crate::model::{DataType, Graph, Model, Node};
use crate::quant::rescaled::ChannelFactors;
use crate::recipe::Preprocessing;
use crate::util::sqnr_db;

/// A fitted rescaling counts when it raises the SQNR by more than this (dB). Fitting
/// `rows + cols` factors to plain quantization noise takes out about that share of its
/// `rows · cols` values (under 1.8 dB where the fit is tried at all, see
/// [`VALUES_PER_FACTOR`]); a weight AWQ rescaled gained 5 to 9 dB on the test decoder.
const RESCALE_GAIN_DB: f64 = 3.0;

/// The fit is tried only on weights with at least this many values per fitted factor.
const VALUES_PER_FACTOR: usize = 3;

/// Error of one weight.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WeightError {
    /// The float weight's name.
    pub weight: String,
    /// SQNR (dB) of the float weight against its dequantized value.
    pub sqnr_db: f64,
    /// The quantizer scaled the weight's rows or columns (equalization, AWQ, SmoothQuant): the
    /// SQNR is that of the effective weight, those factors taken out (as the QDQ model
    /// records them, else fitted).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub rescaled: bool,
}

/// Quantization parameters of one weight: one scale, one per channel along `axis`, or one
/// per block of `block` elements along `axis` (scales shaped like the weight with that axis
/// divided into blocks).
struct Params {
    scales: ArrayD<f32>,
    zero_points: ArrayD<f32>,
    axis: usize,
    block: Option<usize>,
}

impl Params {
    /// Applies `f(value, scale, zero_point)` to `values` (standard layout).
    fn apply(&self, values: &ArrayD<f32>, f: impl Fn(f32, f32, f32) -> f32 + Sync) -> ArrayD<f32> {
        let shape = values.shape().to_vec();
        let axis = self.axis.min(shape.len().saturating_sub(1));
        let dim = shape.get(axis).copied().unwrap_or(1).max(1);
        let inner: usize = shape.iter().skip(axis + 1).product();
        let scales = self.scales.as_standard_layout();
        let zero_points = self.zero_points.as_standard_layout();
        let (scales, zero_points) = (
            scales.as_slice().unwrap_or(&[]),
            zero_points.as_slice().unwrap_or(&[]),
        );
        let at = |offset: usize| -> usize {
            if scales.len() <= 1 {
                return 0;
            }
            let a = (offset / inner.max(1)) % dim;
            match self.block {
                Some(block) => {
                    let blocks = dim.div_ceil(block.max(1));
                    let outer = offset / (dim * inner.max(1));
                    (outer * blocks + a / block.max(1)) * inner.max(1) + offset % inner.max(1)
                }
                None => a,
            }
        };
        let standard = values.as_standard_layout();
        let flat = standard.as_slice().unwrap_or(&[]);
        let out: Vec<f32> = flat
            .par_iter()
            .enumerate()
            .map(|(i, &v)| {
                let p = at(i);
                let s = scales.get(p).copied().unwrap_or(1.0);
                let z = zero_points.get(p).copied().unwrap_or(0.0);
                f(v, s, z)
            })
            .collect();
        ArrayD::from_shape_vec(shape, out).unwrap_or_else(|_| values.clone())
    }
}

/// Dequantizes every DequantizeLinear and MatMulNBits weight of `quant` and compares it to
/// the float weight it stands for, in graph order.
pub fn weight_errors(
    quant: &Model,
    qg: &Graph,
    float: &Model,
    fg: &Graph,
    factors: &HashMap<String, ChannelFactors>,
) -> Result<Vec<WeightError>, EvalError> {
    // Quantizers fold BatchNormalization into the preceding Conv before quantizing (ours and
    // onnxruntime's pre-processing both do): the weight they quantized is the folded one, so
    // compare against the float model folded the same way, not against the raw weight.
    let has_bn = |g: &Graph| {
        g.nodes()
            .iter()
            .any(|n| n.op_type == ops::BATCH_NORMALIZATION)
    };
    // Ours may also have simplified the graph (Conv weights scaled by a folded channel Mul or
    // HardSigmoid), as its recipe says; other tools' do not.
    let simplified = crate::quant::stamped_recipe(quant).is_some_and(|r| r.preprocessing.simplify);
    let folded;
    let float = if simplified || (has_bn(fg) && !has_bn(qg)) {
        let options = Preprocessing {
            simplify: simplified,
            ..Preprocessing::default()
        };
        folded = crate::quant::preprocess::preprocess(float, &options)?.0;
        &folded
    } else {
        float
    };
    let mut out = Vec::new();
    for node in qg.topological_order().iter().map(|&id| qg.node(id)) {
        let found = match node.op_type.as_str() {
            ops::DEQUANTIZE_LINEAR => dequantized_weight(quant, qg, node)?,
            ops::MAT_MUL_N_BITS => nbits_weight(quant, node, fg)?,
            _ => None,
        };
        let Some((base, dequantized)) = found else {
            continue;
        };
        let Some(reference) = float_reference(float, fg, qg, &base, node)? else {
            continue;
        };
        if dequantized.shape() != reference.shape()
            || out.iter().any(|w: &WeightError| w.weight == base)
        {
            continue;
        }
        let (sqnr_db, rescaled) = match recorded_rescaling(&reference, qg, node, factors) {
            Some(rescaled) => (compare(&rescaled, &dequantized).0, true),
            None => compare(&reference, &dequantized),
        };
        out.push(WeightError {
            weight: base,
            sqnr_db,
            rescaled,
        });
    }
    Ok(out)
}

/// The float weight `base` as the quantized model reads it through `node` (its
/// DequantizeLinear, or a MatMulNBits): transposed where int4 stored it `[K, N]`
/// ([`stored_transposed`]). Read once: its mapped pages go back to the system (a large
/// model's weights would otherwise all stay resident by the end).
fn float_reference(
    float: &Model,
    fg: &Graph,
    qg: &Graph,
    base: &str,
    node: &Node,
) -> Result<Option<ArrayD<f32>>, EvalError> {
    let Some(reference) = float.weight(base)? else {
        return Ok(None);
    };
    let reference = reference.to_f32();
    float.release_weight(base);
    Ok(Some(match stored_transposed(fg, qg, base, node) {
        true => reference.t().as_standard_layout().into_owned(),
        false => reference,
    }))
}

/// The float weight `reference` (in the QDQ model's layout) as the QDQ model holds it when
/// the quantizer recorded the factors of what the layer reading it (through `dq`) writes or
/// reads ([`ChannelFactors`]: `qdq = float × f`; `dq` may be a MatMulNBits, which reads its
/// weight itself): equalization and AWQ divide a layer's
/// output channels, weights and bias alike, and multiply the next layer's input channels.
/// So the output channels are multiplied by the output's factors and the input channels
/// divided by the input's. `None` when neither is recorded or the layout is not a Conv's,
/// MatMul's or Gemm's weight or a 1-D bias.
fn recorded_rescaling(
    reference: &ArrayD<f32>,
    qg: &Graph,
    dq: &Node,
    factors: &HashMap<String, ChannelFactors>,
) -> Option<ArrayD<f32>> {
    let (reader, slot) = weight_reader(qg, dq)?;
    let values = |tensor: Option<&str>| {
        tensor
            .and_then(|t| factors.get(t))
            .map(|f| f.values.as_slice())
    };
    let out = values(reader.outputs.first().map(String::as_str));
    let input = match slot {
        0 => None,
        _ => values(
            reader
                .inputs
                .first()
                .map(|i| crate::eval::tensor_error::tensor_order::unquantized(qg, i)),
        ),
    };
    if out.is_none() && input.is_none() {
        return None;
    }
    let layout = WeightLayout::of(reader, slot, reference.shape())?;
    let mut rescaled = reference.as_standard_layout().into_owned();
    let shape = rescaled.shape().to_vec();
    let inner: usize = shape.iter().skip(2).product();
    for (offset, value) in rescaled.iter_mut().enumerate() {
        let (o, i) = layout.channels(offset, &shape, inner);
        if let Some(out) = out {
            *value *= *out.get(o)?;
        }
        if let (Some(input), Some(i)) = (input, i) {
            *value /= *input.get(i)?;
        }
    }
    Some(rescaled)
}

/// Where a weight's output and input channels sit.
#[derive(Debug, Clone, Copy)]
enum WeightLayout {
    /// A bias: `[C]`, output channels.
    Bias,
    /// A Conv's `[O, I / group, k…]`.
    Conv { group: usize },
    /// `[K, N]` (MatMul, Gemm): inputs on axis 0.
    KByN,
    /// `[N, K]` (Gemm with `transB`).
    NByK,
}

impl WeightLayout {
    /// The layout of input `slot` of `reader`, a weight of `shape`.
    fn of(reader: &Node, slot: usize, shape: &[usize]) -> Option<Self> {
        let trans_b = reader.int_attribute("transB").unwrap_or(0) != 0;
        match (reader.op_type.as_str(), slot, shape.len()) {
            (_, _, 1) => Some(WeightLayout::Bias),
            (ops::CONV, 1, rank) if rank >= 3 => {
                let group = reader.int_attribute("group").unwrap_or(1).max(1);
                Some(WeightLayout::Conv {
                    group: usize::try_from(group).ok()?,
                })
            }
            (ops::MAT_MUL | ops::MAT_MUL_N_BITS, 1, 2) | (ops::GEMM, 1, 2) if !trans_b => {
                Some(WeightLayout::KByN)
            }
            (ops::GEMM, 1, 2) => Some(WeightLayout::NByK),
            _ => None,
        }
    }

    /// The output channel and input channel (`None` for a bias) of the value at `offset`
    /// of a standard-layout weight of `shape` (`inner`: the product of its axes past 1).
    fn channels(self, offset: usize, shape: &[usize], inner: usize) -> (usize, Option<usize>) {
        let cols = shape.get(1).copied().unwrap_or(1).max(1);
        match self {
            WeightLayout::Bias => (offset, None),
            WeightLayout::Conv { group } => {
                let per_output = cols * inner.max(1);
                let o = offset / per_output;
                let i = (offset % per_output) / inner.max(1);
                let outputs_per_group = (shape[0] / group).max(1);
                (o, Some((o / outputs_per_group) * cols + i))
            }
            WeightLayout::KByN => (offset % cols, Some(offset / cols)),
            WeightLayout::NByK => (offset / cols, Some(offset % cols)),
        }
    }
}

/// The node of the QDQ model that reads the weight `node` gives (a DequantizeLinear's first
/// reader), and at which input; a MatMulNBits reads its weight itself (input 1).
fn weight_reader<'g>(qg: &'g Graph, node: &'g Node) -> Option<(&'g Node, usize)> {
    if node.op_type == ops::MAT_MUL_N_BITS {
        return Some((node, 1));
    }
    let weight = node.outputs.first()?;
    let reader = qg.node(*qg.tensor(weight)?.consumers.first()?);
    Some((reader, reader.inputs.iter().position(|i| i == weight)?))
}

/// Whether the quantized model holds `weight` transposed against the float model, as int4
/// stores a Gemm's `transB` weight (`[K, N]`, the Gemm a MatMul or its flag cleared,
/// [`crate::quant::gemm_layout`]): its float reader is a Gemm with `transB`, and the node
/// reading it in the quantized model through `node` (its DequantizeLinear, or a MatMulNBits
/// itself) takes `[K, N]`.
fn stored_transposed(fg: &Graph, qg: &Graph, weight: &str, node: &Node) -> bool {
    let trans_b = |n: &Node| n.int_attribute("transB").unwrap_or(0) != 0;
    let float_reader = fg.tensor(weight).and_then(|t| t.consumers.first());
    let float_n_by_k = float_reader.is_some_and(|&r| {
        let r = fg.node(r);
        r.op_type == ops::GEMM && trans_b(r)
    });
    let quant_k_by_n = weight_reader(qg, node).is_some_and(|(r, _)| match r.op_type.as_str() {
        ops::MAT_MUL | ops::MAT_MUL_N_BITS => true,
        ops::GEMM => !trans_b(r),
        _ => false,
    });
    float_n_by_k && quant_k_by_n
}

/// For a layer `reader` of the QDQ model multiplying its input by a weight (MatMul, Gemm,
/// MatMulNBits), the least-squares fit of the factor by which the quantizer multiplied the
/// float weight along each input channel `k` (AWQ, SmoothQuant and equalization divide the
/// input's channel `k` by it), `q ≈ s_k · w`, as its sums `(Σ w·q, Σ w²)` over row `k` of a
/// `[K, N]` weight (column `k` of a Gemm's `transB` `[N, K]`): the layers reading one
/// activation add theirs and fit one factor. `None` when the layer has no such weight of 8
/// bits or more, or it does not match the float one.
pub(crate) fn input_channel_fit(
    quant: &Model,
    qg: &Graph,
    float: &Model,
    fg: &Graph,
    reader: &Node,
) -> Result<Option<Vec<(f64, f64)>>, EvalError> {
    // 4-bit weights are too coarse to fit a factor from (MatMulNBits, int4 DQ): AWQ's own
    // range search moves them off `s · w` by more than a per-row fit can average out.
    let (found, through) = match reader.op_type.as_str() {
        ops::MAT_MUL | ops::GEMM => {
            let dq = reader
                .inputs
                .get(1)
                .and_then(|w| qg.producer_of(w))
                .filter(|n| n.op_type == ops::DEQUANTIZE_LINEAR);
            let eight_bits = |dq: &Node| {
                let codes = dq.inputs.first().and_then(|c| qg.tensor(c)?.elem_type);
                let codes = codes.and_then(|c| DataType::from_onnx(c).ok());
                codes.is_none_or(|t| t.bits() >= 8)
            };
            match dq.filter(|dq| eight_bits(dq)) {
                Some(dq) => (dequantized_weight(quant, qg, dq)?, dq),
                None => return Ok(None),
            }
        }
        _ => return Ok(None),
    };
    let Some((base, dequantized)) = found else {
        return Ok(None);
    };
    let Some(reference) = float_reference(float, fg, qg, &base, through)? else {
        return Ok(None);
    };
    if dequantized.shape() != reference.shape() || reference.ndim() != 2 {
        return Ok(None);
    }
    // Input channels along the first axis: a `transB` weight's columns become its rows.
    let by_input = |a: ArrayD<f32>| match reader.int_attribute("transB").unwrap_or(0) != 0 {
        true => a.reversed_axes(),
        false => a,
    };
    let (w, q) = (by_input(reference), by_input(dequantized));
    let sums = w
        .outer_iter()
        .zip(q.outer_iter())
        .map(|(w, q)| {
            w.iter().zip(q.iter()).fold((0.0, 0.0), |(n, d), (&a, &b)| {
                let a = f64::from(a);
                (n + a * f64::from(b), d + a * a)
            })
        })
        .collect();
    Ok(Some(sums))
}

/// The float weight a DequantizeLinear on a weight stands for and its dequantized value.
fn dequantized_weight(
    quant: &Model,
    graph: &Graph,
    dq: &Node,
) -> Result<Option<(String, ArrayD<f32>)>, EvalError> {
    let Some(scales) = dq
        .inputs
        .get(1)
        .map(|s| quant.weight(s))
        .transpose()?
        .flatten()
    else {
        return Ok(None);
    };
    let scales = scales.to_f32();
    let zero_points = match dq.inputs.get(2).filter(|z| !z.is_empty()) {
        Some(z) => match quant.weight(z)? {
            Some(z) => z.to_f32(),
            None => return Ok(None),
        },
        None => ArrayD::zeros(scales.raw_dim()),
    };
    let block = dq
        .int_attribute("block_size")
        .filter(|&b| b > 0)
        .map(|b| b as usize);
    let axis = dq.int_attribute("axis").unwrap_or(1);
    let params = |rank: usize| Params {
        axis: if axis < 0 {
            (axis + rank as i64).max(0) as usize
        } else {
            axis as usize
        },
        scales: scales.clone(),
        zero_points: zero_points.clone(),
        block,
    };
    let Some((base, codes)) = weight_codes(quant, graph, dq, &params)? else {
        return Ok(None);
    };
    let dequantized = params(codes.ndim()).apply(&codes, |v, s, z| (v - z) * s);
    Ok(Some((base, dequantized)))
}

/// The integer values a DequantizeLinear reads and the float weight they stand for: either an
/// initializer of integers (onnxruntime and qdq-studio store weights quantized, named
/// `<weight>_quantized`), or a QuantizeLinear applied to the float weight inside the graph
/// (ModelOpt's and PyTorch exporters' form), which is evaluated here as ONNX defines it.
fn weight_codes(
    quant: &Model,
    graph: &Graph,
    dq: &Node,
    params: &dyn Fn(usize) -> Params,
) -> Result<Option<(String, ArrayD<f32>)>, EvalError> {
    let input = dq.inputs[0].as_str();
    if let Some(codes) = quant.graph().initializer.iter().find(|t| t.name() == input) {
        let base = input.trim_end_matches("_quantized").to_owned();
        return Ok(Some((base, quant.tensor_array(codes)?.to_f32())));
    }
    let Some(q) = graph
        .producer_of(input)
        .filter(|n| n.op_type == ops::QUANTIZE_LINEAR)
    else {
        return Ok(None);
    };
    let Some(weight) = quant.weight(&q.inputs[0])? else {
        return Ok(None);
    };
    let dtype = match q.inputs.get(2).filter(|z| !z.is_empty()) {
        Some(z) => quant.weight(z)?.map(|z| z.dtype()),
        None => Some(DataType::Uint8),
    };
    let Some((qmin, qmax)) = dtype.and_then(|d| d.quantized_range()) else {
        return Ok(None);
    };
    let weight = weight.to_f32();
    let codes = params(weight.ndim()).apply(&weight, |v, s, z| {
        let q = crate::quant::scale::round_half_even(f64::from(v / s)) as f32 + z;
        q.clamp(qmin as f32, qmax as f32)
    });
    Ok(Some((q.inputs[0].clone(), codes)))
}

/// The `[K, N]` float weight a MatMulNBits node (com.microsoft) computes with, unpacked from
/// `B` (`uint8 [N, blocks, block·bits/8]`, low bits first), its scales (`[N · blocks]`) and
/// zero points (packed the same way; 2^(bits−1) when absent), and the float weight it stands
/// for: the input of the float node of the same name, else `B`'s name without the suffix
/// qdq-studio or onnxruntime gives it.
fn nbits_weight(
    quant: &Model,
    node: &Node,
    fg: &Graph,
) -> Result<Option<(String, ArrayD<f32>)>, EvalError> {
    let attr = |name: &str| {
        node.int_attribute(name)
            .filter(|&v| v > 0)
            .map(|v| v as usize)
    };
    let (Some(k), Some(n), Some(block)) = (attr("K"), attr("N"), attr("block_size")) else {
        return Ok(None);
    };
    let bits = attr("bits").unwrap_or(4);
    if !matches!(bits, 2 | 4 | 8) {
        return Ok(None);
    }
    let read = |i: usize| -> Result<Option<ArrayD<f32>>, EvalError> {
        match node.inputs.get(i).filter(|t| !t.is_empty()) {
            Some(name) => Ok(quant.weight(name)?.map(|t| t.to_f32())),
            None => Ok(None),
        }
    };
    let (Some(b), Some(scales)) = (read(1)?, read(2)?) else {
        return Ok(None);
    };
    let zero_points = read(3)?;
    let blocks = k.div_ceil(block);
    let per_byte = 8 / bits;
    let blob = block / per_byte;
    let mask = (1u32 << bits) - 1;
    let default_zp = f32::from(1u16 << (bits - 1));
    let (b, scales) = (
        b.iter().copied().collect::<Vec<f32>>(),
        scales.iter().copied().collect::<Vec<f32>>(),
    );
    if b.len() != n * blocks * blob || scales.len() != n * blocks {
        return Ok(None);
    }
    // A zero point array of one float per block (the float-zero-point form), or packed codes.
    let zp = zero_points.map(|z| z.iter().copied().collect::<Vec<f32>>());
    let zero_point = |col: usize, blk: usize| -> f32 {
        match &zp {
            None => default_zp,
            Some(z) if z.len() == n * blocks => z[col * blocks + blk],
            Some(z) => {
                let per_column = blocks.div_ceil(per_byte);
                let byte = z
                    .get(col * per_column + blk / per_byte)
                    .copied()
                    .unwrap_or(0.0) as u32;
                ((byte >> ((blk % per_byte) * bits)) & mask) as f32
            }
        }
    };
    let mut w = vec![0f32; k * n];
    for col in 0..n {
        for blk in 0..blocks {
            let scale = scales[col * blocks + blk];
            let z = zero_point(col, blk);
            for i in 0..blob {
                let byte = b[(col * blocks + blk) * blob + i] as u32;
                for j in 0..per_byte {
                    let row = blk * block + i * per_byte + j;
                    if row < k {
                        let code = ((byte >> (j * bits)) & mask) as f32;
                        w[row * n + col] = (code - z) * scale;
                    }
                }
            }
        }
    }
    let b_name = node.inputs[1].as_str();
    let base = fg
        .node_by_name(&node.name)
        .filter(|f| matches!(f.op_type.as_str(), ops::MAT_MUL | ops::GEMM))
        .and_then(|f| f.inputs.get(1).cloned())
        .unwrap_or_else(|| {
            ["_MatMulNBits_B", "_Q4", "_Q8"]
                .iter()
                .find_map(|s| b_name.strip_suffix(s))
                .unwrap_or(b_name)
                .to_owned()
        });
    Ok(ArrayD::from_shape_vec(vec![k, n], w)
        .ok()
        .map(|w| (base, w)))
}

/// The SQNR of `dequantized` against `reference`, and whether a fitted rescaling was taken
/// out (see the module docs).
fn compare(reference: &ArrayD<f32>, dequantized: &ArrayD<f32>) -> (f64, bool) {
    let signal: f64 = reference.iter().map(|&a| f64::from(a).powi(2)).sum();
    let noise: f64 = reference
        .iter()
        .zip(dequantized.iter())
        .map(|(&a, &b)| f64::from(a - b).powi(2))
        .sum();
    let plain = sqnr_db(signal, noise);
    let (rows, cols) = match reference.shape() {
        &[rows, cols] => (rows, cols),
        _ => return (plain, false),
    };
    if rows * cols < VALUES_PER_FACTOR * (rows + cols) {
        return (plain, false);
    }
    match rescaled_noise(reference, dequantized).map(|n| sqnr_db(signal, n)) {
        Some(fitted) if fitted > plain + RESCALE_GAIN_DB => (fitted, true),
        _ => (plain, false),
    }
}

/// Alternating least-squares passes of the row and column factors (each pass lowers the
/// noise; a few settle it).
const FIT_PASSES: usize = 8;

/// The noise of `dequantized` (`[rows, cols]`) against `reference` once a factor per row and
/// one per column, `q ≈ r_i · w_ij · c_j`, are fitted by alternating least squares and divided
/// out; `None` for an empty weight.
fn rescaled_noise(reference: &ArrayD<f32>, dequantized: &ArrayD<f32>) -> Option<f64> {
    let (rows, cols) = (reference.shape()[0], reference.shape()[1]);
    let w = reference.as_standard_layout();
    let q = dequantized.as_standard_layout();
    let (w, q) = (w.as_slice()?, q.as_slice()?);
    if rows == 0 || cols == 0 {
        return None;
    }
    let at = |i: usize, j: usize| (f64::from(w[i * cols + j]), f64::from(q[i * cols + j]));
    let noise = |r: &[f64], c: &[f64]| -> f64 {
        (0..rows)
            .into_par_iter()
            .map(|i| {
                (0..cols)
                    .map(|j| {
                        let (a, b) = at(i, j);
                        (b / (r[i] * c[j]) - a).powi(2)
                    })
                    .sum::<f64>()
            })
            .sum()
    };
    let (mut r, mut c) = (vec![1f64; rows], vec![1f64; cols]);
    let mut best = noise(&r, &c);
    for _ in 0..FIT_PASSES {
        r = line_factors(rows, cols, &c, &|i, j| at(i, j));
        c = line_factors(cols, rows, &r, &|j, i| at(i, j));
        let now = noise(&r, &c);
        let settled = now >= best * 0.999;
        best = best.min(now);
        if settled {
            break;
        }
    }
    Some(best)
}

/// One least-squares factor per line (a row, or a column) given the other side's factors:
/// for line `l`, `Σ_k (w·o_k)·q / Σ_k (w·o_k)²` over its `len` entries, `entry(l, k)` giving
/// `(w, q)`; 1 where the line is empty or the fit is zero.
fn line_factors(
    lines: usize,
    len: usize,
    other: &[f64],
    entry: &(dyn Fn(usize, usize) -> (f64, f64) + Sync),
) -> Vec<f64> {
    (0..lines)
        .into_par_iter()
        .map(|l| {
            let (num, den) = (0..len).fold((0f64, 0f64), |(n, d), k| {
                let (a, b) = entry(l, k);
                let a = a * other[k];
                (n + a * b, d + a * a)
            });
            if den > 0.0 && num != 0.0 {
                num / den
            } else {
                1.0
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use ndarray::{Array2, IxDyn};

    use super::*;

    fn weight() -> ArrayD<f32> {
        Array2::from_shape_fn((16, 8), |(i, j)| ((i * 8 + j) as f32 * 0.61).sin()).into_dyn()
    }

    /// `w` rounded to a grid of `step`.
    fn rounded(w: &ArrayD<f32>, step: f32) -> ArrayD<f32> {
        w.mapv(|v| (v / step).round() * step)
    }

    #[test]
    fn weight_layouts_name_each_values_output_and_input_channel() {
        // A grouped Conv: 6 outputs in 2 groups of 3, 2 inputs per group, 2×1 kernels.
        let conv = WeightLayout::Conv { group: 2 };
        let shape = [6, 2, 2, 1];
        let at = |o: usize, i: usize, k: usize| (o * 2 + i) * 2 + k;
        assert_eq!(conv.channels(at(0, 1, 1), &shape, 2), (0, Some(1)));
        // Output 4 is in the second group: its inputs are channels 2 and 3.
        assert_eq!(conv.channels(at(4, 0, 0), &shape, 2), (4, Some(2)));
        assert_eq!(conv.channels(at(5, 1, 1), &shape, 2), (5, Some(3)));
        // Depthwise: one input per output, its own.
        let depthwise = WeightLayout::Conv { group: 4 };
        assert_eq!(
            depthwise.channels(3 * 9 + 4, &[4, 1, 3, 3], 9),
            (3, Some(3))
        );
        // [K = 3, N = 5] and its transpose.
        assert_eq!(
            WeightLayout::KByN.channels(2 * 5 + 4, &[3, 5], 1),
            (4, Some(2))
        );
        assert_eq!(
            WeightLayout::NByK.channels(4 * 3 + 2, &[5, 3], 1),
            (4, Some(2))
        );
        assert_eq!(WeightLayout::Bias.channels(7, &[8], 1), (7, None));
    }

    #[test]
    fn block_params_index_blocks_along_the_axis() {
        let w = weight();
        // Blocks of 4 rows along axis 0: scales [4, 8]; each block's scale is its index + 1.
        let params = Params {
            scales: ArrayD::from_shape_fn(IxDyn(&[4, 8]), |ix| (ix[0] + 1) as f32),
            zero_points: ArrayD::zeros(IxDyn(&[4, 8])),
            axis: 0,
            block: Some(4),
        };
        let scales = params.apply(&w, |_, s, _| s);
        assert_eq!(scales[[0, 3]], 1.0);
        assert_eq!(scales[[5, 7]], 2.0);
        assert_eq!(scales[[15, 0]], 4.0);
        // Per channel along axis 1.
        let params = Params {
            scales: ArrayD::from_shape_fn(IxDyn(&[8]), |ix| ix[0] as f32),
            zero_points: ArrayD::zeros(IxDyn(&[8])),
            axis: 1,
            block: None,
        };
        assert_eq!(params.apply(&w, |_, s, _| s)[[9, 5]], 5.0);
    }

    #[test]
    fn a_rescaled_weight_is_compared_as_the_layer_computes_with_it() {
        let w = weight();
        let (plain, rescaled) = compare(&w, &rounded(&w, 1.0 / 64.0));
        assert!(!rescaled && plain > 30.0, "{plain}");
        // Rows scaled by s_i (AWQ) and columns divided by d_j (a folded SmoothQuant divisor)
        // before rounding: the error is that of the weight the layer computes with,
        // rounded(s·w/d)·d/s, as if the factors were known.
        let s = |i: usize| 0.5 + i as f32 * 0.25;
        let d = |j: usize| 1.0 + j as f32 * 0.5;
        let scaled = ArrayD::from_shape_fn(IxDyn(&[16, 8]), |ix| {
            w[[ix[0], ix[1]]] * s(ix[0]) / d(ix[1])
        });
        let stored = rounded(&scaled, 1.0 / 64.0);
        let effective = ArrayD::from_shape_fn(IxDyn(&[16, 8]), |ix| {
            stored[[ix[0], ix[1]]] * d(ix[1]) / s(ix[0])
        });
        let (exact, _) = compare(&w, &effective);
        let (fitted, rescaled) = compare(&w, &stored);
        assert!(rescaled, "{fitted}");
        assert!(
            (fitted - exact).abs() < 1.0,
            "fitted {fitted}, exact {exact}"
        );
        // A weight that is simply bad stays bad.
        let (bad, _) = compare(&w, &rounded(&w, 0.5));
        assert!(bad < 15.0, "{bad}");
    }
}
