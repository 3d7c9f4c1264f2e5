//! [`WorkflowError`]: anything a step of the workflow can fail with, with cancellation told
//! apart from failure so the faces can say "cancelled, nothing changed" rather than an error.

use crate::calib::{CalibError, DataError};
use crate::eval::compare::EvalError;
use crate::jobs::Cancelled;
use crate::model::ModelError;
use crate::quant::QuantError;
use crate::recipe::RecipeError;
use crate::report::ReportError;
use crate::runtime::RuntimeError;

/// Why a workflow step stopped.
#[derive(Debug, thiserror::Error)]
pub enum WorkflowError {
    /// The user cancelled it; nothing was written.
    #[error("cancelled")]
    Cancelled,
    /// A model could not be read, or is broken.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The model's graph is structurally broken (a cycle, a read of nothing, ...).
    #[error("{path} is not a valid graph: {source}")]
    InvalidGraph {
        /// The model file.
        path: std::path::PathBuf,
        /// What is broken.
        source: Box<ModelError>,
    },
    /// ONNX Runtime could not be found, fetched or started.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// Data could not be read, or does not fit the model.
    #[error(transparent)]
    Data(#[from] DataError),
    /// Calibration failed.
    #[error(transparent)]
    Calibration(CalibError),
    /// Quantization failed.
    #[error(transparent)]
    Quantization(QuantError),
    /// Evaluation failed.
    #[error(transparent)]
    Evaluation(EvalError),
    /// A recipe could not be read, written or used.
    #[error(transparent)]
    Recipe(#[from] RecipeError),
    /// A report could not be written.
    #[error(transparent)]
    Report(#[from] ReportError),
    /// A statistics file could not be used.
    #[error("{path}: {reason}")]
    Statistics {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        reason: String,
    },
    /// An output would write over one of the run's inputs or another output.
    #[error("refusing to write {output} to {path}: it is {other}; choose another path")]
    WouldOverwrite {
        /// The output refused ("the statistics").
        output: String,
        /// Its path.
        path: std::path::PathBuf,
        /// What is already there ("the input model").
        other: String,
    },
    /// A setting the step cannot run with.
    #[error("{0}")]
    Settings(String),
}

impl WorkflowError {
    /// True when the step stopped because it was cancelled.
    pub fn is_cancelled(&self) -> bool {
        matches!(
            self,
            WorkflowError::Cancelled
                | WorkflowError::Calibration(CalibError::Cancelled)
                | WorkflowError::Evaluation(EvalError::Cancelled)
        )
    }
}

impl From<Cancelled> for WorkflowError {
    fn from(_: Cancelled) -> Self {
        WorkflowError::Cancelled
    }
}

impl From<CalibError> for WorkflowError {
    fn from(e: CalibError) -> Self {
        match e {
            CalibError::Cancelled => WorkflowError::Cancelled,
            e => WorkflowError::Calibration(e),
        }
    }
}

impl From<QuantError> for WorkflowError {
    fn from(e: QuantError) -> Self {
        match e {
            QuantError::Cancelled => WorkflowError::Cancelled,
            e => WorkflowError::Quantization(e),
        }
    }
}

impl From<EvalError> for WorkflowError {
    fn from(e: EvalError) -> Self {
        match e {
            EvalError::Cancelled => WorkflowError::Cancelled,
            e => WorkflowError::Evaluation(e),
        }
    }
}

impl WorkflowError {
    /// The error and its causes on one line ("a: b: c"), as the CLI prints it and the
    /// studio's notices show it.
    pub fn chain(&self) -> String {
        crate::util::error_line(self)
    }
}
