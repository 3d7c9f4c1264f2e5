//! Tensors a QDQ model holds at another scale than the float model, by design: cross-layer
//! equalization divides a layer's output channels and multiplies the next layer's input
//! channels, AWQ-lite and SmoothQuant divide an activation's channels (folded into its
//! producer) and multiply the weights reading it. The model's outputs are unchanged, but these
//! activations no longer equal the float model's of the same name, so a per-tensor comparison
//! must not report the rescaling as error. The quantizer records them in the model's
//! metadata, with the factor per channel each holds against the float model's; the
//! comparison reads them back and measures such a tensor against the float tensor times its
//! factors.

use std::collections::{BTreeMap, BTreeSet, HashMap};

pub use super::channel_factors::ChannelFactors;
use super::equalize::EqualizedPair;
use super::int4::choices::ActivationScale;
use super::int4::fold::ScaleSite;
use crate::model::proto::StringStringEntryProto;
use crate::model::{Graph, Model};

/// The metadata key: the tensors' names, one per line.
pub const RESCALED_KEY: &str = "qdq_studio.rescaled";

/// The metadata key of the factors: a JSON object, tensor name → [`ChannelFactors`].
pub const FACTORS_KEY: &str = "qdq_studio.rescale_factors";

/// The activations a quantization left at another scale than the float model's, and the
/// factors of those whose rescaling is known.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rescaled {
    /// Every such activation, sorted.
    pub tensors: Vec<String>,
    /// Their factors.
    pub factors: BTreeMap<String, ChannelFactors>,
}

impl Rescaled {
    /// Adds `tensors`, made by the quantizer's pre-processing with no twin in the float model
    /// (a folded HardSigmoid's Conv output): listed, with no factors, so a comparison neither
    /// looks for them nor measures them.
    pub(crate) fn add_unmatched(&mut self, tensors: &[String]) {
        let mut all: BTreeSet<String> = self.tensors.drain(..).collect();
        all.extend(tensors.iter().cloned());
        self.tensors = all.into_iter().collect();
    }
}

/// The activations `pairs` (equalization) and `scales` (activation scaling folded into a
/// producer) left at another scale than the float model's, sorted. `graph` is the
/// pre-processed model's. (Their weights are rescaled too; the comparison's weight errors fit
/// such factors out.)
pub(crate) fn rescaled_tensors(
    graph: &Graph,
    pairs: &[EqualizedPair],
    scales: &[ActivationScale],
) -> Rescaled {
    let mut out = BTreeSet::new();
    // Each tensor's rescalings, in the order applied (equalization first).
    let mut applied: BTreeMap<String, Vec<Option<ChannelFactors>>> = BTreeMap::new();
    for pair in pairs {
        // What the nodes between write (an activation's and pooling's outputs), the first
        // layer's output, and what the second reads (past the activation between).
        let tensors = pair
            .between_tensors
            .iter()
            .cloned()
            .chain(
                graph
                    .node_by_name(&pair.first)
                    .and_then(|n| n.outputs.first().cloned()),
            )
            .chain(
                graph
                    .node_by_name(&pair.second)
                    .and_then(|n| n.inputs.first().cloned()),
            )
            .collect::<BTreeSet<_>>();
        for tensor in tensors {
            applied
                .entry(tensor.clone())
                .or_default()
                .push(pair.factors.clone());
            out.insert(tensor);
        }
    }
    // An inserted Mul leaves the activation as it was (its output is a new tensor).
    for scale in scales.iter().filter(|s| !matches!(s.site, ScaleSite::Mul)) {
        let inverse = scale.scales.iter().map(|s| s.recip()).collect();
        let factors = ChannelFactors::new(inverse, 0);
        applied
            .entry(scale.activation.clone())
            .or_default()
            .push(Some(factors));
        out.insert(scale.activation.clone());
    }
    out.retain(|t: &String| !t.is_empty());
    let factors = applied
        .into_iter()
        .filter(|(tensor, _)| !tensor.is_empty())
        .filter_map(|(tensor, steps)| {
            let mut steps = steps.into_iter();
            let first = steps.next().flatten()?;
            let total = steps.try_fold(first, |total, step| total.then(&step?))?;
            total.is_valid().then_some((tensor, total))
        })
        .collect();
    Rescaled {
        tensors: out.into_iter().collect(),
        factors,
    }
}

