//! The quantization work attached to an open model: calibration and evaluation data, the
//! chosen execution provider, cached statistics, the last comparison and sensitivity scan,
//! and the one task running for them. The window draws it ([`crate::app::work_panel`]); the
//! long work itself runs in [`tasks`] on job threads.

pub mod data;
pub mod heat;
pub mod tasks;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crate::calib::CalibrationStats;
use crate::calib::data::InputSpec;
use crate::eval::reference::OutputPair;
use crate::eval::sensitivity::AutoExclude;
use crate::jobs::{Job, Progress};
use crate::model::Graph;
use crate::recipe::Recipe;
use crate::runtime::EpSpec;
use data::{DataCheck, DataChoice};
use tasks::{Comparison, Saved, Scanned};

/// What a task is doing (its label in the progress bar).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskKind {
    /// Calibrating.
    Calibrate,
    /// Quantizing and comparing.
    Compare,
    /// Computing one sample's outputs.
    Sample,
    /// Scanning node sensitivity.
    Sensitivity,
    /// Auto-exclude.
    AutoExclude,
    /// Saving the QDQ model.
    Save,
    /// Fetching an ONNX Runtime build.
    InstallRuntime,
}

impl TaskKind {
    /// The label shown while it runs.
    pub fn label(self) -> &'static str {
        match self {
            TaskKind::Calibrate => "Calibrating",
            TaskKind::Compare => "Quantize & compare",
            TaskKind::Sample => "Running the sample",
            TaskKind::Sensitivity => "Sensitivity scan",
            TaskKind::AutoExclude => "Auto-exclude",
            TaskKind::Save => "Saving the quantized model",
            TaskKind::InstallRuntime => "Getting ONNX Runtime",
        }
    }
}

/// What a finished task hands back.
pub enum TaskOutput {
    /// Calibration statistics.
    Calibrated(CalibrationStats),
    /// A comparison.
    Compared(Box<Comparison>),
    /// A sample's outputs.
    Sample(usize, Vec<OutputPair>),
    /// A sensitivity scan.
    Scanned(Box<Scanned>),
    /// Auto-exclude's result and the scan it used.
    AutoExcluded(Box<(AutoExclude, Scanned)>),
    /// A saved model.
    Saved(Box<Saved>),
    /// An installed runtime build: version and library path.
    Installed(String, PathBuf),
}

/// One line on an auto-exclude result, for the status bar and the Sensitivity tab.
pub fn auto_exclude_summary(result: &AutoExclude) -> String {
    let mut summary = format!(
        "{} node(s) left in float, worst output SQNR {:.2} dB, target {}",
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

/// The running task.
pub struct Task {
    /// What it does.
    pub kind: TaskKind,
    /// The job.
    pub job: Job<Result<TaskOutput, String>>,
    /// When it started.
    pub started: Instant,
    /// Newest progress.
    pub progress: Option<Progress>,
}

/// Which tab of the work panel is showing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WorkTab {
    /// Data, EP, method; run calibration.
    #[default]
    Calibrate,
    /// Activation histograms and ranges.
    Histogram,
    /// Quantize & compare results.
    Results,
    /// Sensitivity scan and auto-exclude.
    Sensitivity,
}

/// The auto-exclude target kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    /// Worst output SQNR in dB.
    SqnrDb,
    /// Top-1 agreement in percent.
    Top1,
    /// Sequence agreement (greedy CTC reading) in percent.
    Sequence,
}

impl TargetKind {
    /// The words before the value in the Sensitivity tab.
    pub fn label(self) -> &'static str {
        match self {
            TargetKind::SqnrDb => "worst output SQNR ≥",
            TargetKind::Top1 => "top-1 agreement ≥",
            TargetKind::Sequence => "sequence agreement ≥",
        }
    }
}

/// The File ▸ Save quantized model window.
#[derive(Debug, Clone, PartialEq)]
pub struct SaveDialog {
    /// Where to write.
    pub path: String,
    /// Weights in a `.data` file.
    pub external_data: bool,
    /// Also write the recipe and the report.
    pub companions: bool,
    /// Quit once saved (the save was started from the unsaved-work prompt).
    pub then_quit: bool,
}

