//! An open model in the studio: the file, its graph index and layout, the recipe being
//! edited, the selection and the search, and the loading job that produces it.

use std::collections::{HashMap, HashSet};

use crate::workflow::tensor_facts::{KnownShape, known_shape};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::calib::CalibrationStats;
use std::time::{Duration, Instant};

use crate::app::canvas::{Emphasis, GraphCanvas, NodeLook, state_fill, state_text, text_on};
use crate::app::edit::RecipeEditor;
use crate::app::layout::{self, GraphLayout, LayoutError};
use crate::app::panel_state::PanelState;
use crate::app::search::Search;
use crate::app::side_view::SideView;
use crate::app::states::{Counts, NodeState, node_states, quantized_states};
use crate::app::work::{Work, heat};
use crate::jobs::{Cancelled, JobContext, Progress};
use crate::model::qdq::QdqStructure;
use crate::model::{Graph, Model, ModelError, NodeId};
use crate::quant::{Explanation, Prepared, explain_prepared};
use crate::recipe::{Preprocessing, Recipe};
use crate::workflow::outputs::RunFiles;

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

/// Why a model could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The file is not a readable ONNX model.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The layout failed.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// The user opened something else.
    #[error("cancelled")]
    Cancelled(#[from] Cancelled),
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

/// A model read, indexed and laid out, ready to become a [`Document`].
#[derive(Debug)]
pub struct Loaded {
    /// Where it came from.
    pub source: Source,
    /// The model.
    pub model: Model,
    /// Its graph index.
    pub graph: Graph,
    /// Its layout.
    pub layout: GraphLayout,
    /// The model as the quantizer sees it (default pre-processing), or why it cannot be
    /// prepared.
    pub prepared: Result<Prepared, String>,
    /// Every tensor's element type, declared or inferred (most files declare only the graph's
    /// inputs and outputs).
    pub types: HashMap<String, i32>,
    /// Its Q/DQ structure (empty for a float model).
    pub qdq: QdqStructure,
    /// Each node's detail line (by node id).
    pub details: Vec<Option<String>>,
    /// Shapes seen in one run on one sample (models with static inputs, when ONNX Runtime is
    /// loaded).
    pub probed: Option<Arc<CalibrationStats>>,
    /// How long it took.
    pub timings: OpenTimings,
}

fn stage(ctx: &JobContext, stage: &str, done: u64, detail: String) {
    ctx.report(Progress {
        stage: stage.to_owned(),
        done,
        total: 3,
        rate: None,
        eta_seconds: None,
        memory_bytes: crate::jobs::resident_memory_bytes(),
        detail,
    });
}

/// Reads, indexes and lays out a model: the body of the studio's open job.
pub fn load(source: Source, ctx: &JobContext) -> Result<Loaded, OpenError> {
    let started = Instant::now();
    stage(ctx, "reading", 0, source.label());
    let model = match &source {
        Source::File(path) => Model::load(path)?,
        Source::Sample => crate::sample::sample_model()?,
    };
    let read = started.elapsed();
    ctx.checkpoint()?;
    stage(
        ctx,
        "indexing",
        1,
        format!("{} nodes", model.graph().node.len()),
    );
    let started = Instant::now();
    let graph = Graph::build(&model);
    let qdq = crate::quant::ops::qdq_structure(&model, &graph);
    let index = started.elapsed();
    ctx.checkpoint()?;
    stage(
        ctx,
        "laying out",
        2,
        format!("{} nodes", graph.nodes().len()),
    );
    let started = Instant::now();
    let details = crate::app::canvas::detail::node_details(&model, &graph, &qdq);
    let layout = layout::layout(&graph, &qdq, &details)?;
    let layout_time = started.elapsed();
    ctx.checkpoint()?;
    let prepared = Prepared::new(&model, &Preprocessing::default()).map_err(|e| e.to_string());
    let types = crate::model::infer::elem_types(&model, &graph);
    let probed = prepared.as_ref().ok().and_then(|p| probe(p, ctx));
    Ok(Loaded {
        source,
        model,
        graph,
        layout,
        prepared,
        types,
        qdq,
        details,
        probed,
        timings: OpenTimings {
            read,
            index,
            layout: layout_time,
        },
    })
}

/// Shapes from one run on one sample (see [`crate::workflow::tensor_facts::probe_shapes`]), when
/// ONNX Runtime is loaded already (opening never downloads it); a failed run only leaves the
/// shapes unknown.
fn probe(prepared: &Prepared, ctx: &JobContext) -> Option<Arc<CalibrationStats>> {
    let runtime = crate::runtime::loaded()?;
    match crate::workflow::tensor_facts::probe_shapes(prepared, &runtime, &ctx.quiet()) {
        Ok(stats) => stats.map(Arc::new),
        Err(e) => {
            tracing::info!("shapes not probed: {e}");
            None
        }
    }
}

/// An open model and everything the user did to it.
pub struct Document {
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
    /// The recipe being edited.
    pub editor: RecipeEditor,
    /// The model as the quantizer sees it under the recipe's pre-processing, or why it
    /// cannot be prepared.
    pub prepared: Result<Prepared, String>,
    /// The quantizer's plan for the current recipe and statistics: what every view shows.
    pub plan: Explanation,
    /// The recipe and statistics `plan` was made for.
    planned_for: Option<(Recipe, Option<usize>)>,
    /// Each node's state under the current recipe (by node id).
    pub states: Vec<NodeState>,
    /// Counts of `states`.
    pub counts: Counts,
    /// Selected nodes, in the order they were picked.
    pub selection: Vec<NodeId>,
    /// The graph view.
    pub canvas: GraphCanvas,
    /// The search bar's state.
    pub search: Search,
    /// The file the recipe was last saved to or loaded from.
    pub recipe_path: Option<PathBuf>,
    /// Nodes with a structural problem.
    pub flagged: HashSet<NodeId>,
    /// How long opening took.
    pub timings: OpenTimings,
    /// Calibration, comparison and the rest of the quantization work.
    pub work: Work,
    /// The work panel's widget state (tab, histogram choices, heat map, save window).
    pub panel: PanelState,
    /// Each node's SQNR in the last comparison (by node id), for the heat map.
    pub heat: Option<Vec<Option<f64>>>,
    /// The other model of the float/QDQ pair, drawn beside the graph when asked.
    pub side: Option<SideView>,
    neighbours: HashMap<NodeId, Vec<NodeId>>,
    dark: bool,
}

impl std::fmt::Debug for Document {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Document")
            .field("source", &self.source)
            .field("selection", &self.selection)
            .finish_non_exhaustive()
    }
}

