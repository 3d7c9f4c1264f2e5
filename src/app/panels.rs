//! The studio's fixed parts: menu bar, status bar, the op-type panel on the left, the node
//! inspector on the right and the graph in the middle. Each takes what it shows and a
//! command sink; none changes the recipe or the studio directly.

use std::path::PathBuf;

use egui::{Color32, RichText, Ui};

use crate::app::canvas::shapes::swatch;
use crate::app::canvas::{Hover, state_fill};
use crate::app::command::{self, Command, SelectMode};
use crate::app::command::{AppCommand, EditCommand, RecipeCommand, ViewCommand, WorkCommand};
use crate::app::document::Document;
use crate::app::document_parts::{DocParts, Shown};
use crate::app::inspector::{self, InspectorState};
use crate::app::states::NodeState;
use crate::model::legacy::LegacyOpset;
use crate::recipe::{Int4Method, Int4Output, NodePrecision, QuantMode, Target};

/// Legend entries in display order.
const LEGEND: [NodeState; 9] = [
    NodeState::Quantized,
    NodeState::Quantized16,
    NodeState::QuantizedW4,
    NodeState::ExcludedByOpType,
    NodeState::ExcludedByNode,
    NodeState::OutsideSubgraph,
    NodeState::KeptFloat,
    NodeState::NotQuantizable,
    NodeState::Folded,
];

/// Legend entries for a model that is quantized already.
const QUANTIZED_LEGEND: [NodeState; 2] = [NodeState::QuantizedInModel, NodeState::FloatInModel];

/// What the menus need to know to enable their items.
#[derive(Debug, Clone, PartialEq)]
pub struct MenuState {
    /// A model is open.
    pub has_doc: bool,
    /// A task runs.
    pub busy: bool,
    /// Statistics are cached.
    pub has_stats: bool,
    /// Undo would do something.
    pub can_undo: bool,
    /// Redo would do something.
    pub can_redo: bool,
    /// Nodes are selected.
    pub has_selection: bool,
    /// Recently opened models.
    pub recent: Vec<PathBuf>,
    /// The theme setting.
    pub theme: egui::ThemePreference,
    /// The open model is quantized already: nothing quantizes it again.
    pub quantized: bool,
}

/// A model being opened, as the progress box shows it.
#[derive(Debug, Clone)]
pub struct OpeningView {
    /// What is being opened.
    pub label: String,
    /// Its newest progress.
    pub progress: Option<crate::jobs::Progress>,
    /// Since when.
    pub elapsed: std::time::Duration,
}

/// A menu button that issues `command`, with its shortcut shown.
fn menu_item(
    ui: &mut Ui,
    commands: &mut Vec<Command>,
    text: &str,
    command: Command,
    enabled: bool,
) {
    let mut button = egui::Button::new(text);
    if let Some(keys) = command::for_command(&command) {
        button = button.shortcut_text(command::label(&keys));
    }
    if ui.add_enabled(enabled, button).clicked() {
        commands.push(command);
        ui.close();
    }
}

/// File, Quantize, Edit, View and Help.
pub fn menu_bar(ui: &mut Ui, menu: &MenuState, commands: &mut Vec<Command>) {
    egui::Panel::top("menu_bar").show(ui, |ui| {
        egui::MenuBar::new().ui(ui, |ui| {
            ui.menu_button("File", |ui| file_menu(ui, menu, commands));
            ui.menu_button("Quantize", |ui| {
                let idle = menu.has_doc && !menu.busy;
                let float = idle && !menu.quantized;
                let ready = float && menu.has_stats;
                menu_item(
                    ui,
                    commands,
                    "Run calibration",
                    Command::Work(WorkCommand::Calibrate),
                    float,
                );
                let (compare, can_compare) = if menu.quantized {
                    ("Compare with the float model", idle)
                } else {
                    ("Quantize & compare", ready)
                };
                menu_item(
                    ui,
                    commands,
                    compare,
                    Command::Work(WorkCommand::QuantizeCompare),
                    can_compare,
                );
                menu_item(
                    ui,
                    commands,
                    "Scan sensitivity",
                    Command::Work(WorkCommand::ScanSensitivity),
                    ready,
                );
                menu_item(
                    ui,
                    commands,
                    "Auto-exclude",
                    Command::Work(WorkCommand::AutoExclude),
                    ready,
                );
                menu_item(
                    ui,
                    commands,
                    "Choose weight ranges by the outputs",
                    Command::Work(WorkCommand::ChooseWeightRanges),
                    ready,
                );
                menu_item(
                    ui,
                    commands,
                    "Tune for speed on the provider",
                    Command::Work(WorkCommand::TuneLatency),
                    ready,
                );
                menu_item(
                    ui,
                    commands,
                    "Cancel the running task",
                    Command::Work(WorkCommand::CancelTask),
                    menu.busy,
                );
                ui.separator();
                menu_item(
                    ui,
                    commands,
                    "Save statistics…",
                    Command::Work(WorkCommand::SaveStatisticsDialog),
                    menu.has_doc && menu.has_stats,
                );
                menu_item(
                    ui,
                    commands,
                    "Load statistics…",
                    Command::Work(WorkCommand::LoadStatisticsDialog),
                    menu.has_doc && !menu.quantized,
                );
            });
            ui.menu_button("Edit", |ui| {
                menu_item(
                    ui,
                    commands,
                    "Undo",
                    Command::Edit(EditCommand::Undo),
                    menu.can_undo,
                );
                menu_item(
                    ui,
                    commands,
                    "Redo",
                    Command::Edit(EditCommand::Redo),
                    menu.can_redo,
                );
                ui.separator();
                menu_item(
                    ui,
                    commands,
                    "Exclude / include selection",
                    Command::Edit(EditCommand::ToggleExclusion),
                    menu.has_selection,
                );
                menu_item(
                    ui,
                    commands,
                    "Clear selection",
                    Command::View(ViewCommand::ClearSelection),
                    menu.has_selection,
                );
                ui.separator();
                menu_item(
                    ui,
                    commands,
                    "Find…",
                    Command::View(ViewCommand::OpenSearch),
                    menu.has_doc,
                );
            });
            ui.menu_button("View", |ui| view_menu(ui, menu, commands));
            ui.menu_button("Help", |ui| {
                menu_item(
                    ui,
                    commands,
                    "Keyboard shortcuts",
                    Command::App(AppCommand::ShowShortcuts),
                    true,
                );
                menu_item(
                    ui,
                    commands,
                    "About qdq-studio",
                    Command::App(AppCommand::ShowAbout),
                    true,
                );
            });
        });
    });
}

