//! The commands that act on the open document, one function per kind: recipe settings,
//! edits of the nodes' choices, and changes of view. [`super::studio`] hands each kind to its
//! function, and each function's match covers its kind whole (the compiler checks both).

use crate::app::command::SelectMode;
use crate::app::command::{EditCommand, RecipeCommand, ViewCommand};
use crate::app::document::Document;
use crate::app::window::WindowState;
use crate::recipe::{NodePrecision, Target, WeightRange};

/// What a command did to the document.
pub enum Applied {
    /// It may have changed what the graph shows; with the status bar's new text, if any.
    Status(Option<String>),
    /// It moved the camera only: nothing to restyle.
    Camera,
}

/// A setting of the recipe (op types, target, mode, techniques): the status bar's text.
pub fn recipe_setting(doc: &mut Document, command: RecipeCommand) -> Applied {
    let mut status = None;
    match command {
        RecipeCommand::SetOpType { op_type, quantize } => {
            let types: Vec<&str> = doc
                .planned
                .plan
                .op_types
                .keys()
                .map(String::as_str)
                .collect();
            doc.planned.editor.set_op_type(&op_type, quantize, &types);
            status = Some(format!(
                "{op_type}: {}",
                if quantize { "quantized" } else { "excluded" }
            ));
        }
        RecipeCommand::SetAutoPrecision(on) => {
            doc.planned.editor.set_auto_precision(on);
            status = Some(format!(
                "Automatic precision {}",
                if on { "on" } else { "off" }
            ));
        }
        RecipeCommand::SetSaturationGuard(on) => {
            doc.planned.editor.change(|r| r.set_saturation_guard(on));
            let state = if on { "on" } else { "off" };
            status = Some(match doc.recipe().target {
                Some(target @ (Target::Cpu | Target::CpuAvx2)) => format!(
                    "7-bit weights against saturation {state}: target {}",
                    target.name()
                ),
                _ => format!("7-bit weights against saturation {state}"),
            });
        }
        RecipeCommand::SetTarget(target) => {
            doc.planned.editor.change(|r| r.set_target(target));
            status = Some(format!("Target: {} - {}", target.name(), target.describe()));
        }
        RecipeCommand::FollowEp(from, to) => {
            let mut followed = false;
            doc.planned
                .editor
                .change(|r| followed = r.follow_execution_provider(&from, &to));
            if let Some(target) = doc.recipe().target.filter(|_| followed) {
                status = Some(format!(
                    "Target follows the execution provider: {} (choose another in the recipe panel)",
                    target.name()
                ));
            }
        }
        RecipeCommand::SetOutlierRows(on) => {
            doc.planned
                .editor
                .change(|r| r.preprocessing.outlier_rows = on);
            status = Some(format!(
                "Outlier rows in float {}",
                if on { "on" } else { "off" }
            ));
        }
        RecipeCommand::SetMode(mode) => {
            doc.planned.editor.change(|r| r.set_mode(mode));
            status = Some(format!("Mode: {}", crate::app::panels::mode_name(mode)));
        }
        RecipeCommand::SetInt4Method(method) => {
            doc.planned.editor.change(|r| {
                r.int4_method = method;
                // rtn keeps float weights: MatMulNBits needs stored int4 ones.
                if method == crate::recipe::Int4Method::Rtn {
                    r.int4_output = crate::recipe::Int4Output::Dq;
                }
            });
            status = Some(format!("Int4 method: {}", method.name()));
        }
        RecipeCommand::SetSmoothQuant(on) => {
            doc.planned.editor.change(|r| r.smoothquant = on);
            status = Some(format!(
                "SmoothQuant {}: calibrate again for its ranges",
                if on { "on" } else { "off" }
            ));
        }
        RecipeCommand::SetSimplify(on) => {
            doc.planned.editor.change(|r| r.preprocessing.simplify = on);
            status = Some(simplify_status(on).to_owned());
        }
        RecipeCommand::SetEqualize(on) => {
            doc.planned.editor.change(|r| r.preprocessing.equalize = on);
            status = Some(format!(
                "Cross-layer equalization {}: calibrate again for the equalized ranges",
                if on { "on" } else { "off" }
            ));
        }
        RecipeCommand::SetBiasCorrection(on) => {
            doc.planned.editor.change(|r| r.bias_correction = on);
            status = Some(technique_status(
                "Bias correction",
                on,
                "the layers' mean inputs",
            ));
        }
        RecipeCommand::SetGptq(on) => {
            doc.planned.editor.change(|r| r.gptq = on);
            status = Some(technique_status(
                "GPTQ rounding",
                on,
                "the layers' input Hessians",
            ));
        }
        RecipeCommand::SetLayerwiseRange(on) => {
            doc.planned.editor.change(|r| r.layerwise_range = on);
            status = Some(technique_status(
                "Layer-wise ranges",
                on,
                "each activation's range methods",
            ));
        }
        RecipeCommand::SetPerChannel(on) => {
            doc.planned.editor.change(|r| r.per_channel = on);
            status = Some(format!(
                "Weights: {}",
                crate::app::panels::granularity_name(on)
            ));
        }
        RecipeCommand::SetMseWeightRanges(on) => {
            let range = if on {
                WeightRange::Mse
            } else {
                WeightRange::Minmax
            };
            doc.planned.editor.change(|r| r.weight_range = range);
            status = Some(format!(
                "Weight ranges: {} (no new calibration needed)",
                if on {
                    "least squared error"
                } else {
                    "extremes"
                }
            ));
        }
        RecipeCommand::SetInt4Output(form) => {
            doc.planned.editor.change(|r| r.int4_output = form);
            status = Some(format!(
                "Int4 output: {}",
                crate::app::panels::output_name(form)
            ));
        }
    }
    Applied::Status(status)
}

