//! Outlier rows in float (recipe `preprocessing.outlier_rows`, on by default for 8-bit
//! weights under automatic precision, without SmoothQuant, which rescales the same rows): a
//! MatMul (or Gemm) weight `W [K, N]` whose few input rows hold values many times larger
//! than the rest is split, exactly in float, into `X·W' + X[…, J]·W[J, :]`, where `W'` is
//! `W` with the rows `J` set to zero. The quantizer quantizes `W'` like any weight, and the
//! small `Gather → MatMul → Add` path that computes the rows `J` stays in float (the plan
//! leaves it there, [`SplitLayer::float_nodes`], and it reads the float activation, not the
//! quantized layer's dequantized copy). Only the op types the recipe quantizes are split.
//!
//! Why: a trained transformer's feed-forward output projection holds a few rows that feed the
//! residual stream's massive activations (MiniLM's first layer: rows of 7.5, 4.2 and 2.2
//! among 1,536 whose 99th-percentile maximum is 0.43). Per tensor, their extremes set a step
//! that rounds most other weights to a handful of levels; clipping them instead destroys the
//! very products they exist for (the layer's own output SQNR falls from 25 dB to 10 dB with
//! a 40 % clip). Computing those rows in float keeps both: the outliers exact and every other
//! weight on a step nine times finer. On `benches/accuracy`'s held-out sentences MiniLM per
//! tensor with equalization, bias correction and GPTQ goes from 14.1 dB to the per-channel
//! figure. It is LLM.int8()'s mixed-precision decomposition (Dettmers et al., 2022) taken
//! along the weight's outlier rows instead of the activation's outlier columns, and needs no
//! data: the rows are read from the weight alone, so the recipe reproduces the model.
//!
//! A row is an outlier when its largest magnitude exceeds [`OUTLIER_FACTOR`] times the
//! weight's 99th-percentile row maximum; at most [`MAX_ROW_SHARE`] of the rows (the largest)
//! are split, so the float path stays a small fraction of the layer's work. None of the
//! convolution networks of the benchmark (PP-OCR cls, rec, det) has such a MatMul, so they
//! are unchanged. MatMuls and Gemms (without `transA`; with `transB` the rows are the stored
//! weight's columns, and the float path carries `alpha`) whose weight is a private
//! two-dimensional float initializer are considered; Conv and shared weights are left as
//! they are.
//!
//! Written by hand: the quantizer's own graph rewriting (no ONNX crate offers it).

use ndarray::{ArrayD, ArrayView2, Axis, Ix2};
use serde::Serialize;

use super::plan::FloatPath;
use super::rewrite::{int_attr, node};
use crate::model::attributes;
use crate::model::graph::{free_name, put_initializer};
use crate::model::ops;
use crate::model::{Graph, Model, ModelError, NodeId, TensorArray};
use crate::recipe::OutlierRowsOf;

/// A row is an outlier when its largest magnitude exceeds this many times the weight's
/// [`ROW_QUANTILE`] row maximum.
pub const OUTLIER_FACTOR: f32 = 3.0;
/// The quantile of the row maxima an outlier is measured against.
pub const ROW_QUANTILE: f64 = 0.99;
/// At most this share of a weight's rows is split off (at least one row).
pub const MAX_ROW_SHARE: f64 = 0.01;

/// One MatMul or Gemm whose outlier rows were moved to a float path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SplitLayer {
    /// The MatMul or Gemm (node name).
    pub layer: String,
    /// Its weight (initializer name; now holding zeros in the split rows).
    pub weight: String,
    /// The rows (input channels) computed in float.
    pub rows: Vec<usize>,
    /// The weight's rows in all.
    pub row_count: usize,
    /// The weight's largest magnitude before and after the split.
    pub range: [f32; 2],
    /// The nodes of the float path (Gather, MatMul, Add), which the plan leaves in float.
    pub float_nodes: [String; 3],
    /// The tensors only the float path reads: the layer's new output without the rows (the
    /// float Add completes it; quantizing it would be a second rounding, of a sum no reader
    /// sees), the gathered inputs and their product with the rows.
    pub float_tensors: [String; 3],
}

