//! The Sensitivity tab: the node ranking of the last scan (a click selects the node in the
//! graph), and auto-exclude to a target the user types; its result lands in the recipe as one
//! undoable step.

use egui::{RichText, Ui};

use crate::app::command::Command;
use crate::app::command::WorkCommand;
use crate::app::document_parts::DocParts;
use crate::app::work::settings::RunSettings;
use crate::eval::search::evaluator::TargetKind;

pub(super) fn show(ui: &mut Ui, doc: &mut DocParts<'_>, commands: &mut Vec<Command>) {
    let busy = doc.work.busy();
    let has_stats = doc.work.results.stats.is_some();
    controls(ui, &mut doc.work.settings, busy, has_stats, commands);
    if !has_stats {
        ui.label(
            RichText::new("Calibrate first: the scan quantizes from the cached statistics.").weak(),
        );
    }
    let results = &doc.work.results;
    if let Some(result) = &results.auto_excluded {
        let names = result
            .promoted
            .iter()
            .map(|n| format!("{n} (w8a16)"))
            .chain(result.excluded.iter().cloned())
            .collect::<Vec<_>>()
            .join(", ");
        ui.label(format!(
            "Auto-exclude: {}{}",
            crate::app::work::auto_exclude_summary(result),
            if names.is_empty() {
                String::new()
            } else {
                format!(": {names}")
            }
        ));
        alternatives(ui, result, commands);
    }
    let Some(scanned) = &results.scanned else {
        ui.label(RichText::new("No scan yet.").weak());
        return;
    };
    let s = &scanned.sensitivity;
    if &scanned.recipe != doc.planned.editor.recipe() {
        ui.colored_label(
            ui.visuals().warn_fg_color,
            "This ranking is for an earlier recipe.",
        );
    }
    ui.label(format!(
        "Baseline worst output SQNR {:.2} dB · {} nodes · {} worker(s)",
        s.baseline_db,
        s.nodes.len(),
        s.workers
    ))
    .on_hover_text(format!("Measured on {}", s.method_note()));
    if let Some(partial) = s.partial_note() {
        ui.colored_label(
            ui.visuals().warn_fg_color,
            format!("Partial: {partial}. The ranking holds those; auto-exclude can use it."),
        );
    }
    ui.label(RichText::new(format!("Measured on {}.", s.method_note())).weak());
    ranking(ui, s, &doc.opened.graph, commands);
}

/// The scan and auto-exclude buttons with the target's kind, value and limit.
fn controls(
    ui: &mut Ui,
    work: &mut RunSettings,
    busy: bool,
    has_stats: bool,
    commands: &mut Vec<Command>,
) {
    ui.horizontal(|ui| {
        if ui
            .add_enabled(!busy && has_stats, egui::Button::new("Scan sensitivity"))
            .on_hover_text("Quantizes the model once per node left in float, and once with only that node quantized, on the evaluation data")
            .clicked()
        {
            commands.push(Command::Work(WorkCommand::ScanSensitivity));
        }
        ui.separator();
        ui.label("Auto-exclude until the");
        egui::ComboBox::from_id_salt("target-kind")
            .selected_text(work.target_kind.label())
            .show_ui(ui, |ui| {
                for kind in TargetKind::ALL {
                    ui.selectable_value(&mut work.target_kind, kind, kind.label());
                }
            })
            .response
            .on_hover_text("Sequence agreement: the share of samples an OCR or speech model (output [N, T, classes]) reads the same as in float, greedy CTC decoding");
        let (range, suffix) = (0.0..=work.target_kind.max_value(), work.target_kind.unit());
        let label = ui.label("Target");
        ui.add(
            egui::DragValue::new(&mut work.target_value)
                .range(range)
                .speed(0.1)
                .suffix(suffix),
        )
        .labelled_by(label.id);
        // Labelled for screen readers (and the tests, which type into it by its label).
        let limit = ui.label("at most");
        ui.add(egui::DragValue::new(&mut work.max_excluded).range(1..=500))
            .labelled_by(limit.id);
        ui.label("nodes");
        ui.checkbox(&mut work.promote, "16-bit first")
            .on_hover_text("Try 16-bit activations (w8a16) on each node before leaving it in float: the node stays quantized. Off for ONNX Runtime's CPU, which runs 16-bit Q/DQ in float (slower than the float node)");
        if ui
            .add_enabled(!busy && has_stats, egui::Button::new("Auto-exclude"))
            .on_hover_text("Gives the most harmful nodes 16-bit activations or leaves them in float, one at a time, each step checked by a real run; Ctrl+Z undoes")
            .clicked()
        {
            commands.push(Command::Work(WorkCommand::AutoExclude));
        }
    });
}

/// The ranking: most harmful first, each row a link to its node.
fn ranking(
    ui: &mut Ui,
    s: &crate::eval::search::sensitivity::Sensitivity,
    graph: &crate::model::Graph,
    commands: &mut Vec<Command>,
) {
    egui::Grid::new("sensitivity-table")
        .striped(true)
        .num_columns(4)
        .show(ui, |ui| {
            for h in [
                "node",
                "op",
                "SQNR with it in float",
                "SQNR with only it quantized",
            ] {
                ui.label(RichText::new(h).strong());
            }
            ui.end_row();
            for n in s.nodes.iter().take(200) {
                if ui.link(&n.node).clicked() {
                    commands.push(Command::Work(WorkCommand::RevealNodes(vec![
                        n.node.clone(),
                    ])));
                }
                let op = graph
                    .node_by_name(&n.node)
                    .map_or("?", |node| node.op_type.as_str());
                ui.label(op);
                ui.label(format!(
                    "{:.2} dB ({:+.2})",
                    n.sqnr_without_db,
                    n.sqnr_without_db - s.baseline_db
                ));
                ui.label(if n.sqnr_only_db.is_finite() {
                    format!("{:.2} dB", n.sqnr_only_db)
                } else {
                    "no quantized tensor".to_owned()
                });
                ui.end_row();
            }
        });
}

/// The recipe-wide changes auto-exclude measured when leaving nodes in float fell short, each
/// with an Apply button (one undoable step).
fn alternatives(
    ui: &mut Ui,
    result: &crate::eval::search::auto_exclude::AutoExclude,
    commands: &mut Vec<Command>,
) {
    if result.alternatives.is_empty() {
        return;
    }
    ui.label(
        "Leaving nodes in float did not reach the target. Recipe-wide changes on top of it, each measured by a real run:",
    );
    let score = |s: f64| result.target.format_score(s);
    egui::Grid::new("alternatives-table")
        .striped(true)
        .num_columns(5)
        .show(ui, |ui| {
            for h in ["change", "score", "worst output SQNR", "target", ""] {
                ui.label(RichText::new(h).strong());
            }
            ui.end_row();
            ui.label("(nodes left in float only)");
            ui.label(score(result.score));
            ui.label(format!("{:.2} dB", result.sqnr_db));
            ui.label(if result.reached {
                "reached"
            } else {
                "not reached"
            });
            ui.label("");
            ui.end_row();
            for (index, a) in result.alternatives.iter().enumerate() {
                ui.label(&a.change);
                ui.label(score(a.score));
                ui.label(format!("{:.2} dB", a.sqnr_db));
                ui.label(if a.reached { "reached" } else { "not reached" });
                if ui
                    .button(format!("Apply {}", a.change))
                    .on_hover_text("Puts this change into the recipe (Ctrl+Z undoes)")
                    .clicked()
                {
                    commands.push(Command::Work(WorkCommand::ApplyAlternative(index)));
                }
                ui.end_row();
            }
        });
}
