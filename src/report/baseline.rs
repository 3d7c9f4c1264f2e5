//! What a comparison against a baseline shows: the outputs of both QDQ models against the
//! float model's, and the layers whose SQNR the compared model moved most, up and down. One set
//! of tables for the CLI and both report formats.

use super::{Baseline, CompareReport, TextTable, db};
use crate::eval::tensor_error::layer_effect::{LayerEffect, sqnr_gain_db};

/// Which end of the layer effects a table lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The layers that gained most.
    Gained,
    /// The layers that lost most (only those that lost).
    Lost,
}

/// What a report (and the CLI) shows of a baseline, in reading order.
pub struct BaselineSection {
    /// The baseline model, as given.
    pub model: String,
    /// Each output before and after.
    pub outputs: TextTable,
    /// How many layers gained and lost.
    pub summary: Option<String>,
    /// The layers that gained most, then those that lost most (tables with rows only).
    pub layers: Vec<TextTable>,
}

/// The baseline section of `report`, listing at most `gained` and `lost` layers; `None`
/// without a baseline.
pub fn baseline_section(
    report: &CompareReport,
    (gained, lost): (usize, usize),
) -> Option<BaselineSection> {
    let baseline = report.baseline.as_ref()?;
    Some(BaselineSection {
        model: baseline.model.clone(),
        outputs: baseline_output_table(report)?,
        summary: layer_effect_summary(baseline),
        layers: [(Change::Gained, gained), (Change::Lost, lost)]
            .into_iter()
            .map(|(change, count)| layer_effect_table(&baseline.layers, count, change))
            .filter(|t| !t.rows.is_empty())
            .collect(),
    })
}

/// How many layers each way a report lists.
pub(crate) const REPORT_LAYERS: (usize, usize) = (15, 15);

/// What the gain means, for the section's first paragraph.
pub(crate) const BASELINE_NOTE: &str = "is another QDQ model of the same float model, measured on the same data: the gain is how much this model's SQNR rose over it (a technique's effect, when the baseline was quantized without it).";

/// Each output's SQNR and cosine in the baseline beside the compared model's; `None` without a
/// baseline.
pub fn baseline_output_table(report: &CompareReport) -> Option<TextTable> {
    let baseline = report.baseline.as_ref()?;
    let rows = report
        .outputs
        .iter()
        .filter_map(|after| {
            let before = baseline.outputs.iter().find(|b| b.name == after.name)?;
            Some(vec![
                after.name.clone(),
                db(before.sqnr_db),
                db(after.sqnr_db),
                signed_db(sqnr_gain_db(before.sqnr_db, after.sqnr_db)),
                format!("{:.5}", before.cosine),
                format!("{:.5}", after.cosine),
            ])
        })
        .collect();
    Some(TextTable {
        header: vec![
            "output",
            "baseline SQNR dB",
            "SQNR dB",
            "gain dB",
            "baseline cosine",
            "cosine",
        ],
        rows,
    })
}

/// The `count` layers that moved most in the direction `change` says, by their own (local)
/// SQNR where measured, else by the cumulative one.
pub fn layer_effect_table(layers: &[LayerEffect], count: usize, change: Change) -> TextTable {
    let mut chosen: Vec<&LayerEffect> = layers
        .iter()
        .filter(|l| match change {
            Change::Gained => l.gain_db() > 0.0,
            Change::Lost => l.gain_db() < 0.0,
        })
        .collect();
    chosen.sort_by(|a, b| match change {
        Change::Gained => b.gain_db().total_cmp(&a.gain_db()),
        Change::Lost => a.gain_db().total_cmp(&b.gain_db()),
    });
    let title = match change {
        Change::Gained => "layers that gained most",
        Change::Lost => "layers that lost most",
    };
    let optional = |v: Option<f64>| v.map_or_else(|| "-".into(), db);
    TextTable {
        header: vec![
            title,
            "local before dB",
            "local after dB",
            "float vs QDQ before dB",
            "float vs QDQ after dB",
            "gain dB",
        ],
        rows: chosen
            .into_iter()
            .take(count)
            .map(|l| {
                vec![
                    l.tensor.clone(),
                    optional(l.local_before_db),
                    optional(l.local_after_db),
                    db(l.cumulative_before_db),
                    db(l.cumulative_after_db),
                    signed_db(l.gain_db()),
                ]
            })
            .collect(),
    }
}

/// A change smaller than this (dB) is no change.
const MOVED_DB: f64 = 0.05;

/// One line: how many layers were compared, how many gained and lost, and the median change
/// of those that did.
pub fn layer_effect_summary(baseline: &Baseline) -> Option<String> {
    let layers = &baseline.layers;
    if layers.is_empty() {
        return None;
    }
    // The median of the layers that moved: most tensors of a model (those of nodes without
    // weights, say) do not, and would pull it to zero.
    let mut moved: Vec<f64> = layers
        .iter()
        .map(LayerEffect::gain_db)
        .filter(|g| g.is_finite() && g.abs() > MOVED_DB)
        .collect();
    moved.sort_by(f64::total_cmp);
    let gained = moved.iter().filter(|&&g| g > 0.0).count();
    let lost = moved.len() - gained;
    let local = layers.iter().any(|l| l.local_gain_db().is_some());
    let median = moved.get(moved.len() / 2).map_or_else(String::new, |m| {
        format!(", median change of those {}", signed_db(*m))
    });
    Some(format!(
        "against {}: {} layers compared, {gained} gained and {lost} lost more than {MOVED_DB} dB of {} SQNR{median}",
        baseline.model,
        layers.len(),
        if local { "local" } else { "float vs QDQ" },
    ))
}

/// A dB change with its sign.
fn signed_db(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 {
            "+∞".into()
        } else {
            "-∞".into()
        }
    } else {
        format!("{v:+.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn effect(tensor: &str, local: Option<(f64, f64)>, cumulative: (f64, f64)) -> LayerEffect {
        LayerEffect {
            tensor: tensor.into(),
            cumulative_before_db: cumulative.0,
            cumulative_after_db: cumulative.1,
            local_before_db: local.map(|l| l.0),
            local_after_db: local.map(|l| l.1),
        }
    }

    #[test]
    fn tables_list_the_largest_moves_each_way() {
        let layers = [
            effect("small", Some((30.0, 31.0)), (20.0, 20.5)),
            effect("big", Some((20.0, 28.0)), (18.0, 19.0)),
            effect("worse", Some((40.0, 37.5)), (25.0, 26.0)),
            effect("no_local", None, (10.0, 12.0)),
        ];
        let gained = layer_effect_table(&layers, 2, Change::Gained);
        let names: Vec<&str> = gained.rows.iter().map(|r| r[0].as_str()).collect();
        assert_eq!(names, ["big", "no_local"]);
        assert_eq!(gained.rows[0][5], "+8.00");
        let lost = layer_effect_table(&layers, 10, Change::Lost);
        assert_eq!(lost.rows.len(), 1);
        assert_eq!(lost.rows[0][0], "worse");
        assert_eq!(lost.rows[0][5], "-2.50");
        let baseline = Baseline {
            model: "rtn.onnx".into(),
            outputs: Vec::new(),
            layers: layers.to_vec(),
        };
        let line = layer_effect_summary(&baseline).unwrap();
        assert!(
            line.contains("4 layers compared, 3 gained and 1 lost"),
            "{line}"
        );
        assert!(line.contains("median change of those +2.00"), "{line}");
    }
}
