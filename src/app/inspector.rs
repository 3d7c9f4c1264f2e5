//! The node inspector: what the selected node is, what flows in and out of it, its weights
//! (statistics and histogram) and what can be done to it.

use std::collections::HashMap;

use egui::{Color32, RichText, Ui};

use crate::app::canvas::state_fill;
use crate::app::command::Command;
use crate::app::command::{EditCommand, ViewCommand};
use crate::app::document::Document;
use crate::app::states::NodeState;
use crate::app::weights::{self, WeightSummary};
use crate::model::{NodeId, TensorKind};
use crate::recipe::{NodePrecision, node_precision};
use crate::workflow::tensor_facts::{KnownShape, ShapeSource};

/// A weight's statistics with its histogram texture, cached while the model is open.
struct WeightView {
    summary: Result<Option<WeightSummary>, String>,
    texture: Option<egui::TextureHandle>,
}

/// The inspector's cache: each weight's statistics and histogram, computed once per tensor.
#[derive(Default)]
pub struct InspectorState {
    weights: HashMap<String, WeightView>,
}

impl InspectorState {
    /// Forgets every cached weight (another model was opened).
    pub fn clear(&mut self) {
        self.weights.clear();
    }
}

/// Histogram texture size in pixels.
const HISTOGRAM_SIZE: [u32; 2] = [300, 160];

/// Draws the inspector for `doc`'s selection, queueing what the buttons do.
pub(crate) fn show(
    ui: &mut Ui,
    doc: &Document,
    state: &mut InspectorState,
    commands: &mut Vec<Command>,
) {
    let cache = &mut state.weights;
    match doc.view.selection.as_slice() {
        [] => {
            ui.heading("Inspector");
            ui.label("Click a node to see it here.");
            ui.label(
                RichText::new("Shift+click or Ctrl+click selects several; X excludes them.").weak(),
            );
            problems(ui, doc, commands);
        }
        [only] => node(ui, doc, *only, cache, commands),
        many => several(ui, doc, many, commands),
    }
}

fn problems(ui: &mut Ui, doc: &Document, commands: &mut Vec<Command>) {
    let problems = doc.opened.graph.problems();
    if problems.is_empty() {
        return;
    }
    ui.separator();
    ui.colored_label(
        Color32::from_rgb(220, 40, 40),
        format!("{} structural problem(s)", problems.len()),
    );
    for p in problems {
        let nodes = p.nodes();
        let text = p.describe(&doc.opened.graph);
        if nodes.is_empty() {
            ui.label(text);
        } else if ui.link(text).clicked() {
            commands.push(Command::View(ViewCommand::SelectNodes(nodes)));
            commands.push(Command::View(ViewCommand::ZoomToSelection));
        }
    }
}

/// True when `node` is excluded while the plan quantizes every float tensor it reads (weights
/// and constants aside) and writes, for its neighbours' sake: the Q/DQ pairs then surround it.
fn surrounded(doc: &Document, node: &crate::model::Node, state: NodeState) -> bool {
    if !matches!(
        state,
        NodeState::ExcludedByNode | NodeState::ExcludedByOpType
    ) {
        return false;
    }
    let float = |t: &str| {
        doc.opened
            .types
            .get(t)
            .and_then(|&c| crate::model::DataType::from_onnx(c).ok())
            .is_some_and(crate::model::DataType::is_float)
    };
    let activation = |t: &&String| {
        float(t)
            && doc
                .opened
                .graph
                .tensor(t)
                .is_some_and(|info| !info.kind.is_constant())
    };
    let mut tensors = node
        .inputs
        .iter()
        .filter(activation)
        .chain(node.outputs.iter().filter(|t| float(t)))
        .peekable();
    tensors.peek().is_some() && tensors.all(|t| doc.planned.plan.tensor(t).is_some())
}

fn state_chip(ui: &mut Ui, state: NodeState) {
    let fill = state_fill(state, ui.visuals().dark_mode);
    egui::Frame::new()
        .fill(fill)
        .corner_radius(4.0)
        .inner_margin(egui::Margin::symmetric(6, 2))
        .show(ui, |ui| {
            ui.label(
                RichText::new(state.label()).color(crate::app::canvas::state_text(
                    state,
                    ui.visuals().dark_mode,
                )),
            );
        });
}

