//! The loaded ONNX Runtime as the status bar and About window show it, found and probed in
//! the background at start (probing registers each execution provider, which takes a moment).

use crate::jobs::Job;
use crate::runtime::{EpState, EpStatus, LoadOptions, Runtime, RuntimeInfo};

/// What is known of the runtime.
pub enum RuntimeStatus {
    /// Not looked for (tests).
    NotProbed,
    /// Being found and probed.
    Probing(Job<Result<(RuntimeInfo, Vec<EpStatus>), String>>),
    /// Loaded; each provider's state here.
    Ready {
        /// The library.
        info: RuntimeInfo,
        /// The providers.
        eps: Vec<EpStatus>,
    },
    /// No usable library; why.
    Missing(String),
}

impl std::fmt::Debug for RuntimeStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.summary())
    }
}

impl RuntimeStatus {
    /// Starts finding the runtime (never downloading: the studio asks before fetching).
    pub fn probe() -> Self {
        let job = Job::spawn("runtime-probe", |_ctx| {
            let mut options = LoadOptions::new().map_err(|e| e.to_string())?;
            options.allow_download = false;
            let runtime = Runtime::load(&options, &mut |_| {}).map_err(|e| format!("{e:#}"))?;
            Ok((runtime.info().clone(), runtime.probe_eps()))
        });
        match job {
            Ok(job) => RuntimeStatus::Probing(job),
            Err(e) => RuntimeStatus::Missing(e.to_string()),
        }
    }

    /// Takes the probe's result when it is ready.
    pub fn poll(&mut self, ctx: &egui::Context) {
        let RuntimeStatus::Probing(job) = self else {
            return;
        };
        let Some(result) = job.try_take() else {
            ctx.request_repaint_after(std::time::Duration::from_millis(100));
            return;
        };
        *self = match result {
            Ok(Ok((info, eps))) => RuntimeStatus::Ready { info, eps },
            Ok(Err(e)) | Err(e) => RuntimeStatus::Missing(e),
        };
        ctx.request_repaint();
    }

    /// One line for the status bar.
    pub fn summary(&self) -> String {
        match self {
            RuntimeStatus::NotProbed => "ONNX Runtime: not checked".to_owned(),
            RuntimeStatus::Probing(_) => "ONNX Runtime: looking…".to_owned(),
            RuntimeStatus::Ready { info, eps } => {
                let ready: Vec<&str> = eps
                    .iter()
                    .filter(|e| e.state == EpState::Ready)
                    .map(|e| e.ort_name.trim_end_matches("ExecutionProvider"))
                    .collect();
                format!("ONNX Runtime {} · {}", info.version, ready.join(", "))
            }
            RuntimeStatus::Missing(_) => {
                "ONNX Runtime: not found (qdq-studio runtime install)".to_owned()
            }
        }
    }
}
