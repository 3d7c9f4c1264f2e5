//! The Results tab: the heat-map controls, the outputs table (float against quantized, with
//! latency beside it), the worst tensors, and one sample's outputs side by side: both maps and
//! their difference as images for image-like outputs, the largest values otherwise.

use crate::app::command::{ViewCommand, WorkCommand};
use crate::eval::tensor_error::tensors::{ErrorKind, TensorErrors};
use egui::{Color32, ColorImage, RichText, TextureOptions, Ui};
use ndarray::{ArrayD, Axis};

use crate::app::command::Command;
use crate::app::document_parts::{DocParts, Planned, Shown};
use crate::app::panel_state::{OutputImages, PanelState};
use crate::app::work::heat;
use crate::eval::compare::OutputKind;
use crate::eval::compare::reference::OutputPair;
use crate::eval::compare::task::TaskOptions;
use crate::report::SpeedVerdict;
use crate::workflow::compare::{Comparison, TENSOR_SAMPLES};

pub(super) fn show(ui: &mut Ui, doc: &mut DocParts<'_>, commands: &mut Vec<Command>) {
    if doc.is_quantized() {
        float_model_row(ui, doc, commands);
    }
    let quantized = doc.is_quantized();
    let DocParts {
        work,
        planned: Planned { editor, .. },
        view: Shown { heat, panel, .. },
        ..
    } = doc;
    let Some(comparison) = work.results.comparison.as_ref() else {
        ui.label(if quantized {
            "Compare (F5) measures this quantized model against its float model on the evaluation data: outputs, every quantized tensor (the heat map), latency."
        } else {
            "Quantize & compare (F5) builds the QDQ model from the cached statistics and measures it against the float model on the evaluation data."
        });
        return;
    };
    if !quantized && &comparison.recipe != editor.recipe() {
        ui.colored_label(
            ui.visuals().warn_fg_color,
            "These results are for an earlier recipe: press Quantize & compare (F5) to update them.",
        );
    } else if comparison.reference.task != work.settings.task {
        ui.colored_label(
            ui.visuals().warn_fg_color,
            "These results were measured with other output kinds or ground truth: press Quantize & compare (F5) to update them.",
        );
    }
    measured_on(ui, comparison);
    // Three columns where they fit; in a narrower window the side-by-side outputs go under
    // the other two, and what is still too wide scrolls sideways rather than being cut.
    // The first two columns' width is known from the last frame (long layer names widen the
    // heat map's list); the third goes beside them only with room for it.
    let measured = ui.id().with("results-two-columns");
    let two: f32 = ui.data(|d| d.get_temp(measured)).unwrap_or(f32::INFINITY);
    let wide = ui.available_width() >= two + SIDE_BY_SIDE_WIDTH;
    egui::ScrollArea::horizontal()
        .id_salt("results-columns")
        .show(ui, |ui| {
            ui.horizontal_top(|ui| {
                let first_two = ui.horizontal_top(|ui| {
                    ui.vertical(|ui| {
                        // Its lines wrap here; only a table wider than this widens it.
                        ui.set_max_width(FIRST_COLUMN_WIDTH);
                        outputs_table(ui, comparison);
                        output_kinds(ui, comparison, &work.settings.task, commands);
                        task_table(ui, comparison);
                        latency(ui, comparison);
                        quantizer_section(ui, comparison);
                    });
                    ui.separator();
                    ui.vertical(|ui| {
                        ui.set_width(HEAT_COLUMN_WIDTH);
                        heat_controls(ui, comparison, heat.as_deref(), panel, commands);
                    });
                });
                let width = first_two.response.rect.width();
                if (width - two).abs() > 1.0 {
                    // Laid out on a guess: once more with the width now known.
                    ui.data_mut(|d| d.insert_temp(measured, width));
                    ui.ctx().request_repaint();
                }
                if wide {
                    ui.separator();
                    ui.vertical(|ui| side_by_side(ui, panel, comparison, commands));
                }
            });
            if !wide {
                ui.separator();
                side_by_side(ui, panel, comparison, commands);
            }
        });
}

