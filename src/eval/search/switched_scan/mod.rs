//! The sensitivity scan over one switchable model ([`crate::eval::search::switchable`]): every variant of
//! the recipe is a gate setting of one model, run in a few sessions opened once, so a scan
//! costs its runs and the quantizations that describe the variants, not a session per
//! variant; on a larger model each variant runs only the part of the model after the nodes
//! it shares with the recipe or the float model ([`suffix_runs`]).

mod suffix_runs;

pub use suffix_runs::Cuts;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};

use rayon::prelude::*;
use serde::Serialize;

use crate::eval::compare::batch_workers::cpu_workers;
use crate::eval::compare::reference::Reference;
use crate::eval::compare::{EvalError, OutputMetrics};
use crate::eval::search::evaluator::{Evaluator, Target};
use crate::eval::search::switchable::{BuildError, Switchable, prefix};
use crate::jobs::{CancelToken, JobContext, RateMeter};
use crate::model::Model;
use crate::model::pinned::pinned_session_model;
use crate::recipe::Recipe;
use crate::runtime::SessionOptions;

/// How a scan measures its variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub enum ScanMethod {
    /// One switchable model, one session per worker (falls back to [`ScanMethod::Exact`]
    /// when the recipe's variants cannot share one model). Each gate setting runs its
    /// variant's fused integer kernels and equals the variant's own model bit for bit
    /// (`tests/sensitivity.rs`). It saves the quantization and session per variant, and on
    /// a larger model part of the runs: a variant runs only the nodes from a cut before its
    /// first difference from the recipe or float model, fed the values crossing the cut
    /// from one run of that model ([`Cuts`]). The bundled sample scans in a little over half
    /// the exact method's time, PP-OCR rec in two thirds to four fifths as the measured costs
    /// choose the cuts (`benches/sensitivity`); not the default, since the exact method
    /// measures the saved model itself on any provider. On accelerators the model picks its
    /// forms by `Where` instead of `If` ([`crate::eval::search::switchable::Gating`]).
    Switchable,
    /// Each variant quantized and opened in a session of its own: the figures of the saved
    /// model on the chosen provider, fused kernels included.
    #[default]
    Exact,
}

/// Why the switched scan did not run.
pub enum Fallback {
    /// The variants cannot share a model: the scan runs them one by one instead.
    NotSwitchable(String),
    /// Anything else stops the scan.
    Failed(EvalError),
}

impl From<EvalError> for Fallback {
    fn from(e: EvalError) -> Self {
        Fallback::Failed(e)
    }
}

impl From<BuildError> for Fallback {
    fn from(e: BuildError) -> Self {
        match e {
            BuildError::NotSwitchable(why) => Fallback::NotSwitchable(why.0),
            e => Fallback::Failed(failed(e)),
        }
    }
}

/// A build error as the scan reports it (callers handle [`BuildError::NotSwitchable`] by
/// running the recipe's own model; here it only has words).
fn failed(e: BuildError) -> EvalError {
    match e {
        BuildError::Quant(e) => crate::eval::search::evaluator::quant_error(e),
        BuildError::Cancelled => EvalError::Cancelled,
        BuildError::NotSwitchable(why) => EvalError::Run {
            batch: 0,
            model: "quantized",
            reason: why.0,
        },
    }
}

/// Samples per run of a switchable model when the model's batch axis is free: one run per
/// variant on a typical evaluation set.
const MERGED_SAMPLES: usize = 32;

/// Whether every input of `model` has a free first axis (symbolic or unknown), so evaluation
/// batches can be joined.
fn batch_axis_free(model: &crate::model::Model) -> bool {
    crate::calib::data::model_inputs(&crate::model::Graph::build(model))
        .iter()
        .all(|input| {
            let first = input.shape.as_ref().and_then(|s| s.first());
            first.is_some_and(|d| !matches!(d, crate::model::Dim::Fixed(v) if *v > 0))
        })
}

