//! The Histograms tab: a calibrated tensor's activation histogram with every method's range
//! drawn on it, the range quantization will use highlighted, and its ends draggable to set an
//! override; the method can be chosen per tensor. Weighted nodes also show each output
//! channel's weight range.
//!
//! Drawn with egui's painter rather than plotters (which draws the report's charts): the
//! range ends are dragged with the pointer, which needs the value↔pixel mapping in egui's own
//! coordinates.

use std::sync::Arc;

use egui::{Color32, Pos2, Rect, RichText, Sense, Stroke, Ui, pos2, vec2};

use crate::app::command::Command;
use crate::app::document::Document;
use crate::app::studio::Studio;
use crate::calib::TensorStats;
use crate::calib::range::{self, Range, RangeMethod};
use crate::quant::rewrite::qtype_range_target;
use crate::recipe::{QuantType, Recipe, TensorOverride};
use crate::report::charts::clipped_share;

/// Colour of each method's range lines (the legend uses them too).
fn method_colour(name: &str) -> Color32 {
    match name {
        "minmax" => Color32::from_rgb(90, 160, 255),
        "entropy" => Color32::from_rgb(230, 120, 60),
        "percentile" => Color32::from_rgb(180, 110, 230),
        "mse" => Color32::from_rgb(60, 190, 140),
        "pow2" => Color32::from_rgb(200, 200, 90),
        _ => Color32::from_rgb(160, 160, 160),
    }
}

/// The range quantization will use for `tensor`, and where it comes from.
pub(crate) fn effective_range(
    recipe: &Recipe,
    tensor: &str,
    stats: &TensorStats,
    parity: bool,
) -> Option<(Range, String)> {
    let over = recipe.tensor_overrides.get(tensor);
    if let Some([lo, hi]) = over.and_then(|o| o.range) {
        return Some((Range { lo, hi }, "override".to_owned()));
    }
    let method = over
        .and_then(|o| o.method)
        .unwrap_or(recipe.calibration_method);
    let range = range::compute(stats, &method, target(recipe, tensor), parity).ok()?;
    Some((range, method.name().to_owned()))
}

fn target(recipe: &Recipe, tensor: &str) -> range::RangeTarget {
    let qtype = recipe
        .tensor_overrides
        .get(tensor)
        .and_then(|o| o.dtype)
        .unwrap_or(recipe.activation_type);
    qtype_range_target(
        qtype,
        recipe.symmetric_activations || qtype == QuantType::Float8e4m3fn,
    )
}

pub(super) fn show(studio: &mut Studio, ui: &mut Ui, commands: &mut Vec<Command>) {
    let Some(doc) = studio.doc.as_mut() else {
        return;
    };
    let Some(stats) = doc.work.stats.clone() else {
        ui.label("Run calibration (Ctrl+R) or load statistics to see activation histograms.");
        weights_section(ui, doc);
        return;
    };
    ui.horizontal_top(|ui| {
        ui.vertical(|ui| {
            ui.set_width(280.0);
            tensor_list(ui, doc, &stats, commands);
        });
        ui.separator();
        ui.vertical(|ui| {
            let tensor = doc.work.histogram_tensor.clone();
            match tensor
                .as_ref()
                .and_then(|t| stats.tensors.get(t).map(|s| (t, s)))
            {
                Some((name, s)) => {
                    let log = &mut doc.work.histogram_log;
                    tensor_view(
                        ui,
                        doc.editor.recipe(),
                        name,
                        s,
                        stats.info.ort_parity,
                        log,
                        commands,
                    );
                }
                None => {
                    ui.label("Pick a tensor on the left, or select a node in the graph.");
                }
            }
            weights_section(ui, doc);
        });
    });
}