/// What the figures below rest on: the verdict and the data it was measured on (a warning
/// when that was random data), then what was quantized and how long each stage took.
fn measured_on(ui: &mut Ui, comparison: &Comparison) {
    ui.add(egui::Label::new(RichText::new(comparison.verdict()).strong()).wrap());
    if comparison.on_random_data() {
        ui.add(
            egui::Label::new(
                RichText::new(
                    "Random data: these figures say how far the QDQ model drifts on noise, not how it does on real inputs: choose evaluation data beside the calibration data.",
                )
                .color(ui.visuals().warn_fg_color),
            )
            .wrap(),
        );
    }
    let target = comparison
        .target
        .map_or_else(String::new, |t| format!(" for target {}", t.name()));
    let t = comparison.timings;
    ui.add(
        egui::Label::new(
            RichText::new(format!(
                "{} nodes quantized{target} · per-tensor SQNR on the first {} samples · {:.0} ms (quantize {:.0}, float reference {:.0}, outputs {:.0}, tensors {:.0}, latency {:.0})",
                comparison.quantized_nodes.len(),
                TENSOR_SAMPLES,
                t.total_ms, t.quantize_ms, t.reference_ms, t.outputs_ms, t.tensors_ms, t.latency_ms
            ))
            .weak(),
        )
        .wrap(),
    );
}

/// What building the QDQ model did: one line per step (the lines the CLI prints), and each
/// technique's per-layer table folded under its first column's title.
fn quantizer_section(ui: &mut Ui, comparison: &Comparison) {
    let Some(built) = &comparison.built else {
        return;
    };
    ui.add_space(6.0);
    ui.label(RichText::new("What the quantizer did").strong());
    for line in built.technique_lines() {
        ui.label(RichText::new(line).small());
    }
    for (i, table) in built.layer_tables(10).into_iter().enumerate() {
        let title = table.header.first().copied().unwrap_or("layers");
        egui::CollapsingHeader::new(format!("{title}s: the {} largest", table.rows.len()))
            .id_salt(("quantizer-table", i))
            .show(ui, |ui| {
                egui::Grid::new(("quantizer-grid", i))
                    .striped(true)
                    .show(ui, |ui| {
                        for cell in &table.header {
                            ui.label(RichText::new(*cell).small().strong());
                        }
                        ui.end_row();
                        for row in &table.rows {
                            for cell in row {
                                ui.label(RichText::new(cell).small());
                            }
                            ui.end_row();
                        }
                    });
            });
    }
}

/// The widest the first column (outputs, latency, what the quantizer did) grows: its lines
/// wrap within it, so that the heat map keeps its room beside it in a 1024-point window.
const FIRST_COLUMN_WIDTH: f32 = 560.0;

/// The heat map column's width: the worst tensors' names lose their start to fit it.
const HEAT_COLUMN_WIDTH: f32 = 380.0;

/// Room the side-by-side column needs beside the other two (three images of at least 80
/// points, their labels, the values table).
const SIDE_BY_SIDE_WIDTH: f32 = 440.0;

/// For a model that is quantized already: the float model it is compared against.
fn float_model_row(ui: &mut Ui, doc: &DocParts<'_>, commands: &mut Vec<Command>) {
    ui.horizontal(|ui| {
        ui.label("Float model");
        match &doc.work.float_model {
            Some(float) => {
                ui.label(RichText::new(float.path.display().to_string()).monospace());
            }
            None => {
                ui.colored_label(ui.visuals().warn_fg_color, "not chosen yet");
            }
        }
        if ui
            .button("Float model…")
            .on_hover_text("The float model this quantized model was made from")
            .clicked()
        {
            commands.push(Command::Work(WorkCommand::ChooseFloatModel));
        }
    });
    ui.separator();
}

/// The fidelity columns of the outputs table, shown for every output; the agreement columns
/// after them are shown only when some output has that figure (they fit its kind).
const FIDELITY_COLUMNS: usize = 6;

/// Per-output metrics: fidelity, and the agreements that fit some output's kind.
fn outputs_table(ui: &mut Ui, comparison: &Comparison) {
    ui.heading("Outputs");
    let rows: Vec<[String; 11]> = comparison.outputs.iter().map(|m| m.table_row()).collect();
    let shown: Vec<usize> = (0..crate::eval::compare::OUTPUT_TABLE_HEADER.len())
        .filter(|&c| c < FIDELITY_COLUMNS || rows.iter().any(|r| r[c] != "-"))
        .collect();
    egui::Grid::new("outputs-table")
        .striped(true)
        .num_columns(shown.len())
        .show(ui, |ui| {
            for &c in &shown {
                ui.label(RichText::new(crate::eval::compare::OUTPUT_TABLE_HEADER[c]).strong());
            }
            ui.end_row();
            for row in &rows {
                for &c in &shown {
                    if c == 0 {
                        ui.label(RichText::new(&row[c]).monospace());
                    } else {
                        ui.label(&row[c]);
                    }
                }
                ui.end_row();
            }
        });
}