/// The least SQNR (dB) of the float model's outputs on joined batches against its outputs
/// on the data's own batches for the two to count as the same function. Rounding alone
/// stays far above it (a larger batch may sum in another order; accelerators pick other
/// kernels per batch size, TF32 convolutions on CUDA among them), a model that needs the
/// batch size it was given or mixes the samples of a batch falls far below it (or fails).
const JOINED_MIN_SQNR_DB: f64 = 30.0;

/// How many times faster the joined batches must run for the scan to take them over the
/// data's own ([`GatedRuns::joining_pays`]): a close call keeps the own batches, so that a
/// timing's noise does not decide between two ways of rounding.
const JOINED_MIN_GAIN: f64 = 1.2;

/// Whether the evaluation data joined into larger batches (`joined`) runs the float model as
/// its own batches did (`eval.reference`). A model may declare its first axis free and still
/// need the batch size it was given (a batched weight broadcast against it) or mix the
/// samples of a batch; the scan then runs the data's own batches. Figures of quantized
/// models are not compared: on accelerators a rounding flip in one activation moves them by
/// more than the check could allow, and the question is only whether joining changes what
/// the model computes.
fn joining_agrees(eval: &Evaluator, joined: &Reference, cancel: &CancelToken) -> bool {
    let options = SessionOptions {
        // Failing on joined batches is an answer here, not an error to print.
        quiet_errors: true,
        ..crate::quant::cpu_session_options(eval.float)
    };
    let session = pinned_session_model(eval.float, &joined.sample_shapes())
        .map_err(EvalError::from)
        .and_then(|m| Ok(eval.runtime.session_from_model(&m, eval.eps, options)?));
    let metrics = session.and_then(|mut session| joined.compare_session(&mut session, &[], cancel));
    let worst = metrics.map(|m| m.iter().map(|o| o.sqnr_db).fold(f64::INFINITY, f64::min));
    tracing::debug!(
        "the float model on joined batches against its own batches: {}",
        match &worst {
            Ok(db) => format!("{db:.1} dB"),
            Err(e) => format!("fails ({e})"),
        }
    );
    worst.is_ok_and(|db| db.is_nan() || db >= JOINED_MIN_SQNR_DB)
}

/// Sessions over a switchable model, one per worker, and the evaluator they report to.
pub struct GatedRuns<'a> {
    eval: &'a Evaluator<'a>,
    switchable: &'a Switchable,
    /// The evaluation data in larger batches, when the model's batch axis is free and they
    /// run faster ([`GatedRuns::joining_pays`]).
    merged: Option<Reference>,
    /// The whole model's sessions; `None` while the variants run from cuts, which need
    /// none of them ([`GatedRuns::close_whole`]), until a run on the whole model opens them
    /// again.
    pool: RwLock<Option<SessionPool>>,
    workers: usize,
    /// How its sessions are opened (those of models cut from it too).
    options: SessionOptions,
    /// Wall seconds opening one of its sessions took (the others open side by side).
    open_seconds: f64,
    /// Memory a session took per byte of the model's weights, measured on the first.
    bytes_per_weight: f64,
    /// How many cuts the scan's runs may take.
    cuts: Cuts,
    /// How many the last scan took.
    cuts_taken: AtomicUsize,
    /// The job's cancel token: a cancel stops every run in flight, the set-up's timed runs
    /// included.
    cancel: CancelToken,
}

/// Open sessions of one model, each taken by one run at a time.
struct SessionPool {
    sessions: Mutex<Vec<ort::session::Session>>,
}