fn file_menu(ui: &mut Ui, menu: &MenuState, commands: &mut Vec<Command>) {
    menu_item(
        ui,
        commands,
        "Open…",
        Command::App(AppCommand::OpenDialog),
        true,
    );
    menu_item(
        ui,
        commands,
        "Open model folder…",
        Command::App(AppCommand::OpenFolderDialog),
        true,
    );
    menu_item(
        ui,
        commands,
        "Open path…",
        Command::App(AppCommand::OpenPathPrompt),
        true,
    );
    ui.menu_button("Recent", |ui| {
        if menu.recent.is_empty() {
            ui.label(RichText::new("No recent models").weak());
        }
        for path in &menu.recent {
            let response = ui
                .add_enabled(path.exists(), egui::Button::new(path.display().to_string()))
                .on_disabled_hover_text("The file is no longer there");
            if response.clicked() {
                commands.push(Command::App(AppCommand::Open(path.clone())));
                ui.close();
            }
        }
        ui.separator();
        if ui.button("Clear recent").clicked() {
            commands.push(Command::App(AppCommand::ClearRecent));
            ui.close();
        }
    });
    menu_item(
        ui,
        commands,
        "Open bundled sample",
        Command::App(AppCommand::OpenSample),
        true,
    );
    ui.separator();
    menu_item(
        ui,
        commands,
        "Save recipe…",
        Command::App(AppCommand::SaveRecipeDialog),
        menu.has_doc,
    );
    menu_item(
        ui,
        commands,
        "Load recipe…",
        Command::App(AppCommand::LoadRecipeDialog),
        menu.has_doc,
    );
    ui.separator();
    menu_item(
        ui,
        commands,
        "Save quantized model…",
        Command::Work(WorkCommand::SaveQuantizedDialog),
        menu.has_doc && !menu.quantized,
    );
    ui.separator();
    menu_item(ui, commands, "Quit", Command::App(AppCommand::Quit), true);
}

fn view_menu(ui: &mut Ui, menu: &MenuState, commands: &mut Vec<Command>) {
    let has_doc = menu.has_doc;
    menu_item(
        ui,
        commands,
        "Fit graph",
        Command::View(ViewCommand::Fit),
        has_doc,
    );
    menu_item(
        ui,
        commands,
        "Zoom to selection",
        Command::View(ViewCommand::ZoomToSelection),
        has_doc,
    );
    menu_item(
        ui,
        commands,
        "Zoom in",
        Command::View(ViewCommand::ZoomIn),
        has_doc,
    );
    menu_item(
        ui,
        commands,
        "Zoom out",
        Command::View(ViewCommand::ZoomOut),
        has_doc,
    );
    menu_item(
        ui,
        commands,
        "Float and QDQ side by side",
        Command::View(ViewCommand::ToggleSideBySide),
        has_doc,
    );
    ui.separator();
    ui.label("Theme");
    for (theme, label) in [
        (egui::ThemePreference::System, "Follow the system"),
        (egui::ThemePreference::Light, "Light"),
        (egui::ThemePreference::Dark, "Dark"),
    ] {
        if ui.radio(menu.theme == theme, label).clicked() {
            commands.push(Command::App(AppCommand::SetTheme(theme)));
            ui.close();
        }
    }
}

/// Model, opset, node counts, the recipe's counts, runtime and the last message.
pub fn status_bar(ui: &mut Ui, doc: Option<&Document>, runtime: &str, status: &str) {
    egui::Panel::bottom("status_bar").show(ui, |ui| {
        // Left to right: the model's name, the message (up to a share of the bar, so it is
        // never pushed off), then the model's facts, cut first from the end.
        ui.horizontal(|ui| {
            if let Some(doc) = doc {
                ui.add(
                    egui::Label::new(RichText::new(doc.opened.source.label()).strong()).truncate(),
                );
                ui.separator();
            }
            let share = (ui.available_width() * 0.4).max(160.0);
            ui.scope(|ui| {
                ui.set_max_width(share);
                ui.add(egui::Label::new(status).truncate());
            });
            ui.separator();
            if let Some(doc) = doc {
                model_facts(ui, doc);
            }
            ui.add(egui::Label::new(runtime).truncate());
        });
    });
}

/// The status bar's facts about the open model: zoom, opset, node counts, plan counts.
fn model_facts(ui: &mut Ui, doc: &Document) {
    ui.label(format!("{:.0}%", doc.view.canvas.zoom() * 100.0));
    ui.separator();
    let opset = doc.opened.opset().map_or("?".to_owned(), |v| v.to_string());
    match doc.opened.model.legacy_opset() {
        Some(legacy @ LegacyOpset::Upgraded { from, .. }) => {
            ui.add(egui::Label::new(format!("opset {opset} (from {from})")).truncate())
                .on_hover_text(legacy.describe());
        }
        Some(legacy @ LegacyOpset::Kept { .. }) => {
            let text = RichText::new(format!("opset {opset}")).color(ui.visuals().warn_fg_color);
            ui.add(egui::Label::new(text).truncate())
                .on_hover_text(legacy.describe());
        }
        None => {
            ui.add(egui::Label::new(format!("opset {opset}")).truncate());
        }
    }
    ui.separator();
    let folded = if doc.is_quantized() {
        "Constant and Q/DQ"
    } else {
        "Constant"
    };
    ui.add(
        egui::Label::new(format!(
            "{} nodes ({} drawn, {} {folded} folded)",
            doc.opened.graph.nodes().len(),
            doc.view.canvas.node_count(),
            doc.opened.folded_nodes()
        ))
        .truncate(),
    );
    ui.separator();
    let c = doc.planned.counts;
    let mut counts = if doc.is_quantized() {
        format!(
            "{} quantized · {} float (in this model)",
            c.quantized, c.not_quantizable
        )
    } else {
        format!(
            "{} quantized · {} excluded · {} not quantizable",
            c.quantized, c.excluded, c.not_quantizable
        )
    };
    if c.folded > 0 {
        counts.push_str(&format!(" · {} folded", c.folded));
    }
    ui.add(egui::Label::new(counts).truncate());
    ui.separator();
}

/// The recipe summary and the op-type list.
pub fn left_panel(ui: &mut Ui, doc: &Document, filter: &mut String, commands: &mut Vec<Command>) {
    egui::Panel::left("op_types")
        .resizable(true)
        .default_size(250.0)
        .show(ui, |ui| {
            if doc.is_quantized() {
                quantized_summary(ui, doc);
                return;
            }
            // One scroll for the recipe and the op types: in a short window the op types are
            // reached by scrolling rather than pushed off the panel.
            egui::ScrollArea::vertical()
                .auto_shrink([false, false])
                .show(ui, |ui| {
                    recipe_summary(ui, doc, commands);
                    ui.separator();
                    ui.heading("Op types");
                    ui.add(
                        egui::TextEdit::singleline(filter)
                            .hint_text("Filter op types")
                            .desired_width(f32::INFINITY),
                    );
                    let needle = filter.to_lowercase();
                    for (op_type, plan) in &doc.planned.plan.op_types {
                        if needle.is_empty() || op_type.to_lowercase().contains(&needle) {
                            op_type_row(ui, op_type, plan, commands);
                        }
                    }
                });
        });
}

