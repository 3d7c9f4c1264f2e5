//! The Calibration tab: calibration and evaluation data (checked against the model as they
//! are edited), the execution provider, batch size, samples, method, and the statistics.

use egui::{Color32, RichText, Ui};

use crate::app::command::Command;
use crate::app::command::{RecipeCommand, WorkCommand};
use crate::app::document_parts::DocParts;
use crate::app::runtime_status::RuntimeStatus;
use crate::app::work::Work;
use crate::app::work::data::{DataCheck, DataChoice, DataKind};
use crate::calib::data::images::{ChannelOrder, Layout};
use crate::calib::range::RangeMethod;
use crate::eval::compare::task::TaskOptions;
use crate::runtime::{EpSpec, EpState, EpStatus, Flavor};

/// The runtime build that carries `ep`, when there is one to fetch.
fn flavor_of(ep: &EpSpec) -> Option<Flavor> {
    match ep {
        EpSpec::Cuda(_) | EpSpec::TensorRt(_) => Some(Flavor::Gpu),
        EpSpec::DirectMl(_) => Some(Flavor::Directml),
        EpSpec::OpenVino(_) => Some(Flavor::Openvino),
        EpSpec::Cpu | EpSpec::CoreMl => None,
    }
    .filter(|f| crate::runtime::pins::wheel_for(*f).is_some())
}

pub(super) fn show(
    ui: &mut Ui,
    doc: &mut DocParts<'_>,
    runtime: &RuntimeStatus,
    commands: &mut Vec<Command>,
) {
    let method = doc.planned.editor.recipe().calibration_method;
    let quantized = doc.is_quantized();
    let work = &mut doc.work;
    ui.columns(4, |columns| {
        let ui = &mut columns[0];
        ui.heading(if quantized {
            "Data"
        } else {
            "Calibration data"
        });
        data_editor(ui, "calib", &mut work.settings.calibration, false, commands);
        check_line(ui, &work.checks.calibration);

        let ui = &mut columns[1];
        ui.heading("Evaluation data");
        let settings = &mut work.settings;
        let mut same = settings.evaluate_on_calibration;
        if ui.checkbox(&mut same, "Same as the calibration data").changed() {
            if same {
                settings.evaluate_on_calibration = true;
            } else {
                settings.evaluate_apart();
            }
        }
        if quantized && settings.evaluation_choice().kind == DataKind::Random {
            let tick = ui
                .checkbox(&mut settings.random_chosen, "Compare on random data")
                .on_hover_text("Random data only shows how far the QDQ model drifts from its float model on noise; a comparison refuses it until it is chosen here.");
            if !settings.random_chosen {
                tick.highlight();
            }
        }
        if !settings.evaluate_on_calibration {
            data_editor(ui, "eval", &mut settings.evaluation, true, commands);
            check_line(ui, &work.checks.evaluation);
        }
        ui.checkbox(
            &mut settings.measure_latency,
            "Measure float and quantized latency",
        );
        ground_truth(ui, &mut settings.task);

        let ui = &mut columns[2];
        ui.heading("Execution provider");
        let before = settings.ep.clone();
        ep_list(ui, &mut settings.ep, runtime, commands);
        if settings.ep != before {
            commands.push(Command::Recipe(RecipeCommand::FollowEp(before, settings.ep.clone())));
        }

        let ui = &mut columns[3];
        ui.heading("Run");
        if quantized {
            batch_size_row(ui, &mut work.settings.batch_size);
            ui.label(
                RichText::new("This model is quantized already: nothing is calibrated.").weak(),
            );
        } else {
            run_column(ui, work, &method, commands);
        }
    });
}