fn node(
    ui: &mut Ui,
    doc: &Document,
    id: NodeId,
    cache: &mut HashMap<String, WeightView>,
    commands: &mut Vec<Command>,
) {
    let node = doc.opened.graph.node(id);
    let state = doc.state(id);
    ui.heading(&node.op_type);
    ui.add(egui::Label::new(RichText::new(&node.name).monospace()).wrap());
    if node.auto_named {
        ui.label(
            RichText::new(
                "This node has no name in the file; the studio and recipes call it by this one.",
            )
            .weak(),
        );
    }
    state_chip(ui, state);
    if let Some(text) = doc.planned.plan.rewritten.get(&node.name) {
        ui.add(egui::Label::new(RichText::new(text).weak()).wrap());
    }
    if surrounded(doc, node, state) {
        ui.label(
            RichText::new(format!(
                "Excluded, yet its neighbours quantize every tensor it reads and writes: the \
                 saved model has DequantizeLinear, {op}, QuantizeLinear in a row, which ONNX Runtime may run on \
                 integers. Exclude a neighbour too to keep it in float.",
                op = node.op_type
            ))
            .color(ui.visuals().warn_fg_color),
        );
    }
    if doc.opened.flagged.contains(&id) {
        ui.colored_label(
            Color32::from_rgb(220, 40, 40),
            "Structural problem: an input nothing produces, or a cycle.",
        );
    }
    ui.add_space(6.0);
    if doc.is_quantized() {
        in_model(ui, doc, node, commands);
    } else {
        actions(ui, doc, id, state, commands);
    }
    facts(ui, doc, id);
    tensors(ui, doc, "Inputs", &node.inputs, commands);
    tensors(ui, doc, "Outputs", &node.outputs, commands);
    measured_error(ui, doc, node);
    let weights: Vec<&str> = node
        .inputs
        .iter()
        .map(|t| doc.opened.qdq.source_of(t))
        .filter(|t| doc.opened.graph.is_constant(t))
        .collect();
    for name in weights {
        weight(ui, doc, name, cache);
    }
}

/// For a model that is quantized already: how this node's inputs and outputs are quantized
/// (the Q/DQ pairs the graph folds into tags).
fn in_model(ui: &mut Ui, doc: &Document, node: &crate::model::Node, commands: &mut Vec<Command>) {
    let inputs: Vec<(&str, &str, String)> = doc
        .opened
        .qdq
        .quantized_inputs(node)
        .map(|(_, read)| {
            let role = if read.constant { "constant" } else { "input" };
            (read.source.as_str(), role, read.params.describe())
        })
        .collect();
    let outputs: Vec<(&str, &str, String)> = node
        .outputs
        .iter()
        .filter_map(|t| {
            let params = doc.opened.qdq.quantization_of(t)?;
            Some((t.as_str(), "output", params.describe()))
        })
        .collect();
    if inputs.is_empty() && outputs.is_empty() {
        ui.label(RichText::new("No Q/DQ pair on this node's tensors.").weak());
        return;
    }
    // One entry under the other, not a grid: a long tensor name would leave a grid's last
    // column no width to wrap in.
    egui::CollapsingHeader::new("Quantization in this model")
        .default_open(true)
        .show(ui, |ui| {
            for (tensor, role, text) in inputs.into_iter().chain(outputs) {
                if ui
                    .link(RichText::new(tensor).monospace())
                    .on_hover_text("Find this tensor's producer and consumers")
                    .clicked()
                {
                    commands.push(Command::View(ViewCommand::Search(tensor.to_owned())));
                }
                ui.indent(tensor, |ui| {
                    ui.label(format!("{role}: {text}"));
                });
            }
        });
}