/// In place of the recipe for a model that is quantized already: what it holds and how to
/// measure it.
fn quantized_summary(ui: &mut Ui, doc: &Document) {
    ui.heading("Quantized model");
    let c = doc.planned.counts;
    egui::Grid::new("quantized_counts")
        .num_columns(2)
        .show(ui, |ui| {
            for (state, count) in [
                (NodeState::QuantizedInModel, c.quantized),
                (NodeState::FloatInModel, c.not_quantizable),
            ] {
                swatch(ui, state_fill(state, ui.visuals().dark_mode));
                ui.label(format!("{}: {count}", capitalised(state.label())));
                ui.end_row();
            }
        });
    ui.label(format!(
        "{} quantized activation(s) and {} quantized constant(s): each Q/DQ pair is a tag on \
         the edge it sits on; a quantized weight, a tag on its node.",
        doc.opened.qdq.activation_pairs(),
        doc.opened.qdq.quantized_constants()
    ));
    ui.add_space(6.0);
    ui.label(
        RichText::new(
            "This model is not quantized again. To measure it, choose its float model in \
             Results and compare (F5).",
        )
        .weak(),
    );
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_uppercase().chain(chars).collect()
    })
}

/// How many quantized nodes the plan gives another precision, each with its swatch (the
/// nodes the graph paints so).
fn precision_counts(ui: &mut Ui, plan: &crate::quant::Explanation) {
    for (precision, state) in [
        (NodePrecision::W8a16, NodeState::Quantized16),
        (NodePrecision::W4a8, NodeState::QuantizedW4),
    ] {
        let count = plan
            .node_precision
            .values()
            .filter(|p| **p == precision)
            .count();
        if count > 0 {
            ui.horizontal(|ui| {
                swatch(ui, state_fill(state, ui.visuals().dark_mode));
                ui.label(format!("{count} node(s) at {}", precision.name()));
            });
        }
    }
}

/// The recipe's counts (from the plan), its file, and its buttons.
fn recipe_summary(ui: &mut Ui, doc: &Document, commands: &mut Vec<Command>) {
    ui.heading("Recipe");
    let c = doc.planned.counts;
    egui::Grid::new("recipe_counts")
        .num_columns(2)
        .show(ui, |ui| {
            for (state, label, count) in [
                (NodeState::Quantized, "Quantized", c.quantized),
                (NodeState::ExcludedByOpType, "Excluded", c.excluded),
                (
                    NodeState::NotQuantizable,
                    "Not quantizable",
                    c.not_quantizable,
                ),
                (NodeState::KeptFloat, "Kept in float", c.kept_float),
                (NodeState::Folded, "Folded by pre-processing", c.folded),
            ] {
                if matches!(state, NodeState::Folded | NodeState::KeptFloat) && count == 0 {
                    continue;
                }
                swatch(ui, state_fill(state, ui.visuals().dark_mode));
                ui.label(format!("{label}: {count}"));
                ui.end_row();
            }
        });
    let recipe = doc.recipe();
    mode_rows(ui, recipe, commands);
    auto_precision_row(ui, doc, commands);
    if !recipe.nodes_to_exclude.is_empty() {
        ui.label(format!(
            "{} node pattern(s) excluded",
            recipe.nodes_to_exclude.len()
        ));
    }
    precision_counts(ui, &doc.planned.plan);
    ui.label(
        RichText::new(match &doc.planned.recipe_path {
            Some(p) => format!("File: {}", p.display()),
            None => "Not saved yet".to_owned(),
        })
        .weak(),
    );
    ui.horizontal(|ui| {
        if ui.button("Save…").clicked() {
            commands.push(Command::App(AppCommand::SaveRecipeDialog));
        }
        if ui.button("Load…").clicked() {
            commands.push(Command::App(AppCommand::LoadRecipeDialog));
        }
        if ui
            .add_enabled(doc.planned.editor.can_undo(), egui::Button::new("Undo"))
            .clicked()
        {
            commands.push(Command::Edit(EditCommand::Undo));
        }
        if ui
            .add_enabled(doc.planned.editor.can_redo(), egui::Button::new("Redo"))
            .clicked()
        {
            commands.push(Command::Edit(EditCommand::Redo));
        }
    });
}

/// A mode's name in the studio.
pub fn mode_name(mode: QuantMode) -> &'static str {
    match mode {
        QuantMode::Int8 => "INT8 (activations and weights)",
        QuantMode::Fp8 => "FP8 E4M3 (activations and weights)",
        QuantMode::Int4 => "INT4 weight-only",
    }
}

/// The weights' scale granularity's name in the studio.
pub fn granularity_name(per_channel: bool) -> &'static str {
    if per_channel {
        "one scale per output channel"
    } else {
        "one scale per weight tensor"
    }
}

/// An int4 output form's name in the studio.
pub fn output_name(form: Int4Output) -> &'static str {
    match form {
        Int4Output::Dq => "DequantizeLinear (any runtime)",
        Int4Output::Matmulnbits => "MatMulNBits (ONNX Runtime)",
    }
}

/// What an int4 method does, for its tooltip.
fn method_hint(method: Int4Method) -> &'static str {
    match method {
        Int4Method::AwqLite => {
            "Activation-aware scaling: per input channel, a scale searched per layer on the \
             calibration activations, folded into the producer (norm weight, Mul, MatMul) or an \
             explicit Mul. Needs calibration."
        }
        Int4Method::AwqClip => {
            "Activation-aware clipping: per block, the range ratio that minimises the layer's \
             output error on the calibration activations. Needs calibration."
        }
        Int4Method::AwqFull => {
            "Both: the activation-aware scales, then the clipping ratios on the scaled \
             weights, each kept only where it beats plain rounding on held-out calibration \
             rows. Needs calibration."
        }
        Int4Method::RtnDq => "Round to nearest, int4 weights stored. No calibration.",
        Int4Method::Rtn => {
            "Round to nearest as Q/DQ on the float weights (TensorRT's form; the file keeps \
             float weights). No calibration."
        }
    }
}

