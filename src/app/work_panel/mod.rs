//! The work panel under the graph: calibration, histograms, results and sensitivity tabs,
//! the running task's progress with its Cancel button, and the windows that belong to this
//! work (Save quantized model, the unsaved-work question).

mod calibrate;
mod histogram;
mod results;
mod sensitivity;

use egui::{RichText, Ui};

use crate::app::command::Command;
use crate::app::studio::Studio;
use crate::app::work::{Task, WorkTab};

pub use results::OutputImages;

/// Draws the panel (a model is open).
pub fn show(studio: &mut Studio, ui: &mut Ui) {
    egui::Panel::bottom("work-panel")
        .resizable(true)
        .default_size(330.0)
        .min_size(160.0)
        .show(ui, |ui| {
            let mut commands = Vec::new();
            ui.horizontal(|ui| {
                let Some(doc) = studio.doc.as_mut() else {
                    return;
                };
                for (tab, label) in [
                    (WorkTab::Calibrate, "Calibration"),
                    (WorkTab::Histogram, "Histograms"),
                    (WorkTab::Results, "Results"),
                    (WorkTab::Sensitivity, "Sensitivity"),
                ] {
                    ui.selectable_value(&mut doc.work.tab, tab, label);
                }
                ui.separator();
                if let Some(task) = &doc.work.task {
                    task_progress(ui, task, &mut commands);
                } else {
                    quick_actions(ui, &mut commands);
                }
            });
            ui.separator();
            let tab = studio.doc.as_ref().map(|d| d.work.tab);
            egui::ScrollArea::vertical()
                .id_salt("work-scroll")
                .auto_shrink([false, false])
                .show(ui, |ui| match tab {
                    Some(WorkTab::Calibrate) => calibrate::show(studio, ui, &mut commands),
                    Some(WorkTab::Histogram) => histogram::show(studio, ui, &mut commands),
                    Some(WorkTab::Results) => results::show(studio, ui, &mut commands),
                    Some(WorkTab::Sensitivity) => sensitivity::show(studio, ui, &mut commands),
                    None => {}
                });
            for c in commands {
                studio.push(c);
            }
        });
}

fn quick_actions(ui: &mut Ui, commands: &mut Vec<Command>) {
    if ui
        .button("Calibrate")
        .on_hover_text("Ctrl+R: calibrate with the settings of the Calibration tab")
        .clicked()
    {
        commands.push(Command::Calibrate);
    }
    if ui
        .button("Quantize & compare")
        .on_hover_text("F5: build the QDQ model from the cached statistics and compare it")
        .clicked()
    {
        commands.push(Command::QuantizeCompare);
    }
}

fn task_progress(ui: &mut Ui, task: &Task, commands: &mut Vec<Command>) {
    ui.spinner();
    ui.label(RichText::new(task.kind.label()).strong());
    let elapsed = task.started.elapsed().as_secs_f32();
    match &task.progress {
        Some(p) => {
            let mut text = p.stage.clone();
            if p.total > 0 {
                text.push_str(&format!(" {}/{}", p.done, p.total));
            }
            ui.add(
                egui::ProgressBar::new(p.fraction())
                    .desired_width(220.0)
                    .text(text),
            );
            let mut facts = vec![format!("{elapsed:.1} s")];
            if let Some(rate) = p.rate {
                facts.push(format!("{rate:.1}/s"));
            }
            if let Some(eta) = p.eta_seconds {
                facts.push(format!("ETA {eta:.0} s"));
            }
            if let Some(memory) = p.memory_bytes {
                facts.push(crate::report::format_bytes(memory));
            }
            if !p.detail.is_empty() {
                facts.push(p.detail.clone());
            }
            ui.label(RichText::new(facts.join(" · ")).weak());
        }
        None => {
            ui.label(RichText::new(format!("starting… {elapsed:.1} s")).weak());
        }
    }
    if ui.button("Cancel").clicked() {
        commands.push(Command::CancelTask);
    }
}