impl SplitLayer {
    /// The float Add that completes the layer's output (writing its old name).
    pub fn completing_add(&self) -> &str {
        &self.float_nodes[2]
    }
}

/// What the splits of a model add to compute in float: their nodes, which the plan leaves in
/// float, and the tensors it never quantizes (nor automatic precision reports as kept).
pub fn float_path(split: &[SplitLayer]) -> FloatPath {
    FloatPath {
        nodes: split.iter().flat_map(|s| s.float_nodes.clone()).collect(),
        tensors: split.iter().flat_map(|s| s.float_tensors.clone()).collect(),
    }
}

/// The rows computed in float over all of `split`.
pub fn total_rows(split: &[SplitLayer]) -> usize {
    split.iter().map(|s| s.rows.len()).sum()
}

/// One line for the CLI: how many rows of which weights stay float; `None` when none do.
pub fn summary(split: &[SplitLayer]) -> Option<String> {
    if split.is_empty() {
        return None;
    }
    let rows = total_rows(split);
    let each: Vec<String> = split
        .iter()
        .take(3)
        .map(|s| format!("{}: {} of {}", s.weight, s.rows.len(), s.row_count))
        .collect();
    let more = match split.len() {
        n if n > 3 => format!(" and {} more", n - 3),
        _ => String::new(),
    };
    Some(format!(
        "outlier rows in float: {rows} row(s) of {} weight(s), each computed by a float MatMul beside its layer ({}{more}; --no_outlier_rows quantizes them)",
        split.len(),
        each.join(", ")
    ))
}

/// The rows of `weight` (`[K, N]`, rows along `K`) to compute in float, largest first; empty
/// when none stands out or the values are not all finite.
pub fn outlier_rows(weight: ArrayView2<f32>) -> Vec<usize> {
    let row_max: Vec<f32> = weight
        .axis_iter(Axis(0))
        .map(|row| row.iter().fold(0f32, |m, v| m.max(v.abs())))
        .collect();
    if row_max.len() < 2 || weight.iter().any(|v| !v.is_finite()) {
        return Vec::new();
    }
    let mut sorted = row_max.clone();
    sorted.sort_by(f32::total_cmp);
    let at = (ROW_QUANTILE * (sorted.len() - 1) as f64).floor() as usize;
    let limit = sorted[at] * OUTLIER_FACTOR;
    if limit <= 0.0 {
        return Vec::new();
    }
    let mut rows: Vec<usize> = (0..row_max.len()).filter(|&r| row_max[r] > limit).collect();
    rows.sort_by(|&a, &b| row_max[b].total_cmp(&row_max[a]));
    let most = ((MAX_ROW_SHARE * row_max.len() as f64).floor() as usize).max(1);
    rows.truncate(most);
    rows
}

/// Splits the outlier rows of every eligible MatMul and Gemm of `model` (of the op types
/// `of` names) in place; returns what it did.
pub fn split_outlier_rows(
    model: &mut Model,
    of: OutlierRowsOf,
) -> Result<Vec<SplitLayer>, ModelError> {
    let graph = Graph::build(model);
    let mut plans = Vec::new();
    for node in graph.nodes() {
        if let Some(plan) = plan_split(model, &graph, node.id, of)? {
            plans.push(plan);
        }
    }
    // Last first: each path is inserted after its layer, which moves the nodes behind it.
    plans.sort_by_key(|p| std::cmp::Reverse(p.position.0));
    let mut report = Vec::with_capacity(plans.len());
    for plan in plans {
        report.push(apply(model, &graph, plan));
    }
    report.reverse();
    Ok(report)
}

/// A split decided for one MatMul or Gemm.
struct Split {
    position: NodeId,
    weight: String,
    values: ArrayD<f32>,
    float_type: crate::model::DataType,
    rows: Vec<usize>,
    /// The weight is stored `[N, K]` (a Gemm with `transB`): the rows are its columns.
    transposed: bool,
    /// A Gemm's `alpha`, which the float path's weight carries (1 for a MatMul).
    alpha: f32,
}