/// The accuracy techniques of per-channel or per-tensor modes: cross-layer equalization, bias
/// correction, GPTQ and layer-wise ranges (all need statistics calibrated with them on), and
/// simplification.
fn technique_rows(ui: &mut Ui, recipe: &crate::recipe::Recipe, commands: &mut Vec<Command>) {
    switch_row(
        ui,
        ("Equalization", "even out weight channel ranges"),
        "Cross-layer equalization: rescales Conv/Gemm/MatMul pairs (through Relu or nothing) so each channel's weights span the same range; float outputs unchanged, per-tensor weights gain most; needs a new calibration",
        recipe.preprocessing.equalize,
        RecipeCommand::SetEqualize,
        commands,
    );
    switch_row(
        ui,
        ("Bias correction", "remove the weights' mean error"),
        "Subtracts each layer's mean output shift from weight quantization, measured on the calibration data, from its bias (adds a bias where there is none); needs a new calibration",
        recipe.bias_correction,
        RecipeCommand::SetBiasCorrection,
        commands,
    );
    gptq_row(ui, recipe, commands);
    switch_row(
        ui,
        ("Layer-wise ranges", "a range method per tensor"),
        "Tries MinMax and two percentiles on every activation and keeps, for each, the one whose quantization disturbs the outputs of the nodes reading it least, measured on the calibration data; needs a new calibration",
        recipe.layerwise_range,
        RecipeCommand::SetLayerwiseRange,
        commands,
    );
    switch_row(
        ui,
        ("MSE weight ranges", "clip weight outliers"),
        "Quantizes each weight (or weight channel) over the clipped range whose rounding and clipping error is least, so one outlier no longer sets the step of every other weight; per-tensor weights gain most (a transformer's output projections); no calibration needed",
        recipe.weight_range == crate::recipe::WeightRange::Mse,
        RecipeCommand::SetMseWeightRanges,
        commands,
    );
    ui.label("");
    let choose = ui.button("Choose per weight").on_hover_text(
        "Gives each weight the other range choice in turn, and the other bit width (7 or 8) where this CPU's u8×s8 kernels read it (all such weights at once first), and keeps each where the worst output SQNR on the evaluation data rises (a real run per weight): clipping helps a transformer's output projections and hurts most convolutions; the choice is saved in the recipe; needs statistics",
    );
    if choose.clicked() {
        commands.push(Command::Work(WorkCommand::ChooseWeightRanges));
    }
    ui.end_row();
    switch_row(
        ui,
        ("Simplify", "fold what the runtime fuses"),
        "Rewrites the float forms ONNX Runtime fuses in a float model, before Q/DQ nodes keep them apart: constant Reshapes folded; a Conv's bias Add, channel Mul and HardSigmoid folded into it; a division by a constant after an elementwise op (hard-swish's /6) made a multiplication, which has an integer kernel. Exact up to float rounding; fewer standalone Q/DQ, a faster model; needs a new calibration",
        recipe.preprocessing.simplify,
        RecipeCommand::SetSimplify,
        commands,
    );
}

/// The GPTQ switch (a grid row; int4's round-to-nearest methods show it too).
fn gptq_row(ui: &mut Ui, recipe: &crate::recipe::Recipe, commands: &mut Vec<Command>) {
    switch_row(
        ui,
        ("GPTQ", "round weights against inputs"),
        "GPTQ: rounds each Conv/Gemm/MatMul weight input by input, spreading each rounding error over the inputs not yet rounded so the layer's output on the calibration data moves least (how far it trusts the data is chosen on held-out calibration samples); same scales, other integers; needs a new calibration",
        recipe.gptq,
        RecipeCommand::SetGptq,
        commands,
    );
}

/// One grid row of a recipe switch: its name, a checkbox saying what it does (`hover`
/// explains), and the command a change sends.
fn switch_row(
    ui: &mut Ui,
    (name, does): (&str, &str),
    hover: &str,
    mut on: bool,
    command: fn(bool) -> RecipeCommand,
    commands: &mut Vec<Command>,
) {
    ui.label(name);
    if ui.checkbox(&mut on, does).on_hover_text(hover).changed() {
        commands.push(command(on).into());
    }
    ui.end_row();
}

/// The recipe's mode and, for int4, its method and output form.
fn mode_rows(ui: &mut Ui, recipe: &crate::recipe::Recipe, commands: &mut Vec<Command>) {
    egui::Grid::new("recipe_mode")
        .num_columns(2)
        .show(ui, |ui| {
            target_row(ui, recipe, commands);
            ui.label("Mode");
            egui::ComboBox::from_id_salt("recipe-mode")
                .selected_text(mode_name(recipe.mode))
                .show_ui(ui, |ui| {
                    for mode in [QuantMode::Int8, QuantMode::Fp8, QuantMode::Int4] {
                        if ui
                            .selectable_label(recipe.mode == mode, mode_name(mode))
                            .clicked()
                            && recipe.mode != mode
                        {
                            commands.push(Command::Recipe(RecipeCommand::SetMode(mode)));
                        }
                    }
                });
            ui.end_row();
            if recipe.mode != QuantMode::Int4 {
                ui.label("Weight scales");
                egui::ComboBox::from_id_salt("recipe-granularity")
                    .selected_text(granularity_name(recipe.per_channel))
                    .show_ui(ui, |ui| {
                        for per_channel in [true, false] {
                            if ui
                                .selectable_label(
                                    recipe.per_channel == per_channel,
                                    granularity_name(per_channel),
                                )
                                .clicked()
                                && recipe.per_channel != per_channel
                            {
                                commands.push(Command::Recipe(RecipeCommand::SetPerChannel(per_channel)));
                            }
                        }
                    })
                    .response
                    .on_hover_text(
                        "Per channel: each output channel of a Conv/Gemm/MatMul weight gets its own scale (onnxruntime's per_channel, the default). Per tensor: one scale per weight, for runtimes and NPUs that take no other; equalization, bias correction, GPTQ and MSE weight ranges win most of the difference back",
                    );
                ui.end_row();
            }
            if recipe.mode == QuantMode::Int8 {
                ui.label("SmoothQuant");
                let mut on = recipe.smoothquant;
                if ui
                    .checkbox(&mut on, "move outliers into the weights")
                    .on_hover_text(
                        "Divides each MatMul input's large channels by s and multiplies the weight rows by s, folded into the norm or op that made the input; needs a new calibration",
                    )
                    .changed()
                {
                    commands.push(Command::Recipe(RecipeCommand::SetSmoothQuant(on)));
                }
                ui.end_row();
            }
            if recipe.mode != QuantMode::Int4 {
                technique_rows(ui, recipe, commands);
                return;
            }
            ui.label("Int4 method");
            egui::ComboBox::from_id_salt("recipe-int4-method")
                .selected_text(recipe.int4_method.name())
                .show_ui(ui, |ui| {
                    for method in Int4Method::ALL {
                        if ui
                            .selectable_label(recipe.int4_method == method, method.name())
                            .on_hover_text(method_hint(method))
                            .clicked()
                            && recipe.int4_method != method
                        {
                            commands.push(Command::Recipe(RecipeCommand::SetInt4Method(method)));
                        }
                    }
                })
                .response
                .on_hover_text(method_hint(recipe.int4_method));
            ui.end_row();
            ui.label("Int4 output");
            egui::ComboBox::from_id_salt("recipe-int4-output")
                .selected_text(output_name(recipe.int4_output))
                .show_ui(ui, |ui| {
                    for form in [Int4Output::Dq, Int4Output::Matmulnbits] {
                        let usable =
                            form == Int4Output::Dq || recipe.int4_method != Int4Method::Rtn;
                        if ui
                            .add_enabled(
                                usable,
                                egui::Button::selectable(
                                    recipe.int4_output == form,
                                    output_name(form),
                                ),
                            )
                            .clicked()
                            && recipe.int4_output != form
                        {
                            commands.push(Command::Recipe(RecipeCommand::SetInt4Output(form)));
                        }
                    }
                });
            ui.end_row();
            if matches!(recipe.int4_method, Int4Method::RtnDq | Int4Method::Rtn) {
                gptq_row(ui, recipe, commands);
            }
        });
}