/// The buttons that change what the recipe does to the node.
fn actions(ui: &mut Ui, doc: &Document, id: NodeId, state: NodeState, commands: &mut Vec<Command>) {
    let node = doc.opened.graph.node(id);
    ui.horizontal_wrapped(|ui| {
        if state == NodeState::ExcludedByNode {
            if ui.button("Include this node").clicked() {
                commands.push(Command::Edit(EditCommand::SetExcluded(vec![id], false)));
            }
        } else if ui
            .add_enabled(state.excludable(), egui::Button::new("Exclude this node"))
            .clicked()
        {
            commands.push(Command::Edit(EditCommand::SetExcluded(vec![id], true)));
        }
        if ui.button(format!("Exclude all {}", node.op_type)).clicked() {
            commands.push(Command::Edit(EditCommand::ExcludeOpTypeOf(id)));
        }
        if ui
            .button("Exclude everything after")
            .on_hover_text("This node and every node downstream (an output head)")
            .clicked()
        {
            commands.push(Command::Edit(EditCommand::ExcludeAfter(id)));
        }
        if ui.button("Subgraph start").clicked() {
            commands.push(Command::Edit(EditCommand::SubgraphStart(Some(id))));
        }
        if ui.button("Subgraph end").clicked() {
            commands.push(Command::Edit(EditCommand::SubgraphEnd(Some(id))));
        }
        let recipe = doc.recipe();
        if (!recipe.subgraph_start.is_empty() || !recipe.subgraph_end.is_empty())
            && ui.button("Clear subgraph").clicked()
        {
            commands.push(Command::Edit(EditCommand::SubgraphStart(None)));
            commands.push(Command::Edit(EditCommand::SubgraphEnd(None)));
        }
    });
    if state.quantized() {
        precision_row(ui, doc, &[id], commands);
    }
}

/// The precision of the nodes `ids` (one, or a selected region): the recipe's 8 bits,
/// 16-bit activations or 4-bit weights, as one undoable step. Greyed with the reason when
/// the recipe cannot mix precisions (not int8 with 8-bit types).
fn precision_row(ui: &mut Ui, doc: &Document, ids: &[NodeId], commands: &mut Vec<Command>) {
    let recipe = doc.recipe();
    let problem = node_precision::cannot_mix(recipe);
    let nodes: Vec<&crate::model::Node> = ids.iter().map(|id| doc.opened.graph.node(*id)).collect();
    let current = |p: Option<NodePrecision>| {
        nodes
            .iter()
            .all(|n| recipe.node_precision.get(&n.name).copied() == p)
    };
    ui.horizontal_wrapped(|ui| {
        ui.add_enabled_ui(problem.is_none(), |ui| {
            ui.label("Precision");
            let choices = [
                (None, "w8a8", "The recipe's 8-bit weights and activations"),
                (
                    Some(NodePrecision::W8a16),
                    "w8a16",
                    "16-bit activations, 8-bit weights: for a node whose activations lose too much at 8 bits (runs in float on ONNX Runtime's CPU; native on NPUs)",
                ),
                (
                    Some(NodePrecision::W4a8),
                    "w4a8",
                    "4-bit weight per output channel, 8-bit activations (Conv/Gemm/MatMul with a constant weight)",
                ),
            ];
            for (precision, label, hover) in choices {
                let takes = precision.is_none_or(|p| nodes.iter().any(|n| p.takes(&doc.opened.graph, n)));
                let response = ui
                    .add_enabled(takes, egui::Button::selectable(current(precision), label))
                    .on_hover_text(hover);
                if response.clicked() {
                    commands.push(Command::Edit(EditCommand::SetPrecision(ids.to_vec(), precision)));
                }
            }
        })
        .response
        .on_disabled_hover_text(problem.unwrap_or_default());
    });
}

/// The node's domain, subgraphs and attributes.
fn facts(ui: &mut Ui, doc: &Document, id: NodeId) {
    let node = doc.opened.graph.node(id);
    ui.separator();
    egui::Grid::new("node_facts")
        .num_columns(2)
        .striped(true)
        .show(ui, |ui| {
            ui.label("Domain");
            ui.label(if node.domain.is_empty() {
                "ai.onnx"
            } else {
                &node.domain
            });
            ui.end_row();
            for (name, count) in &node.subgraphs {
                ui.label(name);
                ui.label(format!("subgraph of {count} nodes"));
                ui.end_row();
            }
        });
    if !node.attribute_names.is_empty() {
        egui::CollapsingHeader::new(format!("Attributes ({})", node.attribute_names.len()))
            .default_open(true)
            .show(ui, |ui| {
                egui::Grid::new("node_attributes")
                    .num_columns(2)
                    .striped(true)
                    .show(ui, |ui| {
                        let proto = doc.opened.model.graph().node.get(id.0);
                        for attribute in proto.map_or(&[][..], |p| &p.attribute[..]) {
                            ui.label(attribute.name.as_deref().unwrap_or("?"));
                            ui.add(
                                egui::Label::new(
                                    RichText::new(format_attribute(attribute)).monospace(),
                                )
                                .wrap(),
                            );
                            ui.end_row();
                        }
                    });
            });
    }
}

