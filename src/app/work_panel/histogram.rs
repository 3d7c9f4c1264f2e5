//! The Histograms tab: a calibrated tensor's activation histogram with every method's range
//! drawn on it, the range quantization will use highlighted (as the quantizer's plan says:
//! the method, an override, the Softmax rule, or a folded Relu/Clip's output), and its ends
//! draggable to set an override; the method can be chosen per tensor. Weighted nodes also
//! show each channel's weight range along the axis the quantizer uses.
//!
//! Drawn with egui's painter rather than plotters (which draws the report's charts): the
//! range ends are dragged with the pointer, which needs the value↔pixel mapping in egui's own
//! coordinates.

use std::collections::BTreeMap;
use std::sync::Arc;

use egui::{Color32, Pos2, Rect, RichText, Sense, Stroke, Ui, pos2, vec2};

use crate::app::command::Command;
use crate::app::command::WorkCommand;
use crate::app::document_parts::{DocParts, Planned};
use crate::calib::range::{self, Range, RangeMethod, RangeTarget};
use crate::calib::{CalibrationStats, TensorStats};
use crate::quant::explain::{Explanation, TensorQuant};
use crate::quant::params::{RangeSource, WeightQuant, activation_quant};
use crate::quant::rewrite::{channel_extremes, weight_params};
use crate::recipe::{Recipe, TensorOverride};
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

/// What the quantizer's plan does with one activation, as the chart draws it.
pub(crate) struct PlannedRange {
    /// The range it is quantized with (`None` when it cannot be computed, with why).
    pub range: Result<Range, String>,
    /// Where it comes from, in a few words ("minmax", "override", "Softmax [0, 1]",
    /// "relu_1 folded: range of r").
    pub source: String,
    /// The method whose row is "in use" (none for fixed ranges).
    pub method: Option<RangeMethod>,
    /// The tensor overrides go on (itself, or the tensor whose range it takes).
    pub override_tensor: String,
    /// True when the range is an override of this tensor's recipe entry.
    pub fixed: bool,
}

/// The plan's range for `tensor` (`None` when the plan leaves it in float).
pub(crate) fn planned_range(
    plan: &Explanation,
    tensor: &str,
    stats: &CalibrationStats,
) -> Option<PlannedRange> {
    let (owner, how) = plan.activation(tensor)?;
    let folded = plan.tensor(tensor).and_then(|p| p.folded_into.clone());
    let (mut source, method, fixed) = match &how.source {
        RangeSource::Fixed { .. } => ("override".to_owned(), None, true),
        RangeSource::Softmax => ("Softmax output [0, 1]".to_owned(), None, false),
        RangeSource::Method { method, .. } => (method.name().to_owned(), Some(*method), false),
    };
    if let Some((node, into)) = folded {
        source = format!("{node} folded: {source} of {into}");
    } else if owner != tensor {
        source = format!("{source} of {owner} (shared scale)");
    }
    Some(PlannedRange {
        range: how.range(Some(stats)).map_err(|e| e.to_string()),
        source,
        method,
        override_tensor: owner,
        fixed,
    })
}

/// The grid the methods' ranges are chosen for: the plan's, else the recipe's activation type.
fn target(plan: &Explanation, recipe: &Recipe, tensor: &str) -> RangeTarget {
    match plan.activation(tensor) {
        Some((_, how)) => how.target(),
        None => activation_quant(recipe, tensor, &Default::default()).target(),
    }
}

