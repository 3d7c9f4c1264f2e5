//! The studio's windows: error notices, the path field, keyboard shortcuts and About.

use std::path::PathBuf;

use egui::{RichText, Ui};

use crate::app::command::{self, Command, SHORTCUTS};
use crate::app::command::{AppCommand, WorkCommand};
use crate::app::runtime_status::RuntimeStatus;
use crate::app::window::{Notice, PathPrompt, PathPurpose, WindowState};
use crate::runtime::EpState;

/// Shows the window's own windows: notices, the path field, shortcuts and About. (The work
/// panel's windows are [`crate::app::work_panel`]'s.)
pub fn show(
    ctx: &egui::Context,
    window: &mut WindowState,
    runtime: &RuntimeStatus,
    commands: &mut Vec<Command>,
) {
    notices(ctx, &mut window.notices);
    path_prompt(ctx, &mut window.prompt, commands);
    shortcuts(ctx, &mut window.show_shortcuts);
    about(ctx, &mut window.show_about, runtime);
}

fn notices(ctx: &egui::Context, notices: &mut Vec<Notice>) {
    let mut dismissed = None;
    for (i, notice) in notices.iter().enumerate() {
        egui::Window::new(
            RichText::new(&notice.title).color(ctx.global_style().visuals.error_fg_color),
        )
        .id(egui::Id::new(("notice", i)))
        .collapsible(false)
        .resizable(true)
        .default_width(460.0)
        .anchor(
            egui::Align2::CENTER_TOP,
            egui::vec2(0.0, 60.0 + 24.0 * i as f32),
        )
        .show(ctx, |ui| {
            egui::ScrollArea::vertical()
                .max_height(240.0)
                .show(ui, |ui| {
                    ui.add(
                        egui::Label::new(RichText::new(&notice.detail).monospace())
                            .wrap()
                            .selectable(true),
                    );
                });
            ui.horizontal(|ui| {
                if ui.button("Dismiss").clicked() {
                    dismissed = Some(i);
                }
                if ui.button("Copy").clicked() {
                    ui.ctx()
                        .copy_text(format!("{}\n{}", notice.title, notice.detail));
                }
            });
        });
    }
    if let Some(i) = dismissed {
        notices.remove(i);
    }
}

fn path_prompt(ctx: &egui::Context, open: &mut Option<PathPrompt>, commands: &mut Vec<Command>) {
    let Some(prompt) = open.as_mut() else {
        return;
    };
    let (title, action) = match prompt.purpose {
        PathPurpose::OpenModel => ("Open a model", "Open"),
        PathPurpose::SaveRecipe => ("Save the recipe", "Save"),
        PathPurpose::LoadRecipe => ("Load a recipe", "Load"),
        PathPurpose::SaveStatistics => ("Save the calibration statistics", "Save"),
        PathPurpose::LoadStatistics => ("Load calibration statistics", "Load"),
        PathPurpose::CalibrationData => ("Calibration data", "Use"),
        PathPurpose::EvaluationData => ("Evaluation data", "Use"),
        PathPurpose::FloatModel => ("The float model to compare against", "Use"),
        PathPurpose::Tokenizer(_) => ("The model's tokenizer (tokenizer.json)", "Use"),
    };
    let mut done: Option<Option<PathBuf>> = None;
    egui::Window::new(title)
        .collapsible(false)
        .resizable(false)
        .anchor(egui::Align2::CENTER_CENTER, egui::Vec2::ZERO)
        .show(ctx, |ui| {
            if let Some(note) = &prompt.note {
                ui.label(RichText::new(note).weak());
            }
            let response = ui
                .horizontal(|ui| {
                    let label = ui.label("Path");
                    ui.add(
                        egui::TextEdit::singleline(&mut prompt.text)
                            .id(egui::Id::new("path-field"))
                            .hint_text("/path/to/file")
                            .desired_width(420.0),
                    )
                    .labelled_by(label.id)
                })
                .inner;
            if !response.has_focus() && prompt.text.is_empty() {
                response.request_focus();
            }
            let entered = response.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
            ui.horizontal(|ui| {
                let ok = ui.add_enabled(!prompt.text.trim().is_empty(), egui::Button::new(action));
                if ok.clicked() || (entered && !prompt.text.trim().is_empty()) {
                    done = Some(Some(PathBuf::from(expand_home(prompt.text.trim()))));
                }
                if ui.button("Cancel").clicked() {
                    done = Some(None);
                }
            });
        });
    let Some(result) = done else {
        return;
    };
    let purpose = prompt.purpose;
    *open = None;
    if let Some(path) = result {
        commands.push(match purpose {
            PathPurpose::OpenModel => Command::App(AppCommand::Open(path)),
            PathPurpose::SaveRecipe => Command::App(AppCommand::SaveRecipe(path)),
            PathPurpose::LoadRecipe => Command::App(AppCommand::LoadRecipe(path)),
            PathPurpose::SaveStatistics => Command::Work(WorkCommand::SaveStatistics(path)),
            PathPurpose::LoadStatistics => Command::Work(WorkCommand::LoadStatistics(path)),
            PathPurpose::CalibrationData => Command::Work(WorkCommand::SetDataPath {
                evaluation: false,
                path,
            }),
            PathPurpose::EvaluationData => Command::Work(WorkCommand::SetDataPath {
                evaluation: true,
                path,
            }),
            PathPurpose::FloatModel => Command::Work(WorkCommand::SetFloatModel(path)),
            PathPurpose::Tokenizer(evaluation) => {
                Command::Work(WorkCommand::SetTokenizer { evaluation, path })
            }
        });
    }
}