/// What the last comparison measured of this node: its outputs' error against the float
/// model (a weight-only layer's output, or a quantized activation's), and its weights'.
fn measured_error(ui: &mut Ui, doc: &Document, node: &crate::model::Node) {
    let Some(comparison) = doc.work.results.comparison.as_ref() else {
        return;
    };
    let errors = &comparison.tensors;
    let mut rows: Vec<(String, String)> = Vec::new();
    for output in &node.outputs {
        let local = errors
            .local_of(output)
            .map_or_else(String::new, |db| format!(" · local {db:.2} dB"));
        if let Some(layer) = errors.layers.iter().find(|l| &l.tensor == output) {
            rows.push((
                output.clone(),
                format!("output {:.2} dB{local}", layer.sqnr_db),
            ));
        }
        if let Some(a) = errors.activations.iter().find(|a| &a.tensor == output) {
            rows.push((
                output.clone(),
                format!(
                    "float vs QDQ {:.2} dB{local} · own Q/DQ {:.2} dB",
                    a.xmodel_sqnr_db, a.qdq_sqnr_db
                ),
            ));
        }
    }
    for input in &node.inputs {
        if let Some(w) = errors.weights.iter().find(|w| &w.weight == input) {
            let note = if w.rescaled {
                " (its scaling fitted out)"
            } else {
                ""
            };
            rows.push((input.clone(), format!("weight {:.2} dB{note}", w.sqnr_db)));
        }
    }
    if rows.is_empty() {
        return;
    }
    let stale = &comparison.recipe != doc.recipe();
    let title = if stale {
        "Quantization error (before the last recipe change)"
    } else {
        "Quantization error (last comparison)"
    };
    egui::CollapsingHeader::new(title)
        .default_open(true)
        .show(ui, |ui| {
            // One row per tensor: its name (losing its start when long), then its figures,
            // wrapped to the panel: neither pushes the other out of view.
            for (tensor, text) in rows {
                let room = ui.available_width();
                crate::app::names::mono_name(ui, &tensor, room, false);
                ui.add(egui::Label::new(text).wrap())
                    .on_hover_text("SQNR against the float model, from the Results tab");
                ui.add_space(2.0);
            }
        });
}

/// The share of the inspector's width a tensor's name takes in the tensor lists.
const NAME_SHARE: f32 = 0.45;

fn tensors(
    ui: &mut Ui,
    doc: &Document,
    title: &str,
    names: &[String],
    commands: &mut Vec<Command>,
) {
    egui::CollapsingHeader::new(format!("{title} ({})", names.len()))
        .default_open(true)
        .show(ui, |ui| {
            // One block per tensor: its name, type and shape on a line that wraps, then what
            // the plan does to it, wrapped to the panel. A grid of four columns grew wider
            // than the panel and cut its last column (and everything below it) at the edge.
            for name in names {
                if name.is_empty() {
                    ui.label(RichText::new("(omitted)").weak());
                    continue;
                }
                tensor_line(ui, doc, name, commands);
                tensor_plan(ui, doc, name);
                ui.add_space(3.0);
            }
        });
}

/// A tensor's name (a link to its producer and consumers), element type and shape.
fn tensor_line(ui: &mut Ui, doc: &Document, name: &str, commands: &mut Vec<Command>) {
    ui.horizontal_wrapped(|ui| {
        // At most about half the panel: its type and shape stay beside it.
        let width = ui.clip_rect().width() * NAME_SHARE;
        let link = crate::app::names::mono_name(ui, name, width, true)
            .on_hover_text("Find this tensor's producer and consumers");
        if link.clicked() {
            commands.push(Command::View(ViewCommand::Search(name.to_owned())));
        }
        match doc.opened.graph.tensor(name) {
            Some(t) => {
                ui.label(doc.tensor_type(name));
                shape_label(ui, doc.tensor_shape(name).as_ref());
                if t.kind == TensorKind::Missing {
                    ui.colored_label(Color32::from_rgb(220, 40, 40), "nothing produces it");
                }
            }
            None => {
                ui.label("?");
            }
        }
    });
}