fn tensor_list(
    ui: &mut Ui,
    doc: &mut Document,
    stats: &Arc<crate::calib::CalibrationStats>,
    commands: &mut Vec<Command>,
) {
    let current = doc.work.histogram_tensor.clone();
    let mut pick = |ui: &mut Ui, name: &str| {
        let over = doc.editor.recipe().tensor_overrides.contains_key(name);
        let text = if over {
            format!("{name} ✎")
        } else {
            name.to_owned()
        };
        if ui
            .selectable_label(current.as_deref() == Some(name), text)
            .clicked()
        {
            commands.push(Command::ShowHistogram(name.to_owned()));
        }
    };
    if let Some(node) = doc.selection.first().map(|id| doc.graph.node(*id)) {
        ui.label(RichText::new(format!("{} ({})", node.name, node.op_type)).strong());
        let mut any = false;
        for (role, list) in [("in", &node.inputs), ("out", &node.outputs)] {
            for t in list.iter().filter(|t| stats.tensors.contains_key(*t)) {
                ui.horizontal(|ui| {
                    ui.label(RichText::new(role).weak());
                    pick(ui, t);
                });
                any = true;
            }
        }
        if !any {
            ui.label(
                RichText::new(
                    "None of its tensors was calibrated (weights, or folded by pre-processing).",
                )
                .weak(),
            );
        }
        ui.separator();
    }
    ui.horizontal(|ui| {
        let label = ui.label("Find tensor");
        ui.add(
            egui::TextEdit::singleline(&mut doc.work.histogram_filter)
                .hint_text("name")
                .desired_width(170.0),
        )
        .labelled_by(label.id);
    });
    let filter = doc.work.histogram_filter.to_lowercase();
    let names: Vec<&String> = stats
        .tensors
        .keys()
        .filter(|n| filter.is_empty() || n.to_lowercase().contains(&filter))
        .collect();
    ui.label(RichText::new(format!("{} calibrated tensors", names.len())).weak());
    let row = ui.text_style_height(&egui::TextStyle::Body) + 4.0;
    egui::ScrollArea::vertical()
        .id_salt("tensor-list")
        .max_height(200.0)
        .show_rows(ui, row, names.len(), |ui, rows| {
            for name in &names[rows] {
                pick(ui, name);
            }
        });
}

/// Drag state of a range end: which end and the value under the pointer.
#[derive(Clone, Copy)]
struct Dragging {
    hi: bool,
    value: f32,
}