/// The recipe's deployment target: a list of every target, each with what it is, and on the
/// chosen one what it set (the engine's own lines).
fn target_row(ui: &mut Ui, recipe: &crate::recipe::Recipe, commands: &mut Vec<Command>) {
    ui.label("Deploy to");
    let shown = recipe.target.map_or("none (older recipe)", Target::name);
    let set = recipe.target_lines();
    let hover = match recipe.target {
        Some(target) => format!(
            "{}\n\nIt set:\n{}\n\nRequired settings cannot be changed while this target is chosen; \
             the others are its defaults.",
            target.describe(),
            set.join("\n")
        ),
        None => "This recipe was written before targets existed and keeps exactly its own \
                 settings. Choosing a target applies that target's settings."
            .to_owned(),
    };
    egui::ComboBox::from_id_salt("recipe-target")
        .selected_text(shown)
        .show_ui(ui, |ui| {
            for target in Target::ALL {
                if ui
                    .selectable_label(recipe.target == Some(target), target.name())
                    .on_hover_text(target.describe())
                    .clicked()
                    && recipe.target != Some(target)
                {
                    commands.push(Command::Recipe(RecipeCommand::SetTarget(target)));
                }
            }
        })
        .response
        .on_hover_text(hover);
    ui.end_row();
}

/// The automatic-precision switch, with what it keeps in float under the current plan.
fn auto_precision_row(ui: &mut Ui, doc: &Document, commands: &mut Vec<Command>) {
    let mut on = doc.recipe().auto_precision;
    let kept = &doc.planned.plan.kept_float;
    let label = if on && !kept.is_empty() {
        format!("Automatic precision ({} tensor(s) kept float)", kept.len())
    } else {
        "Automatic precision".to_owned()
    };
    let hover = std::iter::once(
        "Keeps in float the tensors 8-bit activations break: attention masks and the streams \
         feeding a LayerNorm/RMSNorm, and MatMul/Gemm weights' outlier rows. Off: exactly \
         onnxruntime's placement."
            .to_owned(),
    )
    .chain(crate::quant::precision::summary(kept))
    .collect::<Vec<_>>()
    .join("\n\n");
    if ui.checkbox(&mut on, label).on_hover_text(hover).changed() {
        commands.push(Command::Recipe(RecipeCommand::SetAutoPrecision(on)));
    }
    if on {
        saturation_guard_row(ui, doc, commands);
        outlier_rows_row(ui, doc, commands);
    }
}

/// The outlier rows' switch (part of automatic precision), with how many rows of how many
/// weights the current plan computes in float.
fn outlier_rows_row(ui: &mut Ui, doc: &Document, commands: &mut Vec<Command>) {
    let mut on = doc.recipe().preprocessing.outlier_rows;
    let split = &doc.planned.plan.outlier_rows;
    let rows = crate::quant::outlier_rows::total_rows(split);
    let label = if on && !split.is_empty() {
        format!(
            "Outlier rows in float ({rows} row(s), {} weight(s))",
            split.len()
        )
    } else {
        "Outlier rows in float".to_owned()
    };
    let hover = "The few rows of a MatMul/Gemm weight far larger than the rest (more than 3 times its \
                 99th-percentile row, at most 1 % of the rows; a transformer's feed-forward \
                 output projection holds some) are computed by a small float MatMul beside the \
                 quantized one, so one step no longer serves them and every other weight alike. \
                 Exact in float; 8-bit weights only.";
    ui.indent("outlier_rows", |ui| {
        if ui.checkbox(&mut on, label).on_hover_text(hover).changed() {
            commands.push(Command::Recipe(RecipeCommand::SetOutlierRows(on)));
        }
    });
}

/// The saturation guard's switch (part of automatic precision), with how many weights it
/// gives 7 bits under the current plan.
fn saturation_guard_row(ui: &mut Ui, doc: &Document, commands: &mut Vec<Command>) {
    let mut guard = doc.recipe().saturation_guard;
    let count = doc.planned.plan.seven_bit_weights.len();
    let label = if guard && count > 0 {
        format!("7-bit weights against saturation ({count})")
    } else {
        "7-bit weights against saturation".to_owned()
    };
    let hover = "The per-channel int8 weights of Conv/MatMul/Gemm nodes that ONNX Runtime runs with \
                 its u8×s8 kernels get 7 bits: those kernels saturate on x86 CPUs without VNNI \
                 (AMD before Zen 4, Intel client CPUs before Alder Lake). Per-tensor weights keep \
                 8 bits, but for those cross-layer equalization rescaled (each channel then \
                 spans about the weight's extremes, as per channel) and those with at least 1 % \
                 of the kernels' pairs of neighbouring weights able to overflow. Off: \
                 onnxruntime's 8 bits, for VNNI CPUs, GPUs and NPUs.";
    let target = doc.recipe().target;
    let open = doc.recipe().guard_switchable();
    let hover = match target {
        Some(_) => format!("{hover} Switching it moves the target between cpu and cpu-avx2."),
        None => hover.to_owned(),
    };
    ui.indent("saturation_guard", |ui| {
        if ui
            .add_enabled(open, egui::Checkbox::new(&mut guard, label))
            .on_hover_text(hover)
            .on_disabled_hover_text(format!(
                "Target {}: its kernels do not saturate (8-bit weights).",
                target.map_or("", Target::name)
            ))
            .changed()
        {
            commands.push(Command::Recipe(RecipeCommand::SetSaturationGuard(guard)));
        }
    });
}