/// What the quantizer does to `name` under the recipe (for a model quantized already: what
/// the model does to it), wrapped to the panel.
fn tensor_plan(ui: &mut Ui, doc: &Document, name: &str) {
    if doc.is_quantized() {
        // No recipe applies to a model that is quantized already.
        if let Some(read) = doc.opened.qdq.read_of(name) {
            ui.add(
                egui::Label::new(format!("{} of {}", read.params.short_type(), read.source)).wrap(),
            );
        }
        return;
    }
    let kept = doc.planned.plan.kept_float.get(name);
    match (doc.planned.plan.tensor(name), kept) {
        (Some(planned), _) => ui.add(egui::Label::new(planned.describe()).wrap()),
        (None, Some(reason)) => ui
            .add(
                egui::Label::new(
                    RichText::new(format!("float (kept: {})", reason.label()))
                        .color(state_fill(NodeState::KeptFloat, true)),
                )
                .wrap(),
            )
            .on_hover_text(format!(
                "Automatic precision keeps it in float: {}. Turn it off in the recipe \
                 (auto_precision = false) or give this tensor an override.",
                reason.describe()
            )),
        (None, None) if doc.planned.folded_away(name) => {
            ui.label(RichText::new("removed by pre-processing").weak())
        }
        (None, None) => ui.label(RichText::new("float").weak()),
    }
    .on_hover_text("What the quantizer does to this tensor under the recipe");
}

fn weight(ui: &mut Ui, doc: &Document, name: &str, cache: &mut HashMap<String, WeightView>) {
    let view = cache.entry(name.to_owned()).or_insert_with(|| WeightView {
        summary: weights::summarize(&doc.opened.model, name).map_err(|e| e.to_string()),
        texture: None,
    });
    egui::CollapsingHeader::new(format!("Weight {name}"))
        .id_salt(("weight", name))
        .default_open(true)
        .show(ui, |ui| match &view.summary {
            Err(e) => {
                ui.colored_label(
                    ui.visuals().error_fg_color,
                    format!("Could not read it: {e}"),
                );
            }
            Ok(None) => {
                ui.label("Not an initializer");
            }
            Ok(Some(s)) => {
                egui::Grid::new(("weight_stats", name))
                    .num_columns(2)
                    .striped(true)
                    .show(ui, |ui| {
                        let rows = [
                            ("Type", format!("{:?}", s.dtype).to_lowercase()),
                            ("Shape", format!("{:?}", s.shape)),
                            ("Values", s.len().to_string()),
                            ("Min / max", format!("{:.4} / {:.4}", s.min, s.max)),
                            ("Mean ± std", format!("{:.4} ± {:.4}", s.mean, s.std)),
                            ("Zeros", format!("{:.1}%", s.zeros * 100.0)),
                        ];
                        for (k, v) in rows {
                            ui.label(k);
                            ui.label(v);
                            ui.end_row();
                        }
                        if s.non_finite > 0 {
                            ui.colored_label(ui.visuals().error_fg_color, "NaN / Inf");
                            ui.colored_label(ui.visuals().error_fg_color, s.non_finite.to_string());
                            ui.end_row();
                        }
                    });
                outlier_rows(ui, doc, name);
                if s.len() > 1 {
                    if view.texture.is_none() {
                        match weights::histogram_image(s, HISTOGRAM_SIZE[0], HISTOGRAM_SIZE[1]) {
                            Ok(image) => {
                                view.texture = Some(ui.ctx().load_texture(
                                    format!("weight-histogram-{name}"),
                                    image,
                                    egui::TextureOptions::LINEAR,
                                ));
                            }
                            Err(e) => {
                                ui.label(format!("No histogram: {e}"));
                            }
                        }
                    }
                    if let Some(texture) = &view.texture {
                        let width = ui.available_width().min(HISTOGRAM_SIZE[0] as f32);
                        let size = egui::vec2(
                            width,
                            width * HISTOGRAM_SIZE[1] as f32 / HISTOGRAM_SIZE[0] as f32,
                        );
                        ui.image((texture.id(), size));
                    }
                }
            }
        });
}