/// The nodes' exclusions and precisions, the subgraph bounds, undo and redo.
pub fn node_edit(doc: &mut Document, command: EditCommand) -> Applied {
    let mut status = None;
    match command {
        EditCommand::ToggleExclusion => {
            let names = doc.selected_names();
            if names.is_empty() {
                status = Some("Select nodes first (click, Shift+click), then press X".to_owned());
            } else {
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                doc.planned.editor.toggle_nodes(&refs);
                status = Some(format!("Toggled exclusion of {} node(s)", names.len()));
            }
        }
        EditCommand::SetExcluded(nodes, excluded) => {
            let names: Vec<String> = nodes
                .iter()
                .map(|n| doc.opened.graph.node(*n).name.clone())
                .collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            doc.planned.editor.set_nodes_excluded(&refs, excluded);
            status = Some(format!(
                "{} {} node(s)",
                if excluded { "Excluded" } else { "Included" },
                names.len()
            ));
        }
        EditCommand::SetPrecision(nodes, precision) => {
            let names: Vec<String> = nodes
                .iter()
                .filter(|n| precision.is_none() || doc.state(**n).quantized())
                .map(|n| doc.opened.graph.node(*n))
                .filter(|n| precision.is_none_or(|p| p.takes(&doc.opened.graph, n)))
                .map(|n| n.name.clone())
                .collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            doc.planned.editor.set_nodes_precision(&refs, precision);
            let what = precision.map_or("8-bit (the recipe's)", NodePrecision::name);
            status = Some(format!("{} node(s) set to {what}", names.len()));
        }
        EditCommand::ExcludeOpTypeOf(node) => {
            let op_type = doc.opened.graph.node(node).op_type.clone();
            doc.planned.editor.set_op_type(&op_type, false, &[]);
            status = Some(format!("Excluded every {op_type}"));
        }
        EditCommand::ExcludeAfter(node) => {
            doc.planned.editor.exclude_after(&doc.opened.graph, node);
            status = Some(format!(
                "Excluded {} and everything after it",
                doc.opened.graph.node(node).name
            ));
        }
        EditCommand::SubgraphStart(node) => {
            let name = node.map(|n| doc.opened.graph.node(n).name.clone());
            doc.planned.editor.set_subgraph_start(name.as_deref());
        }
        EditCommand::SubgraphEnd(node) => {
            let name = node.map(|n| doc.opened.graph.node(n).name.clone());
            doc.planned.editor.set_subgraph_end(name.as_deref());
        }
        EditCommand::Undo => {
            let undone = doc.planned.editor.undo();
            status = Some(if undone { "Undone" } else { "Nothing to undo" }.to_owned());
        }
        EditCommand::Redo => {
            let redone = doc.planned.editor.redo();
            status = Some(if redone { "Redone" } else { "Nothing to redo" }.to_owned());
        }
    }
    Applied::Status(status)
}

