//! Long work as jobs: a background thread that reports progress over a channel, stops at the
//! next checkpoint when cancelled, and hands back a `Result`.
//!
//! The engine's long operations take a [`JobContext`] (progress sink + cancel token) so the
//! same code serves the studio (which polls [`Job`] every frame) and the CLI (which drives it
//! on the main thread with a terminal progress bar).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// Something to do at once when a job is cancelled (stop an ONNX Runtime run in flight).
type Hook = Arc<dyn Fn() + Send + Sync>;

/// The flag and the hooks a token's clones share.
#[derive(Default)]
struct CancelState {
    cancelled: AtomicBool,
    next_hook: AtomicU64,
    hooks: Mutex<Vec<(u64, Hook)>>,
}

/// Asks a job to stop; cheap to clone and share. Work checks it between units
/// ([`JobContext::checkpoint`]); a unit that cannot check (a model run) registers a hook
/// ([`CancelToken::on_cancel`]) that stops it at once.
#[derive(Clone, Default)]
pub struct CancelToken(Arc<CancelState>);

impl std::fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CancelToken")
            .field(&self.is_cancelled())
            .finish()
    }
}

impl CancelToken {
    /// A token that has not been cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Requests cancellation, and runs the hooks registered now.
    pub fn cancel(&self) {
        self.0.cancelled.store(true, Ordering::SeqCst);
        if let Ok(hooks) = self.0.hooks.lock() {
            for (_, hook) in hooks.iter() {
                hook();
            }
        }
    }

    /// True once cancellation was requested.
    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(Ordering::SeqCst)
    }

    /// Runs `hook` when the token is cancelled while the returned guard lives (at once when
    /// it is cancelled already); dropping the guard unregisters it.
    pub fn on_cancel(&self, hook: impl Fn() + Send + Sync + 'static) -> CancelHook {
        let id = self.0.next_hook.fetch_add(1, Ordering::Relaxed);
        let hook: Hook = Arc::new(hook);
        if let Ok(mut hooks) = self.0.hooks.lock() {
            hooks.push((id, hook.clone()));
        }
        // Registered first, checked after: a cancel at any moment reaches it.
        if self.is_cancelled() {
            hook();
        }
        CancelHook {
            token: self.clone(),
            id,
        }
    }
}

/// Keeps a [`CancelToken::on_cancel`] hook registered; dropping it unregisters the hook.
#[must_use = "the hook is unregistered when this is dropped"]
pub struct CancelHook {
    token: CancelToken,
    id: u64,
}

impl Drop for CancelHook {
    fn drop(&mut self) {
        if let Ok(mut hooks) = self.token.0.hooks.lock() {
            hooks.retain(|(id, _)| *id != self.id);
        }
    }
}

/// One progress report.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Progress {
    /// What is being done ("calibrating", "pass 2/2: histograms", ...).
    pub stage: String,
    /// Units done.
    pub done: u64,
    /// Units in all (0 when unknown).
    pub total: u64,
    /// Throughput in units per second, when meaningful.
    pub rate: Option<f64>,
    /// Seconds left, when it can be estimated.
    pub eta_seconds: Option<f64>,
    /// Resident memory of the process in bytes, when the platform reports it.
    pub memory_bytes: Option<u64>,
    /// A free-form detail line.
    pub detail: String,
}

impl Progress {
    /// Fraction done in 0..=1 (0 when the total is unknown).
    pub fn fraction(&self) -> f32 {
        if self.total == 0 {
            0.0
        } else {
            (self.done as f32 / self.total as f32).clamp(0.0, 1.0)
        }
    }
}

/// What a job's code gets: where to report, and whether to stop.
#[derive(Clone)]
pub struct JobContext {
    cancel: CancelToken,
    sink: Arc<dyn Fn(Progress) + Send + Sync>,
}

impl std::fmt::Debug for JobContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobContext")
            .field("cancel", &self.cancel)
            .finish_non_exhaustive()
    }
}

/// Returned by job code that stopped because it was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cancelled")]
pub struct Cancelled;

impl JobContext {
    /// A context reporting to `sink`, stopping when `cancel` is set.
    pub fn new(cancel: CancelToken, sink: impl Fn(Progress) + Send + Sync + 'static) -> Self {
        JobContext {
            cancel,
            sink: Arc::new(sink),
        }
    }

    /// A context that reports nowhere and is never cancelled (tests, scripts).
    pub fn silent() -> Self {
        Self::new(CancelToken::new(), |_| {})
    }

    /// A context that stops with this one but reports nowhere (for a sub-step whose progress
    /// would only confuse the step's own).
    pub fn quiet(&self) -> Self {
        Self::new(self.cancel.clone(), |_| {})
    }

    /// Reports progress.
    pub fn report(&self, progress: Progress) {
        (self.sink)(progress);
    }

    /// `Err(Cancelled)` once cancellation was requested: call between units of work.
    pub fn checkpoint(&self) -> Result<(), Cancelled> {
        if self.cancel.is_cancelled() {
            Err(Cancelled)
        } else {
            Ok(())
        }
    }

    /// The cancel token.
    pub fn cancel_token(&self) -> &CancelToken {
        &self.cancel
    }
}

/// Builds progress reports with rate and ETA for a unit count known in advance.
#[derive(Debug, Clone)]
pub struct RateMeter {
    started: Instant,
    stage: String,
    total: u64,
}