impl SessionPool {
    /// Its sessions (a pool no run holds).
    fn into_sessions(self) -> Vec<ort::session::Session> {
        self.sessions
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// `f` on a free session, given back after.
    fn with<R>(&self, f: impl FnOnce(&mut ort::session::Session) -> R) -> Result<R, EvalError> {
        let busy = || EvalError::Run {
            batch: 0,
            model: "quantized",
            reason: "no free session for the switchable model's runs".into(),
        };
        let mut session = self
            .sessions
            .lock()
            .map_err(|_| busy())?
            .pop()
            .ok_or_else(busy)?;
        let result = f(&mut session);
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.push(session);
        }
        Ok(result)
    }
}

impl<'a> GatedRuns<'a> {
    /// Opens the sessions: one per core on the CPU (one thread each) as far as memory holds
    /// them, one on accelerators.
    pub fn open(
        eval: &'a Evaluator<'a>,
        switchable: &'a Switchable,
        parallel: bool,
        cancel: &CancelToken,
    ) -> Result<Self, EvalError> {
        let weights = switchable.initializer_bytes();
        let estimate = weights.saturating_mul(2);
        let most = match parallel {
            true => cpu_workers(eval.eps, || estimate),
            false => 1,
        };
        let options = SessionOptions {
            optimization: switchable.optimization(),
            intra_threads: if most > 1 { 1 } else { 0 },
            // As the exact scan runs each variant (`Reference::compare`): which neighbours
            // the blocked layout fuses with a Conv depends on the graph around it, and a
            // unit in a branch has other neighbours than in the variant's own model.
            blocked_layout: false,
            // Thousands of `If` branches (a model with `Where` gating has none, where it
            // changes nothing): without it each makes its own CUDA stream and handles, which
            // ran an H100 out of memory.
            one_gpu_stream: true,
            ..SessionOptions::default()
        };
        let opened = open_measured(eval, switchable.model(), options, most, estimate)?;
        let workers = opened.sessions;
        tracing::debug!(
            "a session of the switchable model takes {} (its weights {}): {workers} of {most} open",
            crate::util::format_bytes(opened.session_bytes),
            crate::util::format_bytes(weights),
        );
        // Data already in batches of 32 joins nothing: no check (a float session) then.
        let joinable = batch_axis_free(eval.float)
            .then(|| eval.reference.merged(MERGED_SAMPLES))
            .flatten()
            .filter(|joined| joined.batches() < eval.reference.batches())
            .filter(|joined| joining_agrees(eval, joined, cancel));
        let mut runs = GatedRuns {
            eval,
            switchable,
            merged: None,
            pool: RwLock::new(Some(opened.pool)),
            workers,
            options,
            open_seconds: opened.seconds,
            bytes_per_weight: opened.session_bytes as f64 / weights.max(1) as f64,
            cuts: Cuts::default(),
            cuts_taken: AtomicUsize::new(0),
            cancel: cancel.clone(),
        };
        if let Some(joined) = joinable {
            runs.merged = runs.joining_pays(&joined)?.then_some(joined);
        }
        tracing::debug!(
            "the switchable scan runs {}",
            if runs.merged.is_some() {
                "the evaluation data joined into batches of up to 32 samples"
            } else {
                "the evaluation data's own batches"
            }
        );
        Ok(runs)
    }

