//! What the views say of a tensor's type and shape: as the file declares them, else as they
//! are otherwise known: the element type inferred from the graph ([`crate::model::infer`]), the
//! shape observed in calibration, else in one run on one sample when the inputs are static
//! ([`probe_shapes`]). Most exported models declare no `value_info`, so without this every inner
//! tensor reads "? ?".

use crate::calib::CalibrationStats;
use crate::model::dtype::onnx_type_name;
use crate::model::graph::{Dim, Graph, format_shape};
use crate::model::ops;

/// Where a shape comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShapeSource {
    /// The model declares it (graph inputs and outputs, `value_info`, initializers, Constants).
    Declared,
    /// Calibration saw it (dims that varied between batches are `?`).
    Observed,
    /// One run of the model on one random sample saw it (the inputs are static).
    Probed,
}

/// A tensor's shape and where it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct KnownShape {
    /// The dims.
    pub dims: Vec<Dim>,
    /// Their source.
    pub source: ShapeSource,
}

impl KnownShape {
    /// `[1, 3, 48, 192]`.
    pub fn dims_text(&self) -> String {
        format_shape(Some(&self.dims))
    }

    /// `[1, 3, 48, 192]`, marked when calibration observed it.
    pub fn text(&self) -> String {
        match self.source {
            ShapeSource::Declared => self.dims_text(),
            ShapeSource::Observed => format!("{} (seen in calibration)", self.dims_text()),
            ShapeSource::Probed => format!("{} (seen in a one-sample run)", self.dims_text()),
        }
    }
}

/// True when every dim is a value or a name.
fn complete(dims: &[Dim]) -> bool {
    !dims.iter().any(|d| matches!(d, Dim::Unknown))
}

/// Ops whose output has their first input's shape (elementwise, one data input): across
/// them a shape known on one side is known on the other. Batch normalization is the case that
/// matters: pre-processing folds it, so a Conv's output before it is never calibrated.
const SHAPE_KEEPING: &[&str] = &[
    ops::BATCH_NORMALIZATION,
    ops::RELU,
    ops::LEAKY_RELU,
    ops::P_RELU,
    ops::CLIP,
    ops::SIGMOID,
    ops::HARD_SIGMOID,
    ops::HARD_SWISH,
    ops::TANH,
    ops::ELU,
    ops::SELU,
    ops::SOFTPLUS,
    ops::IDENTITY,
    ops::DROPOUT,
    ops::CAST,
    ops::NEG,
    ops::ABS,
    ops::ERF,
];

/// How many shape-keeping ops a shape is carried across, at most.
const CARRIED_ACROSS: usize = 4;

/// `tensor`'s shape: the declared one when it is complete (an initializer's or a Constant's
/// dims included), else the one calibration observed (on it, or carried across shape-keeping
/// ops from a neighbour), else whatever part was declared.
pub fn known_shape(
    graph: &Graph,
    stats: Option<&CalibrationStats>,
    probed: Option<&CalibrationStats>,
    tensor: &str,
) -> Option<KnownShape> {
    let declared = graph.tensor(tensor).and_then(|t| t.shape.clone());
    if let Some(dims) = declared.clone().filter(|d| complete(d)) {
        return Some(KnownShape {
            dims,
            source: ShapeSource::Declared,
        });
    }
    let names: Vec<String> = std::iter::once(tensor.to_owned())
        .chain(shape_keeping_neighbours(graph, tensor))
        .collect();
    let seen_in = |stats: Option<&CalibrationStats>| {
        names.iter().find_map(|name| {
            stats
                .and_then(|s| s.tensors.get(name))
                .and_then(|t| t.observed_shape())
        })
    };
    let known = |dims, source| Some(KnownShape { dims, source });
    match (seen_in(stats), seen_in(probed)) {
        (Some(dims), _) => known(dims, ShapeSource::Observed),
        (None, Some(dims)) => known(dims, ShapeSource::Probed),
        (None, None) => declared.map(|dims| KnownShape {
            dims,
            source: ShapeSource::Declared,
        }),
    }
}

/// Largest model [`probe_shapes`] runs (nodes, weight bytes): opening stays quick.
const PROBE_LIMITS: (usize, u64) = (10_000, 1 << 30);

/// Every activation's shape from one run of `prepared` on one random sample, when all its
/// inputs have static shapes and it is within [`PROBE_LIMITS`]; `None` otherwise. A model
/// opened in the studio then shows shapes before any calibration.
pub fn probe_shapes(
    prepared: &crate::quant::Prepared,
    runtime: &crate::runtime::Runtime,
    ctx: &crate::jobs::JobContext,
) -> Result<Option<CalibrationStats>, super::WorkflowError> {
    let inputs = crate::calib::data::model_inputs(&prepared.graph);
    let fixed = |dims: &Option<Vec<Dim>>| {
        dims.as_ref()
            .is_some_and(|d| d.iter().all(|d| matches!(d, Dim::Fixed(v) if *v > 0)))
    };
    let small = prepared.graph.nodes().len() <= PROBE_LIMITS.0
        && prepared.model.initializer_bytes() <= PROBE_LIMITS.1;
    if inputs.is_empty() || !inputs.iter().all(|i| fixed(&i.shape)) || !small {
        return Ok(None);
    }
    // One batch as the inputs fix it: their leading dim, when they agree on one.
    let leading: Vec<i64> = inputs
        .iter()
        .filter_map(|i| match i.shape.as_deref()?.first()? {
            Dim::Fixed(v) => Some(*v),
            _ => None,
        })
        .collect();
    let batch = match leading.split_first() {
        Some((&first, rest)) if rest.iter().all(|&v| v == first) && first <= 64 => first as usize,
        Some(_) => return Ok(None),
        None => 1,
    };
    let data = crate::calib::DataSpec::Random {
        samples: batch,
        shapes: Default::default(),
        seed: 0,
    };
    let config = crate::calib::CalibrationConfig {
        histogram_bins: 0,
        batch_size: batch,
        ..Default::default()
    };
    super::calibrate::calibrate_prepared(prepared, &data, &config, runtime, ctx).map(Some)
}