/// File ▸ Save quantized model: path, external data, companions.
pub fn save_window(studio: &mut Studio, ctx: &egui::Context) {
    let native = studio.options.native_dialogs;
    let Some(doc) = studio.doc.as_mut() else {
        return;
    };
    let has_stats = doc.work.stats.is_some();
    let fresh = doc.work.fresh_comparison(doc.editor.recipe()).is_some();
    let Some(dialog) = doc.work.save_dialog.as_mut() else {
        return;
    };
    let mut commands = Vec::new();
    let mut close = false;
    egui::Window::new("Save quantized model")
        .collapsible(false)
        .resizable(false)
        .anchor(egui::Align2::CENTER_CENTER, egui::Vec2::ZERO)
        .show(ctx, |ui| {
            ui.horizontal(|ui| {
                let label = ui.label("Save to");
                ui.add(
                    egui::TextEdit::singleline(&mut dialog.path)
                        .id(egui::Id::new("save-model-path"))
                        .desired_width(420.0),
                )
                .labelled_by(label.id);
                if native && ui.button("Browse…").clicked() {
                    let current = std::path::PathBuf::from(dialog.path.trim());
                    let mut picker = rfd::FileDialog::new()
                        .set_title("Save the quantized model")
                        .add_filter("ONNX model", &["onnx"]);
                    if let Some(folder) = current.parent().filter(|p| p.is_dir()) {
                        picker = picker.set_directory(folder);
                    }
                    if let Some(name) = current.file_name() {
                        picker = picker.set_file_name(name.to_string_lossy());
                    }
                    if let Some(path) = picker.save_file() {
                        dialog.path = path.display().to_string();
                    }
                }
            });
            ui.checkbox(
                &mut dialog.external_data,
                "Weights in a separate .data file (always used above 2 GB)",
            );
            ui.checkbox(&mut dialog.companions, "Also save the recipe and the report");
            if dialog.companions && !fresh {
                ui.label(
                    RichText::new(
                        "No comparison for this recipe yet: only the recipe is written (Quantize & compare for a report).",
                    )
                    .weak(),
                );
            }
            if !has_stats {
                ui.colored_label(
                    ui.visuals().warn_fg_color,
                    "Calibrate first: the model needs activation ranges.",
                );
            }
            ui.label(
                RichText::new("The model is checked in ONNX Runtime before it is written; the input is never overwritten.")
                    .weak(),
            );
            ui.horizontal(|ui| {
                if ui.button("Save").clicked() {
                    commands.push(Command::SaveQuantized);
                }
                if ui.button("Cancel").clicked() {
                    close = true;
                }
            });
        });
    if close {
        doc.work.save_dialog = None;
        studio.quit_after_save = false;
    }
    for c in commands {
        studio.push(c);
    }
}

/// Quitting with unsaved work: save, quit anyway, or stay.
pub fn unsaved_prompt(studio: &mut Studio, ctx: &egui::Context) {
    if !studio.ask_unsaved {
        return;
    }
    let mut choice = None;
    egui::Window::new("Unsaved work")
        .collapsible(false)
        .resizable(false)
        .anchor(egui::Align2::CENTER_CENTER, egui::Vec2::ZERO)
        .show(ctx, |ui| {
            ui.label("The recipe or the calibration statistics have not been saved.");
            ui.horizontal(|ui| {
                if ui.button("Save quantized model…").clicked() {
                    choice = Some(0);
                }
                if ui.button("Quit without saving").clicked() {
                    choice = Some(1);
                }
                if ui.button("Stay").clicked() {
                    choice = Some(2);
                }
            });
        });
    match choice {
        Some(0) => studio.save_then_quit(),
        Some(1) => {
            studio.ask_unsaved = false;
            studio.push(Command::QuitDiscarding);
        }
        Some(2) => studio.ask_unsaved = false,
        _ => {}
    }
}