/// The selection, search, side by side and the camera.
pub fn view_change(doc: &mut Document, window: &mut WindowState, command: ViewCommand) -> Applied {
    let mut status = None;
    match command {
        ViewCommand::Select(node, SelectMode::Replace) => doc.view.selection = vec![node],
        ViewCommand::Select(node, SelectMode::Toggle) => {
            if let Some(at) = doc.view.selection.iter().position(|n| *n == node) {
                doc.view.selection.remove(at);
            } else {
                doc.view.selection.push(node);
            }
        }
        ViewCommand::SelectNodes(nodes) => doc.view.selection = nodes,
        ViewCommand::ClearSelection => doc.view.selection.clear(),
        ViewCommand::OpenSearch => {
            doc.view.search.open = true;
            window.focus_search = true;
        }
        ViewCommand::Search(query) => {
            doc.view.search.open = true;
            doc.view
                .search
                .set_query(&doc.opened.graph, &doc.opened.layout, &query);
            if let Some(node) = doc.view.search.current() {
                doc.view.canvas.centre_on(node);
            }
        }
        ViewCommand::SearchNext => {
            if let Some(node) = doc.view.search.next_match() {
                doc.view.canvas.centre_on(node);
            }
        }
        ViewCommand::SearchPrevious => {
            if let Some(node) = doc.view.search.previous_match() {
                doc.view.canvas.centre_on(node);
            }
        }
        ViewCommand::Escape => {
            if doc.view.search.open {
                doc.view.search.close();
            } else {
                doc.view.selection.clear();
            }
        }
        ViewCommand::ToggleSideBySide => {
            doc.view.panel.side_by_side = !doc.view.panel.side_by_side;
            if doc.view.panel.side_by_side && doc.counterpart().is_none() {
                doc.view.panel.side_by_side = false;
                status = Some(if doc.is_quantized() {
                    "Side by side needs the float model: choose it in Results".to_owned()
                } else {
                    "Side by side shows the QDQ model: quantize & compare (F5) first".to_owned()
                });
            }
        }
        ViewCommand::Fit => {
            doc.view.canvas.fit();
            return Applied::Camera;
        }
        ViewCommand::ZoomToSelection => {
            if doc.view.selection.is_empty() {
                doc.view.canvas.fit();
            } else {
                doc.view.canvas.zoom_to(&doc.view.selection);
            }
            return Applied::Camera;
        }
        ViewCommand::ZoomIn => {
            doc.view.canvas.zoom_by(1.25);
            return Applied::Camera;
        }
        ViewCommand::ZoomOut => {
            doc.view.canvas.zoom_by(0.8);
            return Applied::Camera;
        }
        ViewCommand::Pan(delta) => {
            doc.view.canvas.pan_by(delta);
            return Applied::Camera;
        }
    }
    Applied::Status(status)
}

/// The status line after a technique that needs statistics of its own is switched: on, it asks
/// for a calibration that measures `measures`.
fn technique_status(name: &str, on: bool, measures: &str) -> String {
    match on {
        true => format!("{name} on: calibrate again to measure {measures}"),
        false => format!("{name} off"),
    }
}

/// The status line of the simplification switch: what to calibrate for now.
fn simplify_status(on: bool) -> &'static str {
    if on {
        "Simplification on: calibrate again for the simplified model's ranges"
    } else {
        "Simplification off: calibrate again for the model's ranges as exported"
    }
}