    /// Whether the switchable model runs the evaluation data faster joined (`joined`) than
    /// in its own batches, by at least [`JOINED_MIN_GAIN`], timed on the first variant that
    /// quantizes something as the scan runs it, a pass on every session at once, after one
    /// untimed pass of each (the first run of a shape sets up its buffers): the faster of two
    /// timed passes each. Neither way wins everywhere on the CPU (measured): a small model
    /// whose runs are mostly per-run overhead gains by joining (the bundled sample's scan,
    /// 10 s against 15 s), a larger one loses as a batch of 32 no longer fits the caches, the
    /// more so with every core running one (PP-OCR rec's scan on 2 cores, timed on one
    /// session at a time: joined 0.85 s against 1.09 s, and then the variants' runs took
    /// 244 s against 218 s in their own batches). On CUDA the first timed run was still slow
    /// (rec: joined 4.9 s, then 0.23 s). Without a margin the data's own batches are kept:
    /// they are what each variant's own model is measured on.
    fn joining_pays(&self, joined: &Reference) -> Result<bool, EvalError> {
        let Some(gates) = (0..self.switchable.variants())
            .filter(|&v| !self.switchable.is_float(v))
            .find_map(|v| self.switchable.gates(v))
        else {
            return Ok(false);
        };
        let sessions: Vec<usize> = (0..self.workers).collect();
        let timed = |data: &Reference| -> Result<f64, EvalError> {
            let started = std::time::Instant::now();
            on_workers(self.workers, &sessions, |_| self.metrics_on(data, gates))?;
            Ok(started.elapsed().as_secs_f64())
        };
        timed(self.eval.reference)?;
        timed(joined)?;
        let (own, merged) = (
            [timed(self.eval.reference)?, timed(self.eval.reference)?],
            [timed(joined)?, timed(joined)?],
        );
        tracing::debug!(
            "the switchable model on the evaluation data: {own:.3?} s in its own batches, {merged:.3?} s joined"
        );
        let (own, merged) = (own[0].min(own[1]), merged[0].min(merged[1]));
        Ok(merged * JOINED_MIN_GAIN < own)
    }

    /// The memory `sessions` sessions of a model cut from the switchable one, with `weights`
    /// bytes of weights, take: as the whole model's first session took per byte of its
    /// weights, at least twice the weights.
    pub(super) fn sessions_bytes(&self, weights: u64, sessions: usize) -> u64 {
        let one = (weights as f64 * self.bytes_per_weight) as u64;
        one.max(weights.saturating_mul(2))
            .saturating_mul(sessions as u64)
    }

    /// Sessions open.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Sets how many cuts a scan's runs take ([`Cuts::ByCost`] unless set).
    pub fn set_cuts(&mut self, cuts: Cuts) {
        self.cuts = cuts;
    }

    /// How many cuts the last scan ([`variant_sqnrs`]) ran its variants from.
    pub fn cuts_taken(&self) -> usize {
        self.cuts_taken.load(Ordering::Relaxed)
    }

    /// The evaluation data as the runs take it: joined, or in its own batches.
    fn data(&self) -> &Reference {
        self.merged.as_ref().unwrap_or(self.eval.reference)
    }

    /// The output metrics of the model `gates` select.
    pub fn metrics(&self, gates: &[bool]) -> Result<Vec<OutputMetrics>, EvalError> {
        self.metrics_on(self.data(), gates)
    }

    /// What its runs cost, timed now: one run of `gates`, and opening the sessions of the
    /// model fixed to them, as a suffix specialized to a few variants opens (PP-OCR rec:
    /// 0.25 s, against 1.7 s for the whole switchable model's). Where those sessions would
    /// not fit beside the open ones, the whole model's opening stands in.
    fn costs(&self, gates: &[bool]) -> Result<suffix_runs::Costs, EvalError> {
        let started = std::time::Instant::now();
        self.metrics(gates)?;
        let run = started.elapsed().as_secs_f64();
        let opened = std::time::Instant::now();
        let fixed = prefix::suffix(self.switchable.model(), 0, &[], &|s| gates.get(s).copied());
        let need = self.sessions_bytes(fixed.nested_initializer_bytes(), self.workers);
        let open = match suffix_runs::memory_holds(need) {
            true => {
                drop(self.open_pool(&fixed)?);
                opened.elapsed().as_secs_f64()
            }
            false => self.open_seconds,
        };
        Ok(suffix_runs::Costs {
            open,
            run,
            workers: self.workers,
        })
    }

    /// Sessions of `model` (cut from the switchable one), one per worker. ONNX Runtime's
    /// errors are not printed: a scan that cannot run a suffix runs the whole model.
    fn open_pool(&self, model: &Model) -> Result<SessionPool, EvalError> {
        let options = SessionOptions {
            quiet_errors: true,
            ..self.options
        };
        self.sessions_of(model, options, self.workers)
    }