/// One menu per output: the kind it is read as (detected, or chosen).
fn output_kinds(
    ui: &mut Ui,
    comparison: &Comparison,
    task: &TaskOptions,
    commands: &mut Vec<Command>,
) {
    ui.add_space(4.0);
    ui.label(RichText::new("Output kinds").strong())
        .on_hover_text("The kind decides the task metrics: top-1 for class scores, CTC readings for sequences, neighbours for embeddings, mask IoU for dense maps");
    for m in &comparison.outputs {
        ui.horizontal(|ui| {
            let chosen = task.kinds.get(&m.name).copied();
            let shown = chosen.unwrap_or(m.kind);
            ui.label(RichText::new(&m.name).monospace());
            egui::ComboBox::from_id_salt(("output-kind", &m.name))
                .selected_text(format!(
                    "{}{}",
                    shown.label(),
                    if chosen.is_some() { " (chosen)" } else { "" }
                ))
                .show_ui(ui, |ui| {
                    if ui.selectable_label(chosen.is_none(), "Detected").clicked() {
                        commands.push(Command::Work(WorkCommand::SetOutputKind {
                            output: m.name.clone(),
                            kind: None,
                        }));
                    }
                    for kind in OutputKind::ALL {
                        if ui
                            .selectable_label(chosen == Some(kind), kind.label())
                            .clicked()
                        {
                            commands.push(Command::Work(WorkCommand::SetOutputKind {
                                output: m.name.clone(),
                                kind: Some(kind),
                            }));
                        }
                    }
                });
        });
    }
}

/// Scores against the evaluation data's ground truth, float beside quantized.
fn task_table(ui: &mut Ui, comparison: &Comparison) {
    let rows: Vec<[String; 5]> = comparison
        .outputs
        .iter()
        .flat_map(|m| m.task_rows())
        .collect();
    let Some(key) = comparison.reference.reference.truth_key() else {
        ui.label(
            RichText::new("No ground truth: keep 'labels' or 'texts' beside the inputs in the evaluation .npz for accuracy.")
                .weak(),
        );
        return;
    };
    ui.add_space(4.0);
    ui.label(RichText::new(format!("Against ground truth ('{key}')")).strong());
    egui::Grid::new("task-table").striped(true).show(ui, |ui| {
        for h in crate::eval::compare::TASK_TABLE_HEADER {
            ui.label(RichText::new(h).strong());
        }
        ui.end_row();
        for [name, rest @ ..] in rows {
            ui.label(RichText::new(name).monospace());
            for cell in rest {
                ui.label(cell);
            }
            ui.end_row();
        }
    });
}

/// Latency of both models, and which kernels the quantized one ran.
fn latency(ui: &mut Ui, comparison: &Comparison) {
    let Some(l) = &comparison.latency else {
        return;
    };
    ui.add_space(4.0);
    ui.label(RichText::new("Latency (median of 10 runs)").strong());
    let verdict = l.verdict();
    let line = format!(
        "float {:.2} ms · quantized {:.2} ms · {verdict}",
        l.float.median_ms, l.quantized.median_ms,
    );
    match verdict {
        SpeedVerdict::Faster(_) | SpeedVerdict::Unclear(_) => {
            ui.label(line);
        }
        SpeedVerdict::Slower(_) | SpeedVerdict::Noisy(_) => {
            ui.colored_label(ui.visuals().warn_fg_color, line);
        }
    }
    ui.label(
        RichText::new(format!(
            "p90 {:.2} / {:.2} ms on {}, batch {}",
            l.float.p90_ms,
            l.quantized.p90_ms,
            l.float.execution_providers.join(" > "),
            l.float.batch_size
        ))
        .weak(),
    );
    if let Some(note) = l.noise_note() {
        ui.colored_label(ui.visuals().warn_fg_color, note);
    }
    if let Some(kernels) = &l.quantized.kernels {
        let line = format!("Kernels: {}", kernels.line());
        if kernels.hint.is_some() {
            ui.colored_label(ui.visuals().warn_fg_color, line);
        } else {
            ui.label(RichText::new(line).weak());
        }
    }
}

