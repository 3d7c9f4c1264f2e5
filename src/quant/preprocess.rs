//! Pre-processing before quantization, on a copy of the model: Constant-node weights become
//! initializers, BatchNormalization folds into the preceding Conv/ConvTranspose/Gemm,
//! Identity/Dropout nodes disappear, layer pairs may be equalized (see [`super::equalize`])
//! and MatMul/Gemm weights' outlier rows moved to a float path (see [`super::outlier_rows`]).
//! Each step is optional (the recipe records which ran) and reported, so users see what
//! changed.

use std::collections::{HashMap, HashSet};

use ndarray::{ArrayD, Axis};

use crate::model::attributes;
use crate::model::constant::constant_tensor;
use crate::model::graph::{drop_orphans, overridable_initializers, put_initializer, remove_nodes};
use crate::model::ops;
use crate::model::proto::{GraphProto, NodeProto};
use crate::model::{DataType, Model, ModelError, TensorArray};
use crate::recipe::Preprocessing;

/// What pre-processing changed.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct PreprocessReport {
    /// Constant nodes turned into initializers.
    pub constants_to_initializers: usize,
    /// BatchNormalization nodes folded (their names).
    pub folded_batchnorms: Vec<String>,
    /// Identity/Dropout nodes removed.
    pub removed_identities: usize,
    /// Activations whose observed shape was written as `value_info`.
    pub shapes_written: usize,
    /// What simplification rewrote ([`super::simplify`]).
    pub simplified: super::simplify::SimplifyReport,
    /// Layer pairs cross-layer equalization rescaled.
    pub equalized: Vec<super::equalize::EqualizedPair>,
    /// MatMuls and Gemms whose outlier rows were moved to a float path ([`super::outlier_rows`]).
    pub outlier_rows: Vec<super::outlier_rows::SplitLayer>,
    /// Gemm layers int4 pre-processing rewrote ([`super::gemm_layout`]).
    pub gemm_layout: super::gemm_layout::GemmLayout,
}

impl PreprocessReport {
    /// One line for logs and the CLI.
    pub fn summary(&self) -> String {
        let mut text = format!(
            "{} Constant node(s) became initializers, {} BatchNormalization node(s) folded, {} Identity/Dropout node(s) removed, {} observed shape(s) recorded",
            self.constants_to_initializers,
            self.folded_batchnorms.len(),
            self.removed_identities,
            self.shapes_written
        );
        if let Some(simplified) = self.simplified.summary() {
            text.push_str(&format!(", {simplified}"));
        }
        if !self.equalized.is_empty() {
            text.push_str(&format!(
                ", {} layer pair(s) equalized",
                self.equalized.len()
            ));
        }
        if !self.outlier_rows.is_empty() {
            let rows = super::outlier_rows::total_rows(&self.outlier_rows);
            text.push_str(&format!(
                ", {rows} outlier row(s) of {} weight(s) computed in float",
                self.outlier_rows.len()
            ));
        }
        let gemms = &self.gemm_layout;
        if !gemms.as_matmul.is_empty() {
            text.push_str(&format!(
                ", {} Gemm(s) rewritten as MatMul for int4",
                gemms.as_matmul.len()
            ));
        }
        if !gemms.transposed.is_empty() {
            text.push_str(&format!(
                ", {} Gemm weight(s) stored as [K, N] for int4 blocks",
                gemms.transposed.len()
            ));
        }
        text
    }
}

/// Applies `options` to a copy of `model`.
pub fn preprocess(
    model: &Model,
    options: &Preprocessing,
) -> Result<(Model, PreprocessReport), ModelError> {
    let mut out = model.clone();
    let mut report = PreprocessReport::default();
    if options.constants_to_initializers {
        report.constants_to_initializers = constants_to_initializers(&mut out);
    }
    if options.drop_identity {
        report.removed_identities = drop_identities(&mut out);
    }
    if options.fold_batchnorm {
        report.folded_batchnorms = fold_batchnorms(&mut out)?;
    }
    // After the BatchNormalization folds, which leave a Conv beside what follows it.
    if options.simplify {
        report.simplified = super::simplify::simplify(&mut out)?;
    }
    // After the folds: a Conv → BatchNormalization → Conv chain is a pair only then.
    if options.equalize {
        report.equalized = super::equalize::equalize(&mut out)?;
    }
    // After equalization, which rescales the rows it would measure.
    let of = options.outlier_rows_of;
    if of.matmul || of.gemm {
        report.outlier_rows = super::outlier_rows::split_outlier_rows(&mut out, of)?;
    }
    if options.gemm_weights_k_by_n {
        report.gemm_layout =
            super::gemm_layout::lay_out_gemms_for_int4(&mut out, options.gemms_as_matmul)?;
    }
    Ok((out, report))
}

