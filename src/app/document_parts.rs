//! The three parts of an open model ([`crate::app::document::Document`]): what is fixed once
//! it is open ([`Opened`]), the recipe with the plan that follows it ([`Planned`]), and what
//! is shown of it ([`Shown`]); and [`DocParts`], a view's handle on them for one frame (the
//! first two to read, its own state and the work to change).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::app::canvas::GraphCanvas;
use crate::app::edit::RecipeEditor;
use crate::app::layout::GraphLayout;
use crate::app::panel_state::PanelState;
use crate::app::search::Search;
use crate::app::side_view::SideView;
use crate::app::states::{Counts, NodeState};
use crate::app::work::Work;
use crate::calib::CalibrationStats;
use crate::model::qdq::QdqStructure;
use crate::model::{Graph, Model, NodeId};
use crate::quant::{Explanation, Prepared};
use crate::recipe::Recipe;

/// Where a model came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A file on disk.
    File(PathBuf),
    /// The sample bundled with the app.
    Sample,
}

impl Source {
    /// A short name for titles and the status bar.
    pub fn label(&self) -> String {
        match self {
            Source::File(path) => path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            ),
            Source::Sample => crate::sample::SAMPLE_NAME.to_owned(),
        }
    }

    /// The file, if any.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Source::File(path) => Some(path),
            Source::Sample => None,
        }
    }
}

/// How long each step of opening took.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OpenTimings {
    /// Reading and decoding the file.
    pub read: Duration,
    /// Building the graph index.
    pub index: Duration,
    /// Laying the graph out.
    pub layout: Duration,
}

/// What is fixed once a model is open: the model, its index and layout, and what was read
/// or measured while opening it.
pub struct Opened {
    /// Where it came from.
    pub source: Source,
    /// The model.
    pub model: Model,
    /// Its graph index.
    pub graph: Graph,
    /// Every tensor's element type, declared or inferred.
    pub types: HashMap<String, i32>,
    /// Shapes seen in one run on one sample when the model opened.
    pub probed: Option<Arc<CalibrationStats>>,
    /// Its Q/DQ structure: for a model that is quantized already, what every view draws in
    /// place of the recipe's plan.
    pub qdq: QdqStructure,
    /// Its layout.
    pub layout: GraphLayout,
    /// Nodes with a structural problem.
    pub flagged: HashSet<NodeId>,
    /// How long opening took.
    pub timings: OpenTimings,
    pub(crate) neighbours: HashMap<NodeId, Vec<NodeId>>,
}

/// The recipe being edited and the quantizer's plan that follows it: re-made whenever the
/// recipe or the statistics change ([`Document::refresh`]).
pub struct Planned {
    /// The recipe being edited.
    pub editor: RecipeEditor,
    /// The model as the quantizer sees it under the recipe's pre-processing, or why it
    /// cannot be prepared.
    pub prepared: Result<Prepared, String>,
    /// The quantizer's plan for the current recipe and statistics: what every view shows.
    pub plan: Explanation,
    /// The recipe and statistics `plan` was made for.
    pub(crate) planned_for: Option<(Recipe, Option<usize>)>,
    /// Each node's state under the current recipe (by node id).
    pub states: Vec<NodeState>,
    /// Counts of `states`.
    pub counts: Counts,
    /// The file the recipe was last saved to or loaded from.
    pub recipe_path: Option<PathBuf>,
}

/// What is shown of an open model: the selection, the search, the graph view, the work
/// panel's widgets, the heat map and the side view.
pub struct Shown {
    /// Selected nodes, in the order they were picked.
    pub selection: Vec<NodeId>,
    /// The graph view.
    pub canvas: GraphCanvas,
    /// The search bar's state.
    pub search: Search,
    /// The work panel's widget state (tab, histogram choices, heat map, save window).
    pub panel: PanelState,
    /// Each node's SQNR in the last comparison (by node id), for the heat map.
    pub heat: Option<Vec<Option<f64>>>,
    /// The other model of the float/QDQ pair, drawn beside the graph when asked.
    pub side: Option<SideView>,
    pub(crate) dark: bool,
}

impl Opened {
    /// `tensor`'s element type as the views show it: declared, else inferred.
    pub fn tensor_type(&self, tensor: &str) -> String {
        crate::workflow::tensor_facts::type_text(
            &self.graph,
            self.types.get(tensor).copied(),
            tensor,
        )
    }

    /// The ai.onnx opset the model imports.
    pub fn opset(&self) -> Option<i64> {
        crate::model::legacy::default_opset(self.model.proto())
    }

    /// Number of nodes the view folds into edges and boxes (Constants, Q/DQ pairs).
    pub fn folded_nodes(&self) -> usize {
        self.layout.positions.iter().filter(|p| p.is_none()).count()
    }

    /// True when the open model is quantized already (Q/DQ pairs or integer ops): the views
    /// then show what it does rather than what a recipe would do to it.
    pub fn is_quantized(&self) -> bool {
        self.qdq.is_quantized()
    }
}

impl Planned {
    /// The recipe as it stands.
    pub fn recipe(&self) -> &Recipe {
        self.editor.recipe()
    }

    /// What the recipe does to `node` (`NotQuantizable` for an unknown id).
    pub fn state(&self, node: NodeId) -> NodeState {
        self.states
            .get(node.0)
            .copied()
            .unwrap_or(NodeState::NotQuantizable)
    }

    /// True when pre-processing removed `tensor` (a Conv output a BatchNormalization was
    /// folded into, an Identity's output): the quantizer never sees it.
    pub fn folded_away(&self, tensor: &str) -> bool {
        self.prepared
            .as_ref()
            .is_ok_and(|p| p.graph.tensor(tensor).is_none())
    }
}

/// A view's handle on an open model for one frame (as rerun's viewer hands its panels a
/// context): the model and the plan to read, the view's own state and the quantization work
/// (its run settings are edited in place) to change.
pub struct DocParts<'a> {
    /// What is fixed once the model is open.
    pub opened: &'a Opened,
    /// The recipe and its plan.
    pub planned: &'a Planned,
    /// What is shown.
    pub view: &'a mut Shown,
    /// The quantization work.
    pub work: &'a mut Work,
}

impl DocParts<'_> {
    /// The recipe as it stands.
    pub fn recipe(&self) -> &Recipe {
        self.planned.recipe()
    }

    /// True when the open model is quantized already.
    pub fn is_quantized(&self) -> bool {
        self.opened.is_quantized()
    }
}