/// The heat map's switch and threshold, the nodes under it, and the worst tensors.
fn heat_controls(
    ui: &mut Ui,
    comparison: &Comparison,
    heat: Option<&[Option<f64>]>,
    panel: &PanelState,
    commands: &mut Vec<Command>,
) {
    ui.heading("Heat map");
    let (mut shown, mut threshold_db) = (panel.heat_map, panel.heat_threshold_db);
    let mut kind = panel.heat_kind;
    let mut changed = ui
        .checkbox(&mut shown, "Colour the graph by per-tensor SQNR")
        .changed();
    changed |= error_kind_switch(ui, &comparison.tensors, &mut kind);
    changed |= ui
        .add(egui::Slider::new(&mut threshold_db, 0.0..=60.0).text("threshold dB"))
        .changed();
    if changed {
        commands.push(Command::Work(WorkCommand::SetHeatMap {
            shown,
            kind,
            threshold_db,
        }));
    }
    let below = heat
        .map(|h| heat::below(h, f64::from(threshold_db)))
        .unwrap_or_default();
    ui.label(format!(
        "{} node(s) under {threshold_db:.1} dB",
        below.len()
    ));
    if ui
        .add_enabled(!below.is_empty(), egui::Button::new("Select them"))
        .on_hover_text("Then X leaves them in float")
        .clicked()
    {
        commands.push(Command::View(ViewCommand::SelectNodes(below.clone())));
    }
    ui.add_space(4.0);
    worst_layers(ui, &comparison.tensors, commands);
    worst_tensors(ui, &comparison.tensors, panel.heat_kind, commands);
    rescaled_note(ui, &comparison.tensors);
}

/// Says which activations the heat map leaves uncoloured because the quantizer rescaled them
/// on purpose (equalization, AWQ, SmoothQuant); nothing when none was.
fn rescaled_note(ui: &mut Ui, tensors: &TensorErrors) {
    if let Some(note) = crate::report::rescaled_note(tensors) {
        ui.label(
            RichText::new(format!(
                "{} rescaled activation(s) not measured",
                tensors.rescaled.len()
            ))
            .weak(),
        )
        .on_hover_text(note);
    }
}

/// The switch between cumulative and local error (local disabled, saying why, when it was
/// not measured). True when the user changed it.
fn error_kind_switch(ui: &mut Ui, tensors: &TensorErrors, kind: &mut ErrorKind) -> bool {
    let before = *kind;
    ui.horizontal(|ui| {
        ui.label("Error:");
        for option in [ErrorKind::Cumulative, ErrorKind::Local] {
            let available = option == ErrorKind::Cumulative || !tensors.local.is_empty();
            let hover = match (&tensors.local_unavailable, available) {
                (Some(reason), false) => format!("Not measured: {reason}"),
                _ => option.meaning().to_owned(),
            };
            ui.add_enabled_ui(available, |ui| {
                ui.selectable_value(kind, option, option.label())
                    .on_hover_text(hover)
                    .on_disabled_hover_text(
                        tensors
                            .local_unavailable
                            .as_deref()
                            .unwrap_or("Not measured for this model"),
                    );
            });
        }
    });
    *kind != before
}

/// The tensors with the worst error of `kind`, each with the other kind beside it; a click
/// shows the tensor's histogram and finds its node.
fn worst_tensors(
    ui: &mut Ui,
    tensors: &TensorErrors,
    kind: ErrorKind,
    commands: &mut Vec<Command>,
) {
    let other = match kind {
        ErrorKind::Cumulative => ErrorKind::Local,
        ErrorKind::Local => ErrorKind::Cumulative,
    };
    let others: std::collections::HashMap<&str, f64> = tensors.sqnr_of(other).collect();
    let mut worst: Vec<(&str, f64)> = tensors.sqnr_of(kind).collect();
    if worst.is_empty() {
        return;
    }
    worst.sort_by(|a, b| a.1.total_cmp(&b.1));
    let title = match kind {
        ErrorKind::Cumulative => "Worst tensors (float vs QDQ · local)",
        ErrorKind::Local => "Where the error is made (local · float vs QDQ)",
    };
    ui.label(RichText::new(title).strong());
    for (tensor, db) in worst.into_iter().take(6) {
        ui.horizontal(|ui| {
            ui.label(format!("{db:6.2} dB"));
            if let Some(other) = others.get(tensor) {
                ui.label(RichText::new(format!("{other:6.2} dB")).weak());
            }
            if crate::app::names::name_link(ui, tensor).clicked() {
                commands.push(Command::Work(WorkCommand::ShowHistogram(tensor.to_owned())));
                commands.push(Command::View(ViewCommand::Search(tensor.to_owned())));
            }
        });
    }
}

