//! An open model in the studio: the file, its graph index and layout, the recipe being
//! edited, the selection and the search, and the loading job that produces it.

use std::collections::{HashMap, HashSet};

use crate::workflow::tensor_facts::{KnownShape, known_shape};
use std::sync::Arc;

use crate::calib::CalibrationStats;
use std::time::Instant;

use crate::app::canvas::{Emphasis, GraphCanvas, NodeLook, state_fill, state_text, text_on};
use crate::app::document_parts::{DocParts, Opened, Planned, Shown};
pub use crate::app::document_parts::{OpenTimings, Source};
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

/// An open model and everything the user did to it, in three parts: what is fixed once it is
/// open, the recipe with the plan that follows it, and what is shown of it; with the
/// quantization work. Views read the first two and change only their own state.
pub struct Document {
    /// What is fixed once the model is open.
    pub opened: Opened,
    /// The recipe being edited and the quantizer's plan that follows it.
    pub planned: Planned,
    /// What is shown of it.
    pub view: Shown,
    /// Calibration, comparison and the rest of the quantization work.
    pub work: Work,
}

impl std::fmt::Debug for Document {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Document")
            .field("source", &self.opened.source)
            .field("selection", &self.view.selection)
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
        let mut work = Work::new(&loaded.graph, data);
        if let Source::File(path) = &loaded.source {
            work.settings.tokenizer_beside(path);
        }
        let mut doc = Document {
            opened: Opened {
                source: loaded.source,
                model: loaded.model,
                graph: loaded.graph,
                types: loaded.types,
                probed: loaded.probed,
                qdq: loaded.qdq,
                layout: loaded.layout,
                flagged,
                timings: loaded.timings,
                neighbours,
            },
            planned: Planned {
                editor: RecipeEditor::new(recipe),
                prepared: loaded.prepared,
                plan: Explanation::default(),
                planned_for: None,
                states: Vec::new(),
                counts: Counts::default(),
                recipe_path: None,
            },
            view: Shown {
                selection: Vec::new(),
                canvas,
                search: Search::default(),
                panel: PanelState::default(),
                heat: None,
                side: None,
                dark,
            },
            work,
        };
        if doc.is_quantized() {
            // Its float model is chosen there: the first thing to do with it.
            doc.view.panel.tab = crate::app::panel_state::WorkTab::Results;
        }
        doc.refresh();
        doc
    }

    /// The recipe as it stands.
    pub fn recipe(&self) -> &Recipe {
        self.planned.recipe()
    }

    /// What the recipe does to `node` ([`Planned::state`]).
    pub fn state(&self, node: NodeId) -> NodeState {
        self.planned.state(node)
    }

    /// True when the open model is quantized already ([`Opened::is_quantized`]).
    pub fn is_quantized(&self) -> bool {
        self.opened.is_quantized()
    }

    /// `tensor`'s element type as the views show it ([`Opened::tensor_type`]).
    pub fn tensor_type(&self, tensor: &str) -> String {
        self.opened.tensor_type(tensor)
    }

    /// The parts of the document a view gets for a frame: the model and its plan to read, its
    /// own state and the quantization work to change.
    pub fn parts(&mut self) -> DocParts<'_> {
        let Document {
            opened,
            planned,
            view,
            work,
        } = self;
        DocParts {
            opened,
            planned,
            view,
            work,
        }
    }

    /// `tensor`'s shape as the views show it: declared, else seen in calibration; see
    /// [`crate::workflow::tensor_facts`].
    pub fn tensor_shape(&self, tensor: &str) -> Option<KnownShape> {
        let stats = self.work.results.stats.as_deref();
        known_shape(
            &self.opened.graph,
            stats,
            self.opened.probed.as_deref(),
            tensor,
        )
    }

    /// Re-plans when the recipe or the statistics changed since the last plan: the model is
    /// prepared again if the pre-processing changed, then the quantizer's plan is explained
    /// and the node states read off it.
    fn replan(&mut self) {
        let recipe = self.planned.editor.recipe();
        let stats = self.work.results.stats.as_ref();
        let key = (
            recipe.clone(),
            stats.map(|s| std::sync::Arc::as_ptr(s) as usize),
        );
        if self.planned.planned_for.as_ref() == Some(&key) {
            return;
        }
        let stale = self
            .planned
            .prepared
            .as_ref()
            .is_ok_and(|p| p.options != recipe.prepared_options());
        if stale {
            self.planned.prepared = Prepared::new(&self.opened.model, &recipe.prepared_options())
                .map_err(|e| e.to_string());
        }
        // A model that is quantized already is not quantized again: no recipe plan for it.
        self.planned.plan = match &self.planned.prepared {
            Ok(prepared) if !self.opened.qdq.is_quantized() => {
                explain_prepared(&self.opened.graph, prepared, recipe, stats.map(|s| &**s))
            }
            _ => Explanation::default(),
        };
        self.planned.states = if self.opened.qdq.is_quantized() {
            quantized_states(&self.opened.graph, &self.opened.qdq)
        } else {
            node_states(&self.opened.graph, &self.planned.plan)
        };
        self.planned.counts =
            Counts::of(&self.planned.states, &self.opened.graph, &self.opened.qdq);
        self.planned.planned_for = Some(key);
    }

    /// Recomputes the plan (when the recipe or statistics changed) and every box's look after
    /// a change of recipe, statistics, selection, search or theme.
    pub fn refresh(&mut self) {
        self.replan();
        let selected: HashSet<NodeId> = self.view.selection.iter().copied().collect();
        let neighbours: HashSet<NodeId> = self
            .view
            .selection
            .iter()
            .flat_map(|n| self.opened.neighbours.get(n).into_iter().flatten().copied())
            .collect();
        let matches: HashSet<NodeId> = self.view.search.matches.iter().copied().collect();
        let current = self.view.search.current();
        let accent = if self.view.dark {
            egui::Color32::from_rgb(120, 180, 255)
        } else {
            egui::Color32::from_rgb(20, 90, 200)
        };
        let heat = self.view.heat.as_ref().filter(|_| self.view.panel.heat_map);
        let threshold = f64::from(self.view.panel.heat_threshold_db);
        let looks: Vec<NodeLook> = self
            .planned
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
                            state_fill(NodeState::NotQuantizable, self.view.dark),
                            state_text(NodeState::NotQuantizable, self.view.dark),
                        ),
                    },
                    None => (
                        state_fill(state, self.view.dark),
                        state_text(state, self.view.dark),
                    ),
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
                    flagged: self.opened.flagged.contains(&id),
                }
            })
            .collect();
        self.view.canvas.restyle(&looks, &selected);
        self.update_side();
        if let Some(side) = self.view.side.as_mut() {
            let plain = NodeLook {
                fill: state_fill(NodeState::NotQuantizable, self.view.dark),
                text: state_text(NodeState::NotQuantizable, self.view.dark),
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
        if !self.view.panel.side_by_side {
            self.view.side = None;
            return;
        }
        let Some((model, label, key)) = self.counterpart() else {
            self.view.side = None;
            return;
        };
        if self.view.side.as_ref().is_some_and(|s| s.source == key) {
            return;
        }
        self.view.side = Some(SideView::build(
            model,
            label,
            key,
            &self.opened.graph,
            &self.opened.layout,
        ));
    }

    /// Follows the window's theme.
    pub fn set_dark(&mut self, dark: bool) {
        if self.view.dark != dark {
            self.view.dark = dark;
            self.refresh();
        }
    }

    /// Names of the selected nodes.
    pub fn selected_names(&self) -> Vec<String> {
        self.view
            .selection
            .iter()
            .map(|id| self.opened.graph.node(*id).name.clone())
            .collect()
    }

    /// The files this model's runs read (the model and its external data, the calibration and
    /// evaluation data), against which every save is checked.
    pub fn run_files(&self) -> RunFiles {
        let settings = &self.work.settings;
        let mut files = RunFiles::new().model("the input model", &self.opened.model);
        if let Ok(spec) = settings.calibration.spec() {
            files = files.data("the calibration data", &spec);
        }
        if let Ok(spec) = settings.evaluation_choice().spec() {
            files = files.data("the evaluation data", &spec);
        }
        files
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
