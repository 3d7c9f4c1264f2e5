//! The quantization work attached to an open model, in four parts kept apart: how runs are
//! set up ([`settings`]), the data chosen and its checks ([`data`], [`data_checks`]), what they produced
//! ([`results`], GUI-free) and the one task running ([`task`]). The work panel's own widget
//! state lives with the panel ([`crate::app::work_panel::PanelState`]); the long work itself
//! runs in [`tasks`], thin adapters over [`crate::workflow`].

pub mod data;
pub mod data_checks;
pub mod heat;
pub mod results;
pub mod settings;
pub mod task;
pub mod tasks;

use crate::calib::data::InputSpec;
use crate::eval::search::auto_exclude::AutoExclude;
use crate::model::Graph;

use data_checks::DataChecks;
use results::WorkResults;
use settings::RunSettings;
use task::TaskSlot;

pub use task::{TaskError, TaskKind, TaskOutput};

/// One line on an auto-exclude result, for the status bar and the Sensitivity tab.
pub fn auto_exclude_summary(result: &AutoExclude) -> String {
    let promoted = match result.promoted.len() {
        0 => String::new(),
        n => format!("{n} node(s) given 16-bit activations, "),
    };
    let mut summary = format!(
        "{promoted}{} node(s) left in float, worst output SQNR {:.2} dB, target {}",
        result.excluded.len(),
        result.sqnr_db,
        if result.reached {
            "reached"
        } else {
            "not reached"
        }
    );
    if let Some(best) = result.best_alternative() {
        summary.push_str(&format!("; {} does better", best.change));
    }
    summary
}

/// The quantization work of one open model.
pub struct Work {
    /// The float model's inputs (as calibration sees them).
    pub inputs: Vec<InputSpec>,
    /// How runs are set up.
    pub settings: RunSettings,
    /// The checks of the data against the model.
    pub checks: DataChecks,
    /// What the runs produced.
    pub results: WorkResults,
    /// The running task.
    pub task: TaskSlot,
    /// For a model that is quantized already: the float model it is compared against.
    pub float_model: Option<FloatModel>,
}

/// The float model an open quantized model is measured against.
#[derive(Debug, Clone)]
pub struct FloatModel {
    /// Its file.
    pub path: std::path::PathBuf,
    /// The model.
    pub model: crate::model::Model,
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Work")
            .field("settings", &self.settings)
            .field("has_stats", &self.results.stats.is_some())
            .field("task", &self.task.running().map(|t| t.kind))
            .finish_non_exhaustive()
    }
}

impl Work {
    /// The work of a freshly opened model: random data sized to its inputs, or the given
    /// calibration/evaluation files (the bundled sample ships both).
    pub fn new(
        graph: &Graph,
        data_files: Option<(std::path::PathBuf, std::path::PathBuf)>,
    ) -> Self {
        let inputs = crate::calib::data::model_inputs(graph);
        Work {
            settings: RunSettings::new(&inputs, data_files),
            inputs,
            checks: DataChecks::default(),
            results: WorkResults::default(),
            task: TaskSlot::default(),
            float_model: None,
        }
    }

    /// Re-checks the data whose settings changed; true while a check runs.
    pub fn poll_checks(&mut self) -> bool {
        self.checks.poll(&self.settings, &self.inputs)
    }

    /// True while a task runs.
    pub fn busy(&self) -> bool {
        self.task.busy()
    }
}
