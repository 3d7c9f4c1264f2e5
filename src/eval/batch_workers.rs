//! Every batch of a data source run on several sessions at once: each worker thread opens
//! its own session and takes the next batch in turn. On a CPU of few cores, whole batches
//! side by side on one thread each keep the cores busier than one session splitting each
//! operator over them: the small operators of a model run at batch 1 barely gain from a
//! second thread (the local errors of PP-OCR rec on 2 cores, `cargo bench --bench
//! local_error`: 2.46 s on two sessions of one thread against 2.58 to 2.69 s on one of
//! two).
//! The results come back in batch order, so whatever is summed from them is summed in the
//! same order whichever worker ran which batch.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::EvalError;
use crate::calib::data::{Batch, BatchSource};
use crate::jobs::{JobContext, RateMeter};

/// `step` on every batch of `source` from the first, on `workers` threads, each with the
/// state `open` gives it (its session, opened on that thread, all at once: a session with
/// custom operators needs their domain registered first, [`super::error_sums::register`]);
/// the results in batch order. Progress as `label`; cancellable between batches; the
/// first failure stops every worker and is returned.
pub(super) fn each_batch_on_workers<S, R: Send>(
    source: &mut dyn BatchSource,
    batch_size: usize,
    workers: usize,
    ctx: &JobContext,
    label: &str,
    open: impl Fn() -> Result<S, EvalError> + Sync,
    step: impl Fn(&mut S, Batch) -> Result<R, EvalError> + Sync,
) -> Result<Vec<R>, EvalError> {
    let meter = RateMeter::new(label, source.samples() as u64);
    source.rewind()?;
    let source = Mutex::new(source);
    let (done, failed) = (AtomicU64::new(0), AtomicBool::new(false));
    let next = || -> Result<Option<Batch>, EvalError> {
        ctx.checkpoint().map_err(|_| EvalError::Cancelled)?;
        if failed.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let mut source = source.lock().map_err(|_| stopped())?;
        Ok(source.next_batch(batch_size)?)
    };
    let work = || -> Result<Vec<(usize, R)>, EvalError> {
        let run = || -> Result<Vec<(usize, R)>, EvalError> {
            let mut state = open()?;
            let mut results = Vec::new();
            while let Some(batch) = next()? {
                let (index, samples) = (batch.index, batch.samples);
                results.push((index, step(&mut state, batch)?));
                let total = done.fetch_add(samples as u64, Ordering::Relaxed) + samples as u64;
                ctx.report(meter.progress(total, format!("batch {}", index + 1)));
            }
            Ok(results)
        };
        let results = run();
        if results.is_err() {
            failed.store(true, Ordering::Relaxed);
        }
        results
    };
    let mut results = match workers {
        0 | 1 => work()?,
        _ => std::thread::scope(|scope| {
            let work = &work;
            let handles: Vec<_> = (0..workers).map(|_| scope.spawn(work)).collect();
            let mut all = Vec::new();
            for handle in handles {
                all.extend(handle.join().map_err(|_| stopped())??);
            }
            Ok::<_, EvalError>(all)
        })?,
    };
    results.sort_by_key(|(index, _)| *index);
    Ok(results.into_iter().map(|(_, result)| result).collect())
}

/// A worker that stopped without an answer (it panicked, or held the source's lock then).
fn stopped() -> EvalError {
    EvalError::Run {
        batch: 0,
        model: "evaluated",
        reason: "a worker thread stopped unexpectedly".into(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::calib::data::{DataSpec, model_inputs};
    use crate::model::builder::ModelBuilder;
    use crate::model::{DataType, Graph};

    /// Random data of `samples` samples for a one-input model.
    fn source(samples: usize) -> Box<dyn BatchSource> {
        let mut builder = ModelBuilder::new(13);
        builder
            .input("x", DataType::Float32, &[-1, 4])
            .output("y", DataType::Float32, &[-1, 4]);
        builder.node("Relu", &["x"], &["y"]);
        let model = builder.build();
        let spec = DataSpec::Random {
            samples,
            shapes: BTreeMap::from([("x".to_owned(), vec![1, 4])]),
            seed: 1,
        };
        spec.open(&model_inputs(&Graph::build(&model))).unwrap()
    }

    #[test]
    fn every_batch_runs_once_and_the_results_come_back_in_batch_order() {
        let ctx = JobContext::silent();
        for workers in [1, 2, 3] {
            let mut data = source(7);
            let opened = AtomicU64::new(0);
            let results = each_batch_on_workers(
                data.as_mut(),
                2,
                workers,
                &ctx,
                "test",
                || Ok(opened.fetch_add(1, Ordering::Relaxed)),
                |_, batch| Ok((batch.index, batch.samples)),
            )
            .unwrap();
            assert_eq!(opened.into_inner(), workers as u64, "one state per worker");
            assert_eq!(results, [(0, 2), (1, 2), (2, 2), (3, 1)]);
        }
    }

    #[test]
    fn a_failing_batch_stops_the_pass_with_its_error() {
        let ctx = JobContext::silent();
        let mut data = source(9);
        let result = each_batch_on_workers(
            data.as_mut(),
            1,
            2,
            &ctx,
            "test",
            || Ok(()),
            |_, batch| match batch.index {
                3 => Err(EvalError::NothingToQuantize),
                index => Ok(index),
            },
        );
        assert!(matches!(result, Err(EvalError::NothingToQuantize)));
    }
}