/// One op type: checked when the recipe selects it, greyed when the policy has no quantized
/// form for it, and how many of its nodes the plan quantizes.
fn op_type_row(
    ui: &mut Ui,
    op_type: &str,
    plan: &crate::quant::explain::OpTypePlan,
    commands: &mut Vec<Command>,
) {
    ui.horizontal(|ui| {
        let mut value = plan.selected;
        let response = ui
            .add_enabled(
                plan.quantizable,
                egui::Checkbox::new(&mut value, format!("{op_type} ({})", plan.count)),
            )
            .on_disabled_hover_text(
                "The recipe's placement has no quantized form for this op type: it stays float",
            );
        if response.changed() {
            commands.push(Command::Recipe(RecipeCommand::SetOpType {
                op_type: op_type.to_owned(),
                quantize: value,
            }));
        }
        if plan.selected && plan.quantized < plan.count {
            ui.label(RichText::new(format!("{} quantized", plan.quantized)).weak())
                .on_hover_text(
                    "The others stay float: excluded by name or subgraph, or nothing to quantize on them (their input is not quantized)",
                );
        }
    });
}

/// The node inspector.
pub fn inspector_panel(
    ui: &mut Ui,
    doc: Option<&Document>,
    state: &mut InspectorState,
    commands: &mut Vec<Command>,
) {
    egui::Panel::right("inspector")
        .resizable(true)
        .default_size(330.0)
        .show(ui, |ui| {
            // Both ways: a row wider than the panel (a long tensor name, a Q/DQ description)
            // scrolls instead of widening the panel over the graph.
            egui::ScrollArea::both()
                .auto_shrink([false, false])
                .show(ui, |ui| match doc {
                    Some(doc) => inspector::show(ui, doc, state, commands),
                    None => {
                        ui.label("No model open");
                    }
                });
        });
}

/// The graph, or what to do when there is none, with the search bar, legend and progress.
pub fn central(
    ui: &mut Ui,
    doc: Option<&mut Document>,
    opening: Option<&OpeningView>,
    focus_search: bool,
    commands: &mut Vec<Command>,
) {
    egui::CentralPanel::no_frame().show(ui, |ui| {
        let hovering_files = ui.input(|i| !i.raw.hovered_files.is_empty());
        if let Some(doc) = doc {
            if doc.view.search.open {
                search_bar(ui, &mut doc.parts(), commands, focus_search);
            }
            let events = graph_views(ui, &mut doc.parts(), commands);
            if let Some((node, modifiers)) = events.clicked {
                let mode = if modifiers.shift || modifiers.command {
                    SelectMode::Toggle
                } else {
                    SelectMode::Replace
                };
                commands.push(Command::View(ViewCommand::Select(node, mode)));
            }
            if events.clicked_empty {
                commands.push(Command::View(ViewCommand::ClearSelection));
            }
            if let Some(node) = events.double_clicked {
                commands.push(Command::View(ViewCommand::ZoomToSelection));
                commands.push(Command::View(ViewCommand::Select(
                    node,
                    SelectMode::Replace,
                )));
            }
            let response = events.response.clone();
            match &events.hovered {
                Some(Hover::Node(id)) => {
                    let node = doc.opened.graph.node(*id);
                    let state = doc.planned.states.get(id.0).copied();
                    response.clone().on_hover_ui_at_pointer(|ui| {
                        ui.label(RichText::new(&node.op_type).strong());
                        ui.label(&node.name);
                        if let Some(state) = state {
                            ui.label(state.label());
                        }
                        if let Some(db) = doc
                            .view
                            .heat
                            .as_ref()
                            .and_then(|h| h.get(id.0).copied().flatten())
                        {
                            ui.label(format!("output SQNR {db:.2} dB (float vs QDQ)"));
                        }
                        if doc.opened.flagged.contains(id) {
                            ui.colored_label(
                                Color32::from_rgb(220, 40, 40),
                                "structural problem: see the inspector",
                            );
                        }
                    });
                }
                Some(Hover::Edge { tensor }) => {
                    response
                        .clone()
                        .on_hover_ui_at_pointer(|ui| tensor_tooltip(ui, doc, tensor, None));
                }
                Some(Hover::Terminal { tensor, input }) => {
                    let role = if *input {
                        "graph input"
                    } else {
                        "graph output"
                    };
                    response
                        .clone()
                        .on_hover_ui_at_pointer(|ui| tensor_tooltip(ui, doc, tensor, Some(role)));
                }
                None => {}
            }
            let context_node = doc.view.canvas.context_node();
            response.context_menu(|ui| {
                if let Some(id) = context_node {
                    node_menu(ui, doc, id, commands);
                } else {
                    if ui.button("Fit graph").clicked() {
                        commands.push(Command::View(ViewCommand::Fit));
                        ui.close();
                    }
                    if ui.button("Clear selection").clicked() {
                        commands.push(Command::View(ViewCommand::ClearSelection));
                        ui.close();
                    }
                }
            });
            let heat = (doc.view.panel.heat_map && doc.view.heat.is_some())
                .then_some((doc.view.panel.heat_kind, doc.view.panel.heat_threshold_db));
            let states: &[NodeState] = if doc.is_quantized() {
                &QUANTIZED_LEGEND
            } else {
                &LEGEND
            };
            let facts = LegendFacts {
                states,
                simplified: doc.opened.layout.simplified,
                flagged: !doc.opened.flagged.is_empty(),
                heat,
            };
            legend(ui, &facts, &mut doc.view.panel.legend_open);
        } else if opening.is_none() {
            empty_state(ui, commands);
        }
        if let Some(opening) = opening
            && progress_overlay(ui, opening)
        {
            commands.push(Command::App(AppCommand::CancelOpen));
        }
        if hovering_files {
            let rect = ui.max_rect();
            ui.painter()
                .rect_filled(rect, 0.0, Color32::from_black_alpha(120));
            ui.painter().text(
                rect.center(),
                egui::Align2::CENTER_CENTER,
                "Drop a .onnx model to open it",
                egui::FontId::proportional(22.0),
                Color32::WHITE,
            );
        }
    });
}