fn tensor_view(
    ui: &mut Ui,
    recipe: &Recipe,
    name: &str,
    stats: &TensorStats,
    parity: bool,
    log: &mut bool,
    commands: &mut Vec<Command>,
) {
    ui.horizontal(|ui| {
        ui.label(RichText::new(name).strong().monospace());
        ui.checkbox(log, "Log scale");
    });
    ui.label(
        RichText::new(format!(
            "min {:.5} · max {:.5} · {} values{}",
            stats.min,
            stats.max,
            stats.count,
            if stats.nan + stats.inf > 0 {
                format!(" · {} NaN/Inf left out", stats.nan + stats.inf)
            } else {
                String::new()
            }
        ))
        .weak(),
    );
    let ranges = range::all_ranges(stats, target(recipe, name), parity);
    let effective = effective_range(recipe, name, stats, parity);
    let over = recipe.tensor_overrides.get(name).cloned();

    ui.horizontal_top(|ui| {
        ui.vertical(|ui| {
            let width = (ui.available_width() * 0.55).clamp(260.0, 760.0);
            let (rect, _) = ui.allocate_exact_size(vec2(width, 170.0), Sense::hover());
            let drag_id = ui.id().with(("range-drag", name));
            let mut dragging: Option<Dragging> = ui.data(|d| d.get_temp(drag_id));

            // The x extent: occupied bins and every range, with a margin.
            let (mut lo, mut hi) = (f64::from(stats.min), f64::from(stats.max));
            // The data and the range in use set the extent; other methods' lines beyond it
            // (power-of-two ranges can be far wider) are cut at the edge.
            for r in effective.iter().map(|(r, _)| r) {
                lo = lo.min(f64::from(r.lo));
                hi = hi.max(f64::from(r.hi));
            }
            if !(lo.is_finite() && hi.is_finite()) || hi <= lo {
                (lo, hi) = (-1.0, 1.0);
            }
            let margin = (hi - lo) * 0.05;
            let (lo, hi) = (lo - margin, hi + margin);
            let x_of = |v: f64| rect.left() + ((v - lo) / (hi - lo)) as f32 * rect.width();
            let v_of =
                |x: f32| (lo + f64::from((x - rect.left()) / rect.width()) * (hi - lo)) as f32;

            let painter = ui.painter_at(rect);
            painter.rect_filled(rect, 2.0, ui.visuals().extreme_bg_color);
            if let Some(h) = &stats.histogram {
                // One column per pixel pair: bins are summed into columns.
                let columns = (rect.width() / 2.0).max(1.0) as usize;
                let mut sums = vec![0u64; columns];
                let edges = h.edges();
                for (i, &c) in h.counts.iter().enumerate() {
                    let mid = (edges[i] + edges[i + 1]) / 2.0;
                    let at = ((mid - lo) / (hi - lo) * columns as f64).floor();
                    if c > 0 && at >= 0.0 && (at as usize) < columns {
                        sums[at as usize] += c;
                    }
                }
                let peak = sums.iter().copied().max().unwrap_or(1).max(1) as f64;
                let scale = |c: u64| {
                    if *log {
                        (1.0 + c as f64).ln() / (1.0 + peak).ln()
                    } else {
                        c as f64 / peak
                    }
                };
                let bar = ui.visuals().text_color().gamma_multiply(0.55);
                for (i, &c) in sums.iter().enumerate().filter(|(_, c)| **c > 0) {
                    let x = rect.left() + i as f32 * 2.0;
                    let height = scale(c) as f32 * (rect.height() - 14.0);
                    painter.rect_filled(
                        Rect::from_min_max(
                            pos2(x, rect.bottom() - height),
                            pos2(x + 2.0, rect.bottom()),
                        ),
                        0.0,
                        bar,
                    );
                }
            } else {
                painter.text(
                    rect.center(),
                    egui::Align2::CENTER_CENTER,
                    "no histogram (calibrated extremes only)",
                    egui::FontId::proportional(13.0),
                    ui.visuals().weak_text_color(),
                );
            }
            // Every method's range, thin; the effective one thick, with draggable ends.
            for (method, r) in &ranges {
                let stroke = Stroke::new(1.0, method_colour(method).gamma_multiply(0.8));
                for v in [r.lo, r.hi] {
                    let x = x_of(f64::from(v));
                    painter
                        .line_segment([pos2(x, rect.top() + 12.0), pos2(x, rect.bottom())], stroke);
                }
            }
            if let Some((r, source)) = &effective {
                let colour = if source == "override" {
                    Color32::from_rgb(240, 70, 70)
                } else {
                    method_colour(source)
                };
                for (hi_end, v) in [(false, r.lo), (true, r.hi)] {
                    let shown = match dragging {
                        Some(d) if d.hi == hi_end => d.value,
                        _ => v,
                    };
                    let x = x_of(f64::from(shown));
                    let handle =
                        Rect::from_center_size(pos2(x, rect.center().y), vec2(10.0, rect.height()));
                    let response = ui
                        .interact(handle, drag_id.with(hi_end), Sense::drag())
                        .on_hover_cursor(egui::CursorIcon::ResizeHorizontal)
                        .on_hover_text(
                            "Drag to set this tensor's range (an override in the recipe)",
                        );
                    if let Some(pointer) = response
                        .interact_pointer_pos()
                        .filter(|_| response.dragged())
                    {
                        dragging = Some(Dragging {
                            hi: hi_end,
                            value: v_of(pointer.x),
                        });
                    }
                    if response.drag_stopped()
                        && let Some(d) = dragging.take()
                    {
                        let (mut a, mut b) = (r.lo, r.hi);
                        if d.hi {
                            b = d.value;
                        } else {
                            a = d.value;
                        }
                        let (a, b) = (a.min(b), a.max(b));
                        // A range must hold zero (the zero point must be exact).
                        let (a, b) = (a.min(0.0), b.max(0.0));
                        commands.push(Command::SetTensorOverride(
                            name.to_owned(),
                            Some(TensorOverride {
                                range: Some([a, b]),
                                ..over.clone().unwrap_or_default()
                            }),
                        ));
                    }
                    painter.line_segment(
                        [pos2(x, rect.top()), pos2(x, rect.bottom())],
                        Stroke::new(3.0, colour),
                    );
                    painter.circle_filled(Pos2::new(x, rect.top() + 6.0), 5.0, colour);
                }
            }
            ui.data_mut(|d| match dragging {
                Some(state) => {
                    d.insert_temp(drag_id, state);
                }
                None => {
                    d.remove::<Dragging>(drag_id);
                }
            });
            // Axis labels at the chart's ends.
            for (value, x, align) in [
                (lo, rect.left() + 2.0, egui::Align2::LEFT_TOP),
                (hi, rect.right() - 2.0, egui::Align2::RIGHT_TOP),
            ] {
                painter.text(
                    pos2(x, rect.top() + 2.0),
                    align,
                    format!("{value:.4}"),
                    egui::FontId::proportional(11.0),
                    ui.visuals().weak_text_color(),
                );
            }
        });
        ui.vertical(|ui| {
            // The methods: their ranges, clipping, and a button to use one for this tensor.
            egui::Grid::new(("ranges", name))
                .num_columns(4)
                .striped(true)
                .show(ui, |ui| {
                    for (method, r) in &ranges {
                        let active = effective.as_ref().is_some_and(|(_, s)| s == method);
                        ui.horizontal(|ui| {
                            crate::app::panels::swatch(ui, method_colour(method));
                            let text = format!("{method} [{:.4}, {:.4}]", r.lo, r.hi);
                            ui.label(if active {
                                RichText::new(text).strong()
                            } else {
                                RichText::new(text)
                            });
                        });
                        match &stats.histogram {
                            Some(h) => ui.label(format!(
                                "clips {:.3}%",
                                clipped_share(h, (r.lo, r.hi)) * 100.0
                            )),
                            None => ui.label(""),
                        };
                        if active {
                            ui.label(RichText::new("in use").strong());
                        } else if ui.button(format!("Use {method}")).clicked() {
                            let method = RangeMethod::all()
                                .into_iter()
                                .find(|m| m.name() == *method)
                                .unwrap_or(recipe.calibration_method);
                            let method = if method.name() == recipe.calibration_method.name() {
                                recipe.calibration_method
                            } else {
                                method
                            };
                            commands.push(Command::SetTensorOverride(
                                name.to_owned(),
                                Some(TensorOverride {
                                    method: Some(method),
                                    range: None,
                                    ..over.clone().unwrap_or_default()
                                }),
                            ));
                        }
                        ui.label("");
                        ui.end_row();
                    }
                });
        });
    });
    if let Some((r, source)) = &effective
        && source == "override"
    {
        ui.colored_label(
            Color32::from_rgb(240, 70, 70),
            format!("override [{:.4}, {:.4}] (in the recipe)", r.lo, r.hi),
        );
    }
    if over.is_some() && ui.button("Back to the recipe's method").clicked() {
        let rest = over.map(|o| TensorOverride {
            range: None,
            method: None,
            ..o
        });
        commands.push(Command::SetTensorOverride(
            name.to_owned(),
            rest.filter(|o| *o != TensorOverride::default()),
        ));
    }
}

