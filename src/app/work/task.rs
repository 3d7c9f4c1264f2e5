//! The one task that may run for an open model: what it is, its job, its progress, and how it
//! ended — with cancellation told apart from failure by type, never by message.

use std::path::PathBuf;
use std::time::Instant;

use crate::calib::CalibrationStats;
use crate::eval::compare::reference::OutputPair;
use crate::eval::search::auto_exclude::AutoExclude;
use crate::eval::search::latency_tuning::LatencyTuning;
use crate::eval::search::weight_ranges::WeightRanges;
use crate::jobs::{Job, JobContext, Progress};
use crate::workflow::WorkflowError;
use crate::workflow::compare::Comparison;
use crate::workflow::quantize::Saved;
use crate::workflow::sensitivity::Scanned;

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
    /// Choosing each weight's range by the outputs.
    WeightRanges,
    /// Tuning the placement for speed on the provider.
    TuneLatency,
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
            TaskKind::WeightRanges => "Choosing weight ranges",
            TaskKind::TuneLatency => "Tuning for speed",
            TaskKind::Save => "Saving the quantized model",
            TaskKind::InstallRuntime => "Getting ONNX Runtime",
        }
    }
}

/// What a finished task hands back.
pub enum TaskOutput {
    /// Calibration statistics.
    Calibrated(Box<CalibrationStats>),
    /// A comparison.
    Compared(Box<Comparison>),
    /// A sample's outputs.
    Sample(usize, Vec<OutputPair>),
    /// A sensitivity scan.
    Scanned(Box<Scanned>),
    /// Auto-exclude's result and the scan it used.
    AutoExcluded(Box<(AutoExclude, Scanned)>),
    /// Each weight's range, chosen by the outputs.
    WeightRanges(Box<WeightRanges>),
    /// The placement tuned for speed.
    LatencyTuning(Box<LatencyTuning>),
    /// A saved model.
    Saved(Box<Saved>),
    /// An installed runtime build: version and library path.
    Installed(String, PathBuf),
}

/// How a task ended when it did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskError {
    /// The user cancelled it; nothing changed.
    Cancelled,
    /// It failed: the cause, on one line.
    Failed(String),
}

impl From<WorkflowError> for TaskError {
    fn from(e: WorkflowError) -> Self {
        if e.is_cancelled() {
            TaskError::Cancelled
        } else {
            TaskError::Failed(e.chain())
        }
    }
}

/// A task's body: runs on a job thread.
pub type TaskWork = Box<dyn FnOnce(JobContext) -> Result<TaskOutput, WorkflowError> + Send>;

/// A running task.
pub struct Task {
    /// What it does.
    pub kind: TaskKind,
    /// The job.
    job: Job<Result<TaskOutput, WorkflowError>>,
    /// When it started.
    pub started: Instant,
    /// Newest progress.
    pub progress: Option<Progress>,
}

/// The one task slot of an open model.
#[derive(Default)]
pub struct TaskSlot {
    task: Option<Task>,
}

impl TaskSlot {
    /// The running task.
    pub fn running(&self) -> Option<&Task> {
        self.task.as_ref()
    }

    /// True while a task runs.
    pub fn busy(&self) -> bool {
        self.task.is_some()
    }

    /// Starts `work` as the task; refused while another runs.
    pub fn start(&mut self, kind: TaskKind, work: TaskWork) -> Result<(), String> {
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
    pub fn cancel(&self) {
        if let Some(task) = &self.task {
            task.job.cancel();
        }
    }

    /// The finished task's kind and result, once it finished.
    pub fn poll(&mut self) -> Option<(TaskKind, Result<TaskOutput, TaskError>)> {
        let task = self.task.as_mut()?;
        if let Some(p) = task.job.poll_progress() {
            task.progress = Some(p.clone());
        }
        let result = task.job.try_take()?;
        let kind = task.kind;
        self.task = None;
        let result = match result {
            Ok(Ok(output)) => Ok(output),
            Ok(Err(e)) => Err(TaskError::from(e)),
            Err(panic) => Err(TaskError::Failed(panic)),
        };
        Some((kind, result))
    }
}