/// The quantization work of one open model.
pub struct Workbench {
    /// The float model's inputs (as calibration sees them).
    pub inputs: Vec<InputSpec>,
    /// Calibration data.
    pub calibration: DataChoice,
    /// Its check.
    pub calibration_check: DataCheck,
    checked_calibration: Option<(DataChoice, usize)>,
    /// Evaluation data (when not the calibration data).
    pub evaluation: DataChoice,
    /// Its check.
    pub evaluation_check: DataCheck,
    checked_evaluation: Option<(DataChoice, usize)>,
    /// Evaluate on the calibration data.
    pub evaluate_on_calibration: bool,
    /// The execution provider for every run.
    pub ep: EpSpec,
    /// Samples per batch.
    pub batch_size: usize,
    /// Calibrate on at most this many samples (0: all).
    pub max_samples: usize,
    /// Histogram bins.
    pub histogram_bins: usize,
    /// Time float and QDQ in quantize & compare.
    pub measure_latency: bool,
    /// Cached statistics.
    pub stats: Option<Arc<CalibrationStats>>,
    /// The statistics were saved (or loaded) since they were made.
    pub stats_saved: bool,
    /// The last comparison.
    pub comparison: Option<Comparison>,
    /// The last sensitivity scan.
    pub scanned: Option<Scanned>,
    /// The last auto-exclude result.
    pub auto_excluded: Option<AutoExclude>,
    /// The running task.
    pub task: Option<Task>,
    /// The panel's tab.
    pub tab: WorkTab,
    /// The tensor the histogram shows.
    pub histogram_tensor: Option<String>,
    /// Filter of the histogram's tensor list.
    pub histogram_filter: String,
    /// Log-scale counts.
    pub histogram_log: bool,
    /// Colour the graph by per-tensor SQNR.
    pub heat_map: bool,
    /// Nodes under this SQNR (dB) are flagged on the heat map.
    pub heat_threshold_db: f32,
    /// Auto-exclude target kind.
    pub target_kind: TargetKind,
    /// Auto-exclude target value (dB or percent).
    pub target_value: f64,
    /// Auto-exclude's limit.
    pub max_excluded: usize,
    /// The output shown side by side.
    pub output_index: usize,
    /// The sample shown side by side.
    pub sample: usize,
    /// The save window.
    pub save_dialog: Option<SaveDialog>,
    /// The recipe as last saved with a model (or as a recipe file).
    pub saved_recipe: Option<Recipe>,
    /// Where the QDQ model was last saved.
    pub saved_model: Option<PathBuf>,
}

impl std::fmt::Debug for Workbench {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workbench")
            .field("ep", &self.ep)
            .field("has_stats", &self.stats.is_some())
            .field("task", &self.task.as_ref().map(|t| t.kind))
            .finish_non_exhaustive()
    }
}

impl Workbench {
    /// The work of a freshly opened model: random data sized to its inputs, or the given
    /// calibration/evaluation files (the bundled sample ships both).
    pub fn new(graph: &Graph, data_files: Option<(PathBuf, PathBuf)>) -> Self {
        let inputs = crate::calib::data::model_inputs(graph);
        let (calibration, evaluation, evaluate_on_calibration) = match data_files {
            Some((calib, eval)) => (DataChoice::file(calib), DataChoice::file(eval), false),
            None => (
                DataChoice::random_for(&inputs),
                DataChoice::random_for(&inputs),
                true,
            ),
        };
        Workbench {
            inputs,
            calibration,
            calibration_check: DataCheck::Unchecked,
            checked_calibration: None,
            evaluation,
            evaluation_check: DataCheck::Unchecked,
            checked_evaluation: None,
            evaluate_on_calibration,
            ep: EpSpec::Cpu,
            batch_size: 1,
            max_samples: 0,
            histogram_bins: crate::calib::CalibrationConfig::default().histogram_bins,
            measure_latency: true,
            stats: None,
            stats_saved: false,
            comparison: None,
            scanned: None,
            auto_excluded: None,
            task: None,
            tab: WorkTab::Calibrate,
            histogram_tensor: None,
            histogram_filter: String::new(),
            histogram_log: true,
            heat_map: false,
            heat_threshold_db: 20.0,
            target_kind: TargetKind::SqnrDb,
            target_value: 30.0,
            max_excluded: 10,
            output_index: 0,
            sample: 0,
            save_dialog: None,
            saved_recipe: None,
            saved_model: None,
        }
    }