/// Where the evaluation data's ground truth is: the array (empty: `labels` or `texts`) and,
/// for a CTC model without `character` metadata, its characters file.
fn ground_truth(ui: &mut Ui, task: &mut TaskOptions) {
    let optional_text = |ui: &mut Ui, value: &mut Option<String>, hint: &str, tip: &str| {
        let mut text = value.clone().unwrap_or_default();
        ui.add(egui::TextEdit::singleline(&mut text).hint_text(hint))
            .on_hover_text(tip);
        *value = Some(text.trim().to_owned()).filter(|t| !t.is_empty());
    };
    egui::Grid::new("ground-truth").num_columns(2).show(ui, |ui| {
        ui.label("Ground truth");
        optional_text(
            ui,
            &mut task.truth_key,
            "labels or texts",
            "The .npz array holding class labels or texts, one per sample (empty: 'labels' or 'texts' when present)",
        );
        ui.end_row();
        ui.label("Characters");
        let mut charset = task.charset.as_ref().map(|p| p.display().to_string());
        optional_text(
            ui,
            &mut charset,
            "from the model",
            "A CTC model's characters, one per line (empty: the model's 'character' metadata)",
        );
        task.charset = charset.map(std::path::PathBuf::from);
        ui.end_row();
    });
}

/// Batch size, samples, bins and method; the Run button; the statistics and their files.
/// Samples per run.
fn batch_size_row(ui: &mut Ui, batch_size: &mut usize) {
    ui.horizontal(|ui| {
        ui.label("Batch size");
        ui.add(egui::DragValue::new(batch_size).range(1..=4096));
    });
}

fn run_column(ui: &mut Ui, work: &mut Work, method: &RangeMethod, commands: &mut Vec<Command>) {
    let settings = &mut work.settings;
    egui::Grid::new("calib-settings")
        .num_columns(2)
        .show(ui, |ui| {
            ui.label("Batch size");
            ui.add(egui::DragValue::new(&mut settings.batch_size).range(1..=4096));
            ui.end_row();
            ui.label("Samples (0: all)");
            ui.add(egui::DragValue::new(&mut settings.max_samples).range(0..=1_000_000));
            ui.end_row();
            ui.label("Histogram bins");
            let mut bins = settings.histogram_bins;
            ui.add(
                egui::DragValue::new(&mut bins)
                    .range(8..=crate::calib::MAX_HISTOGRAM_BINS)
                    .speed(64),
            );
            settings.histogram_bins = (bins / 4).max(2) * 4;
            ui.end_row();
            ui.label("Method");
            method_editor(ui, method, commands);
            ui.end_row();
        });
    ui.add_space(6.0);
    let can_run = !work.busy() && !matches!(work.checks.calibration, DataCheck::Problem(_));
    ui.horizontal(|ui| {
        if ui
            .add_enabled(can_run, egui::Button::new("Run calibration"))
            .on_hover_text("Ctrl+R")
            .clicked()
        {
            commands.push(Command::Work(WorkCommand::Calibrate));
        }
    });
    let results = &work.results;
    match &results.stats {
        Some(stats) => {
            let info = &stats.info;
            ui.label(format!(
                "Statistics: {} tensors, {} samples, {} ({:.1} s){}",
                stats.tensors.len(),
                info.samples,
                if info.execution_providers.is_empty() {
                    "loaded".to_owned()
                } else {
                    info.execution_providers.join(" > ")
                },
                info.seconds,
                match (results.stats_saved, &results.saved_model) {
                    (true, _) => "",
                    // Quitting does not ask about them then: the model holds their ranges.
                    (false, Some(_)) => " · not saved (the saved model holds their ranges)",
                    (false, None) => " · not saved",
                }
            ));
            non_finite_line(ui, stats, commands);
        }
        None => {
            ui.label(RichText::new("No statistics yet").weak());
        }
    }
    ui.horizontal(|ui| {
        if ui
            .add_enabled(results.stats.is_some(), egui::Button::new("Save statistics…"))
            .clicked()
        {
            commands.push(Command::Work(WorkCommand::SaveStatisticsDialog));
        }
        if ui
            .button("Load statistics…")
            .on_hover_text("qdq-studio statistics, an onnxruntime calibration cache (JSON) or a TensorRT calibration cache")
            .clicked()
        {
            commands.push(Command::Work(WorkCommand::LoadStatisticsDialog));
        }
    });
}