/// The weight-only quantized layers (int4) with the worst outputs, each with its weight's
/// error; nothing for models whose activations are quantized.
fn worst_layers(ui: &mut Ui, tensors: &TensorErrors, commands: &mut Vec<Command>) {
    if tensors.layers.is_empty() {
        return;
    }
    ui.label(RichText::new("Worst layers (output float vs quantized · weight)").strong());
    let mut worst: Vec<_> = tensors.layers.iter().collect();
    worst.sort_by(|a, b| a.sqnr_db.total_cmp(&b.sqnr_db));
    for layer in worst.iter().take(6) {
        ui.horizontal(|ui| {
            ui.label(format!("{:6.2} dB", layer.sqnr_db));
            if let Some(w) = tensors.weight_of(&layer.node) {
                ui.label(RichText::new(format!("weight {:.2} dB", w.sqnr_db)).weak());
            }
            if crate::app::names::name_link(ui, &layer.node).clicked() {
                commands.push(Command::View(ViewCommand::Search(layer.node.clone())));
            }
        });
    }
    ui.add_space(4.0);
}

fn side_by_side(
    ui: &mut Ui,
    panel: &mut PanelState,
    comparison: &Comparison,
    commands: &mut Vec<Command>,
) {
    let PanelState {
        output_images: images,
        output_index,
        sample,
        ..
    } = panel;
    ui.heading("Side by side");
    let (shown, pairs) = &comparison.sample;
    let samples = comparison.reference.reference.samples();
    ui.horizontal(|ui| {
        ui.label("Sample");
        let mut wanted = *shown;
        let response =
            ui.add(egui::DragValue::new(&mut wanted).range(0..=samples.saturating_sub(1)));
        if response.changed() && wanted != *shown {
            *sample = wanted;
            commands.push(Command::Work(WorkCommand::ShowSample(wanted)));
        }
        if !pairs.is_empty() {
            *output_index = (*output_index).min(pairs.len() - 1);
            egui::ComboBox::from_id_salt("side-output")
                .selected_text(&pairs[*output_index].name)
                .show_ui(ui, |ui| {
                    for (i, p) in pairs.iter().enumerate() {
                        ui.selectable_value(output_index, i, &p.name);
                    }
                });
        }
    });
    let Some(pair) = pairs.get(*output_index) else {
        ui.label("No float output to show.");
        return;
    };
    let dims: Vec<String> = pair.float.shape().iter().map(usize::to_string).collect();
    ui.label(RichText::new(format!("{} [{}]", pair.name, dims.join(", "))).weak());
    match image_plane(&pair.float) {
        Some(_) => image_view(ui, images, pair, (*shown, *output_index, 0)),
        None => value_table(ui, pair),
    }
}

/// The first 2-D plane of an image-like output (`[1, C, H, W]`, `[1, H, W]` with H, W > 1).
fn image_plane(a: &ArrayD<f32>) -> Option<ndarray::ArrayView2<'_, f32>> {
    let shape = a.shape();
    let (h, w) = match shape.len() {
        4 => (shape[2], shape[3]),
        3 => (shape[1], shape[2]),
        _ => return None,
    };
    if h < 2 || w < 2 {
        return None;
    }
    let mut view = a.view();
    while view.ndim() > 2 {
        view = view.index_axis_move(Axis(0), 0);
    }
    view.into_dimensionality().ok()
}

/// The longest side an output image is drawn with: GPUs refuse textures past their limit
/// (16384 and less), and a side beyond this (a `[1, 32, 32000]` logits tensor) is sampled.
const MAX_IMAGE_SIDE: usize = 4096;