/// What automatic precision does with the weight's outlier rows, when the plan splits them
/// off to a float path.
fn outlier_rows(ui: &mut Ui, doc: &Document, name: &str) {
    let Some(split) = doc
        .planned
        .plan
        .outlier_rows
        .iter()
        .find(|s| s.weight == name)
    else {
        return;
    };
    let rows: Vec<String> = split.rows.iter().map(usize::to_string).collect();
    ui.label(format!(
        "Outlier rows in float: {} of {} (rows {}); the quantized rest spans ±{:.4} instead of \
         ±{:.4}",
        split.rows.len(),
        split.row_count,
        rows.join(", "),
        split.range[1],
        split.range[0],
    ))
    .on_hover_text(
        "Automatic precision computes these rows with a small float MatMul beside the \
         quantized layer (exact in float), so one step no longer serves them and every other \
         weight alike",
    );
}

fn several(ui: &mut Ui, doc: &Document, nodes: &[NodeId], commands: &mut Vec<Command>) {
    ui.heading(format!("{} nodes selected", nodes.len()));
    ui.horizontal_wrapped(|ui| {
        if ui.button(format!("Exclude all {}", nodes.len())).clicked() {
            commands.push(Command::Edit(EditCommand::SetExcluded(
                nodes.to_vec(),
                true,
            )));
        }
        if ui.button(format!("Include all {}", nodes.len())).clicked() {
            commands.push(Command::Edit(EditCommand::SetExcluded(
                nodes.to_vec(),
                false,
            )));
        }
        if ui.button("Zoom to them").clicked() {
            commands.push(Command::View(ViewCommand::ZoomToSelection));
        }
    });
    if nodes.iter().any(|id| doc.state(*id).quantized()) {
        precision_row(ui, doc, nodes, commands);
    }
    ui.separator();
    egui::Grid::new("selection")
        .num_columns(3)
        .striped(true)
        .show(ui, |ui| {
            for &id in nodes {
                let node = doc.opened.graph.node(id);
                let state = doc.state(id);
                crate::app::canvas::shapes::swatch(ui, state_fill(state, ui.visuals().dark_mode));
                ui.label(&node.op_type);
                if ui.link(RichText::new(&node.name).monospace()).clicked() {
                    commands.push(Command::View(ViewCommand::SelectNodes(vec![id])));
                }
                ui.end_row();
            }
        });
}

/// An attribute's value as text: scalars as they are, lists bracketed (long ones cut),
/// tensors and graphs by their size.
fn format_attribute(a: &crate::model::proto::AttributeProto) -> String {
    fn list<T: std::fmt::Display>(items: &[T]) -> String {
        let shown: Vec<String> = items.iter().take(16).map(ToString::to_string).collect();
        let more = if items.len() > 16 { ", …" } else { "" };
        format!("[{}{more}]", shown.join(", "))
    }
    if let Some(i) = a.i {
        return i.to_string();
    }
    if let Some(f) = a.f {
        return format!("{f}");
    }
    if let Some(s) = &a.s {
        let text = String::from_utf8_lossy(s);
        return format!("\"{}\"", text.chars().take(80).collect::<String>());
    }
    if let Some(t) = &a.t {
        return format!("tensor {:?}", t.dims);
    }
    if let Some(g) = &a.g {
        return format!("graph of {} nodes", g.node.len());
    }
    if !a.ints.is_empty() {
        return list(&a.ints);
    }
    if !a.floats.is_empty() {
        return list(&a.floats);
    }
    if !a.strings.is_empty() {
        let strings: Vec<String> = a
            .strings
            .iter()
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect();
        return list(&strings);
    }
    "(empty)".to_owned()
}

/// A tensor's shape: plain when declared, weak with a note when calibration saw it, `?` when
/// unknown.
fn shape_label(ui: &mut Ui, shape: Option<&KnownShape>) {
    match shape {
        Some(s) if s.source == ShapeSource::Observed => {
            ui.label(RichText::new(s.dims_text()).weak())
                .on_hover_text("Seen in calibration: the file declares no shape for it");
        }
        Some(s) if s.source == ShapeSource::Probed => {
            ui.label(RichText::new(s.dims_text()).weak()).on_hover_text(
                "Seen in one run on one random sample when the model opened (its inputs are \
                 static): the file declares no shape for it",
            );
        }
        Some(s) => {
            ui.label(s.dims_text());
        }
        None => {
            ui.label("?");
        }
    }
}
