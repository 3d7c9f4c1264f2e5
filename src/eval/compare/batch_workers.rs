//! Every batch of a data source run on several sessions at once: each worker thread opens
//! its own session and takes the next batch in turn. On a CPU of few cores, whole batches
//! side by side on one thread each keep the cores busier than one session splitting each
//! operator over them: the small operators of a model run at batch 1 barely gain from a
//! second thread (the local errors of PP-OCR rec on 2 cores, `cargo bench --bench
//! local_error`: 2.46 s on two sessions of one thread against 2.58 to 2.69 s on one of
//! two).
//! The results come back in batch order, so whatever is summed from them is summed in the
//! same order whichever worker ran which batch.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::calib::data::{Batch, BatchSource};
use crate::eval::compare::EvalError;
use crate::jobs::{JobContext, RateMeter};
use crate::runtime::EpSpec;

/// `step` on every batch of `source` from the first, on `workers` threads, each with the
/// state `open` gives it (its session, opened on that thread, all at once: a session with
/// custom operators needs their domain registered first, [`crate::eval::tensor_error::error_sums::register`]);
/// each result handed to `fold` in batch order as soon as the batches before it are in (so
/// only those still running elsewhere wait in memory). Progress as `label`; cancellable
/// between batches; the first failure stops every worker and is returned.
#[allow(clippy::too_many_arguments)]
pub(crate) fn each_batch_on_workers<S, R: Send>(
    source: &mut dyn BatchSource,
    batch_size: usize,
    workers: usize,
    ctx: &JobContext,
    label: &str,
    open: impl Fn() -> Result<S, EvalError> + Sync,
    step: impl Fn(&mut S, Batch) -> Result<R, EvalError> + Sync,
    fold: impl FnMut(R) + Send,
) -> Result<(), EvalError> {
    let meter = RateMeter::new(label, source.samples() as u64);
    source.rewind()?;
    let source = Mutex::new(source);
    let in_order = Mutex::new(InOrder {
        next: 0,
        waiting: BTreeMap::new(),
        fold,
    });
    let (done, failed) = (AtomicU64::new(0), AtomicBool::new(false));
    let next = || -> Result<Option<Batch>, EvalError> {
        ctx.checkpoint().map_err(|_| EvalError::Cancelled)?;
        if failed.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let mut source = source.lock().map_err(|_| stopped())?;
        Ok(source.next_batch(batch_size)?)
    };
    let work = || -> Result<(), EvalError> {
        let run = || -> Result<(), EvalError> {
            let mut state = open()?;
            while let Some(batch) = next()? {
                let (index, samples) = (batch.index, batch.samples);
                let result = step(&mut state, batch)?;
                in_order.lock().map_err(|_| stopped())?.add(index, result);
                let total = done.fetch_add(samples as u64, Ordering::Relaxed) + samples as u64;
                ctx.report(meter.progress(total, format!("batch {}", index + 1)));
            }
            Ok(())
        };
        let ran = run();
        if ran.is_err() {
            failed.store(true, Ordering::Relaxed);
        }
        ran
    };
    match workers {
        0 | 1 => work()?,
        _ => std::thread::scope(|scope| {
            let work = &work;
            let handles: Vec<_> = (0..workers).map(|_| scope.spawn(work)).collect();
            handles
                .into_iter()
                .try_for_each(|handle| handle.join().map_err(|_| stopped())?)
        })?,
    }
    in_order.into_inner().map_err(|_| stopped())?.flush();
    Ok(())
}

/// Results handed to `fold` in batch order as they come in from the workers.
struct InOrder<R, F> {
    /// The index of the next batch to fold.
    next: usize,
    /// Results of later batches, waiting for those before them.
    waiting: BTreeMap<usize, R>,
    fold: F,
}

impl<R, F: FnMut(R)> InOrder<R, F> {
    /// Takes batch `index`'s result and folds every result now in order.
    fn add(&mut self, index: usize, result: R) {
        self.waiting.insert(index, result);
        while let Some(result) = self.waiting.remove(&self.next) {
            (self.fold)(result);
            self.next += 1;
        }
    }

    /// Folds what is left in index order (batches after a gap in the source's numbering).
    fn flush(mut self) {
        for result in std::mem::take(&mut self.waiting).into_values() {
            (self.fold)(result);
        }
    }
}

/// A worker that stopped without an answer (it panicked, or held the source's lock then).
fn stopped() -> EvalError {
    EvalError::Run {
        batch: 0,
        model: "evaluated",
        reason: "a worker thread stopped unexpectedly".into(),
    }
}

/// Sessions to run side by side on `eps`: on the CPU one per core (up to 8, each then on
/// one thread) as far as the memory available holds `need()` bytes for each ([`workers_within`]);
/// one on accelerators, which run one model at a time anyway and whose memory is the limit.
/// `need` is only asked on the CPU.
pub(crate) fn cpu_workers(eps: &[EpSpec], need: impl FnOnce() -> u64) -> usize {
    if !eps.iter().all(|e| matches!(e, EpSpec::Cpu)) {
        return 1;
    }
    let cores = rayon::current_num_threads().clamp(1, 8);
    workers_within(cores, need(), crate::util::available_memory())
}

/// Up to `cores` workers, as many as `available` bytes hold at `need` each (at least one:
/// a single variant that cannot fit is refused by the quantizer with the numbers).
pub(crate) fn workers_within(cores: usize, need: u64, available: Option<u64>) -> usize {
    match available {
        Some(available) if need > 0 => cores.min((available / need) as usize).max(1),
        _ => cores,
    }
}

#[cfg(test)]
mod tests {
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
            let mut results = Vec::new();
            each_batch_on_workers(
                data.as_mut(),
                2,
                workers,
                &ctx,
                "test",
                || Ok(opened.fetch_add(1, Ordering::Relaxed)),
                |_, batch| Ok((batch.index, batch.samples)),
                |result| results.push(result),
            )
            .unwrap();
            assert_eq!(opened.into_inner(), workers as u64, "one state per worker");
            assert_eq!(results, [(0, 2), (1, 2), (2, 2), (3, 1)]);
        }
    }

    #[test]
    fn results_are_folded_in_batch_order_whatever_order_they_come_in() {
        let mut folded = Vec::new();
        let mut in_order = InOrder {
            next: 0,
            waiting: BTreeMap::new(),
            fold: |r| folded.push(r),
        };
        in_order.add(2, "c");
        in_order.add(0, "a");
        assert_eq!(in_order.waiting.len(), 1, "2 waits for 1");
        in_order.add(1, "b");
        in_order.add(5, "f");
        in_order.add(4, "e");
        assert!(
            in_order.waiting.contains_key(&5),
            "a gap before 4 holds both"
        );
        in_order.flush();
        assert_eq!(folded, ["a", "b", "c", "e", "f"]);
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
            |_| {},
        );
        assert!(matches!(result, Err(EvalError::NothingToQuantize)));
    }

    #[test]
    fn parallel_variants_are_bounded_by_the_memory_available() {
        // A 1.1B decoder's int8 variant needs about 2.6 GB: 8 GB holds three at once.
        assert_eq!(workers_within(8, 2_600_000_000, Some(8_000_000_000)), 3);
        assert_eq!(workers_within(8, 2_600_000_000, Some(1_000_000_000)), 1);
        assert_eq!(workers_within(4, 1_000, Some(1 << 40)), 4);
        assert_eq!(workers_within(4, 1_000, None), 4);
    }
}