    /// The evaluation data in use.
    pub fn evaluation_choice(&self) -> &DataChoice {
        if self.evaluate_on_calibration {
            &self.calibration
        } else {
            &self.evaluation
        }
    }

    /// Re-checks the data sources whose settings changed since their last check; true while
    /// a check runs (the window keeps polling).
    pub fn poll_checks(&mut self) -> bool {
        let key = (self.calibration.clone(), self.batch_size);
        if self.checked_calibration.as_ref() != Some(&key) {
            self.calibration_check =
                DataCheck::start(&self.calibration, self.inputs.clone(), self.batch_size);
            self.checked_calibration = Some(key);
        }
        let key = (self.evaluation.clone(), self.batch_size);
        if !self.evaluate_on_calibration && self.checked_evaluation.as_ref() != Some(&key) {
            self.evaluation_check =
                DataCheck::start(&self.evaluation, self.inputs.clone(), self.batch_size);
            self.checked_evaluation = Some(key);
        }
        let calibrating = self.calibration_check.poll();
        let evaluating = self.evaluation_check.poll();
        calibrating || evaluating
    }

    /// The evaluation data's check.
    pub fn evaluation_check(&self) -> &DataCheck {
        if self.evaluate_on_calibration {
            &self.calibration_check
        } else {
            &self.evaluation_check
        }
    }

    /// True while a task runs.
    pub fn busy(&self) -> bool {
        self.task.is_some()
    }

    /// Starts `work` as the task (refused while another runs).
    pub fn start(
        &mut self,
        kind: TaskKind,
        work: impl FnOnce(crate::jobs::JobContext) -> Result<TaskOutput, String> + Send + 'static,
    ) -> Result<(), String> {
        if let Some(task) = &self.task {
            return Err(format!(
                "{} is still running: wait for it or cancel it first",
                task.kind.label()
            ));
        }
        let job = Job::spawn(kind.label(), work).map_err(|e| e.to_string())?;
        self.task = Some(Task {
            kind,
            job,
            started: Instant::now(),
            progress: None,
        });
        Ok(())
    }

    /// Asks the running task to stop (it does at its next checkpoint, between batches).
    pub fn cancel(&mut self) {
        if let Some(task) = &self.task {
            task.job.cancel();
        }
    }

    /// The finished task's result, if it finished.
    pub fn poll_task(&mut self) -> Option<(TaskKind, Result<TaskOutput, String>)> {
        let task = self.task.as_mut()?;
        if let Some(p) = task.job.poll_progress() {
            task.progress = Some(p.clone());
        }
        let result = task.job.try_take()?;
        let kind = task.kind;
        self.task = None;
        Some((kind, result.and_then(|r| r)))
    }

    /// The last comparison when it is for `recipe` (results of an older recipe are shown
    /// greyed, and not saved in reports).
    pub fn fresh_comparison(&self, recipe: &Recipe) -> Option<&Comparison> {
        self.comparison.as_ref().filter(|c| &c.recipe == recipe)
    }

    /// True when there is work the user would lose by quitting: a recipe changed since it
    /// was last saved, or statistics that were neither saved nor used in a saved model.
    pub fn unsaved(&self, recipe: &Recipe, recipe_edited: bool) -> bool {
        let recipe_unsaved = recipe_edited && self.saved_recipe.as_ref() != Some(recipe);
        let stats_unsaved = self.stats.is_some() && !self.stats_saved && self.saved_model.is_none();
        recipe_unsaved || stats_unsaved
    }

    /// Forgets results that depend on the statistics (after new statistics arrive).
    pub fn statistics_replaced(&mut self, stats: CalibrationStats, saved: bool) {
        self.stats = Some(Arc::new(stats));
        self.stats_saved = saved;
        self.scanned = None;
        self.auto_excluded = None;
    }

    /// The default path of the QDQ model: `<name>.qdq.onnx` beside the input (the current
    /// folder for the bundled sample).
    pub fn default_output(source_path: Option<&std::path::Path>) -> PathBuf {
        match source_path {
            Some(input) => {
                let stem = input
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "model".to_owned());
                input.with_file_name(format!("{stem}.qdq.onnx"))
            }
            None => std::env::current_dir()
                .unwrap_or_default()
                .join("ppocr_cls.qdq.onnx"),
        }
    }
}