fn data_editor(
    ui: &mut Ui,
    id: &str,
    choice: &mut DataChoice,
    evaluation: bool,
    commands: &mut Vec<Command>,
) {
    egui::ComboBox::from_id_salt((id, "kind"))
        .selected_text(choice.kind.label())
        .show_ui(ui, |ui| {
            for kind in DataKind::ALL {
                ui.selectable_value(&mut choice.kind, kind, kind.label());
            }
        });
    if choice.kind != DataKind::Random {
        ui.horizontal(|ui| {
            let label = ui.label(if evaluation { "Eval path" } else { "Data path" });
            ui.add(
                egui::TextEdit::singleline(&mut choice.path)
                    .desired_width(ui.available_width() - 80.0)
                    .hint_text(if choice.kind == DataKind::Text {
                        "text file (UTF-8)"
                    } else {
                        "file or folder"
                    }),
            )
            .labelled_by(label.id);
            if ui.button("Browse…").clicked() {
                commands.push(Command::Work(WorkCommand::BrowseData {
                    evaluation,
                    kind: choice.kind,
                }));
            }
        });
    }
    match choice.kind {
        DataKind::Images => images_editor(ui, id, choice),
        DataKind::Text => text_editor(ui, id, choice, evaluation, commands),
        DataKind::Random => {
            egui::Grid::new((id, "random"))
                .num_columns(2)
                .show(ui, |ui| {
                    ui.label("Samples");
                    ui.add(egui::DragValue::new(&mut choice.random_samples).range(1..=100_000));
                    ui.end_row();
                    ui.label("Shapes");
                    ui.add(
                        egui::TextEdit::singleline(&mut choice.shapes)
                            .hint_text("input:1x3x224x224")
                            .desired_width(200.0),
                    );
                    ui.end_row();
                    ui.label("Seed");
                    ui.add(egui::DragValue::new(&mut choice.seed));
                    ui.end_row();
                });
            ui.label(
                RichText::new(
                    "Random data exercises the pipeline; its ranges are not representative.",
                )
                .weak(),
            );
        }
        DataKind::File | DataKind::TestData => {}
    }
}

/// The tokenizer, the sequence length and the sequence count of text data.
fn text_editor(
    ui: &mut Ui,
    id: &str,
    choice: &mut DataChoice,
    evaluation: bool,
    commands: &mut Vec<Command>,
) {
    ui.horizontal(|ui| {
        let label = ui.label("Tokenizer");
        ui.add(
            egui::TextEdit::singleline(&mut choice.tokenizer)
                .desired_width(ui.available_width() - 80.0)
                .hint_text("tokenizer.json"),
        )
        .labelled_by(label.id);
        if ui.button("Browse…").clicked() {
            commands.push(Command::Work(WorkCommand::BrowseTokenizer { evaluation }));
        }
    });
    egui::Grid::new((id, "text")).num_columns(2).show(ui, |ui| {
        ui.label("Tokens per sequence (0: the model's)");
        ui.add(egui::DragValue::new(&mut choice.sequence).range(0..=1_000_000));
        ui.end_row();
        ui.label("Sequences at most");
        ui.add(egui::DragValue::new(&mut choice.text_samples).range(1..=100_000));
        ui.end_row();
    });
    ui.label(
        RichText::new(
            "The text is tokenized whole and cut into sequences; a language model's comparison reads perplexity off it.",
        )
        .weak(),
    );
}