/// The graph view, or with the side view on, the open model and the other model of the pair
/// in two halves on one camera; clicks on the other model's nodes select the open model's
/// nodes of the same name. Returns the open model's view events.
fn graph_views(
    ui: &mut Ui,
    doc: &mut DocParts<'_>,
    commands: &mut Vec<Command>,
) -> crate::app::canvas::CanvasEvents {
    let Shown {
        canvas, side, heat, ..
    } = &mut doc.view;
    let Some(side) = side.as_mut() else {
        return canvas.show(ui);
    };
    let rect = ui.available_rect_before_wrap();
    let (left, right) = rect.split_left_right_at_fraction(0.5);
    let events = ui
        .scope_builder(
            egui::UiBuilder::new().max_rect(left.shrink2(egui::vec2(1.0, 0.0))),
            |ui| canvas.show(ui),
        )
        .inner;
    let side_events = ui
        .scope_builder(
            egui::UiBuilder::new().max_rect(right.shrink2(egui::vec2(1.0, 0.0))),
            |ui| side.canvas.show(ui),
        )
        .inner;
    side.sync(canvas);
    let painter = ui.painter();
    for (at, text) in [(left, "this model"), (right, side.label.as_str())] {
        painter.text(
            at.center_top() + egui::vec2(0.0, 6.0),
            egui::Align2::CENTER_TOP,
            text,
            egui::FontId::proportional(13.0),
            ui.visuals().weak_text_color(),
        );
    }
    painter.vline(
        left.right(),
        left.y_range(),
        ui.visuals().widgets.noninteractive.bg_stroke,
    );
    let to_doc = |id: crate::model::NodeId| side.to_doc.get(id.0).copied().flatten();
    if let Some((node, modifiers)) = side_events.clicked {
        let mode = if modifiers.shift || modifiers.command {
            SelectMode::Toggle
        } else {
            SelectMode::Replace
        };
        match to_doc(node) {
            Some(id) => commands.push(Command::View(ViewCommand::Select(id, mode))),
            None => commands.push(Command::View(ViewCommand::ClearSelection)),
        }
    }
    if side_events.clicked_empty {
        commands.push(Command::View(ViewCommand::ClearSelection));
    }
    if let Some(Hover::Node(id)) = side_events.hovered {
        let node = side.graph.node(id);
        let db = to_doc(id).and_then(|d| heat.as_ref()?.get(d.0).copied().flatten());
        side_events.response.on_hover_ui_at_pointer(|ui| {
            ui.label(RichText::new(&node.op_type).strong());
            ui.label(&node.name);
            match (to_doc(id), db) {
                (_, Some(db)) => ui.label(format!("output SQNR {db:.2} dB (float vs QDQ)")),
                (Some(_), None) => ui.label("also in this model"),
                (None, None) => ui.label("not in this model"),
            };
        });
    }
    events
}

/// What the view knows of `tensor`: its name, type and shape, its role, and for a tensor
/// quantized on the way, the float tensor it stands for and how it is quantized.
fn tensor_tooltip(ui: &mut Ui, doc: &Document, tensor: &str, role: Option<&str>) {
    let read = doc.opened.qdq.read_of(tensor);
    let shown = doc.opened.qdq.source_of(tensor);
    let dtype = doc.tensor_type(shown);
    let shape = crate::workflow::tensor_facts::shape_text(doc.tensor_shape(shown).as_ref());
    if let Some(role) = role {
        ui.label(RichText::new(role).weak());
    }
    ui.label(RichText::new(shown).monospace());
    ui.label(format!("{dtype} {shape}"));
    let quantized = read
        .map(|r| &r.params)
        .or_else(|| doc.opened.qdq.quantization_of(tensor));
    if let Some(params) = quantized {
        ui.label(format!("quantized: {}", params.describe()));
    }
}

fn search_bar(ui: &mut Ui, doc: &mut DocParts<'_>, commands: &mut Vec<Command>, focus: bool) {
    egui::Frame::new()
        .inner_margin(6.0)
        .fill(ui.visuals().panel_fill)
        .show(ui, |ui| {
            ui.horizontal(|ui| {
                ui.label("Find");
                let mut query = doc.view.search.query.clone();
                let response = ui.add(
                    egui::TextEdit::singleline(&mut query)
                        .id(egui::Id::new("search-field"))
                        .hint_text("node name, op type or tensor")
                        .desired_width(260.0),
                );
                if focus {
                    response.request_focus();
                }
                if response.changed() {
                    commands.push(Command::View(ViewCommand::Search(query)));
                }
                if response.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter)) {
                    if ui.input(|i| i.modifiers.shift) {
                        commands.push(Command::View(ViewCommand::SearchPrevious));
                    } else {
                        commands.push(Command::View(ViewCommand::SearchNext));
                    }
                    response.request_focus();
                }
                let n = doc.view.search.matches.len();
                if doc.view.search.query.trim().is_empty() {
                    ui.label(RichText::new("type to search").weak());
                } else if n == 0 {
                    ui.colored_label(ui.visuals().warn_fg_color, "no match");
                } else {
                    ui.label(format!("{} of {n}", doc.view.search.position + 1));
                }
                if ui
                    .add_enabled(n > 0, egui::Button::new("◀"))
                    .on_hover_text("Previous (Shift+F3)")
                    .clicked()
                {
                    commands.push(Command::View(ViewCommand::SearchPrevious));
                }
                if ui
                    .add_enabled(n > 0, egui::Button::new("▶"))
                    .on_hover_text("Next (F3, Enter)")
                    .clicked()
                {
                    commands.push(Command::View(ViewCommand::SearchNext));
                }
                if ui
                    .add_enabled(n > 0, egui::Button::new("Select all"))
                    .clicked()
                {
                    commands.push(Command::View(ViewCommand::SelectNodes(
                        doc.view.search.matches.clone(),
                    )));
                }
                if ui.button("Close").on_hover_text("Close (Esc)").clicked() {
                    commands.push(Command::View(ViewCommand::Escape));
                }
            });
        });
}

/// The right-click menu of a node.
pub fn node_menu(
    ui: &mut Ui,
    doc: &Document,
    id: crate::model::NodeId,
    commands: &mut Vec<Command>,
) {
    let node = doc.opened.graph.node(id);
    ui.label(RichText::new(format!("{} · {}", node.op_type, node.name)).strong());
    ui.separator();
    let selected = if doc.view.selection.contains(&id) {
        doc.view.selection.clone()
    } else {
        vec![id]
    };
    let excluded = doc.planned.states.get(id.0) == Some(&NodeState::ExcludedByNode);
    let mut item = |ui: &mut Ui, text: String, command: Command| {
        if ui.button(text).clicked() {
            commands.push(command);
            ui.close();
        }
    };
    if excluded {
        item(
            ui,
            format!("Include {} node(s)", selected.len()),
            Command::Edit(EditCommand::SetExcluded(selected, false)),
        );
    } else {
        item(
            ui,
            format!("Exclude {} node(s)", selected.len()),
            Command::Edit(EditCommand::SetExcluded(selected, true)),
        );
    }
    item(
        ui,
        format!("Exclude every {}", node.op_type),
        Command::Edit(EditCommand::ExcludeOpTypeOf(id)),
    );
    item(
        ui,
        "Exclude this and everything after".to_owned(),
        Command::Edit(EditCommand::ExcludeAfter(id)),
    );
    ui.separator();
    item(
        ui,
        "Set as subgraph start".to_owned(),
        Command::Edit(EditCommand::SubgraphStart(Some(id))),
    );
    item(
        ui,
        "Set as subgraph end".to_owned(),
        Command::Edit(EditCommand::SubgraphEnd(Some(id))),
    );
    ui.separator();
    item(
        ui,
        "Select".to_owned(),
        Command::View(ViewCommand::Select(id, SelectMode::Replace)),
    );
    item(
        ui,
        "Zoom to".to_owned(),
        Command::View(ViewCommand::SelectNodes(vec![id])),
    );
}