impl Document {
    /// A document for a freshly loaded model with `recipe`.
    pub fn new(loaded: Loaded, recipe: Recipe, dark: bool) -> Self {
        let mut flagged = HashSet::new();
        for problem in loaded.graph.problems() {
            flagged.extend(problem.nodes());
        }
        for e in &loaded.layout.cycle_edges {
            flagged.insert(e.to);
        }
        let canvas = GraphCanvas::new(
            &loaded.graph,
            &loaded.layout,
            &loaded.qdq,
            &loaded.details,
            &flagged,
        );
        let neighbours = layout::neighbours(&loaded.layout);
        let data = sample_files(&loaded.source).map(|f| (f.calibration, f.evaluation));
        let work = Work::new(&loaded.graph, data);
        let mut doc = Document {
            source: loaded.source,
            model: loaded.model,
            graph: loaded.graph,
            layout: loaded.layout,
            editor: RecipeEditor::new(recipe),
            prepared: loaded.prepared,
            types: loaded.types,
            probed: loaded.probed,
            qdq: loaded.qdq,
            plan: Explanation::default(),
            planned_for: None,
            states: Vec::new(),
            counts: Counts::default(),
            selection: Vec::new(),
            canvas,
            search: Search::default(),
            recipe_path: None,
            flagged,
            timings: loaded.timings,
            work,
            panel: PanelState::default(),
            heat: None,
            side: None,
            neighbours,
            dark,
        };
        if doc.is_quantized() {
            // Its float model is chosen there: the first thing to do with it.
            doc.panel.tab = crate::app::panel_state::WorkTab::Results;
        }
        doc.refresh();
        doc
    }