    /// One session of `model` on every core, for the few runs that read values off it.
    fn probe(&self, model: &Model) -> Result<SessionPool, EvalError> {
        let options = SessionOptions {
            intra_threads: 0,
            quiet_errors: true,
            ..self.options
        };
        self.sessions_of(model, options, 1)
    }

    /// `sessions` sessions of `model` with `options`, its inputs declaring the evaluation
    /// data's sample shapes.
    fn sessions_of(
        &self,
        model: &Model,
        options: SessionOptions,
        sessions: usize,
    ) -> Result<SessionPool, EvalError> {
        let encoded = pinned_session_model(model, &self.eval.reference.sample_shapes())?;
        open_pool(self.eval, &encoded, options, sessions)
    }

    /// The output metrics of the model `gates` select on `data` (the evaluation data in its
    /// own batches or joined).
    fn metrics_on(
        &self,
        data: &Reference,
        gates: &[bool],
    ) -> Result<Vec<OutputMetrics>, EvalError> {
        let gates = Switchable::gate_inputs(gates);
        self.open_whole()?;
        let pool = self.pool.read().map_err(|_| closed())?;
        pool.as_ref()
            .ok_or_else(closed)?
            .with(|session| data.compare_session(session, &gates, &self.cancel))?
    }

    /// Closes the whole model's sessions: the variants about to run from cuts run on
    /// sessions of their suffixes, and these would hold the memory those need (PP-OCR rec:
    /// 0.7 GB of a scan's 1.6 GB). A later run on the whole model opens them again.
    pub(super) fn close_whole(&self) {
        if let Ok(mut pool) = self.pool.write() {
            *pool = None;
        }
    }

    /// Opens the whole model's sessions again if [`GatedRuns::close_whole`] closed them.
    fn open_whole(&self) -> Result<(), EvalError> {
        if self.pool.read().map_err(|_| closed())?.is_some() {
            return Ok(());
        }
        let mut pool = self.pool.write().map_err(|_| closed())?;
        if pool.is_none() {
            let started = std::time::Instant::now();
            let model = self.switchable.model();
            *pool = Some(self.sessions_of(model, self.options, self.workers)?);
            tracing::debug!(
                "the whole switchable model's sessions opened again in {:.1} s",
                started.elapsed().as_secs_f64()
            );
        }
        Ok(())
    }

    /// The output metrics of `recipe`: on the switchable model when its chains are all
    /// there, else of the recipe quantized on its own.
    pub fn recipe_metrics(&self, recipe: &Recipe) -> Result<Vec<OutputMetrics>, EvalError> {
        let gates = self
            .switchable
            .gates_for(self.eval.float, self.eval.stats, recipe);
        match gates {
            Ok(Some(gates)) => self.metrics(&gates),
            Ok(None) | Err(BuildError::NotSwitchable(_)) => {
                let threads = if self.workers > 1 { 1 } else { 0 };
                self.eval.metrics_until(recipe, threads, &self.cancel)
            }
            Err(e) => Err(failed(e)),
        }
    }
}

/// The worst output SQNR of each variant of `switchable` (infinite for one that quantizes
/// nothing), run in parallel over `runs`' sessions, progress per variant.
pub fn variant_sqnrs(runs: &GatedRuns, ctx: &JobContext) -> Result<Vec<f64>, EvalError> {
    let measured = measured_variants(runs, ctx)?;
    if measured.cancelled {
        return Err(EvalError::Cancelled);
    }
    Ok(measured
        .scores
        .into_iter()
        .map(|s| s.unwrap_or(f64::NAN))
        .collect())
}

/// The variants a scan measured: each one's worst output SQNR, `None` for those a
/// cancellation left unmeasured.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredVariants {
    /// By variant.
    pub scores: Vec<Option<f64>>,
    /// The scan was cancelled before it measured them all.
    pub cancelled: bool,
}

