//! Latency of a model on the chosen execution providers, and the kernels ONNX Runtime ran
//! for it, read from its per-node profile: `kernels` reads a profile, `kernel_costs` sets a
//! float and a QDQ model's segments side by side.

pub mod kernel_costs;
pub mod kernels;

use std::time::Instant;

use serde::Serialize;

use super::EvalError;
use crate::calib::data::{BatchSource, DataError, choose_batch, model_inputs};
use crate::model::ops;
use crate::model::{Graph, Model};
use crate::quant::cpu_session_options;
use crate::runtime::value::{owned_inputs, session_inputs};
use crate::runtime::{EpSpec, Runtime, SessionOptions};

/// Latency of one model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Latency {
    /// Median milliseconds per run.
    pub median_ms: f64,
    /// 90th percentile milliseconds.
    pub p90_ms: f64,
    /// Timed runs.
    pub runs: usize,
    /// The execution providers used.
    pub execution_providers: Vec<String>,
    /// Intra-op threads of the session (0: ONNX Runtime's default, one per physical core).
    pub intra_op_threads: usize,
    /// Samples per timed run.
    pub batch_size: usize,
    /// For a QDQ model: the kernels ONNX Runtime ran for it (from the per-node profile of
    /// one untimed run), which tell why it is as fast as it is.
    pub kernels: Option<kernels::KernelReport>,
}

/// The blocks each model's timed runs are split into when models are timed in turn.
pub const BLOCKS: usize = 5;

/// Times `models` in turn on one batch of `source` (the same inputs: models of one float
/// model), each in its own live session: `warmup` untimed runs of each, then [`BLOCKS`]
/// rounds in which each model runs its share of `runs` timed runs, one model after the
/// other (one model: its runs one after the other). A machine's speed drifts (by a fifth within seconds on a shared virtual machine,
/// measured here); timed one after the other, models are compared across that drift, and in
/// turn it falls on all of them alike. Every session is alive at once, as in the comparison
/// of outputs.
pub fn measure_in_turn<const N: usize>(
    models: [&Model; N],
    source: &mut dyn BatchSource,
    runtime: &Runtime,
    eps: &[EpSpec],
    batch_size: usize,
    warmup: usize,
    runs: usize,
) -> Result<[Latency; N], EvalError> {
    let mut timed = models
        .iter()
        .map(|model| Timed::new(model, source, runtime, eps, batch_size))
        .collect::<Result<Vec<_>, _>>()?;
    for model in &mut timed {
        model.run(warmup, false)?;
    }
    for share in block_shares(runs) {
        for model in &mut timed {
            model.run(share, true)?;
        }
    }
    let latencies: Vec<Latency> = timed.into_iter().map(|t| t.latency(eps)).collect();
    latencies
        .try_into()
        .map_err(|_: Vec<Latency>| EvalError::Run {
            batch: 0,
            model: "timed",
            reason: "a timing in turn lost a model's latency".to_owned(),
        })
}

/// Each block's share of `runs` (at least one) when models take [`BLOCKS`] turns: shares that
/// differ by at most one and add up to `runs`.
fn block_shares(runs: usize) -> impl Iterator<Item = usize> {
    let runs = runs.max(1);
    let blocks = BLOCKS.min(runs);
    (0..blocks).map(move |block| runs * (block + 1) / blocks - runs * block / blocks)
}

/// The kernels ONNX Runtime runs for the QDQ model `model` on the first batch of `source`
/// (from the profile of one run; `None` for a float model, or when the profile cannot be
/// read), without timing it.
pub fn kernel_report(
    model: &Model,
    source: &mut dyn BatchSource,
    runtime: &Runtime,
    eps: &[EpSpec],
    batch_size: usize,
) -> Result<Option<kernels::KernelReport>, EvalError> {
    Ok(Timed::new(model, source, runtime, eps, batch_size)?.kernels)
}

/// A model ready to be timed: its session, the batch it runs, and the runs timed so far.
struct Timed {
    session: ort::session::Session,
    owned: Vec<(String, ort::value::DynValue)>,
    samples: usize,
    options: SessionOptions,
    kernels: Option<kernels::KernelReport>,
    times: Vec<f64>,
}

impl Timed {
    /// `model`'s session on the first batch of `source` (after one profiled run for a QDQ
    /// model, whose kernels the latency reports).
    fn new(
        model: &Model,
        source: &mut dyn BatchSource,
        runtime: &Runtime,
        eps: &[EpSpec],
        batch_size: usize,
    ) -> Result<Timed, EvalError> {
        let FirstBatch {
            graph,
            samples,
            owned,
        } = first_batch(model, source, batch_size)?;
        let quantized = graph.nodes().iter().any(|n| {
            matches!(
                n.op_type.as_str(),
                ops::DEQUANTIZE_LINEAR | ops::MAT_MUL_N_BITS
            )
        });
        // A float model's CPU options are the defaults; a QDQ model's follow its types.
        let options = cpu_session_options(model);
        let session_model = model.to_session_model()?;
        let (session, kernels) = if quantized {
            profiled_session(&graph, &session_model, runtime, eps, options, &owned)?
        } else {
            let session = runtime.session_from_model(&session_model, eps, options)?;
            (session, None)
        };
        Ok(Timed {
            session,
            owned,
            samples,
            options,
            kernels,
            times: Vec::new(),
        })
    }

    /// `n` runs, their milliseconds kept when `timed`.
    fn run(&mut self, n: usize, timed: bool) -> Result<(), EvalError> {
        for _ in 0..n {
            let started = Instant::now();
            run_once(&mut self.session, &self.owned, "timed")?;
            if timed {
                self.times.push(started.elapsed().as_secs_f64() * 1e3);
            }
        }
        Ok(())
    }