/// Per-output-channel weight ranges of the selected node's weights (what per-channel
/// quantization sees), cached in egui's memory per weight.
fn weights_section(ui: &mut Ui, doc: &Document) {
    let Some(node) = doc.selection.first().map(|id| doc.graph.node(*id)) else {
        return;
    };
    for name in &node.inputs {
        let id = egui::Id::new(("channel-ranges", name));
        let cached: Option<Arc<Vec<(f32, f32)>>> = ui.data(|d| d.get_temp(id));
        let ranges = match cached {
            Some(r) => r,
            None => {
                let Ok(Some(array)) = doc.model.weight(name) else {
                    continue;
                };
                if array.shape().len() < 2 {
                    continue;
                }
                let values = array.to_f32();
                let ranges: Vec<(f32, f32)> = values
                    .outer_iter()
                    .map(|c| {
                        c.iter()
                            .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &v| {
                                (a.min(v), b.max(v))
                            })
                    })
                    .collect();
                let ranges = Arc::new(ranges);
                ui.data_mut(|d| d.insert_temp(id, ranges.clone()));
                ranges
            }
        };
        ui.separator();
        ui.label(
            RichText::new(format!(
                "Weight {name}: range of each of its {} output channels",
                ranges.len()
            ))
            .strong(),
        );
        channel_chart(ui, &ranges);
    }
}

fn channel_chart(ui: &mut Ui, ranges: &[(f32, f32)]) {
    let width = ui.available_width().clamp(300.0, 900.0);
    let (rect, response) = ui.allocate_exact_size(vec2(width, 110.0), Sense::hover());
    let painter = ui.painter_at(rect);
    painter.rect_filled(rect, 2.0, ui.visuals().extreme_bg_color);
    let extent = ranges
        .iter()
        .map(|(a, b)| a.abs().max(b.abs()))
        .fold(0.0f32, f32::max)
        .max(1e-12);
    let y_of = |v: f32| rect.center().y - v / extent * (rect.height() / 2.0 - 4.0);
    painter.line_segment(
        [
            pos2(rect.left(), rect.center().y),
            pos2(rect.right(), rect.center().y),
        ],
        Stroke::new(1.0, ui.visuals().weak_text_color()),
    );
    let step = rect.width() / ranges.len().max(1) as f32;
    let colour = Color32::from_rgb(90, 160, 255);
    for (i, (a, b)) in ranges.iter().enumerate() {
        let x = rect.left() + (i as f32 + 0.5) * step;
        painter.line_segment(
            [pos2(x, y_of(*a)), pos2(x, y_of(*b))],
            Stroke::new(step.clamp(1.0, 6.0), colour),
        );
    }
    if let Some(pointer) = response.hover_pos() {
        let i = (((pointer.x - rect.left()) / step) as usize).min(ranges.len().saturating_sub(1));
        if let Some((a, b)) = ranges.get(i) {
            response.on_hover_text(format!("channel {i}: [{a:.5}, {b:.5}]"));
        }
    }
    ui.label(RichText::new(format!("±{extent:.4}")).small().weak());
}