fn graph_mut(model: &mut Model) -> Option<&mut GraphProto> {
    model.proto_mut().graph.as_mut()
}

fn constants_to_initializers(model: &mut Model) -> usize {
    let Some(graph) = graph_mut(model) else {
        return 0;
    };
    let mut moved = 0;
    let mut kept = Vec::with_capacity(graph.node.len());
    for node in std::mem::take(&mut graph.node) {
        let is_constant = node.op_type() == ops::CONSTANT && node.domain().is_empty();
        match constant_tensor(&node).filter(|_| is_constant) {
            Some(tensor) => {
                graph.initializer.push(tensor);
                moved += 1;
            }
            None => kept.push(node),
        }
    }
    graph.node = kept;
    moved
}

/// Renames every read of `from` to `to` in the nodes of `graph`.
fn rewire(graph: &mut GraphProto, from: &str, to: &str) {
    for node in &mut graph.node {
        for input in &mut node.input {
            if input == from {
                *input = to.to_owned();
            }
        }
    }
}

fn drop_identities(model: &mut Model) -> usize {
    let Some(graph) = graph_mut(model) else {
        return 0;
    };
    let outputs: HashSet<String> = graph.output.iter().map(|o| o.name().to_owned()).collect();
    let mut removed = 0;
    let mut index = 0;
    while index < graph.node.len() {
        let node = &graph.node[index];
        let droppable = matches!(node.op_type(), ops::IDENTITY | ops::DROPOUT)
            && node.domain().is_empty()
            && node.input.first().is_some_and(|i| !i.is_empty())
            && node.output.first().is_some_and(|o| !outputs.contains(o))
            // A Dropout whose mask is used must stay.
            && node.output.iter().skip(1).all(|o| o.is_empty() || !graph.node.iter().any(|n| n.input.contains(o)));
        if droppable {
            let (from, to) = (node.output[0].clone(), node.input[0].clone());
            graph.node.remove(index);
            rewire(graph, &from, &to);
            removed += 1;
        } else {
            index += 1;
        }
    }
    removed
}

fn attr_f(node: &NodeProto, name: &str, default: f32) -> f32 {
    attributes::float(node, name).unwrap_or(default)
}

fn attr_i(node: &NodeProto, name: &str, default: i64) -> i64 {
    attributes::int(node, name).unwrap_or(default)
}

/// One BatchNormalization folded into its producer.
struct Fold {
    producer: usize,
    weight: TensorArray,
    bias_name: String,
    bias: TensorArray,
    output: String,
}