/// The tensors that have `tensor`'s shape through up to [`CARRIED_ACROSS`] shape-keeping ops,
/// upstream and downstream, nearest first.
fn shape_keeping_neighbours(graph: &Graph, tensor: &str) -> Vec<String> {
    let keeps = |id: crate::model::NodeId| SHAPE_KEEPING.contains(&graph.node(id).op_type.as_str());
    let mut out = Vec::new();
    // Upstream: through the producer's first input.
    let mut at = tensor.to_owned();
    for _ in 0..CARRIED_ACROSS {
        let Some(id) = graph
            .tensor(&at)
            .and_then(|t| t.producer)
            .filter(|&id| keeps(id))
        else {
            break;
        };
        let Some(input) = graph.node(id).inputs.first().cloned() else {
            break;
        };
        out.push(input.clone());
        at = input;
    }
    // Downstream: through a consumer reading it as its first input.
    let mut at = tensor.to_owned();
    for _ in 0..CARRIED_ACROSS {
        let next = graph.tensor(&at).and_then(|t| {
            t.consumers
                .iter()
                .copied()
                .find(|&id| keeps(id) && graph.node(id).inputs.first().is_some_and(|i| *i == at))
        });
        let Some(output) = next.and_then(|id| graph.node(id).outputs.first().cloned()) else {
            break;
        };
        out.push(output.clone());
        at = output;
    }
    out
}

/// A shape's text, `?` when nothing is known.
pub fn shape_text(shape: Option<&KnownShape>) -> String {
    shape.map_or_else(|| "?".to_owned(), KnownShape::text)
}

/// `tensor`'s element type name: declared, else `inferred` (see
/// [`crate::model::infer::elem_types`]), else `?`.
pub fn type_text(graph: &Graph, inferred: Option<i32>, tensor: &str) -> String {
    graph
        .tensor(tensor)
        .and_then(|t| t.elem_type)
        .or(inferred)
        .map_or_else(|| "?".to_owned(), onnx_type_name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calib::stats::TensorStats;
    use crate::model::{DataType, ModelBuilder};

    /// x [N, 4] → Relu → y, declared; the Relu's output `h` → Neg → y has no value_info.
    fn graph() -> Graph {
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[-1, 4]);
        b.node("Relu", &["x"], &["h"]);
        b.node("Neg", &["h"], &["y"]);
        b.output("y", DataType::Float32, &[-1, 4]);
        Graph::build(&b.build())
    }

    fn stats(tensor: &str, shapes: &[&[usize]]) -> CalibrationStats {
        let mut stats = CalibrationStats::default();
        let mut t = TensorStats::default();
        for shape in shapes {
            let n = shape.iter().product();
            t.add_batch(&vec![1.0; n], shape, None);
        }
        stats.tensors.insert(tensor.to_owned(), t);
        stats
    }

    #[test]
    fn an_undeclared_shape_is_the_one_calibration_saw_with_varying_dims_unknown() {
        let g = graph();
        assert_eq!(shape_text(known_shape(&g, None, None, "h").as_ref()), "?");
        let seen = stats("h", &[&[4, 4], &[4, 4], &[2, 4]]);
        assert_eq!(
            shape_text(known_shape(&g, Some(&seen), None, "h").as_ref()),
            "[?, 4] (seen in calibration)"
        );
        let seen = stats("h", &[&[1, 4]]);
        assert_eq!(
            known_shape(&g, Some(&seen), None, "h").map(|s| s.source),
            Some(ShapeSource::Observed)
        );
    }

    #[test]
    fn a_shape_is_carried_across_shape_keeping_ops() {
        // h (Relu's output) was calibrated; x → Relu → h → Neg → y: `y` is declared, but a
        // tensor before a folded batch norm, say, has only its neighbour's observed shape.
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[-1, 4]);
        b.node("Relu", &["x"], &["h"]);
        b.node("Sigmoid", &["h"], &["s"]);
        b.node("Neg", &["s"], &["y"]);
        b.output("y", DataType::Float32, &[-1, 4]);
        let g = Graph::build(&b.build());
        let seen = stats("s", &[&[2, 4]]);
        let h = known_shape(&g, Some(&seen), None, "h").unwrap();
        assert_eq!(
            (h.dims_text(), h.source),
            ("[2, 4]".into(), ShapeSource::Observed)
        );
        let seen = stats("h", &[&[3, 4]]);
        assert_eq!(
            known_shape(&g, Some(&seen), None, "s").unwrap().dims_text(),
            "[3, 4]"
        );
    }

    #[test]
    fn a_declared_shape_stands_and_types_fall_back_to_the_inferred_one() {
        let g = graph();
        let seen = stats("x", &[&[4, 4]]);
        let x = known_shape(&g, Some(&seen), None, "x").unwrap();
        assert_eq!(x.source, ShapeSource::Declared, "{}", x.text());
        assert_eq!(type_text(&g, None, "h"), "?");
        assert_eq!(type_text(&g, Some(1), "h"), "float32");
        assert_eq!(type_text(&g, Some(7), "x"), "float32", "declared first");
    }
}