    /// The recipe as it stands.
    pub fn recipe(&self) -> &Recipe {
        self.editor.recipe()
    }

    /// `tensor`'s element type as the views show it: declared, else inferred.
    pub fn tensor_type(&self, tensor: &str) -> String {
        crate::workflow::tensor_facts::type_text(
            &self.graph,
            self.types.get(tensor).copied(),
            tensor,
        )
    }

    /// `tensor`'s shape as the views show it: declared, else seen in calibration; see
    /// [`crate::workflow::tensor_facts`].
    pub fn tensor_shape(&self, tensor: &str) -> Option<KnownShape> {
        let stats = self.work.results.stats.as_deref();
        known_shape(&self.graph, stats, self.probed.as_deref(), tensor)
    }

    /// Re-plans when the recipe or the statistics changed since the last plan: the model is
    /// prepared again if the pre-processing changed, then the quantizer's plan is explained
    /// and the node states read off it.
    fn replan(&mut self) {
        let recipe = self.editor.recipe();
        let stats = self.work.results.stats.as_ref();
        let key = (
            recipe.clone(),
            stats.map(|s| std::sync::Arc::as_ptr(s) as usize),
        );
        if self.planned_for.as_ref() == Some(&key) {
            return;
        }
        let stale = self
            .prepared
            .as_ref()
            .is_ok_and(|p| p.options != recipe.prepared_options());
        if stale {
            self.prepared =
                Prepared::new(&self.model, &recipe.prepared_options()).map_err(|e| e.to_string());
        }
        // A model that is quantized already is not quantized again: no recipe plan for it.
        self.plan = match &self.prepared {
            Ok(prepared) if !self.qdq.is_quantized() => {
                explain_prepared(&self.graph, prepared, recipe, stats.map(|s| &**s))
            }
            _ => Explanation::default(),
        };
        self.states = if self.qdq.is_quantized() {
            quantized_states(&self.graph, &self.qdq)
        } else {
            node_states(&self.graph, &self.plan)
        };
        self.counts = Counts::of(&self.states, &self.graph, &self.qdq);
        self.planned_for = Some(key);
    }

    /// Recomputes the plan (when the recipe or statistics changed) and every box's look after
    /// a change of recipe, statistics, selection, search or theme.
    pub fn refresh(&mut self) {
        self.replan();
        let selected: HashSet<NodeId> = self.selection.iter().copied().collect();
        let neighbours: HashSet<NodeId> = self
            .selection
            .iter()
            .flat_map(|n| self.neighbours.get(n).into_iter().flatten().copied())
            .collect();
        let matches: HashSet<NodeId> = self.search.matches.iter().copied().collect();
        let current = self.search.current();
        let accent = if self.dark {
            egui::Color32::from_rgb(120, 180, 255)
        } else {
            egui::Color32::from_rgb(20, 90, 200)
        };
        let heat = self.heat.as_ref().filter(|_| self.panel.heat_map);
        let threshold = f64::from(self.panel.heat_threshold_db);
        let looks: Vec<NodeLook> = self
            .states
            .iter()
            .enumerate()
            .map(|(i, &state)| {
                let id = NodeId(i);
                let (fill, text) = match heat {
                    Some(heat) => match heat.get(i).copied().flatten() {
                        Some(db) => {
                            let fill = heat::colour(db, threshold);
                            (fill, text_on(fill))
                        }
                        None => (
                            state_fill(NodeState::NotQuantizable, self.dark),
                            state_text(NodeState::NotQuantizable, self.dark),
                        ),
                    },
                    None => (state_fill(state, self.dark), state_text(state, self.dark)),
                };
                let emphasis = if current == Some(id) {
                    Emphasis::CurrentMatch
                } else if matches.contains(&id) {
                    Emphasis::Match
                } else if neighbours.contains(&id) && !selected.contains(&id) {
                    Emphasis::Neighbour
                } else if !selected.is_empty() && !selected.contains(&id) {
                    Emphasis::Dimmed
                } else {
                    Emphasis::Normal
                };
                NodeLook {
                    fill,
                    text,
                    accent,
                    emphasis,
                    flagged: self.flagged.contains(&id),
                }
            })
            .collect();
        self.canvas.restyle(&looks, &selected);
        self.update_side();
        if let Some(side) = self.side.as_mut() {
            let plain = NodeLook {
                fill: state_fill(NodeState::NotQuantizable, self.dark),
                text: state_text(NodeState::NotQuantizable, self.dark),
                accent,
                ..NodeLook::default()
            };
            side.restyle(&looks, &selected, plain);
        }
    }