/// How a node's weight (its second input) is laid out for the split: whether it is stored
/// `[N, K]`, and the factor on the product; `None` for nodes the split does not apply to (op
/// types `of` leaves out, a Gemm that transposes its input).
fn layout(model: &Model, id: NodeId, op_type: &str, of: OutlierRowsOf) -> Option<(bool, f32)> {
    let proto = model.graph().node.get(id.0)?;
    match op_type {
        ops::MAT_MUL if of.matmul => Some((false, 1.0)),
        ops::GEMM if of.gemm && attributes::int(proto, "transA").unwrap_or(0) == 0 => Some((
            attributes::int(proto, "transB").unwrap_or(0) != 0,
            attributes::float(proto, "alpha").unwrap_or(1.0),
        )),
        _ => None,
    }
}

/// The split of node `id`, when it is an eligible MatMul or Gemm (of the op types `of`
/// names) with outlier rows.
fn plan_split(
    model: &Model,
    graph: &Graph,
    id: NodeId,
    of: OutlierRowsOf,
) -> Result<Option<Split>, ModelError> {
    let node = graph.node(id);
    if !node.is_default_domain() || node.inputs.len() < 2 || node.outputs.len() != 1 {
        return Ok(None);
    }
    let Some((transposed, alpha)) = layout(model, id, &node.op_type, of) else {
        return Ok(None);
    };
    let (input, weight) = (&node.inputs[0], &node.inputs[1]);
    if graph.is_constant(input) || !graph.is_private_initializer(weight) || !alpha.is_finite() {
        return Ok(None);
    }
    let Some(value) = model.weight(weight)? else {
        return Ok(None);
    };
    let float_type = value.dtype();
    if !float_type.is_quantizable() || value.shape().len() != 2 {
        return Ok(None);
    }
    let values = value.into_f32();
    // An external weight's pages go back at once: a large model's weights are all read here.
    model.release_weight(weight);
    let rows = match values.view().into_dimensionality::<Ix2>() {
        Ok(matrix) if transposed => outlier_rows(matrix.t()),
        Ok(matrix) => outlier_rows(matrix),
        Err(_) => Vec::new(),
    };
    Ok((!rows.is_empty()).then(|| Split {
        position: id,
        weight: weight.clone(),
        values,
        float_type,
        rows,
        transposed,
        alpha,
    }))
}