/// Folds `Conv → BatchNormalization` (and ConvTranspose with group 1, Gemm) when the BN's
/// parameters and the producer's weights are initializers read by nobody else.
fn fold_batchnorms(model: &mut Model) -> Result<Vec<String>, ModelError> {
    let snapshot = model.clone();
    let Some(graph) = graph_mut(model) else {
        return Ok(Vec::new());
    };
    let outputs: HashSet<String> = graph.output.iter().map(|o| o.name().to_owned()).collect();
    let mut consumers: HashMap<String, usize> = HashMap::new();
    for node in &graph.node {
        for input in node.input.iter().filter(|i| !i.is_empty()) {
            *consumers.entry(input.clone()).or_default() += 1;
        }
    }
    // An initializer a caller may override is no constant.
    let overridable = overridable_initializers(graph, snapshot.proto().ir_version());
    let init_index: HashMap<String, usize> = graph
        .initializer
        .iter()
        .enumerate()
        .filter(|(_, t)| !overridable.contains(t.name()))
        .map(|(i, t)| (t.name().to_owned(), i))
        .collect();
    let producer: HashMap<String, usize> = graph
        .node
        .iter()
        .enumerate()
        .flat_map(|(i, n)| n.output.iter().map(move |o| (o.clone(), i)))
        .collect();
    // Any plain float type: float16 and bfloat16 models are folded in f32 and stored back
    // in their own type (as ONNX Runtime's own Conv+BatchNormalization fusion does).
    let typed = |name: &str| -> Result<Option<(ArrayD<f32>, DataType)>, ModelError> {
        match init_index.get(name) {
            Some(&i) => {
                let value = snapshot.tensor_array(&snapshot.graph().initializer[i])?;
                let dtype = value.dtype();
                Ok(dtype.is_plain_float().then(|| (value.into_f32(), dtype)))
            }
            None => Ok(None),
        }
    };
    let weight = |name: &str| -> Result<Option<ArrayD<f32>>, ModelError> {
        Ok(typed(name)?.map(|(value, _)| value))
    };
    let mut folded = Vec::new();
    let mut remove = HashSet::new();
    let mut folds: Vec<Fold> = Vec::new();
    for (bn_index, bn) in graph.node.iter().enumerate() {
        if bn.op_type() != ops::BATCH_NORMALIZATION
            || !bn.domain().is_empty()
            || bn.input.len() < 5
            || bn.output.len() != 1
        {
            continue;
        }
        let Some(&p) = producer.get(&bn.input[0]) else {
            continue;
        };
        let conv = &graph.node[p];
        let kind = conv.op_type();
        let channel_axis = match kind {
            ops::CONV => 0,
            ops::CONV_TRANSPOSE if attr_i(conv, "group", 1) == 1 => 1,
            ops::GEMM if attr_i(conv, "transB", 0) == 1 && attr_f(conv, "beta", 1.0) == 1.0 => 0,
            ops::GEMM if attr_f(conv, "beta", 1.0) == 1.0 => 1,
            _ => continue,
        };
        let single_use = |name: &str| consumers.get(name).copied().unwrap_or(0) == 1;
        if !single_use(&bn.input[0])
            || outputs.contains(&bn.input[0])
            || conv.input.len() < 2
            || !single_use(&conv.input[1])
        {
            continue;
        }
        let (Some((w, weight_type)), Some(gamma), Some(beta), Some(mean), Some(var)) = (
            typed(&conv.input[1])?,
            weight(&bn.input[1])?,
            weight(&bn.input[2])?,
            weight(&bn.input[3])?,
            weight(&bn.input[4])?,
        ) else {
            continue;
        };
        let channels = w.shape().get(channel_axis).copied().unwrap_or(0);
        if [&gamma, &beta, &mean, &var]
            .iter()
            .any(|a| a.len() != channels)
        {
            continue;
        }
        let bias = match conv.input.get(2).filter(|b| !b.is_empty()) {
            Some(b) if single_use(b) => match typed(b)? {
                Some(b) => Some(b),
                None => continue,
            },
            Some(_) => continue,
            None => None,
        };
        let bias_type = bias.as_ref().map_or(weight_type, |(_, t)| *t);
        let bias = bias.map(|(value, _)| value);
        let eps = f64::from(attr_f(bn, "epsilon", 1e-5));
        let factor: Vec<f64> = gamma
            .iter()
            .zip(var.iter())
            .map(|(&g, &v)| f64::from(g) / (f64::from(v) + eps).sqrt())
            .collect();
        let mut new_w = w.clone();
        for (c, mut lane) in new_w.axis_iter_mut(Axis(channel_axis)).enumerate() {
            lane.mapv_inplace(|x| (f64::from(x) * factor[c]) as f32);
        }
        let new_b: Vec<f32> = (0..channels)
            .map(|c| {
                let b = bias.as_ref().map_or(0.0, |b| f64::from(b[c]));
                ((b - f64::from(mean[c])) * factor[c] + f64::from(beta[c])) as f32
            })
            .collect();
        let new_b = TensorArray::Float32(crate::model::tensor::array(vec![channels], new_b))
            .cast_float(bias_type);
        let bias_name = match conv.input.get(2).filter(|b| !b.is_empty()) {
            Some(b) => b.clone(),
            None => format!("{}_folded_bias", conv.input[1]),
        };
        folds.push(Fold {
            producer: p,
            weight: TensorArray::Float32(new_w).cast_float(weight_type),
            bias_name,
            bias: new_b,
            output: bn.output[0].clone(),
        });
        remove.insert(bn_index);
        folded.push(bn.name().to_owned());
    }
    apply_folds(graph, folds, &remove);
    Ok(folded)
}