fn images_editor(ui: &mut Ui, id: &str, choice: &mut DataChoice) {
    let p = &mut choice.preprocess;
    egui::Grid::new((id, "images"))
        .num_columns(2)
        .show(ui, |ui| {
            ui.label("Size W×H");
            ui.horizontal(|ui| {
                ui.add(egui::DragValue::new(&mut p.width).range(1..=8192));
                ui.add(egui::DragValue::new(&mut p.height).range(1..=8192));
            });
            ui.end_row();
            ui.label("Resize shorter side (0: plain resize)");
            ui.add(egui::DragValue::new(&mut p.resize_shorter).range(0..=8192));
            ui.end_row();
            ui.label("Channels");
            ui.horizontal(|ui| {
                ui.radio_value(&mut p.channels, ChannelOrder::Rgb, "RGB");
                ui.radio_value(&mut p.channels, ChannelOrder::Bgr, "BGR");
            });
            ui.end_row();
            ui.label("Layout");
            ui.horizontal(|ui| {
                ui.radio_value(&mut p.layout, Layout::Nchw, "NCHW");
                ui.radio_value(&mut p.layout, Layout::Nhwc, "NHWC");
            });
            ui.end_row();
            ui.label("Scale");
            ui.add(
                egui::DragValue::new(&mut p.scale)
                    .speed(0.0001)
                    .max_decimals(6),
            );
            ui.end_row();
            ui.label("Mean");
            ui.horizontal(|ui| {
                for v in &mut p.mean {
                    ui.add(egui::DragValue::new(v).speed(0.001).max_decimals(4));
                }
            });
            ui.end_row();
            ui.label("Std");
            ui.horizontal(|ui| {
                for v in &mut p.std {
                    ui.add(
                        egui::DragValue::new(v)
                            .speed(0.001)
                            .max_decimals(4)
                            .range(1e-6..=1e6),
                    );
                }
            });
            ui.end_row();
        });
}

fn check_line(ui: &mut Ui, check: &DataCheck) {
    match check {
        DataCheck::Unchecked => {}
        DataCheck::Checking(_) => {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("Checking the data against the model…");
            });
        }
        DataCheck::Fits(summary) => {
            ui.colored_label(Color32::from_rgb(60, 170, 110), format!("✔ {summary}"));
        }
        DataCheck::Problem(problem) => {
            ui.colored_label(ui.visuals().error_fg_color, format!("✖ {problem}"));
        }
    }
}

fn ep_list(ui: &mut Ui, chosen: &mut EpSpec, runtime: &RuntimeStatus, commands: &mut Vec<Command>) {
    let eps: Option<&[EpStatus]> = match runtime {
        RuntimeStatus::Ready { eps, .. } => Some(eps),
        _ => None,
    };
    ui.label(RichText::new(runtime.summary()).weak());
    if matches!(runtime, RuntimeStatus::Missing(_)) {
        // First run without a bundled or installed runtime: say so and offer the installer.
        ui.label(
            "Calibrating and comparing run the model in ONNX Runtime, which was not found \
             beside qdq-studio, in its cache, or in a Python install.",
        );
        if ui
            .button("Get ONNX Runtime (CPU)")
            .on_hover_text(
                "Downloads the pinned onnxruntime wheel from PyPI (about 15 MB), checks its \
                 sha256 and keeps the library in qdq-studio's cache",
            )
            .clicked()
        {
            commands.push(Command::Work(WorkCommand::InstallRuntime(Flavor::Cpu)));
        }
        return;
    }
    let Some(eps) = eps else {
        ui.radio_value(chosen, EpSpec::Cpu, "cpu");
        ui.label(
            RichText::new("Other providers are listed once ONNX Runtime has been found.").weak(),
        );
        return;
    };
    let mut fetch: Vec<Flavor> = Vec::new();
    for status in eps {
        let ready = status.state == EpState::Ready;
        let (note, colour) = match &status.state {
            EpState::Ready => ("ready".to_owned(), None),
            EpState::Unavailable(reason) => (
                format!("cannot run here: {reason}"),
                Some(ui.visuals().warn_fg_color),
            ),
            EpState::NotInLibrary(_) => {
                if let Some(f) = flavor_of(&status.ep).filter(|f| !fetch.contains(f)) {
                    fetch.push(f);
                }
                ("not in this ONNX Runtime build".to_owned(), None)
            }
        };
        ui.horizontal(|ui| {
            let response = ui.add_enabled(
                ready,
                egui::RadioButton::new(*chosen == status.ep, status.ep.to_string()),
            );
            if response.clicked() {
                *chosen = status.ep.clone();
            }
            let text = RichText::new(note).small();
            match colour {
                Some(c) => ui.colored_label(c, text),
                None => ui.label(text.weak()),
            }
            .on_hover_text(match &status.state {
                EpState::NotInLibrary(hint) => hint.clone(),
                _ => status.ort_name.clone(),
            });
        });
    }
    for flavor in fetch {
        let label = match flavor {
            Flavor::Gpu => "Get the GPU runtime (CUDA, TensorRT)",
            Flavor::Directml => "Get the DirectML runtime",
            Flavor::Openvino => "Get the OpenVINO runtime",
            Flavor::Cpu => continue,
        };
        if ui
            .button(label)
            .on_hover_text(
                "Downloads the pinned ONNX Runtime build into the cache; restart to use it",
            )
            .clicked()
        {
            commands.push(Command::Work(WorkCommand::InstallRuntime(flavor)));
        }
    }
}

