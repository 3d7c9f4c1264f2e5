//! The work panel under the graph: calibration, histograms, results and sensitivity tabs,
//! the running task's progress with its Cancel button, and the windows that belong to this
//! work (Save quantized model, the unsaved-work question). Each tab takes what it shows and
//! queues commands; the plan it shows is the quantizer's ([`crate::quant::explain`]).

mod calibrate;
mod histogram;
mod results;
mod sensitivity;

use egui::{RichText, Ui};

use crate::app::command::Command;
use crate::app::command::{AppCommand, WorkCommand};
use crate::app::document_parts::DocParts;
use crate::app::runtime_status::RuntimeStatus;
use crate::app::work::task::Task;

pub use crate::app::panel_state::{OutputImages, PanelState, SaveDialog, WorkTab};

/// Draws the panel for the open model.
pub fn show(
    ui: &mut Ui,
    doc: &mut DocParts<'_>,
    runtime: &RuntimeStatus,
    commands: &mut Vec<Command>,
) {
    egui::Panel::bottom("work-panel")
        .resizable(true)
        .default_size(330.0)
        .min_size(160.0)
        .show(ui, |ui| {
            let quantized = doc.is_quantized();
            if quantized
                && matches!(
                    doc.view.panel.tab,
                    WorkTab::Histogram | WorkTab::Sensitivity
                )
            {
                doc.view.panel.tab = WorkTab::Results;
            }
            ui.horizontal(|ui| {
                let tabs: &[(WorkTab, &str)] = if quantized {
                    &[(WorkTab::Calibrate, "Data"), (WorkTab::Results, "Results")]
                } else {
                    &[
                        (WorkTab::Calibrate, "Calibration"),
                        (WorkTab::Histogram, "Histograms"),
                        (WorkTab::Results, "Results"),
                        (WorkTab::Sensitivity, "Sensitivity"),
                    ]
                };
                for &(tab, label) in tabs {
                    ui.selectable_value(&mut doc.view.panel.tab, tab, label);
                }
                ui.separator();
                match doc.work.task.running() {
                    Some(task) => task_progress(ui, task, commands),
                    None if quantized => compare_action(ui, commands),
                    None => quick_actions(ui, commands),
                }
            });
            ui.separator();
            egui::ScrollArea::vertical()
                .id_salt("work-scroll")
                .auto_shrink([false, false])
                .show(ui, |ui| match doc.view.panel.tab {
                    WorkTab::Calibrate => calibrate::show(ui, doc, runtime, commands),
                    WorkTab::Histogram => histogram::show(ui, doc, commands),
                    WorkTab::Results => results::show(ui, doc, commands),
                    WorkTab::Sensitivity => sensitivity::show(ui, doc, commands),
                });
        });
}

fn quick_actions(ui: &mut Ui, commands: &mut Vec<Command>) {
    action_button(
        ui,
        (
            "Calibrate",
            "Ctrl+R: calibrate with the settings of the Calibration tab",
        ),
        Command::Work(WorkCommand::Calibrate),
        commands,
    );
    action_button(
        ui,
        (
            "Quantize & compare",
            "F5: build the QDQ model from the cached statistics and compare it",
        ),
        Command::Work(WorkCommand::QuantizeCompare),
        commands,
    );
}

/// The one action on a model that is quantized already.
fn compare_action(ui: &mut Ui, commands: &mut Vec<Command>) {
    action_button(
        ui,
        (
            "Compare with the float model",
            "F5: measure this model against its float model (Results ▸ Float model…)",
        ),
        Command::Work(WorkCommand::QuantizeCompare),
        commands,
    );
}

/// A button beside the tabs: its label and hover text, and the command it sends.
fn action_button(
    ui: &mut Ui,
    (label, hover): (&str, &str),
    command: Command,
    commands: &mut Vec<Command>,
) {
    if ui.button(label).on_hover_text(hover).clicked() {
        commands.push(command);
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
                facts.push(crate::util::format_bytes(memory));
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
        commands.push(Command::Work(WorkCommand::CancelTask));
    }
}

/// File ▸ Save quantized model: path, external data, companions.
pub fn save_window(
    ctx: &egui::Context,
    doc: &mut DocParts<'_>,
    native_dialogs: bool,
    commands: &mut Vec<Command>,
) {
    let has_stats = doc.work.results.stats.is_some();
    let fresh = doc
        .work
        .results
        .fresh_comparison(doc.planned.editor.recipe())
        .is_some();
    let Some(dialog) = doc.view.panel.save_dialog.as_mut() else {
        return;
    };
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
                if native_dialogs && ui.button("Browse…").clicked() {
                    browse_output(dialog);
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
                    commands.push(Command::Work(WorkCommand::SaveQuantized));
                }
                if ui.button("Cancel").clicked() {
                    commands.push(Command::Work(WorkCommand::CloseSaveWindow));
                }
            });
        });
}

/// The native save dialog for the output path, starting from the one typed.
fn browse_output(dialog: &mut SaveDialog) {
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

/// Quitting with unsaved work: save, quit anyway, or stay.
pub fn unsaved_prompt(
    ctx: &egui::Context,
    ask: bool,
    opening: Option<String>,
    commands: &mut Vec<Command>,
) {
    if !ask {
        return;
    }
    let discard = match &opening {
        Some(_) => "Open without saving",
        None => "Quit without saving",
    };
    egui::Window::new("Unsaved work")
        .collapsible(false)
        .resizable(false)
        .anchor(egui::Align2::CENTER_CENTER, egui::Vec2::ZERO)
        .show(ctx, |ui| {
            ui.label("The recipe or the calibration statistics have not been saved.");
            if let Some(label) = &opening {
                ui.label(format!("Opening {label} replaces them."));
            }
            ui.horizontal(|ui| {
                if ui.button("Save quantized model…").clicked() {
                    commands.push(Command::App(AppCommand::SaveThenGoOn));
                }
                if ui.button(discard).clicked() {
                    commands.push(Command::App(AppCommand::Discard));
                }
                if ui.button("Stay").clicked() {
                    commands.push(Command::App(AppCommand::KeepWorking));
                }
            });
        });
}