/// `~/x` → the home folder's `x`, as a shell would.
fn expand_home(text: &str) -> String {
    match (text.strip_prefix("~/"), directories::BaseDirs::new()) {
        (Some(rest), Some(dirs)) => dirs.home_dir().join(rest).display().to_string(),
        _ => text.to_owned(),
    }
}

fn shortcuts(ctx: &egui::Context, open: &mut bool) {
    egui::Window::new("Keyboard shortcuts")
        .open(open)
        .collapsible(false)
        .resizable(false)
        .show(ctx, |ui| {
            egui::Grid::new("shortcuts")
                .num_columns(2)
                .striped(true)
                .show(ui, |ui| {
                    for s in SHORTCUTS {
                        ui.label(RichText::new(command::label(&s.keys)).monospace().strong());
                        ui.label(s.description);
                        ui.end_row();
                    }
                    for (keys, what) in [
                        ("Click", "Select a node"),
                        (
                            "Shift/Ctrl+click",
                            "Add or remove a node from the selection",
                        ),
                        ("Right-click", "Node actions"),
                        ("Double-click", "Zoom to a node"),
                        ("Drag / scroll", "Pan"),
                        ("Ctrl+scroll / pinch", "Zoom"),
                    ] {
                        ui.label(RichText::new(keys).monospace().strong());
                        ui.label(what);
                        ui.end_row();
                    }
                });
        });
}

fn about(ctx: &egui::Context, open: &mut bool, runtime: &RuntimeStatus) {
    egui::Window::new("About qdq-studio")
        .open(open)
        .collapsible(false)
        .resizable(false)
        .show(ctx, |ui| about_contents(ui, runtime));
}

fn about_contents(ui: &mut Ui, runtime: &RuntimeStatus) {
    ui.heading(format!("qdq-studio {}", env!("CARGO_PKG_VERSION")));
    ui.label("Post-training quantization of ONNX models to QDQ.");
    ui.separator();
    match runtime {
        RuntimeStatus::Ready { info, eps } => {
            ui.label(format!(
                "ONNX Runtime {} ({})",
                info.version,
                info.path.display()
            ));
            egui::Grid::new("about_eps")
                .num_columns(2)
                .striped(true)
                .show(ui, |ui| {
                    for ep in eps {
                        ui.label(&ep.ort_name);
                        match &ep.state {
                            EpState::Ready => {
                                ui.colored_label(egui::Color32::from_rgb(40, 160, 90), "ready")
                            }
                            EpState::Unavailable(why) => ui.label(format!("unavailable: {why}")),
                            EpState::NotInLibrary(flavour) => ui.label(
                                RichText::new(format!("not in this build ({flavour})")).weak(),
                            ),
                        };
                        ui.end_row();
                    }
                });
        }
        RuntimeStatus::Missing(why) => {
            ui.label("ONNX Runtime was not found:");
            ui.label(RichText::new(why).monospace());
            ui.label("Install it with `qdq-studio runtime install`.");
        }
        other => {
            ui.label(other.summary());
        }
    }
    ui.separator();
    ui.label(
        RichText::new("Built with eframe/egui 0.36, egui_graphs, rust-sugiyama and plotters.")
            .weak(),
    );
}