/// `plane` with every n-th row and column, so neither side passes [`MAX_IMAGE_SIDE`].
fn sampled(plane: ndarray::ArrayView2<'_, f32>) -> ndarray::ArrayView2<'_, f32> {
    let step = |side: usize| side.div_ceil(MAX_IMAGE_SIDE).max(1) as isize;
    let (h, w) = plane.dim();
    plane.slice_move(ndarray::s![..;step(h), ..;step(w)])
}

fn grey(plane: ndarray::ArrayView2<'_, f32>, lo: f32, hi: f32) -> ColorImage {
    let (h, w) = plane.dim();
    let span = (hi - lo).max(f32::EPSILON);
    let pixels = plane
        .iter()
        .map(|&v| {
            let g = (((v - lo) / span).clamp(0.0, 1.0) * 255.0) as u8;
            Color32::from_gray(g)
        })
        .collect();
    ColorImage::new([w, h], pixels)
}

fn image_view(
    ui: &mut Ui,
    images: &mut Option<OutputImages>,
    pair: &OutputPair,
    key: (usize, usize, usize),
) {
    if images.as_ref().is_none_or(|i| i.key != key) {
        let (Some(f), Some(q)) = (image_plane(&pair.float), image_plane(&pair.quantized)) else {
            return;
        };
        let (f, q) = (sampled(f), sampled(q));
        let (lo, hi) = f
            .iter()
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &v| {
                (a.min(v), b.max(v))
            });
        let difference = &f - &q;
        let max_difference = difference.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let (h, w) = difference.dim();
        let diff_image = ColorImage::new(
            [w, h],
            difference
                .iter()
                .map(|&d| {
                    let t = (d.abs() / max_difference.max(f32::EPSILON)).clamp(0.0, 1.0);
                    Color32::from_rgb((t * 255.0) as u8, (t * 60.0) as u8, (t * 40.0) as u8)
                })
                .collect(),
        );
        let ctx = ui.ctx();
        let load = |name: &str, image: ColorImage| {
            ctx.load_texture(format!("side-{name}"), image, TextureOptions::NEAREST)
        };
        *images = Some(OutputImages {
            key,
            textures: [
                load("float", grey(f, lo, hi)),
                load("quant", grey(q, lo, hi)),
                load("diff", diff_image),
            ],
            max_difference,
        });
    }
    let Some(images) = images.as_ref() else {
        return;
    };
    let [float, quant, diff] = &images.textures;
    let size = float.size_vec2();
    // Three images in the width there is (a long, thin map would otherwise run off the
    // window), from 80 to 260 points each.
    let width =
        ((ui.available_width() - 3.0 * ui.spacing().item_spacing.x) / 3.0).clamp(80.0, 260.0);
    let scale = (width / size.x.max(1.0)).min(200.0 / size.y.max(1.0));
    ui.horizontal(|ui| {
        for (label, texture) in [
            ("float", float),
            ("quantized", quant),
            ("|difference|", diff),
        ] {
            ui.vertical(|ui| {
                ui.label(label);
                ui.image((texture.id(), size * scale));
            });
        }
    });
    ui.label(
        RichText::new(format!(
            "Same grey scale for float and quantized; difference scaled to its max {:.4}",
            images.max_difference
        ))
        .weak(),
    );
}

fn value_table(ui: &mut Ui, pair: &OutputPair) {
    let f: Vec<f32> = pair.float.iter().copied().collect();
    let q: Vec<f32> = pair.quantized.iter().copied().collect();
    let argmax = |v: &[f32]| {
        v.iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, v)| (i, *v))
    };
    if let (Some((fi, fv)), Some((qi, qv))) = (argmax(&f), argmax(&q)) {
        let same = fi == qi;
        ui.colored_label(
            if same {
                Color32::from_rgb(60, 170, 110)
            } else {
                ui.visuals().error_fg_color
            },
            format!(
                "largest: float #{fi} ({fv:.4}) · quantized #{qi} ({qv:.4}){}",
                if same { " · same" } else { " · differs" }
            ),
        );
    }
    let mut order: Vec<usize> = (0..f.len()).collect();
    order.sort_by(|&a, &b| f[b].abs().total_cmp(&f[a].abs()));
    egui::Grid::new("side-values")
        .striped(true)
        .num_columns(4)
        .show(ui, |ui| {
            for h in ["index", "float", "quantized", "difference"] {
                ui.label(RichText::new(h).strong());
            }
            ui.end_row();
            for &i in order.iter().take(10) {
                ui.label(i.to_string());
                ui.label(format!("{:.5}", f[i]));
                ui.label(format!("{:.5}", q.get(i).copied().unwrap_or(f32::NAN)));
                ui.label(format!(
                    "{:+.5}",
                    q.get(i).copied().unwrap_or(f32::NAN) - f[i]
                ));
                ui.end_row();
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plane_wider_than_a_texture_is_sampled_down() {
        let wide = ndarray::Array2::<f32>::zeros((32, 32_000));
        assert_eq!(sampled(wide.view()).dim(), (32, 4000));
        let small = ndarray::Array2::<f32>::zeros((48, 160));
        assert_eq!(sampled(small.view()).dim(), (48, 160));
        assert_eq!(grey(small.view(), 0.0, 1.0).size, [160, 48]);
    }
}
