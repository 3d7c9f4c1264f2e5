//! Tensors a QDQ model holds at another scale than the float model, by design: cross-layer
//! equalization divides a layer's output channels and multiplies the next layer's input
//! channels, AWQ-lite and SmoothQuant divide an activation's channels (folded into its
//! producer) and multiply the weights reading it. The model's outputs are unchanged, but these
//! activations no longer equal the float model's of the same name, so a per-tensor comparison
//! must set them aside rather than report the rescaling as error. The quantizer records them
//! in the model's metadata; the comparison reads them back.

use std::collections::BTreeSet;

use super::equalize::EqualizedPair;
use super::int4::{ActivationScale, ScaleSite};
use crate::model::proto::StringStringEntryProto;
use crate::model::{Graph, Model};

/// The metadata key: the tensors' names, one per line.
pub const RESCALED_KEY: &str = "qdq_studio.rescaled";

/// The activations `pairs` (equalization) and `scales` (activation scaling folded into a
/// producer) left at another scale than the float model's, sorted. `graph` is the
/// pre-processed model's. (Their weights are rescaled too; the comparison's weight errors fit
/// such factors out.)
pub(crate) fn rescaled_tensors(
    graph: &Graph,
    pairs: &[EqualizedPair],
    scales: &[ActivationScale],
) -> Vec<String> {
    let mut out = BTreeSet::new();
    for pair in pairs {
        // What the nodes between write (an activation's and pooling's outputs).
        out.extend(pair.between_tensors.iter().cloned());
        // The first layer's output, and what the second reads (past the activation between).
        out.extend(
            graph
                .node_by_name(&pair.first)
                .and_then(|n| n.outputs.first().cloned()),
        );
        out.extend(
            graph
                .node_by_name(&pair.second)
                .and_then(|n| n.inputs.first().cloned()),
        );
    }
    // An inserted Mul leaves the activation as it was (its output is a new tensor).
    out.extend(
        scales
            .iter()
            .filter(|s| !matches!(s.site, ScaleSite::Mul))
            .map(|s| s.activation.clone()),
    );
    out.retain(|t: &String| !t.is_empty());
    out.into_iter().collect()
}

/// Records `tensors` in `model`'s metadata (nothing when there are none).
pub(crate) fn stamp(model: &mut Model, tensors: &[String]) {
    let proto = model.proto_mut();
    proto.metadata_props.retain(|p| p.key() != RESCALED_KEY);
    if !tensors.is_empty() {
        proto.metadata_props.push(StringStringEntryProto {
            key: Some(RESCALED_KEY.to_owned()),
            value: Some(tensors.join("\n")),
        });
    }
}

/// The tensors a QDQ model says it holds rescaled (none for a model without the record, as
/// other tools' are).
pub fn rescaled_in(model: &Model) -> BTreeSet<String> {
    model
        .proto()
        .metadata_props
        .iter()
        .filter(|p| p.key() == RESCALED_KEY)
        .flat_map(|p| p.value().lines().map(str::to_owned))
        .filter(|t| !t.is_empty())
        .collect()
}