pub(super) fn show(ui: &mut Ui, doc: &mut DocParts<'_>, commands: &mut Vec<Command>) {
    let Some(stats) = doc.work.results.stats.clone() else {
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
            let tensor = doc.view.panel.histogram_tensor.clone();
            match tensor
                .as_ref()
                .and_then(|t| stats.tensors.get(t).map(|s| (t, s)))
            {
                Some((name, s)) => {
                    let view = TensorView {
                        recipe: doc.planned.editor.recipe(),
                        plan: &doc.planned.plan,
                        stats: &stats,
                        name,
                        tensor: s,
                        float_reason: if doc.planned.folded_away(name) {
                            "Removed by pre-processing: the quantizer never sees this tensor."
                        } else {
                            "Not quantized under this recipe: it stays float."
                        },
                    };
                    tensor_view(ui, &view, &mut doc.view.panel.histogram_log, commands);
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
    doc: &mut DocParts<'_>,
    stats: &Arc<CalibrationStats>,
    commands: &mut Vec<Command>,
) {
    let current = doc.view.panel.histogram_tensor.clone();
    let mut pick = |ui: &mut Ui, name: &str| {
        let over = doc
            .planned
            .editor
            .recipe()
            .tensor_overrides
            .contains_key(name);
        let text = if over {
            format!("{name} ✎")
        } else {
            name.to_owned()
        };
        if ui
            .selectable_label(current.as_deref() == Some(name), text)
            .clicked()
        {
            commands.push(Command::Work(WorkCommand::ShowHistogram(name.to_owned())));
        }
    };
    if let Some(node) = doc
        .view
        .selection
        .first()
        .map(|id| doc.opened.graph.node(*id))
    {
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
            egui::TextEdit::singleline(&mut doc.view.panel.histogram_filter)
                .hint_text("name")
                .desired_width(170.0),
        )
        .labelled_by(label.id);
    });
    let filter = doc.view.panel.histogram_filter.to_lowercase();
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

/// One calibrated tensor and what the plan does with it.
struct TensorView<'a> {
    recipe: &'a Recipe,
    plan: &'a Explanation,
    stats: &'a CalibrationStats,
    name: &'a str,
    tensor: &'a TensorStats,
    /// Why it stays float when the plan leaves it so.
    float_reason: &'static str,
}

impl TensorView<'_> {
    /// The override entry of the tensor overrides go on.
    fn override_entry(&self, planned: Option<&PlannedRange>) -> (String, Option<TensorOverride>) {
        let owner = planned.map_or_else(|| self.name.to_owned(), |p| p.override_tensor.clone());
        let current = self.recipe.tensor_overrides.get(&owner).cloned();
        (owner, current)
    }
}

