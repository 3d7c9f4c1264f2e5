//! The commands that act on the open document, by kind: recipe settings, edits of the
//! selection and of the nodes' choices, and changes of view. Each function carries out the
//! commands of its kind and gives any other back, so [`super::studio`] routes a command to
//! the first that takes it.

use crate::app::command::{Command, SelectMode};
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
pub fn recipe_setting(doc: &mut Document, command: Command) -> Result<Applied, Command> {
    let mut status = None;
    match command {
        Command::SetOpType { op_type, quantize } => {
            let types: Vec<&str> = doc.plan.op_types.keys().map(String::as_str).collect();
            doc.editor.set_op_type(&op_type, quantize, &types);
            status = Some(format!(
                "{op_type}: {}",
                if quantize { "quantized" } else { "excluded" }
            ));
        }
        Command::SetAutoPrecision(on) => {
            doc.editor.set_auto_precision(on);
            status = Some(format!(
                "Automatic precision {}",
                if on { "on" } else { "off" }
            ));
        }
        Command::SetSaturationGuard(on) => {
            doc.editor.change(|r| r.set_saturation_guard(on));
            let state = if on { "on" } else { "off" };
            status = Some(match doc.recipe().target {
                Some(target @ (Target::Cpu | Target::CpuAvx2)) => format!(
                    "7-bit weights against saturation {state}: target {}",
                    target.name()
                ),
                _ => format!("7-bit weights against saturation {state}"),
            });
        }
        Command::SetTarget(target) => {
            doc.editor.change(|r| r.set_target(target));
            status = Some(format!("Target: {} - {}", target.name(), target.describe()));
        }
        Command::FollowEp(from, to) => {
            let mut followed = false;
            doc.editor
                .change(|r| followed = r.follow_execution_provider(&from, &to));
            if let Some(target) = doc.recipe().target.filter(|_| followed) {
                status = Some(format!(
                    "Target follows the execution provider: {} (choose another in the recipe panel)",
                    target.name()
                ));
            }
        }
        Command::SetOutlierRows(on) => {
            doc.editor.change(|r| r.preprocessing.outlier_rows = on);
            status = Some(format!(
                "Outlier rows in float {}",
                if on { "on" } else { "off" }
            ));
        }
        Command::SetMode(mode) => {
            doc.editor.change(|r| r.set_mode(mode));
            status = Some(format!("Mode: {}", crate::app::panels::mode_name(mode)));
        }
        Command::SetInt4Method(method) => {
            doc.editor.change(|r| {
                r.int4_method = method;
                // rtn keeps float weights: MatMulNBits needs stored int4 ones.
                if method == crate::recipe::Int4Method::Rtn {
                    r.int4_output = crate::recipe::Int4Output::Dq;
                }
            });
            status = Some(format!("Int4 method: {}", method.name()));
        }
        Command::SetSmoothQuant(on) => {
            doc.editor.change(|r| r.smoothquant = on);
            status = Some(format!(
                "SmoothQuant {}: calibrate again for its ranges",
                if on { "on" } else { "off" }
            ));
        }
        Command::SetEqualize(on) => {
            doc.editor.change(|r| r.preprocessing.equalize = on);
            status = Some(format!(
                "Cross-layer equalization {}: calibrate again for the equalized ranges",
                if on { "on" } else { "off" }
            ));
        }
        Command::SetBiasCorrection(on) => {
            doc.editor.change(|r| r.bias_correction = on);
            status = Some(technique_status(
                "Bias correction",
                on,
                "the layers' mean inputs",
            ));
        }
        Command::SetGptq(on) => {
            doc.editor.change(|r| r.gptq = on);
            status = Some(technique_status(
                "GPTQ rounding",
                on,
                "the layers' input Hessians",
            ));
        }
        Command::SetLayerwiseRange(on) => {
            doc.editor.change(|r| r.layerwise_range = on);
            status = Some(technique_status(
                "Layer-wise ranges",
                on,
                "each activation's range methods",
            ));
        }
        Command::SetPerChannel(on) => {
            doc.editor.change(|r| r.per_channel = on);
            status = Some(format!(
                "Weights: {}",
                crate::app::panels::granularity_name(on)
            ));
        }
        Command::SetMseWeightRanges(on) => {
            let range = if on {
                WeightRange::Mse
            } else {
                WeightRange::Minmax
            };
            doc.editor.change(|r| r.weight_range = range);
            status = Some(format!(
                "Weight ranges: {} (no new calibration needed)",
                if on {
                    "least squared error"
                } else {
                    "extremes"
                }
            ));
        }
        Command::SetInt4Output(form) => {
            doc.editor.change(|r| r.int4_output = form);
            status = Some(format!(
                "Int4 output: {}",
                crate::app::panels::output_name(form)
            ));
        }
        other => return Err(other),
    }
    Ok(Applied::Status(status))
}