    /// The other model of the float/QDQ pair: for a float model the last comparison's QDQ
    /// model, for a quantized one the float model chosen for it; with its label and identity.
    pub fn counterpart(&self) -> Option<(&Model, String, usize)> {
        if self.is_quantized() {
            let float = self.work.float_model.as_ref()?;
            let name = Source::File(float.path.clone()).label();
            let key = std::ptr::from_ref(&float.model) as usize;
            Some((&float.model, format!("float model · {name}"), key))
        } else {
            let comparison = self.work.results.comparison.as_ref()?;
            let key = std::sync::Arc::as_ptr(&comparison.quantized) as usize;
            let label = "QDQ model of the last comparison".to_owned();
            Some((&*comparison.quantized, label, key))
        }
    }

    /// Builds the side view when it is asked for and its model changed; drops it otherwise.
    fn update_side(&mut self) {
        if !self.panel.side_by_side {
            self.side = None;
            return;
        }
        let Some((model, label, key)) = self.counterpart() else {
            self.side = None;
            return;
        };
        if self.side.as_ref().is_some_and(|s| s.source == key) {
            return;
        }
        self.side = Some(SideView::build(
            model,
            label,
            key,
            &self.graph,
            &self.layout,
        ));
    }

    /// Follows the window's theme.
    pub fn set_dark(&mut self, dark: bool) {
        if self.dark != dark {
            self.dark = dark;
            self.refresh();
        }
    }

    /// What the recipe does to `node` (`NotQuantizable` for an unknown id).
    pub fn state(&self, node: NodeId) -> NodeState {
        self.states
            .get(node.0)
            .copied()
            .unwrap_or(NodeState::NotQuantizable)
    }

    /// Names of the selected nodes.
    pub fn selected_names(&self) -> Vec<String> {
        self.selection
            .iter()
            .map(|id| self.graph.node(*id).name.clone())
            .collect()
    }

    /// The files this model's runs read (the model and its external data, the calibration and
    /// evaluation data), against which every save is checked.
    pub fn run_files(&self) -> RunFiles {
        let settings = &self.work.settings;
        let mut files = RunFiles::new().model("the input model", &self.model);
        if let Ok(spec) = settings.calibration.spec() {
            files = files.data("the calibration data", &spec);
        }
        if let Ok(spec) = settings.evaluation_choice().spec() {
            files = files.data("the evaluation data", &spec);
        }
        files
    }

    /// True when pre-processing removed `tensor` (a Conv output a BatchNormalization was
    /// folded into, an Identity's output): the quantizer never sees it.
    pub fn folded_away(&self, tensor: &str) -> bool {
        self.prepared
            .as_ref()
            .is_ok_and(|p| p.graph.tensor(tensor).is_none())
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

/// The bundled sample's files (its float model and data), written to the cache on first
/// use; `None` for other models (and when the cache cannot be written: random data then).
pub(crate) fn sample_files(source: &Source) -> Option<crate::sample::SampleFiles> {
    if *source != Source::Sample {
        return None;
    }
    let folder = crate::runtime::default_cache_dir().ok()?.join("sample");
    match crate::sample::sample_files(&folder) {
        Ok(files) => Some(files),
        Err(e) => {
            tracing::warn!(
                "the sample's files could not be written to {}: {e}",
                folder.display()
            );
            None
        }
    }
}
