//! The graph as a heat map of per-tensor error: each node coloured by the SQNR of the tensor
//! it produces (cumulative, float against QDQ, or local, its own quantization with float
//! inputs, as the user switches), red below the user's threshold, green above.

use std::collections::HashMap;

use egui::Color32;

use crate::eval::tensor_error::tensors::{ErrorKind, TensorErrors};
use crate::model::{Graph, NodeId};
use crate::quant::Explanation;

/// SQNR above the threshold by this much (dB) is drawn at full green.
const GREEN_SPAN_DB: f64 = 30.0;
/// SQNR below the threshold by this much (dB) is drawn at full red.
const RED_SPAN_DB: f64 = 20.0;

/// Each node's SQNR of `kind`: the worst over the tensors it produces that were measured (`None` when
/// none was: the node's outputs are not quantized, or pre-processing folded it away). Nodes
/// are read as the quantizer sees them (`prepared`, matched by name): a Conv with a folded
/// BatchNormalization writes the BatchNormalization's output; a tensor quantized under another
/// name (a Conv's output when the Relu after it is folded) is looked up under that.
pub fn node_sqnr(
    graph: &Graph,
    prepared: &Graph,
    errors: &TensorErrors,
    kind: ErrorKind,
    plan: &Explanation,
) -> Vec<Option<f64>> {
    let by_tensor: HashMap<&str, f64> = errors.sqnr_of(kind).collect();
    graph
        .nodes()
        .iter()
        .map(|node| {
            prepared
                .node_by_name(&node.name)?
                .outputs
                .iter()
                .map(
                    |t| match plan.tensor(t).and_then(|p| p.folded_into.as_ref()) {
                        Some((_, into)) => into.as_str(),
                        None => t.as_str(),
                    },
                )
                .filter_map(|t| by_tensor.get(t).copied())
                .reduce(f64::min)
        })
        .collect()
}

fn mix(a: Color32, b: Color32, t: f64) -> Color32 {
    let t = t.clamp(0.0, 1.0) as f32;
    let lerp = |x: u8, y: u8| (f32::from(x) + (f32::from(y) - f32::from(x)) * t).round() as u8;
    Color32::from_rgb(lerp(a.r(), b.r()), lerp(a.g(), b.g()), lerp(a.b(), b.b()))
}

/// The fill of a node with `sqnr_db` under `threshold_db` (the legend uses the same scale).
pub fn colour(sqnr_db: f64, threshold_db: f64) -> Color32 {
    let yellow = Color32::from_rgb(214, 170, 40);
    if sqnr_db < threshold_db {
        let red = Color32::from_rgb(200, 40, 45);
        let orange = Color32::from_rgb(220, 110, 40);
        mix(orange, red, (threshold_db - sqnr_db) / RED_SPAN_DB)
    } else {
        let green = Color32::from_rgb(30, 140, 90);
        mix(yellow, green, (sqnr_db - threshold_db) / GREEN_SPAN_DB)
    }
}

/// The dB range the legend's gradient spans around `threshold_db`.
pub fn legend_span(threshold_db: f64) -> (f64, f64) {
    (threshold_db - RED_SPAN_DB, threshold_db + GREEN_SPAN_DB)
}

/// Nodes whose SQNR is under `threshold_db`, worst first.
pub fn below(sqnr: &[Option<f64>], threshold_db: f64) -> Vec<NodeId> {
    let mut out: Vec<(NodeId, f64)> = sqnr
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.filter(|&s| s < threshold_db).map(|s| (NodeId(i), s)))
        .collect();
    out.sort_by(|a, b| a.1.total_cmp(&b.1));
    out.into_iter().map(|(id, _)| id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_run_from_red_below_the_threshold_to_green_above() {
        let worst = colour(-5.0, 20.0);
        let near_below = colour(19.0, 20.0);
        let near_above = colour(21.0, 20.0);
        let best = colour(80.0, 20.0);
        assert!(worst.r() > worst.g() * 3, "{worst:?}");
        assert!(near_below.r() > near_below.g(), "{near_below:?}");
        assert!(near_above.g() > 120, "{near_above:?}");
        assert!(best.g() > best.r() * 3, "{best:?}");
        assert_eq!(
            below(&[Some(30.0), None, Some(5.0), Some(10.0)], 20.0),
            [NodeId(2), NodeId(3)]
        );
    }
}