/// Writes one split into `model`: the weight's rows zeroed, the float rows (times a Gemm's
/// `alpha`, laid out `[rows, N]`) and their indices as new initializers, and
/// `Gather → MatMul → Add` after the layer, the Add writing the layer's old output so its
/// readers are unchanged.
fn apply(model: &mut Model, graph: &Graph, split: Split) -> SplitLayer {
    let layer_node = graph.node(split.position);
    let layer = layer_node.name.clone();
    let (input, output) = (layer_node.inputs[0].clone(), layer_node.outputs[0].clone());
    let taken = |n: &str| graph.tensor(n).is_some();
    let name = |suffix: &str| free_name(&format!("{layer}/outlier_rows/{suffix}"), taken);
    let partial = free_name(&format!("{output}_without_outlier_rows"), taken);
    let (gathered, product) = (name("rows_in"), name("rows_out"));
    let (index, rows_weight) = (name("index"), name("weight"));
    let float_nodes = [name("Gather"), name("MatMul"), name("Add")];
    // Rows along K: the first axis of a `[K, N]` weight, the second of an `[N, K]` one.
    let along = Axis(usize::from(split.transposed));
    let mut kept = split.values.clone();
    let mut float_rows = split.values.select(along, &split.rows);
    if split.transposed {
        float_rows = float_rows.reversed_axes().as_standard_layout().into_owned();
    }
    float_rows.mapv_inplace(|v| v * split.alpha);
    for &r in &split.rows {
        kept.index_axis_mut(along, r).fill(0.0);
    }
    let range = |a: &ArrayD<f32>| a.iter().fold(0f32, |m, v| m.max(v.abs()));
    let report = SplitLayer {
        layer,
        weight: split.weight.clone(),
        rows: split.rows.clone(),
        row_count: split.values.shape()[along.0],
        range: [range(&split.values), range(&kept)],
        float_nodes: float_nodes.clone(),
        float_tensors: [partial.clone(), gathered.clone(), product.clone()],
    };
    let Some(g) = model.proto_mut().graph.as_mut() else {
        return report;
    };
    let stored = |a: ArrayD<f32>| TensorArray::Float32(a).cast_float(split.float_type);
    put_initializer(g, stored(kept).to_proto(&split.weight));
    put_initializer(g, stored(float_rows).to_proto(&rows_weight));
    let indices: Vec<i64> = split.rows.iter().map(|&r| r as i64).collect();
    let indices =
        ArrayD::from_shape_vec(ndarray::IxDyn(&[indices.len()]), indices).map(TensorArray::Int64);
    if let Ok(indices) = indices {
        put_initializer(g, indices.to_proto(&index));
    }
    if let Some(matmul) = g.node.get_mut(split.position.0)
        && let Some(out) = matmul.output.first_mut()
    {
        out.clone_from(&partial);
    }
    let [gather, side, add] = float_nodes;
    let path = [
        node(
            "Gather",
            &gather,
            vec![input, index],
            vec![gathered.clone()],
            vec![int_attr("axis", -1)],
        ),
        node(
            "MatMul",
            &side,
            vec![gathered, rows_weight],
            vec![product.clone()],
            vec![],
        ),
        node("Add", &add, vec![partial, product], vec![output], vec![]),
    ];
    let at = split.position.0 + 1;
    g.node.splice(at..at, path);
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;

    fn matrix(rows: usize, cols: usize, f: impl Fn(usize, usize) -> f32) -> Array2<f32> {
        Array2::from_shape_fn((rows, cols), |(r, c)| f(r, c))
    }

    #[test]
    fn rows_far_above_the_rest_are_outliers_largest_first() {
        let base = |r: usize, c: usize| ((r * 7 + c * 3) % 11) as f32 / 10.0 - 0.5;
        let mut w = matrix(400, 8, base);
        w[[17, 3]] = 7.5;
        w[[250, 0]] = -4.0;
        w[[99, 5]] = 1.2; // 2.4 times the rest: not an outlier
        assert_eq!(outlier_rows(w.view()), vec![17, 250]);
    }

    #[test]
    fn at_most_one_percent_of_the_rows_are_split() {
        let mut w = matrix(150, 4, |r, c| ((r + c) % 5) as f32 * 0.1);
        w[[30, 1]] = 10.0;
        w[[60, 2]] = -12.0;
        // Two outliers, one allowed (1 % of 150 rows): the larger.
        assert_eq!(outlier_rows(w.view()), vec![60]);
    }

    #[test]
    fn the_summary_names_the_weights_and_counts_their_rows() {
        assert_eq!(summary(&[]), None);
        let layer = |weight: &str, rows: Vec<usize>| SplitLayer {
            layer: format!("{weight}_layer"),
            weight: weight.to_owned(),
            rows,
            row_count: 1536,
            range: [7.5, 0.8],
            float_nodes: Default::default(),
            float_tensors: Default::default(),
        };
        let line = summary(&[layer("w1", vec![4, 2, 9]), layer("w2", vec![1])]).unwrap();
        assert!(
            line.starts_with("outlier rows in float: 4 row(s) of 2 weight(s)"),
            "{line}"
        );
        assert!(line.contains("(w1: 3 of 1536, w2: 1 of 1536;"), "{line}");
    }

    #[test]
    fn even_weights_zero_weights_and_non_finite_ones_have_none() {
        assert!(outlier_rows(matrix(64, 4, |r, c| (r + c) as f32 % 3.0).view()).is_empty());
        assert!(outlier_rows(matrix(64, 4, |_, _| 0.0).view()).is_empty());
        let mut w = matrix(64, 4, |r, _| r as f32 * 1e-3);
        w[[3, 3]] = 9.0;
        w[[5, 0]] = f32::NAN;
        assert!(outlier_rows(w.view()).is_empty());
    }
}