fn tensor_view(ui: &mut Ui, view: &TensorView, log: &mut bool, commands: &mut Vec<Command>) {
    let stats = view.tensor;
    ui.horizontal(|ui| {
        ui.label(RichText::new(view.name).strong().monospace());
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
    let parity = view.stats.info.ort_parity;
    let ranges = range::all_ranges(stats, target(view.plan, view.recipe, view.name), parity);
    let planned = planned_range(view.plan, view.name, view.stats);
    // The methods' table beside the chart where both fit, else under it (nothing cut).
    if ui.available_width() >= CHART_AND_TABLE_FROM {
        ui.horizontal_top(|ui| {
            ui.vertical(|ui| chart(ui, view, &ranges, planned.as_ref(), *log, commands));
            ui.vertical(|ui| methods_table(ui, view, &ranges, planned.as_ref(), commands));
        });
    } else {
        chart(ui, view, &ranges, planned.as_ref(), *log, commands);
        methods_table(ui, view, &ranges, planned.as_ref(), commands);
    }
    plan_line(ui, view, planned.as_ref(), commands);
}

/// What the plan says under the chart: the range in use and where it comes from, or that
/// the tensor stays float; and the button that drops this tensor's override.
fn plan_line(
    ui: &mut Ui,
    view: &TensorView,
    planned: Option<&PlannedRange>,
    commands: &mut Vec<Command>,
) {
    match planned {
        Some(p) => match &p.range {
            Ok(r) => {
                let text = format!("quantized with [{:.4}, {:.4}] · {}", r.lo, r.hi, p.source);
                if p.fixed {
                    ui.colored_label(OVERRIDE_COLOUR, format!("{text} (in the recipe)"));
                } else {
                    ui.label(RichText::new(text).strong());
                }
            }
            Err(e) => {
                ui.colored_label(ui.visuals().error_fg_color, format!("no range: {e}"));
            }
        },
        None => {
            ui.label(RichText::new(view.float_reason).weak());
        }
    }
    let (owner, over) = view.override_entry(planned);
    if over.is_some() && ui.button("Back to the recipe's method").clicked() {
        let rest = over.map(|o| TensorOverride {
            range: None,
            method: None,
            ..o
        });
        commands.push(Command::Work(WorkCommand::SetTensorOverride(
            owner,
            rest.filter(|o| *o != TensorOverride::default()),
        )));
    }
}

/// Width from which the methods' table sits beside the chart rather than under it.
const CHART_AND_TABLE_FROM: f32 = 900.0;

/// The colour of an override range.
const OVERRIDE_COLOUR: Color32 = Color32::from_rgb(240, 70, 70);

/// The histogram with every method's range thin and the plan's range thick, its ends
/// draggable to set an override.
fn chart(
    ui: &mut Ui,
    view: &TensorView,
    ranges: &BTreeMap<&'static str, Range>,
    planned: Option<&PlannedRange>,
    log: bool,
    commands: &mut Vec<Command>,
) {
    let stats = view.tensor;
    let share = if ui.available_width() >= CHART_AND_TABLE_FROM {
        0.55
    } else {
        0.95
    };
    let width = (ui.available_width() * share).clamp(260.0, 760.0);
    // The chart, and under it a strip for the axis' end values (drawn in the chart's top
    // corners they sat under the range handles).
    let (whole, _) = ui.allocate_exact_size(vec2(width, 170.0 + AXIS_STRIP), Sense::hover());
    let rect = Rect::from_min_size(whole.min, vec2(width, 170.0));
    let effective = planned.and_then(|p| p.range.as_ref().ok().map(|r| (*r, p)));
    // The data and the range in use set the extent; other methods' lines beyond it (power-of-
    // two ranges can be far wider) are cut at the edge.
    let (mut lo, mut hi) = (f64::from(stats.min), f64::from(stats.max));
    if let Some((r, _)) = &effective {
        lo = lo.min(f64::from(r.lo));
        hi = hi.max(f64::from(r.hi));
    }
    if !(lo.is_finite() && hi.is_finite()) || hi <= lo {
        (lo, hi) = (-1.0, 1.0);
    }
    let margin = (hi - lo) * 0.05;
    let axis = Axis {
        rect,
        lo: lo - margin,
        hi: hi + margin,
    };
    let painter = ui.painter_at(rect);
    painter.rect_filled(rect, 2.0, ui.visuals().extreme_bg_color);
    bars(ui, &painter, &axis, stats, log);
    for (method, r) in ranges {
        let stroke = Stroke::new(1.0, method_colour(method).gamma_multiply(0.8));
        for v in [r.lo, r.hi] {
            let x = axis.x_of(f64::from(v));
            painter.line_segment([pos2(x, rect.top() + 12.0), pos2(x, rect.bottom())], stroke);
        }
    }
    if let Some((r, p)) = effective {
        range_handles(ui, &painter, &axis, view, r, p, commands);
    }
    let strip = ui.painter_at(whole);
    for (value, x, align) in [
        (axis.lo, rect.left() + 2.0, egui::Align2::LEFT_TOP),
        (axis.hi, rect.right() - 2.0, egui::Align2::RIGHT_TOP),
    ] {
        strip.text(
            pos2(x, rect.bottom() + 1.0),
            align,
            format!("{value:.4}"),
            egui::FontId::proportional(11.0),
            ui.visuals().weak_text_color(),
        );
    }
}

/// Height of the strip under the chart holding the axis' end values.
const AXIS_STRIP: f32 = 14.0;

/// The chart's value ↔ pixel mapping.
struct Axis {
    rect: Rect,
    lo: f64,
    hi: f64,
}

impl Axis {
    fn x_of(&self, v: f64) -> f32 {
        self.rect.left() + ((v - self.lo) / (self.hi - self.lo)) as f32 * self.rect.width()
    }

    fn value_of(&self, x: f32) -> f32 {
        (self.lo + f64::from((x - self.rect.left()) / self.rect.width()) * (self.hi - self.lo))
            as f32
    }
}

/// The histogram's bars, one column per pixel pair.
fn bars(ui: &Ui, painter: &egui::Painter, axis: &Axis, stats: &TensorStats, log: bool) {
    let rect = axis.rect;
    let Some(h) = &stats.histogram else {
        painter.text(
            rect.center(),
            egui::Align2::CENTER_CENTER,
            "no histogram (calibrated extremes only)",
            egui::FontId::proportional(13.0),
            ui.visuals().weak_text_color(),
        );
        return;
    };
    let columns = (rect.width() / 2.0).max(1.0) as usize;
    let mut sums = vec![0u64; columns];
    let edges = h.edges();
    for (i, &c) in h.counts.iter().enumerate() {
        let mid = (edges[i] + edges[i + 1]) / 2.0;
        let at = ((mid - axis.lo) / (axis.hi - axis.lo) * columns as f64).floor();
        if c > 0 && at >= 0.0 && (at as usize) < columns {
            sums[at as usize] += c;
        }
    }
    let peak = sums.iter().copied().max().unwrap_or(1).max(1) as f64;
    let scale = |c: u64| {
        if log {
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
}

/// The plan's range drawn thick, each end a handle that sets an override when dragged.
fn range_handles(
    ui: &mut Ui,
    painter: &egui::Painter,
    axis: &Axis,
    view: &TensorView,
    r: Range,
    planned: &PlannedRange,
    commands: &mut Vec<Command>,
) {
    let rect = axis.rect;
    let colour = match (planned.fixed, &planned.method) {
        (true, _) => OVERRIDE_COLOUR,
        (false, Some(m)) => method_colour(m.name()),
        (false, None) => method_colour("fixed"),
    };
    let drag_id = ui.id().with(("range-drag", view.name));
    let mut dragging: Option<Dragging> = ui.data(|d| d.get_temp(drag_id));
    for (hi_end, v) in [(false, r.lo), (true, r.hi)] {
        let shown = match dragging {
            Some(d) if d.hi == hi_end => d.value,
            _ => v,
        };
        let x = axis.x_of(f64::from(shown));
        let handle = Rect::from_center_size(pos2(x, rect.center().y), vec2(10.0, rect.height()));
        let response = ui
            .interact(handle, drag_id.with(hi_end), Sense::drag())
            .on_hover_cursor(egui::CursorIcon::ResizeHorizontal)
            .on_hover_text("Drag to set this range (an override in the recipe)");
        if let Some(pointer) = response
            .interact_pointer_pos()
            .filter(|_| response.dragged())
        {
            dragging = Some(Dragging {
                hi: hi_end,
                value: axis.value_of(pointer.x),
            });
        }
        if response.drag_stopped()
            && let Some(d) = dragging.take()
        {
            let (a, b) = if d.hi {
                (r.lo, d.value)
            } else {
                (d.value, r.hi)
            };
            // A range must hold zero (the zero point must be exact).
            let (a, b) = (a.min(b).min(0.0), a.max(b).max(0.0));
            let (owner, over) = view.override_entry(Some(planned));
            commands.push(Command::Work(WorkCommand::SetTensorOverride(
                owner,
                Some(TensorOverride {
                    range: Some([a, b]),
                    ..over.unwrap_or_default()
                }),
            )));
        }
        painter.line_segment(
            [pos2(x, rect.top()), pos2(x, rect.bottom())],
            Stroke::new(3.0, colour),
        );
        painter.circle_filled(Pos2::new(x, rect.top() + 6.0), 5.0, colour);
    }
    ui.data_mut(|d| match dragging {
        Some(state) => {
            d.insert_temp(drag_id, state);
        }
        None => {
            d.remove::<Dragging>(drag_id);
        }
    });
}

/// Every method's range and what it clips, with a button to use one for this tensor.
fn methods_table(
    ui: &mut Ui,
    view: &TensorView,
    ranges: &BTreeMap<&'static str, Range>,
    planned: Option<&PlannedRange>,
    commands: &mut Vec<Command>,
) {
    // A tensor quantized with another's range (a folded Relu/Clip's output, a shared scale):
    // these rows are its own values' ranges, and the method is chosen on the other tensor.
    let owner = planned
        .map(|p| p.override_tensor.as_str())
        .filter(|o| *o != view.name);
    let in_use = planned
        .filter(|p| !p.fixed && owner.is_none())
        .and_then(|p| p.method)
        .map(|m| m.name());
    // Softmax outputs keep [0, 1] whatever the method: no method choice applies.
    let choosable = owner.is_none() && planned.is_none_or(|p| p.fixed || p.method.is_some());
    egui::Grid::new(("ranges", view.name))
        .num_columns(4)
        .striped(true)
        .show(ui, |ui| {
            for (&method, r) in ranges {
                let active = in_use == Some(method);
                ui.horizontal(|ui| {
                    crate::app::canvas::shapes::swatch(ui, method_colour(method));
                    let text = format!("{method} [{:.4}, {:.4}]", r.lo, r.hi);
                    ui.label(if active {
                        RichText::new(text).strong()
                    } else {
                        RichText::new(text)
                    });
                });
                match &view.tensor.histogram {
                    Some(h) => ui.label(format!(
                        "clips {:.3}%",
                        clipped_share(h, (r.lo, r.hi), Some((view.tensor.min, view.tensor.max)))
                            * 100.0
                    )),
                    None => ui.label(""),
                };
                if active {
                    ui.label(RichText::new("in use").strong());
                } else if ui
                    .add_enabled(choosable, egui::Button::new(format!("Use {method}")))
                    .on_disabled_hover_text(match owner {
                        Some(o) => format!("Quantized with {o}'s range: choose the method there"),
                        None => "A Softmax output is always quantized over [0, 1]".to_owned(),
                    })
                    .clicked()
                {
                    use_method(view, planned, method, commands);
                }
                ui.label("");
                ui.end_row();
            }
        });
    if let Some(owner) = owner
        && ui
            .link(format!("Show {owner}, whose range it takes"))
            .clicked()
    {
        commands.push(Command::Work(WorkCommand::ShowHistogram(owner.to_owned())));
    }
}

/// Sets `method` (by name) as the tensor's method override; the recipe's own method keeps its
/// parameters.
fn use_method(
    view: &TensorView,
    planned: Option<&PlannedRange>,
    method: &str,
    commands: &mut Vec<Command>,
) {
    let recipe_method = view.recipe.calibration_method;
    let method = if method == recipe_method.name() {
        recipe_method
    } else {
        RangeMethod::all()
            .into_iter()
            .find(|m| m.name() == method)
            .unwrap_or(recipe_method)
    };
    let (owner, over) = view.override_entry(planned);
    commands.push(Command::Work(WorkCommand::SetTensorOverride(
        owner,
        Some(TensorOverride {
            method: Some(method),
            range: None,
            ..over.unwrap_or_default()
        }),
    )));
}

/// How the plan quantizes weight `name` of `node`: the axis its channel ranges run along and
/// a line saying so.
fn weight_axis_of(
    planned: &Planned,
    node: &crate::model::Node,
    name: &str,
) -> (usize, String, Option<WeightQuant>) {
    match planned.plan.tensor(name).map(|p| (&p.quant, p.describe())) {
        Some((TensorQuant::Weight { quant, .. }, text)) => match quant.axis {
            Some(axis) => (axis, text, Some(*quant)),
            None => (
                crate::quant::plan::weight_axis(node),
                format!("{text}: one scale covers all these channels"),
                Some(*quant),
            ),
        },
        _ => (
            crate::quant::plan::weight_axis(node),
            "not quantized under this recipe".to_owned(),
            None,
        ),
    }
}

/// Each channel's values' range, and the span of the grid the quantizer puts it on (one
/// span repeated for a per-tensor weight; none for block-wise, FP8 or unquantized weights).
struct ChannelRanges {
    values: Vec<(f32, f32)>,
    grid: Option<Vec<(f32, f32)>>,
    /// Channels with values the quantizer clips (by the engine's rule, `within_span`).
    clipped: usize,
}

impl ChannelRanges {
    fn of(values: &ndarray::ArrayD<f32>, axis: usize, quant: Option<&WeightQuant>) -> Self {
        let ranges = channel_extremes(values, Some(axis));
        let params = quant.filter(|q| q.channel_grid()).and_then(|q| {
            let params = weight_params(values, q);
            match params.len() {
                1 => Some((q, vec![params[0]; ranges.len()])),
                n if n == ranges.len() => Some((q, params)),
                _ => None,
            }
        });
        let clipped = params.as_ref().map_or(0, |(q, params)| {
            let clips = |v: f32, p| q.within_span(v, p) != v;
            ranges
                .iter()
                .zip(params)
                .filter(|((a, b), p)| clips(*a, **p) || clips(*b, **p))
                .count()
        });
        ChannelRanges {
            grid: params.map(|(q, params)| params.into_iter().map(|p| q.grid_span(p)).collect()),
            values: ranges,
            clipped,
        }
    }
}

/// Each channel's range of the selected node's weights, along the axis the quantizer's plan
/// uses (output channels: axis 0 for Conv, 1 for MatMul, ConvTranspose and Gemm without
/// transB), from the values it quantizes (batch-norm folded). Cached in egui's memory.
fn weights_section(ui: &mut Ui, doc: &DocParts<'_>) {
    let Some(node) = doc
        .view
        .selection
        .first()
        .map(|id| doc.opened.graph.node(*id))
    else {
        return;
    };
    let model = doc
        .planned
        .prepared
        .as_ref()
        .map_or(&doc.opened.model, |p| &p.model);
    for name in &node.inputs {
        let (axis, how, quant) = weight_axis_of(doc.planned, node, name);
        let id = egui::Id::new(("channel-ranges", name, axis, &how));
        let cached: Option<Arc<ChannelRanges>> = ui.data(|d| d.get_temp(id));
        let ranges = match cached {
            Some(r) => r,
            None => {
                let Ok(Some(array)) = model.weight(name) else {
                    continue;
                };
                if array.shape().len() < 2 {
                    continue;
                }
                let values = array.to_f32();
                let ranges = Arc::new(ChannelRanges::of(&values, axis, quant.as_ref()));
                ui.data_mut(|d| d.insert_temp(id, ranges.clone()));
                ranges
            }
        };
        ui.separator();
        ui.label(
            RichText::new(format!(
                "Weight {name}: range of each of its {} channels along axis {axis}",
                ranges.values.len()
            ))
            .strong(),
        );
        ui.label(RichText::new(how).weak());
        channel_chart(ui, &ranges);
        if ranges.grid.is_some() {
            let text = match ranges.clipped {
                0 => "orange ticks: the span each channel's integer grid covers".to_owned(),
                n => format!(
                    "orange ticks: the span each channel's integer grid covers; {n} channel(s) have values beyond it, clipped when quantized"
                ),
            };
            ui.label(RichText::new(text).small().weak());
        }
    }
}

fn channel_chart(ui: &mut Ui, ranges: &ChannelRanges) {
    let width = ui.available_width().clamp(300.0, 900.0);
    let (rect, response) = ui.allocate_exact_size(vec2(width, 110.0), Sense::hover());
    let painter = ui.painter_at(rect);
    painter.rect_filled(rect, 2.0, ui.visuals().extreme_bg_color);
    let spans = ranges.values.iter().chain(ranges.grid.iter().flatten());
    let extent = spans
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
    let count = ranges.values.len();
    let step = rect.width() / count.max(1) as f32;
    let width = step.clamp(1.0, 6.0);
    let colour = Color32::from_rgb(90, 160, 255);
    let grid_colour = Color32::from_rgb(255, 150, 40);
    for (i, (a, b)) in ranges.values.iter().enumerate() {
        let x = rect.left() + (i as f32 + 0.5) * step;
        painter.line_segment(
            [pos2(x, y_of(*a)), pos2(x, y_of(*b))],
            Stroke::new(width, colour),
        );
        if let Some((lo, hi)) = ranges.grid.as_ref().and_then(|g| g.get(i)) {
            let half = (step * 0.5).max(1.5);
            for y in [y_of(*lo), y_of(*hi)] {
                painter.line_segment(
                    [pos2(x - half, y), pos2(x + half, y)],
                    Stroke::new(1.5, grid_colour),
                );
            }
        }
    }
    if let Some(pointer) = response.hover_pos() {
        let i = (((pointer.x - rect.left()) / step) as usize).min(count.saturating_sub(1));
        if let Some((a, b)) = ranges.values.get(i) {
            let grid = ranges.grid.as_ref().and_then(|g| g.get(i));
            response.on_hover_text(match grid {
                Some((lo, hi)) => format!("channel {i}: [{a:.5}, {b:.5}]; grid [{lo:.5}, {hi:.5}]"),
                None => format!("channel {i}: [{a:.5}, {b:.5}]"),
            });
        }
    }
    ui.label(RichText::new(format!("±{extent:.4}")).small().weak());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::document::{self, Document, Source};
    use crate::calib::stats::CalibrationInfo;
    use crate::jobs::JobContext;
    use crate::model::{DataType, ModelBuilder, TensorArray};
    use ndarray::{ArrayD, IxDyn};

    #[test]
    fn the_weight_chart_marks_the_grid_and_counts_clipped_channels() {
        // 4 output channels (axis 1) of 2,000 small values; channel 2 holds an outlier.
        let mut values: Vec<f32> = (0..8000).map(|i| (i as f32 * 0.37).sin() * 0.03).collect();
        values[4 * 17 + 2] = 7.5;
        let values = ArrayD::from_shape_vec(IxDyn(&[2000, 4]), values).unwrap();
        let quant = |axis: Option<usize>, range: crate::recipe::WeightRange| WeightQuant {
            qtype: crate::recipe::QuantType::Int8,
            symmetric: true,
            reduce_range: false,
            axis,
            block_size: None,
            range,
        };
        use crate::recipe::WeightRange::{Minmax, Mse};
        // Extremes: every channel's grid holds its values; per tensor, one span for all.
        let minmax = ChannelRanges::of(&values, 1, Some(&quant(Some(1), Minmax)));
        assert_eq!(minmax.clipped, 0);
        let one = ChannelRanges::of(&values, 1, Some(&quant(None, Minmax)));
        let grid = one.grid.as_ref().unwrap();
        assert!(grid.iter().all(|g| *g == grid[0]) && grid[0].1 >= 7.5);
        // Least squared error per tensor clips the outlier's channel only.
        let mse = ChannelRanges::of(&values, 1, Some(&quant(None, Mse)));
        assert_eq!(mse.clipped, 1);
        assert!(mse.grid.as_ref().unwrap()[0].1 < 7.5);
        // Unquantized: no grid.
        assert!(ChannelRanges::of(&values, 1, None).grid.is_none());
    }

    fn weight(shape: &[usize]) -> TensorArray {
        let n: usize = shape.iter().product();
        let values = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
        TensorArray::Float32(ArrayD::from_shape_vec(IxDyn(shape), values).unwrap())
    }

    /// x → MatMul → Relu → Gemm (transB = 0) → Softmax → y, with calibration statistics
    /// made by hand (the Softmax output observed in [0.1, 0.6]).
    fn document_with_stats() -> (Document, CalibrationStats) {
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[1, 4]);
        b.initializer("w_mm", weight(&[4, 3]));
        b.initializer("w_g", weight(&[3, 5]));
        b.initializer("b_g", weight(&[5]));
        b.node("MatMul", &["x", "w_mm"], &["mm"]).name("matmul");
        b.node("Relu", &["mm"], &["r"]).name("relu");
        b.node("Gemm", &["r", "w_g", "b_g"], &["g"]).name("gemm");
        b.node("Softmax", &["g"], &["y"]).name("softmax");
        b.output("y", DataType::Float32, &[1, 5]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.onnx");
        b.build().save(&path, &Default::default()).unwrap();
        let loaded = document::load(Source::File(path), &JobContext::silent()).unwrap();
        let mut doc = Document::new(loaded, Recipe::default(), true);
        let mut stats = CalibrationStats {
            info: CalibrationInfo::default(),
            ..CalibrationStats::default()
        };
        for (name, lo, hi) in [
            ("x", -1.0, 1.0),
            ("mm", -3.0, 5.0),
            ("r", 0.0, 5.0),
            ("g", -2.0, 2.0),
            ("y", 0.1, 0.6),
        ] {
            let mut s = TensorStats::default();
            s.add_batch(&[lo, hi, (lo + hi) / 2.0], &[1, 3], Some(64));
            stats.tensors.insert(name.to_owned(), s);
        }
        doc.work.results.stats = Some(Arc::new(stats.clone()));
        doc.refresh();
        (doc, stats)
    }

    #[test]
    fn the_histogram_shows_the_ranges_and_axes_the_quantizer_uses() {
        let (doc, stats) = document_with_stats();
        let quantized =
            crate::quant::quantize(&doc.opened.model, Some(&stats), doc.planned.editor.recipe())
                .unwrap();
        let used = |t: &str| quantized.params[t].range;
        let shown = |t: &str| {
            let p = planned_range(&doc.planned.plan, t, &stats).unwrap();
            let r = p.range.unwrap();
            (Some((r.lo, r.hi)), p.source)
        };

        // The Softmax output: [0, 1] whatever was observed.
        let (range, source) = shown("y");
        assert_eq!(range, Some((0.0, 1.0)), "{source}");
        assert_eq!(range, used("y"));
        // The MatMul output before the folded Relu: quantized with the Relu output's range.
        let (range, source) = shown("mm");
        assert_eq!(range, Some((0.0, 5.0)), "{source}");
        assert_eq!(range, used("r"));
        assert!(source.contains("relu folded"), "{source}");
        // Overrides of it go on the tensor whose range it takes.
        let planned = planned_range(&doc.planned.plan, "mm", &stats).unwrap();
        assert_eq!(planned.override_tensor, "r");

        // Per-channel weight ranges run along the quantizer's axis: 1 for MatMul and for Gemm
        // without transB, with one range per scale the quantizer wrote.
        let node = |name: &str| doc.opened.graph.node_by_name(name).unwrap();
        for (op, w) in [("matmul", "w_mm"), ("gemm", "w_g")] {
            let (axis, how, _) = weight_axis_of(&doc.planned, node(op), w);
            assert_eq!(Some(axis), quantized.params[w].axis, "{w}: {how}");
            assert_eq!(axis, 1, "{w}");
            let values = doc.opened.model.weight(w).unwrap().unwrap().to_f32();
            let channels = channel_extremes(&values, Some(axis)).len();
            assert_eq!(channels, quantized.params[w].params.len(), "{w}");
        }
    }
}