fn method_editor(ui: &mut Ui, method: &RangeMethod, commands: &mut Vec<Command>) {
    ui.vertical(|ui| {
        egui::ComboBox::from_id_salt("calib-method")
            .selected_text(method.name())
            .show_ui(ui, |ui| {
                for m in RangeMethod::all() {
                    if ui
                        .selectable_label(m.name() == method.name(), m.name())
                        .clicked()
                        && m.name() != method.name()
                    {
                        commands.push(Command::Work(WorkCommand::SetMethod(m)));
                    }
                }
            });
        match method {
            RangeMethod::Percentile {
                percentile,
                symmetric,
            } => {
                let (mut p, mut s) = (*percentile, *symmetric);
                ui.horizontal(|ui| {
                    ui.label("Percentile");
                    ui.add(
                        egui::DragValue::new(&mut p)
                            .range(50.0..=100.0)
                            .speed(0.001)
                            .max_decimals(4),
                    );
                });
                ui.checkbox(&mut s, "Symmetric (|x|)");
                if (p, s) != (*percentile, *symmetric) {
                    commands.push(Command::Work(WorkCommand::SetMethod(
                        RangeMethod::Percentile {
                            percentile: p,
                            symmetric: s,
                        },
                    )));
                }
            }
            RangeMethod::Entropy { num_quantized_bins } => {
                let mut bins = *num_quantized_bins;
                ui.horizontal(|ui| {
                    ui.label("Quantized bins");
                    ui.add(egui::DragValue::new(&mut bins).range(2..=65536));
                });
                if bins != *num_quantized_bins {
                    commands.push(Command::Work(WorkCommand::SetMethod(
                        RangeMethod::Entropy {
                            num_quantized_bins: bins,
                        },
                    )));
                }
            }
            RangeMethod::MinMax { moving_average } => {
                let mut m = *moving_average;
                ui.checkbox(&mut m, "Moving average of batch extremes");
                if m != *moving_average {
                    commands.push(Command::Work(WorkCommand::SetMethod(RangeMethod::MinMax {
                        moving_average: m,
                    })));
                }
            }
            RangeMethod::Mse | RangeMethod::PowerOfTwoNonOverflow | RangeMethod::PowerOfTwoMse => {}
        }
    });
}

/// A warning when calibration met NaN or ±Inf, with a link to the first such tensor's
/// histogram (ranges leave those values out; the model may be broken on this data).
fn non_finite_line(
    ui: &mut Ui,
    stats: &crate::calib::CalibrationStats,
    commands: &mut Vec<Command>,
) {
    let tensors = stats.non_finite_tensors();
    let Some(first) = tensors.first() else {
        return;
    };
    ui.horizontal_wrapped(|ui| {
        ui.colored_label(
            ui.visuals().warn_fg_color,
            format!(
                "{} tensor(s) hold NaN or ±Inf (left out of their ranges)",
                tensors.len()
            ),
        );
        if ui.link(format!("Show {first}")).clicked() {
            commands.push(Command::Work(WorkCommand::ShowHistogram(
                (*first).to_owned(),
            )));
        }
    });
}