/// What the graph's legend explains.
struct LegendFacts<'a> {
    /// The node states drawn.
    states: &'a [NodeState],
    /// The simplified layout is in use.
    simplified: bool,
    /// Some node has a structural problem.
    flagged: bool,
    /// The heat map is on: its kind and threshold.
    heat: Option<(crate::eval::tensor_error::tensors::ErrorKind, f32)>,
}

/// Below this width or height the graph view starts with its legend folded to one line.
const ROOM_FOR_LEGEND: egui::Vec2 = egui::vec2(640.0, 420.0);

/// The legend in the graph's bottom-left corner; its title folds and unfolds it (`open`:
/// the user's choice, else unfolded when the view has room).
fn legend(ui: &mut Ui, facts: &LegendFacts, open: &mut Option<bool>) {
    let rect = ui.max_rect();
    let roomy = rect.width() >= ROOM_FOR_LEGEND.x && rect.height() >= ROOM_FOR_LEGEND.y;
    let shown = open.unwrap_or(roomy);
    egui::Area::new(egui::Id::new("graph-legend"))
        .fixed_pos(rect.left_bottom() + egui::vec2(10.0, -10.0))
        .pivot(egui::Align2::LEFT_BOTTOM)
        .show(ui.ctx(), |ui| {
            egui::Frame::popup(ui.style()).show(ui, |ui| {
                let title = if shown { "Hide legend" } else { "Legend" };
                if ui
                    .add(egui::Label::new(RichText::new(title).weak()).sense(egui::Sense::click()))
                    .on_hover_text("Click to fold or unfold the legend")
                    .clicked()
                {
                    *open = Some(!shown);
                }
                if shown {
                    legend_body(ui, facts);
                }
            });
        });
}

fn legend_body(ui: &mut Ui, facts: &LegendFacts) {
    if let Some((kind, threshold)) = facts.heat {
        heat_legend(ui, kind, f64::from(threshold));
        return;
    }
    for &state in facts.states {
        ui.horizontal(|ui| {
            swatch(ui, state_fill(state, ui.visuals().dark_mode));
            ui.label(state.label());
        });
    }
    if facts.states.contains(&NodeState::QuantizedInModel) {
        ui.horizontal(|ui| {
            swatch(ui, crate::app::canvas::shapes::TAG_FILL);
            ui.label("Q/DQ pair (u8, i8 …; W: a quantized weight)");
        });
    }
    if facts.flagged {
        ui.horizontal(|ui| {
            swatch(ui, Color32::from_rgb(220, 40, 40));
            ui.label("structural problem (!)");
        });
    }
    if facts.simplified {
        ui.label(RichText::new("Very large graph: simplified layout").weak());
    }
}

/// The heat map's scale: SQNR from red (under the threshold) to green.
fn heat_legend(ui: &mut Ui, kind: crate::eval::tensor_error::tensors::ErrorKind, threshold: f64) {
    use crate::app::work::heat;
    use crate::eval::tensor_error::tensors::ErrorKind;
    let title = match kind {
        ErrorKind::Cumulative => "SQNR of each node's output, float vs QDQ",
        ErrorKind::Local => "Local SQNR: each node's own quantization, float inputs",
    };
    ui.label(RichText::new(title).strong());
    let (lo, hi) = heat::legend_span(threshold);
    let (rect, _) = ui.allocate_exact_size(egui::vec2(220.0, 14.0), egui::Sense::hover());
    let steps = 44;
    for i in 0..steps {
        let t = i as f64 / f64::from(steps - 1);
        let db = lo + t * (hi - lo);
        let x0 = rect.left() + rect.width() * i as f32 / steps as f32;
        let x1 = rect.left() + rect.width() * (i + 1) as f32 / steps as f32;
        ui.painter().rect_filled(
            egui::Rect::from_min_max(egui::pos2(x0, rect.top()), egui::pos2(x1, rect.bottom())),
            0.0,
            heat::colour(db, threshold),
        );
    }
    let x = rect.left() + rect.width() * ((threshold - lo) / (hi - lo)) as f32;
    ui.painter().line_segment(
        [
            egui::pos2(x, rect.top() - 2.0),
            egui::pos2(x, rect.bottom() + 2.0),
        ],
        egui::Stroke::new(2.0, ui.visuals().text_color()),
    );
    ui.horizontal(|ui| {
        ui.label(RichText::new(format!("≤{lo:.0} dB")).small());
        ui.label(
            RichText::new(format!("threshold {threshold:.1} dB"))
                .small()
                .strong(),
        );
        ui.label(RichText::new(format!("≥{hi:.0} dB")).small());
    });
    ui.horizontal(|ui| {
        swatch(
            ui,
            state_fill(NodeState::NotQuantizable, ui.visuals().dark_mode),
        );
        ui.label("not measured (output not quantized)");
    });
}

fn empty_state(ui: &mut Ui, commands: &mut Vec<Command>) {
    ui.vertical_centered(|ui| {
        ui.add_space(ui.available_height() * 0.3);
        ui.heading("No model open");
        ui.label("Open an ONNX model to choose what to quantize.");
        ui.add_space(12.0);
        if ui.button("Open a model…  (Ctrl+O)").clicked() {
            commands.push(Command::App(AppCommand::OpenDialog));
        }
        if ui.button("Open the bundled sample").clicked() {
            commands.push(Command::App(AppCommand::OpenSample));
        }
        ui.add_space(8.0);
        ui.label(RichText::new("or drop a .onnx file on this window").weak());
    });
}

/// Shows the opening job's progress; true when the user pressed Cancel.
fn progress_overlay(ui: &mut Ui, opening: &OpeningView) -> bool {
    let OpeningView {
        label,
        progress,
        elapsed,
    } = opening;
    let mut cancel = false;
    egui::Area::new(egui::Id::new("open-progress"))
        .anchor(egui::Align2::CENTER_CENTER, egui::Vec2::ZERO)
        .show(ui.ctx(), |ui| {
            egui::Frame::popup(ui.style())
                .inner_margin(16.0)
                .show(ui, |ui| {
                    ui.set_min_width(320.0);
                    ui.horizontal(|ui| {
                        ui.spinner();
                        ui.label(RichText::new(format!("Opening {label}")).strong());
                    });
                    if let Some(p) = progress {
                        ui.add(
                            egui::ProgressBar::new(p.fraction())
                                .text(format!("{} {}", p.stage, p.detail)),
                        );
                    }
                    ui.label(RichText::new(format!("{:.1} s", elapsed.as_secs_f32())).weak());
                    if ui.button("Cancel").clicked() {
                        cancel = true;
                    }
                });
        });
    cancel
}