/// [`variant_sqnrs`], keeping what was measured when the scan is cancelled: every variant
/// records its score as it finishes, so a cancelled scan hands back those.
pub fn measured_variants(
    runs: &GatedRuns,
    ctx: &JobContext,
) -> Result<MeasuredVariants, EvalError> {
    let switchable = runs.switchable;
    let count = switchable.variants();
    // Variants whose gates are equal are one model (a node whose exclusion changes nothing
    // the quantizer writes): each distinct model runs once.
    let mut distinct: Vec<&[bool]> = Vec::new();
    let mut index: HashMap<&[bool], usize> = HashMap::new();
    let mut run_of = Vec::with_capacity(count);
    for variant in 0..count {
        let gates = match switchable.gates(variant) {
            Some(gates) if !switchable.is_float(variant) => gates,
            _ => {
                run_of.push(None);
                continue;
            }
        };
        let at = *index.entry(gates).or_insert_with(|| {
            distinct.push(gates);
            distinct.len() - 1
        });
        run_of.push(Some(at));
    }
    let meter = RateMeter::new("sensitivity scan", distinct.len() as u64);
    let done = AtomicU64::new(0);
    let finished: Mutex<Vec<Option<f64>>> = Mutex::new(vec![None; distinct.len()]);
    let score = |gates: &[bool], feed: Option<suffix_runs::Feed>| -> Result<f64, EvalError> {
        ctx.checkpoint().map_err(|_| EvalError::Cancelled)?;
        let metrics = match feed {
            Some(feed) => feed.metrics(runs.data(), gates, ctx.cancel_token())?,
            None => runs.metrics(gates)?,
        };
        let score = Target::SqnrDb(0.0).score(&metrics)?;
        if let (Some(&at), Ok(mut finished)) = (index.get(gates), finished.lock()) {
            finished[at] = Some(score);
        }
        let count = done.fetch_add(1, Ordering::Relaxed) + 1;
        ctx.report(meter.progress(count, format!("model {count}")));
        Ok(score)
    };
    let (scores, cancelled) = match suffix_runs::scores(runs, &distinct, &score) {
        Ok(scores) => (scores.into_iter().map(Some).collect(), false),
        Err(EvalError::Cancelled) => (
            finished.into_inner().unwrap_or_else(|p| p.into_inner()),
            true,
        ),
        Err(e) => return Err(e),
    };
    // A variant that quantizes nothing is the float model: infinite SQNR.
    Ok(MeasuredVariants {
        scores: run_of
            .into_iter()
            .map(|at| at.map_or(Some(f64::INFINITY), |at| scores[at]))
            .collect(),
        cancelled,
    })
}

/// The error of a run that finds the whole model's sessions unusable (a worker panicked
/// holding them).
fn closed() -> EvalError {
    EvalError::Run {
        batch: 0,
        model: "quantized",
        reason: "the switchable model's sessions are not usable".into(),
    }
}

/// A model's sessions opened by [`open_measured`].
struct Opened {
    pool: SessionPool,
    sessions: usize,
    /// Wall seconds one session took to open (the first alone, or all side by side).
    seconds: f64,
    /// Memory one session took (at least the estimate).
    session_bytes: u64,
}