/// The selection, the nodes' exclusions and precisions, the subgraph bounds, undo and redo.
pub fn node_edit(doc: &mut Document, command: Command) -> Result<Applied, Command> {
    let mut status = None;
    match command {
        Command::Select(node, SelectMode::Replace) => doc.selection = vec![node],
        Command::Select(node, SelectMode::Toggle) => {
            if let Some(at) = doc.selection.iter().position(|n| *n == node) {
                doc.selection.remove(at);
            } else {
                doc.selection.push(node);
            }
        }
        Command::SelectNodes(nodes) => doc.selection = nodes,
        Command::ClearSelection => doc.selection.clear(),
        Command::ToggleExclusion => {
            let names = doc.selected_names();
            if names.is_empty() {
                status = Some("Select nodes first (click, Shift+click), then press X".to_owned());
            } else {
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                doc.editor.toggle_nodes(&refs);
                status = Some(format!("Toggled exclusion of {} node(s)", names.len()));
            }
        }
        Command::SetExcluded(nodes, excluded) => {
            let names: Vec<String> = nodes
                .iter()
                .map(|n| doc.graph.node(*n).name.clone())
                .collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            doc.editor.set_nodes_excluded(&refs, excluded);
            status = Some(format!(
                "{} {} node(s)",
                if excluded { "Excluded" } else { "Included" },
                names.len()
            ));
        }
        Command::SetPrecision(nodes, precision) => {
            let names: Vec<String> = nodes
                .iter()
                .filter(|n| precision.is_none() || doc.state(**n).quantized())
                .map(|n| doc.graph.node(*n))
                .filter(|n| precision.is_none_or(|p| p.takes(&doc.graph, n)))
                .map(|n| n.name.clone())
                .collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            doc.editor.set_nodes_precision(&refs, precision);
            let what = precision.map_or("8-bit (the recipe's)", NodePrecision::name);
            status = Some(format!("{} node(s) set to {what}", names.len()));
        }
        Command::ExcludeOpTypeOf(node) => {
            let op_type = doc.graph.node(node).op_type.clone();
            doc.editor.set_op_type(&op_type, false, &[]);
            status = Some(format!("Excluded every {op_type}"));
        }
        Command::ExcludeAfter(node) => {
            doc.editor.exclude_after(&doc.graph, node);
            status = Some(format!(
                "Excluded {} and everything after it",
                doc.graph.node(node).name
            ));
        }
        Command::SubgraphStart(node) => {
            let name = node.map(|n| doc.graph.node(n).name.clone());
            doc.editor.set_subgraph_start(name.as_deref());
        }
        Command::SubgraphEnd(node) => {
            let name = node.map(|n| doc.graph.node(n).name.clone());
            doc.editor.set_subgraph_end(name.as_deref());
        }
        Command::Undo => {
            let undone = doc.editor.undo();
            status = Some(if undone { "Undone" } else { "Nothing to undo" }.to_owned());
        }
        Command::Redo => {
            let redone = doc.editor.redo();
            status = Some(if redone { "Redone" } else { "Nothing to redo" }.to_owned());
        }
        other => return Err(other),
    }
    Ok(Applied::Status(status))
}

/// Search, side by side and the camera.
pub fn view_change(
    doc: &mut Document,
    window: &mut WindowState,
    command: Command,
) -> Result<Applied, Command> {
    let mut status = None;
    match command {
        Command::OpenSearch => {
            doc.search.open = true;
            window.focus_search = true;
        }
        Command::Search(query) => {
            doc.search.open = true;
            doc.search.set_query(&doc.graph, &doc.layout, &query);
            if let Some(node) = doc.search.current() {
                doc.canvas.centre_on(node);
            }
        }
        Command::SearchNext => {
            if let Some(node) = doc.search.next_match() {
                doc.canvas.centre_on(node);
            }
        }
        Command::SearchPrevious => {
            if let Some(node) = doc.search.previous_match() {
                doc.canvas.centre_on(node);
            }
        }
        Command::Escape => {
            if doc.search.open {
                doc.search.close();
            } else {
                doc.selection.clear();
            }
        }
        Command::ToggleSideBySide => {
            doc.panel.side_by_side = !doc.panel.side_by_side;
            if doc.panel.side_by_side && doc.counterpart().is_none() {
                doc.panel.side_by_side = false;
                status = Some(if doc.is_quantized() {
                    "Side by side needs the float model: choose it in Results".to_owned()
                } else {
                    "Side by side shows the QDQ model: quantize & compare (F5) first".to_owned()
                });
            }
        }
        Command::Fit => {
            doc.canvas.fit();
            return Ok(Applied::Camera);
        }
        Command::ZoomToSelection => {
            if doc.selection.is_empty() {
                doc.canvas.fit();
            } else {
                doc.canvas.zoom_to(&doc.selection);
            }
            return Ok(Applied::Camera);
        }
        Command::ZoomIn => {
            doc.canvas.zoom_by(1.25);
            return Ok(Applied::Camera);
        }
        Command::ZoomOut => {
            doc.canvas.zoom_by(0.8);
            return Ok(Applied::Camera);
        }
        Command::Pan(delta) => {
            doc.canvas.pan_by(delta);
            return Ok(Applied::Camera);
        }
        other => return Err(other),
    }
    Ok(Applied::Status(status))
}

/// The status line after a technique that needs statistics of its own is switched: on, it asks
/// for a calibration that measures `measures`.
fn technique_status(name: &str, on: bool, measures: &str) -> String {
    match on {
        true => format!("{name} on: calibrate again to measure {measures}"),
        false => format!("{name} off"),
    }
}