impl RateMeter {
    /// Starts measuring a stage of `total` units.
    pub fn new(stage: impl Into<String>, total: u64) -> Self {
        RateMeter {
            started: Instant::now(),
            stage: stage.into(),
            total,
        }
    }

    /// A report for `done` units.
    pub fn progress(&self, done: u64, detail: impl Into<String>) -> Progress {
        let elapsed = self.started.elapsed().as_secs_f64();
        let rate = (elapsed > 0.0 && done > 0).then(|| done as f64 / elapsed);
        let eta_seconds = rate
            .filter(|_| self.total >= done)
            .map(|r| (self.total - done) as f64 / r);
        Progress {
            stage: self.stage.clone(),
            done,
            total: self.total,
            rate,
            eta_seconds,
            memory_bytes: resident_memory_bytes(),
            detail: detail.into(),
        }
    }
}

/// Resident set size of this process: one read of `/proc/self/statm` on Linux (called for
/// every progress report), sysinfo's process query elsewhere (Windows: the working set).
pub fn resident_memory_bytes() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
        let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
        Some(pages * 4096)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let pid = sysinfo::get_current_pid().ok()?;
        let mut system = sysinfo::System::new();
        system.refresh_processes_specifics(
            sysinfo::ProcessesToUpdate::Some(&[pid]),
            false,
            sysinfo::ProcessRefreshKind::nothing().with_memory(),
        );
        system.process(pid).map(sysinfo::Process::memory)
    }
}

/// A job running on its own thread.
#[derive(Debug)]
pub struct Job<T> {
    progress: Receiver<Progress>,
    cancel: CancelToken,
    handle: Option<JoinHandle<T>>,
    last: Option<Progress>,
}

impl<T: Send + 'static> Job<T> {
    /// Starts `work` on a new thread with a fresh context.
    pub fn spawn(
        name: &str,
        work: impl FnOnce(JobContext) -> T + Send + 'static,
    ) -> std::io::Result<Self> {
        let (sender, receiver): (Sender<Progress>, Receiver<Progress>) = channel();
        let cancel = CancelToken::new();
        let sender = std::sync::Mutex::new(sender);
        let context = JobContext::new(cancel.clone(), move |p| {
            if let Ok(sender) = sender.lock() {
                // The receiver is gone only when the job's owner dropped it; nothing to do then.
                let _ = sender.send(p);
            }
        });
        let handle = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || work(context))?;
        Ok(Job {
            progress: receiver,
            cancel,
            handle: Some(handle),
            last: None,
        })
    }

    /// The newest progress report (drains the channel).
    pub fn poll_progress(&mut self) -> Option<&Progress> {
        while let Ok(p) = self.progress.try_recv() {
            self.last = Some(p);
        }
        self.last.as_ref()
    }

    /// Requests cancellation.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// True when the thread has finished.
    pub fn is_finished(&self) -> bool {
        self.handle.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Takes the result if the job has finished; `None` while it runs. A panic inside the
    /// job becomes `Err` with its message.
    pub fn try_take(&mut self) -> Option<Result<T, String>> {
        if !self.is_finished() {
            return None;
        }
        let handle = self.handle.take()?;
        Some(handle.join().map_err(|panic| {
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "the job panicked".to_owned())
        }))
    }

    /// Waits for the job and returns its result.
    pub fn wait(mut self) -> Result<T, String> {
        match self.handle.take() {
            Some(handle) => handle.join().map_err(|_| "the job panicked".to_owned()),
            None => Err("the result was already taken".to_owned()),
        }
    }
}

impl<T> Drop for Job<T> {
    /// Dropping a running job cancels it; the thread finishes on its own at its next checkpoint.
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_runs_the_hooks_registered_while_their_guards_live() {
        let token = CancelToken::new();
        let fired = Arc::new(AtomicU64::new(0));
        let hook = |fired: &Arc<AtomicU64>| {
            let fired = fired.clone();
            move || {
                fired.fetch_add(1, Ordering::SeqCst);
            }
        };
        let dropped = token.on_cancel(hook(&fired));
        drop(dropped);
        let _kept = token.clone().on_cancel(hook(&fired));
        token.cancel();
        assert_eq!(fired.load(Ordering::SeqCst), 1, "only the live hook");
        // Registered after the cancel: it runs at once.
        let _late = token.on_cancel(hook(&fired));
        assert_eq!(fired.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_job_reports_progress_and_returns_its_result() {
        let job = Job::spawn("t", |ctx| {
            let meter = RateMeter::new("work", 3);
            for i in 1..=3 {
                ctx.report(meter.progress(i, ""));
            }
            42
        })
        .unwrap();
        assert_eq!(job.wait(), Ok(42));
    }

    #[test]
    fn cancel_stops_a_job_at_its_next_checkpoint() {
        let mut job = Job::spawn("t", |ctx| {
            for _ in 0..10_000 {
                ctx.checkpoint()?;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Ok::<(), Cancelled>(())
        })
        .unwrap();
        job.cancel();
        let started = Instant::now();
        let result = loop {
            if let Some(result) = job.try_take() {
                break result;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        assert_eq!(result, Ok(Err(Cancelled)));
        assert!(started.elapsed().as_secs() < 1);
    }
}