/// Sessions of `model`, up to `most`, with what one takes of this process's memory measured.
/// A switchable model's session takes far more than twice its weights, the estimate the
/// count starts from: every `If` branch is a subgraph with its own kernels and plan (PP-OCR
/// rec's scan: 304.5 MB a session against 47.8 MB of weights; the sample's 88.4 MB against
/// 2.8 MB). When even [`generous_session_bytes`] each fits twice over in the memory left,
/// all open side by side and the growth is shared among them; else the first opens alone,
/// is measured, and as many more as the memory left holds at that size each (a model that
/// fits only once then runs on one session, on the one thread it was opened with).
fn open_measured(
    eval: &Evaluator,
    model: &Model,
    options: SessionOptions,
    most: usize,
    estimate: u64,
) -> Result<Opened, EvalError> {
    let encoded = pinned_session_model(model, &eval.reference.sample_shapes())?;
    let free = crate::util::available_memory();
    let bound = generous_session_bytes(estimate).saturating_mul(most as u64 * 2);
    let first = match free.is_none_or(|free| bound <= free) {
        true => most,
        false => 1,
    };
    let before = crate::jobs::resident_memory_bytes();
    let started = std::time::Instant::now();
    let mut sessions = open_pool(eval, &encoded, options, first)?.into_sessions();
    let seconds = started.elapsed().as_secs_f64();
    let after = crate::jobs::resident_memory_bytes();
    let measured = before.zip(after).map_or(0, |(b, a)| a.saturating_sub(b)) / first as u64;
    let session_bytes = measured.max(estimate);
    let fit = free.map_or(usize::MAX, |free| (free / session_bytes.max(1)) as usize);
    let more = most
        .saturating_sub(sessions.len())
        .min(fit.saturating_sub(1));
    if more > 0 {
        sessions.extend(open_pool(eval, &encoded, options, more)?.into_sessions());
    }
    Ok(Opened {
        sessions: sessions.len(),
        pool: SessionPool {
            sessions: Mutex::new(sessions),
        },
        seconds,
        session_bytes,
    })
}

/// A bound on one switchable session's memory, from `estimate` (twice its weights): eight
/// times that, and 256 MiB for the kernels and plans of its nodes. Above what was measured
/// (PP-OCR rec 6.4 times its weights, the sample 88 MB).
fn generous_session_bytes(estimate: u64) -> u64 {
    estimate.saturating_mul(8).saturating_add(256 << 20)
}

/// `workers` sessions of the `encoded` model over `eval`'s data (opened side by side when
/// several).
fn open_pool(
    eval: &Evaluator,
    encoded: &crate::model::SessionModel,
    options: SessionOptions,
    workers: usize,
) -> Result<SessionPool, EvalError> {
    let indices: Vec<usize> = (0..workers).collect();
    let sessions = on_workers(workers, &indices, |_| {
        Ok(eval
            .runtime
            .session_from_model(encoded, eval.eps, options)?)
    })?;
    Ok(SessionPool {
        sessions: Mutex::new(sessions),
    })
}

/// `f` on every one of `items`, results in their order: on `workers` threads at once when
/// more than one, else one after another on this thread; the first failure is returned.
pub(crate) fn on_workers<T: Sync, R: Send>(
    workers: usize,
    items: &[T],
    f: impl Fn(&T) -> Result<R, EvalError> + Sync,
) -> Result<Vec<R>, EvalError> {
    match workers > 1 {
        true => worker_pool(workers)?.install(|| items.par_iter().map(&f).collect()),
        false => items.iter().map(f).collect(),
    }
}

/// [`on_workers`], keeping each item's own result: one item's error (a cancellation) does
/// not throw away the others'.
pub(crate) fn on_workers_each<T: Sync, R: Send>(
    workers: usize,
    items: &[T],
    f: impl Fn(&T) -> Result<R, EvalError> + Sync,
) -> Result<Vec<Result<R, EvalError>>, EvalError> {
    Ok(match workers > 1 {
        true => worker_pool(workers)?.install(|| items.par_iter().map(&f).collect()),
        false => items.iter().map(f).collect(),
    })
}

/// A thread pool of `workers` threads.
pub(crate) fn worker_pool(workers: usize) -> Result<rayon::ThreadPool, EvalError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .build()
        .map_err(|e| EvalError::Run {
            batch: 0,
            model: "quantized",
            reason: format!("cannot start the scan's worker threads: {e}"),
        })
}