/// Records `rescaled` in `model`'s metadata (nothing when there is none).
pub(crate) fn stamp(model: &mut Model, rescaled: &Rescaled) {
    let proto = model.proto_mut();
    proto
        .metadata_props
        .retain(|p| p.key() != RESCALED_KEY && p.key() != FACTORS_KEY);
    if !rescaled.tensors.is_empty() {
        proto.metadata_props.push(StringStringEntryProto {
            key: Some(RESCALED_KEY.to_owned()),
            value: Some(rescaled.tensors.join("\n")),
        });
    }
    // Serialising a map of plain numbers cannot fail; a failure would only lose the record.
    if let Ok(json) = serde_json::to_string(&rescaled.factors)
        && !rescaled.factors.is_empty()
    {
        proto.metadata_props.push(StringStringEntryProto {
            key: Some(FACTORS_KEY.to_owned()),
            value: Some(json),
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

/// The factors a QDQ model records for its rescaled activations (none for a model without
/// the record, as other tools' and older ones are; an unreadable or inconsistent entry is left
/// out, so the comparison falls back to what it can fit).
pub fn factors_in(model: &Model) -> HashMap<String, ChannelFactors> {
    model
        .proto()
        .metadata_props
        .iter()
        .filter(|p| p.key() == FACTORS_KEY)
        .filter_map(|p| serde_json::from_str::<HashMap<String, ChannelFactors>>(p.value()).ok())
        .flatten()
        .filter(|(_, factors)| factors.is_valid())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_apply_per_channel_compose_and_check_their_layout() {
        let conv = ChannelFactors::new(vec![2.0, 0.5], 2);
        assert_eq!(conv.shape, vec![2, 1, 1]);
        // [N = 1, C = 2, H = 1, W = 2]: each channel times its factor.
        let x =
            ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[1, 2, 1, 2]), vec![1., 2., 3., 4.])
                .unwrap();
        let y = conv.apply(&x.view()).unwrap();
        assert_eq!(
            y.iter().copied().collect::<Vec<f32>>(),
            vec![2., 4., 1.5, 2.]
        );
        // Channels on the last axis.
        let dense = ChannelFactors::new(vec![2.0, 0.5], 0);
        let y = dense.apply(&x.view()).unwrap();
        assert_eq!(
            y.iter().copied().collect::<Vec<f32>>(),
            vec![2., 1., 6., 2.]
        );
        // A layout that does not broadcast is no answer, not a panic.
        assert!(
            ChannelFactors::new(vec![1.0; 3], 0)
                .apply(&x.view())
                .is_none()
        );
        // Two rescalings of one tensor compose; different layouts do not.
        let both = dense.then(&ChannelFactors::new(vec![3.0, 4.0], 0)).unwrap();
        assert_eq!(both.values, vec![6.0, 2.0]);
        assert!(dense.then(&conv).is_none());
        assert!(conv.is_valid());
        assert!(!ChannelFactors::new(vec![1.0, 0.0], 0).is_valid());
        assert!(
            !ChannelFactors {
                shape: vec![3],
                values: vec![1.0]
            }
            .is_valid()
        );
    }

    #[test]
    fn the_record_reads_back_and_an_unreadable_one_is_left_out() {
        let mut model = crate::model::ModelBuilder::new(13).build();
        let mut rescaled = Rescaled {
            tensors: vec!["a".into(), "b".into()],
            factors: BTreeMap::new(),
        };
        rescaled
            .factors
            .insert("a".into(), ChannelFactors::new(vec![0.25, 4.0], 2));
        stamp(&mut model, &rescaled);
        assert_eq!(rescaled_in(&model).len(), 2);
        let read = factors_in(&model);
        assert_eq!(read.len(), 1);
        assert_eq!(read["a"], rescaled.factors["a"]);
        // Stamped again: one record, not two.
        stamp(&mut model, &rescaled);
        assert_eq!(model.proto().metadata_props.len(), 2);
        for p in &mut model.proto_mut().metadata_props {
            if p.key() == FACTORS_KEY {
                p.value = Some("{not json".into());
            }
        }
        assert!(factors_in(&model).is_empty());
    }
}
