//! The Sensitivity tab: the node ranking of the last scan (a click selects the node in the
//! graph), and auto-exclude to a target the user types; its result lands in the recipe as one
//! undoable step.

use egui::{RichText, Ui};

use crate::app::command::Command;
use crate::app::studio::Studio;
use crate::app::work::TargetKind;

pub(super) fn show(studio: &mut Studio, ui: &mut Ui, commands: &mut Vec<Command>) {
    let Some(doc) = studio.doc.as_mut() else {
        return;
    };
    let busy = doc.work.busy();
    let has_stats = doc.work.stats.is_some();
    let recipe = doc.editor.recipe().clone();
    let work = &mut doc.work;
    ui.horizontal(|ui| {
        if ui
            .add_enabled(!busy && has_stats, egui::Button::new("Scan sensitivity"))
            .on_hover_text("Quantizes the model once per node left in float, and once with only that node quantized, on the evaluation data")
            .clicked()
        {
            commands.push(Command::ScanSensitivity);
        }
        ui.separator();
        ui.label("Auto-exclude until the");
        egui::ComboBox::from_id_salt("target-kind")
            .selected_text(match work.target_kind {
                TargetKind::SqnrDb => "worst output SQNR ≥",
                TargetKind::Top1 => "top-1 agreement ≥",
            })
            .show_ui(ui, |ui| {
                ui.selectable_value(&mut work.target_kind, TargetKind::SqnrDb, "worst output SQNR ≥");
                ui.selectable_value(&mut work.target_kind, TargetKind::Top1, "top-1 agreement ≥");
            });
        let (range, suffix) = match work.target_kind {
            TargetKind::SqnrDb => (0.0..=120.0, " dB"),
            TargetKind::Top1 => (0.0..=100.0, " %"),
        };
        let label = ui.label("Target");
        ui.add(
            egui::DragValue::new(&mut work.target_value)
                .range(range)
                .speed(0.1)
                .suffix(suffix),
        )
        .labelled_by(label.id);
        ui.label("at most");
        ui.add(egui::DragValue::new(&mut work.max_excluded).range(1..=500));
        ui.label("nodes");
        if ui
            .add_enabled(!busy && has_stats, egui::Button::new("Auto-exclude"))
            .on_hover_text("Leaves the most harmful nodes in float, one at a time, each step checked by a real run; Ctrl+Z undoes")
            .clicked()
        {
            commands.push(Command::AutoExclude);
        }
    });
    if !has_stats {
        ui.label(
            RichText::new("Calibrate first: the scan quantizes from the cached statistics.").weak(),
        );
    }
    if let Some(result) = &work.auto_excluded {
        let names = result.excluded.join(", ");
        ui.label(format!(
            "Auto-exclude: {}{}",
            crate::app::work::auto_exclude_summary(result),
            if names.is_empty() {
                String::new()
            } else {
                format!(": {names}")
            }
        ));
    }
    let Some(scanned) = &work.scanned else {
        ui.label(RichText::new("No scan yet.").weak());
        return;
    };
    let s = &scanned.sensitivity;
    if scanned.recipe != recipe {
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
    ));
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
                    commands.push(Command::RevealNodes(vec![n.node.clone()]));
                }
                let op = doc
                    .graph
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