/// Rewires each fold's producer to write the BatchNormalization's output with the folded
/// weight and bias, then drops the folded nodes (`remove`) and the parameters only they read.
fn apply_folds(graph: &mut GraphProto, folds: Vec<Fold>, remove: &HashSet<usize>) {
    for fold in folds {
        let Fold {
            producer,
            weight: w,
            bias_name,
            bias: bias_value,
            output,
        } = fold;
        let conv = &mut graph.node[producer];
        let weight_name = conv.input[1].clone();
        conv.output[0] = output;
        if conv.input.len() < 3 {
            conv.input.push(bias_name.clone());
        } else {
            conv.input[2] = bias_name.clone();
        }
        for (name, value) in [(weight_name, w), (bias_name, bias_value)] {
            put_initializer(graph, value.to_proto(&name));
        }
    }
    let bn_params: HashSet<String> = remove
        .iter()
        .flat_map(|&i| graph.node[i].input.iter().skip(1).cloned())
        .collect();
    remove_nodes(graph, remove);
    // The folded BatchNormalizations' parameters are dropped unless something else reads them.
    drop_orphans(graph, &bn_params);
}

/// Writes the shapes calibration observed as `value_info` for activations the model does not
/// describe yet. Sizes are written only when every graph input is fully static (then the
/// observed shapes are the shapes); otherwise only the rank is recorded, with unknown dims, so
/// a batch size or sequence length seen during calibration is never pinned into the model.
/// Returns how many were written.
pub fn write_observed_shapes(model: &mut Model, stats: &crate::calib::CalibrationStats) -> usize {
    use crate::model::builder::value_info;
    use crate::model::proto::tensor_shape_proto::dimension::Value as DimValue;
    use crate::model::proto::type_proto;

    let Some(graph) = model.proto_mut().graph.as_mut() else {
        return 0;
    };
    let described: HashSet<String> = graph
        .value_info
        .iter()
        .chain(&graph.input)
        .chain(&graph.output)
        .map(|v| v.name().to_owned())
        .chain(graph.initializer.iter().map(|t| t.name().to_owned()))
        .collect();
    let produced: HashSet<&str> = graph
        .node
        .iter()
        .flat_map(|n| n.output.iter().map(String::as_str))
        .collect();
    let initializers: HashSet<&str> = graph.initializer.iter().map(|t| t.name()).collect();
    let static_inputs = graph.input.iter().filter(|i| !initializers.contains(i.name())).all(|i| {
        matches!(&i.r#type, Some(crate::model::proto::TypeProto {
            value: Some(type_proto::Value::TensorType(t)),
            ..
        }) if t.shape.as_ref().is_some_and(|s| s.dim.iter().all(|d| matches!(d.value, Some(DimValue::DimValue(v)) if v > 0))))
    });
    let mut written = 0;
    let mut additions = Vec::new();
    for (name, s) in &stats.tensors {
        let Some(dtype) = s.dtype else { continue };
        if described.contains(name) || !produced.contains(name.as_str()) || s.shapes.is_empty() {
            continue;
        }
        let rank = s.shapes[0].len();
        if s.shapes.iter().any(|shape| shape.len() != rank) {
            continue;
        }
        let dims: Vec<i64> = (0..rank)
            .map(|axis| {
                let first = s.shapes[0][axis];
                let stable = s.shapes.iter().all(|shape| shape[axis] == first);
                if static_inputs && stable {
                    first as i64
                } else {
                    -1
                }
            })
            .collect();
        let mut info = value_info(name, dtype, &dims);
        // Dims not known for sure are written without value or name.
        if let Some(crate::model::proto::TypeProto {
            value: Some(type_proto::Value::TensorType(t)),
            ..
        }) = info.r#type.as_mut()
            && let Some(shape) = t.shape.as_mut()
        {
            for d in &mut shape.dim {
                if matches!(d.value, Some(DimValue::DimParam(_))) {
                    d.value = None;
                }
            }
        }
        additions.push(info);
        written += 1;
    }
    graph.value_info.extend(additions);
    written
}