    /// The median and 90th percentile of the timed runs.
    fn latency(mut self, eps: &[EpSpec]) -> Latency {
        self.times.sort_by(f64::total_cmp);
        let times = &self.times;
        let at = |q: f64| {
            let index = ((times.len().saturating_sub(1)) as f64 * q).round() as usize;
            times.get(index).copied().unwrap_or(0.0)
        };
        Latency {
            median_ms: at(0.5),
            p90_ms: at(0.9),
            runs: times.len(),
            execution_providers: eps.iter().map(ToString::to_string).collect(),
            intra_op_threads: self.options.intra_threads,
            batch_size: self.samples,
            kernels: self.kernels,
        }
    }
}

/// Each kernel's median microseconds over `runs` profiled runs of `model` on one sample of
/// `source`, in execution order: what [`kernel_costs`] compares between a float and a QDQ
/// model. Profiling costs a little on each kernel, alike for both models.
pub fn profile_kernels(
    model: &Model,
    source: &mut dyn BatchSource,
    runtime: &Runtime,
    eps: &[EpSpec],
    runs: usize,
) -> Result<Vec<kernels::KernelTime>, EvalError> {
    let [times] = profile_in_turn([model], source, runtime, eps, runs)?;
    Ok(times)
}

/// [`profile_kernels`] of several models, profiled in turn as [`measure_in_turn`] times them:
/// kernel times set side by side (a float model's segments against a QDQ model's) must come
/// from the same moments of a drifting machine.
pub fn profile_in_turn<const N: usize>(
    models: [&Model; N],
    source: &mut dyn BatchSource,
    runtime: &Runtime,
    eps: &[EpSpec],
    runs: usize,
) -> Result<[Vec<kernels::KernelTime>; N], EvalError> {
    let folder = tempfile::tempdir().map_err(|e| profile_error(e.to_string()))?;
    let mut profiled = Vec::with_capacity(N);
    for (index, model) in models.iter().enumerate() {
        let owned = first_batch(model, source, 1)?.owned;
        let session = runtime.profiled_session_from_model(
            &model.to_session_model()?,
            eps,
            cpu_session_options(model),
            &folder.path().join(format!("profile{index}")),
        )?;
        profiled.push((session, owned));
    }
    for share in block_shares(runs) {
        for (session, owned) in &mut profiled {
            for _ in 0..share {
                run_once(session, owned, "profiled")?;
            }
        }
    }
    let times = profiled
        .into_iter()
        .map(|(mut session, _)| {
            let text = profile_text(&mut session).map_err(profile_error)?;
            kernels::kernel_times(&text).map_err(|e| profile_error(e.to_string()))
        })
        .collect::<Result<Vec<_>, EvalError>>()?;
    times
        .try_into()
        .map_err(|_: Vec<_>| profile_error("a profile in turn lost a model's kernels".to_owned()))
}

/// A model's graph and the first batch of a source, as a timing or profile runs it.
struct FirstBatch {
    graph: Graph,
    /// Samples in the batch.
    samples: usize,
    /// The batch's inputs, owned.
    owned: Vec<(String, ort::value::DynValue)>,
}

/// `model`'s graph and the first batch of `source` in batches of `batch_size` (as the model
/// takes them).
fn first_batch(
    model: &Model,
    source: &mut dyn BatchSource,
    batch_size: usize,
) -> Result<FirstBatch, EvalError> {
    source.rewind()?;
    let graph = Graph::build(model);
    let batch = source
        .next_batch(choose_batch(&model_inputs(&graph), batch_size).size)?
        .ok_or(DataError::Empty)?;
    Ok(FirstBatch {
        graph,
        samples: batch.samples,
        owned: owned_inputs(batch.inputs)?,
    })
}

/// One run of `session` on `owned` (a run of `model`, for the error).
fn run_once(
    session: &mut ort::session::Session,
    owned: &[(String, ort::value::DynValue)],
    model: &'static str,
) -> Result<(), EvalError> {
    session
        .run(session_inputs(owned))
        .map(drop)
        .map_err(|e| EvalError::Run {
            batch: 0,
            model,
            reason: e.to_string(),
        })
}

/// Ends the profiling of `session` and reads the profile it wrote.
fn profile_text(session: &mut ort::session::Session) -> Result<String, String> {
    let file = session.end_profiling().map_err(|e| e.to_string())?;
    std::fs::read_to_string(file).map_err(|e| e.to_string())
}

/// A profile that could not be had, as a run error.
fn profile_error(reason: String) -> EvalError {
    EvalError::Run {
        batch: 0,
        model: "profiled",
        reason: format!("ONNX Runtime's profile cannot be read: {reason}"),
    }
}

/// A session of the QDQ model `graph` after one profiled run, and the kernels that run
/// used (`None` when the profile could not be had: the timing does not depend on it).
fn profiled_session(
    graph: &Graph,
    model: &crate::model::SessionModel,
    runtime: &Runtime,
    eps: &[EpSpec],
    options: SessionOptions,
    owned: &[(String, ort::value::DynValue)],
) -> Result<(ort::session::Session, Option<kernels::KernelReport>), EvalError> {
    let folder = tempfile::tempdir().ok();
    let Some(prefix) = folder.as_ref().map(|f| f.path().join("profile")) else {
        return Ok((runtime.session_from_model(model, eps, options)?, None));
    };
    let mut session = runtime.profiled_session_from_model(model, eps, options, &prefix)?;
    run_once(&mut session, owned, "timed")?;
    let names: Vec<String> = eps.iter().map(ToString::to_string).collect();
    let report = profile_text(&mut session)
        .ok()
        .and_then(|text| kernels::read_profile(&text, graph, &names).ok());
    Ok((session, report))
}
