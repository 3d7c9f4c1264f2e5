//! The evaluation set held in memory together with the float model's outputs on it, so that
//! the many variants of a sensitivity scan are each compared with one quantized run: the float
//! model runs once, the data is read once, and variants can run in parallel.
//!
//! [`crate::eval::compare::compare_outputs`] stays streaming (memory bounded by one batch) for the one-off
//! comparison; a scan trades memory (inputs and float outputs of the evaluation set) for
//! hundreds of runs saved.

use std::collections::BTreeMap;

use ndarray::{ArrayD, Axis};
use ort::session::{OutputSelector, RunOptions};
use ort::value::DynValue;

use crate::calib::data::BatchSource;
use crate::eval::compare::task::{Task, TaskOptions};
use crate::eval::compare::{
    EvalError, OutputMetrics, check_comparable, run_outputs, run_outputs_of,
};
use crate::jobs::{CancelToken, JobContext, RateMeter};
use crate::model::pinned::pinned_session_model;
use crate::model::{Model, TensorArray};
use crate::quant::cpu_session_options;
use crate::runtime::value::{owned_inputs, session_inputs};
use crate::runtime::{EpSpec, Runtime, SessionOptions};

/// One batch: its inputs and the float model's outputs.
#[derive(Debug, Clone)]
struct ReferenceBatch {
    index: usize,
    first_sample: usize,
    samples: usize,
    inputs: Vec<(String, TensorArray)>,
    outputs: Vec<Option<ArrayD<f32>>>,
}

impl ReferenceBatch {
    /// The batch's inputs with `extra` ones beside them, as session values.
    fn owned_inputs(
        &self,
        extra: &[(String, TensorArray)],
    ) -> Result<Vec<(String, DynValue)>, EvalError> {
        let mut inputs = self.inputs.clone();
        inputs.extend(extra.iter().cloned());
        Ok(owned_inputs(inputs)?)
    }

    /// True when `sample` is one of this batch's.
    fn holds(&self, sample: usize) -> bool {
        (self.first_sample..self.first_sample + self.samples).contains(&sample)
    }
}

/// A session for a QDQ model with its CPU options and at most `intra_threads` threads per
/// operator (0: ONNX Runtime's default), its inputs declaring `sample_shapes`
/// ([`Reference::sample_shapes`]); `blocked_layout` as in [`SessionOptions`].
fn quantized_session(
    quant: &Model,
    sample_shapes: &BTreeMap<String, Vec<usize>>,
    runtime: &Runtime,
    eps: &[EpSpec],
    intra_threads: usize,
    blocked_layout: bool,
) -> Result<ort::session::Session, EvalError> {
    let options = SessionOptions {
        intra_threads,
        blocked_layout,
        ..cpu_session_options(quant)
    };
    let encoded = pinned_session_model(quant, sample_shapes)?;
    Ok(runtime.session_from_model(&encoded, eps, options)?)
}

/// Consecutive batches as one (`None` when an input or output cannot be joined).
fn join_batches(index: usize, group: &[&ReferenceBatch]) -> Option<ReferenceBatch> {
    let first = group.first()?;
    let inputs = first
        .inputs
        .iter()
        .enumerate()
        .map(|(at, (name, _))| {
            let parts = group
                .iter()
                .map(|b| Some(&b.inputs.get(at)?.1))
                .collect::<Option<Vec<&TensorArray>>>()?;
            Some((name.clone(), TensorArray::concatenate(&parts)?))
        })
        .collect::<Option<Vec<_>>>()?;
    let outputs = (0..first.outputs.len())
        .map(|at| {
            let parts = group
                .iter()
                .map(|b| b.outputs.get(at)?.as_ref().map(|a| a.view()))
                .collect::<Option<Vec<_>>>();
            // An output that is not a float tensor stays unmeasured, as in each batch.
            match parts {
                None => Some(None),
                Some(parts) => ndarray::concatenate(Axis(0), &parts).ok().map(Some),
            }
        })
        .collect::<Option<Vec<_>>>()?;
    Some(ReferenceBatch {
        index,
        first_sample: first.first_sample,
        samples: group.iter().map(|b| b.samples).sum(),
        inputs,
        outputs,
    })
}

/// One output of one sample, float beside quantized (what the studio's side-by-side view
/// draws).
#[derive(Debug, Clone, PartialEq)]
pub struct OutputPair {
    /// The output's name.
    pub name: String,
    /// The float model's values (the sample's slice, batch axis kept with length 1).
    pub float: ArrayD<f32>,
    /// The quantized model's values, same shape.
    pub quantized: ArrayD<f32>,
}

/// The evaluation data and the float model's outputs on it.
#[derive(Debug, Clone)]
pub struct Reference {
    outputs: Vec<String>,
    /// Each output's kind and ground truth.
    task: Task,
    batches: Vec<ReferenceBatch>,
    samples: usize,
}

impl Reference {
    /// Runs the float model once over `source` and keeps inputs and outputs, with the task
    /// (output kinds, ground truth) resolved from `task`.
    #[allow(clippy::too_many_arguments)] // the model, where and how it runs, the task
    pub fn capture(
        float: &Model,
        source: &mut dyn BatchSource,
        runtime: &Runtime,
        eps: &[EpSpec],
        batch_size: usize,
        task: &TaskOptions,
        ctx: &JobContext,
    ) -> Result<Reference, EvalError> {
        let crate::eval::compare::EvalData {
            outputs,
            batch_size,
            samples,
            task,
        } = crate::eval::compare::EvalData::check(float, &*source, batch_size, task)?;
        let mut session = runtime.session_from_model(
            &float.to_session_model()?,
            eps,
            SessionOptions::default(),
        )?;
        let meter = RateMeter::new("float reference", samples as u64);
        let mut batches = Vec::new();
        let mut done = 0;
        source.rewind()?;
        while let Some(batch) = source.next_batch(batch_size.max(1))? {
            ctx.checkpoint().map_err(|_| EvalError::Cancelled)?;
            let owned = owned_inputs(batch.inputs.clone())?;
            let results = run_outputs(&mut session, &owned, &outputs, batch.index, "float")?;
            done += batch.samples;
            batches.push(ReferenceBatch {
                index: batch.index,
                first_sample: batch.first_sample,
                samples: batch.samples,
                inputs: batch.inputs,
                outputs: results,
            });
            ctx.report(meter.progress(done as u64, format!("batch {}", batch.index + 1)));
        }
        Ok(Reference {
            task,
            outputs,
            batches,
            samples: done,
        })
    }

    /// The same data and float outputs in batches of up to `max_samples` (consecutive
    /// batches joined), for a model whose batch axis is free: fewer, larger runs. `None` when
    /// some input or output cannot be joined along its first axis.
    pub fn merged(&self, max_samples: usize) -> Option<Reference> {
        let mut groups: Vec<Vec<&ReferenceBatch>> = Vec::new();
        for batch in &self.batches {
            match groups.last_mut() {
                Some(group)
                    if group.iter().map(|b| b.samples).sum::<usize>() + batch.samples
                        <= max_samples =>
                {
                    group.push(batch)
                }
                _ => groups.push(vec![batch]),
            }
        }
        let batches = groups
            .into_iter()
            .enumerate()
            .map(|(index, group)| join_batches(index, &group))
            .collect::<Option<Vec<_>>>()?;
        Some(Reference {
            outputs: self.outputs.clone(),
            task: self.task.clone(),
            batches,
            samples: self.samples,
        })
    }

    /// Samples held.
    pub fn samples(&self) -> usize {
        self.samples
    }

    /// Batches the samples are held in (one run each).
    pub fn batches(&self) -> usize {
        self.batches.len()
    }

    /// The array of the data the outputs are scored against, if any.
    pub fn truth_key(&self) -> Option<&str> {
        self.task.truth_key.as_deref()
    }

    /// Runs `quant` over the held data and measures each output against the float outputs,
    /// as a sensitivity scan measures a variant: without the CPU's blocked float layout, as
    /// the switchable model runs it ([`crate::eval::search::switched_scan`]), so that both methods
    /// give a variant the same figure. `intra_threads` bounds the session's threads (0: ONNX
    /// Runtime's default), so parallel callers do not oversubscribe the CPU.
    pub fn compare(
        &self,
        float: &Model,
        quant: &Model,
        runtime: &Runtime,
        eps: &[EpSpec],
        intra_threads: usize,
        cancel: &CancelToken,
    ) -> Result<Vec<OutputMetrics>, EvalError> {
        check_comparable(float, quant, "the quantized model")?;
        let mut session = quantized_session(
            quant,
            &self.sample_shapes(),
            runtime,
            eps,
            intra_threads,
            false,
        )?;
        Ok(self.run_all(&mut session, None, &[], None, Some(cancel))?.0)
    }

    /// Runs an open `session` over the held data with `extra` inputs beside each batch's
    /// (a switchable model's gates) and measures each output against the float outputs.
    pub fn compare_session(
        &self,
        session: &mut ort::session::Session,
        extra: &[(String, TensorArray)],
        cancel: &CancelToken,
    ) -> Result<Vec<OutputMetrics>, EvalError> {
        Ok(self.run_all(session, None, extra, None, Some(cancel))?.0)
    }

    /// [`Reference::compare_session`] with values of each batch fed beside its inputs
    /// (`fed`, one list per held batch, as [`Reference::batch_values`] gives them): a model
    /// cut after its first nodes reads what they wrote.
    pub fn compare_fed(
        &self,
        session: &mut ort::session::Session,
        fed: &[Vec<(String, DynValue)>],
        extra: &[(String, TensorArray)],
        cancel: &CancelToken,
    ) -> Result<Vec<OutputMetrics>, EvalError> {
        if fed.len() != self.batches.len() {
            return Err(EvalError::Run {
                batch: 0,
                model: "quantized",
                reason: format!(
                    "values of {} batches fed for {} held batches",
                    fed.len(),
                    self.batches.len()
                ),
            });
        }
        Ok(self
            .run_all(session, None, extra, Some(fed), Some(cancel))?
            .0)
    }

    /// The values `names` (outputs of `session`'s model) take on each held batch, `extra`
    /// inputs beside the batch's own; only they are asked of ONNX Runtime.
    pub fn batch_values(
        &self,
        session: &mut ort::session::Session,
        extra: &[(String, TensorArray)],
        names: &[String],
    ) -> Result<Vec<Vec<(String, DynValue)>>, EvalError> {
        let failed = |batch: usize| {
            move |e: ort::Error| EvalError::Run {
                batch,
                model: "quantized",
                reason: e.to_string(),
            }
        };
        let selector = names
            .iter()
            .fold(OutputSelector::no_default(), |s, name| s.with(name.clone()));
        let options = RunOptions::new().map_err(failed(0))?.with_outputs(selector);
        let mut values = Vec::with_capacity(self.batches.len());
        for batch in &self.batches {
            let owned = batch.owned_inputs(extra)?;
            let mut out = session
                .run_with_options(session_inputs(&owned), &options)
                .map_err(failed(batch.index))?;
            let taken = names
                .iter()
                .map(|name| {
                    let value = out.remove(name.as_str()).ok_or_else(|| EvalError::Run {
                        batch: batch.index,
                        model: "quantized",
                        reason: format!("the model gave no value `{name}`"),
                    })?;
                    Ok((name.clone(), value))
                })
                .collect::<Result<Vec<_>, EvalError>>()?;
            values.push(taken);
        }
        Ok(values)
    }

    /// [`Reference::compare`] that also returns `sample`'s outputs, float beside quantized,
    /// from the same run (one session instead of two).
    pub fn compare_with_sample(
        &self,
        float: &Model,
        quant: &Model,
        runtime: &Runtime,
        eps: &[EpSpec],
        sample: usize,
    ) -> Result<(Vec<OutputMetrics>, Vec<OutputPair>), EvalError> {
        check_comparable(float, quant, "the quantized model")?;
        self.batch_of(sample)?;
        let mut session = quantized_session(quant, &self.sample_shapes(), runtime, eps, 0, true)?;
        let (metrics, pairs) = self.run_all(&mut session, Some(sample), &[], None, None)?;
        Ok((metrics, pairs.unwrap_or_default()))
    }

    /// Runs every held batch through `session` with `extra` inputs beside each batch's (and
    /// its `fed` values, when given), accumulating the output metrics, and keeps `sample`'s
    /// outputs when asked.
    fn run_all(
        &self,
        session: &mut ort::session::Session,
        sample: Option<usize>,
        extra: &[(String, TensorArray)],
        fed: Option<&[Vec<(String, DynValue)>]>,
        cancel: Option<&CancelToken>,
    ) -> Result<(Vec<OutputMetrics>, Option<Vec<OutputPair>>), EvalError> {
        let mut accumulators = crate::eval::compare::accumulators(&self.outputs, &self.task);
        let mut pairs = None;
        for (at, batch) in self.batches.iter().enumerate() {
            let fed = fed.and_then(|f| f.get(at)).map_or(&[][..], Vec::as_slice);
            let results = self.run_batch(session, batch, extra, fed, cancel)?;
            crate::eval::compare::accumulate(
                &mut accumulators,
                &batch.outputs,
                &results,
                batch.first_sample,
            )?;
            if let Some(sample) = sample.filter(|s| batch.holds(*s)) {
                pairs = Some(self.pairs(batch, &results, sample));
            }
        }
        Ok((crate::eval::compare::finish(&accumulators), pairs))
    }

    /// The shape of one sample of each input that every held batch gives alike: a session
    /// that only runs these batches may declare it, and ONNX Runtime then plans the graph
    /// without symbolic sizes (the local errors' module [`crate::model::pinned`] says how
    /// much that saves).
    pub fn sample_shapes(&self) -> BTreeMap<String, Vec<usize>> {
        let mut shapes: BTreeMap<String, Option<Vec<usize>>> = BTreeMap::new();
        for (name, array) in self.batches.iter().flat_map(|b| &b.inputs) {
            let sample = array.shape().get(1..).map(<[usize]>::to_vec);
            let agreed = shapes.entry(name.clone()).or_insert_with(|| sample.clone());
            if *agreed != sample {
                *agreed = None;
            }
        }
        shapes
            .into_iter()
            .filter_map(|(name, shape)| Some((name, shape?)))
            .collect()
    }

    /// The batch holding `sample`.
    fn batch_of(&self, sample: usize) -> Result<&ReferenceBatch, EvalError> {
        self.batches
            .iter()
            .find(|b| b.holds(sample))
            .ok_or(EvalError::NoSample {
                sample,
                samples: self.samples,
            })
    }

    /// Runs `quant` on the batch holding `sample` and returns that sample's outputs, float
    /// beside quantized. Outputs that are not float tensors are left out.
    pub fn sample_outputs(
        &self,
        float: &Model,
        quant: &Model,
        runtime: &Runtime,
        eps: &[EpSpec],
        sample: usize,
    ) -> Result<Vec<OutputPair>, EvalError> {
        check_comparable(float, quant, "the quantized model")?;
        let batch = self.batch_of(sample)?;
        let mut session = quantized_session(quant, &self.sample_shapes(), runtime, eps, 0, true)?;
        let results = self.run_batch(&mut session, batch, &[], &[], None)?;
        Ok(self.pairs(batch, &results, sample))
    }

    /// The quantized `session`'s outputs on one held batch, `extra` inputs and `fed` values
    /// beside its own.
    fn run_batch(
        &self,
        session: &mut ort::session::Session,
        batch: &ReferenceBatch,
        extra: &[(String, TensorArray)],
        fed: &[(String, DynValue)],
        cancel: Option<&CancelToken>,
    ) -> Result<Vec<Option<ArrayD<f32>>>, EvalError> {
        let owned = batch.owned_inputs(extra)?;
        run_outputs_of(
            session,
            &[&owned, fed],
            &self.outputs,
            batch.index,
            "quantized",
            cancel,
        )
    }

    /// `sample`'s outputs in `batch`, float beside the quantized `results`.
    fn pairs(
        &self,
        batch: &ReferenceBatch,
        results: &[Option<ArrayD<f32>>],
        sample: usize,
    ) -> Vec<OutputPair> {
        let at = sample - batch.first_sample;
        let slice = |a: &ArrayD<f32>| -> Option<ArrayD<f32>> {
            (a.ndim() > 0 && a.shape()[0] == batch.samples && at < a.shape()[0])
                .then(|| a.slice_axis(Axis(0), (at..at + 1).into()).to_owned())
        };
        self.outputs
            .iter()
            .zip(batch.outputs.iter().zip(results))
            .filter_map(|(name, (f, q))| {
                let (f, q) = (f.as_ref()?, q.as_ref()?);
                let (float, quantized) = match (slice(f), slice(q)) {
                    (Some(f), Some(q)) => (f, q),
                    // An output without a batch axis (a scalar, a fixed table): whole.
                    _ => (f.clone(), q.clone()),
                };
                Some(OutputPair {
                    name: name.clone(),
                    float,
                    quantized,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(index: usize, inputs: &[(&str, &[usize])]) -> ReferenceBatch {
        let inputs = inputs
            .iter()
            .map(|(name, shape)| {
                let array = ArrayD::<f32>::zeros(ndarray::IxDyn(shape));
                ((*name).to_owned(), TensorArray::Float32(array))
            })
            .collect();
        ReferenceBatch {
            index,
            first_sample: index,
            samples: 1,
            inputs,
            outputs: Vec::new(),
        }
    }

    #[test]
    fn sample_shapes_are_those_every_batch_gives_alike() {
        let reference = Reference {
            outputs: Vec::new(),
            task: Task {
                kinds: Vec::new(),
                truth_key: None,
                scorers: Vec::new(),
                iou_threshold: 0.5,
            },
            batches: vec![
                batch(
                    0,
                    &[("image", &[4, 3, 48, 320]), ("ids", &[4, 7]), ("k", &[])],
                ),
                // A smaller last batch keeps the sample shape; a longer sequence does not.
                batch(
                    1,
                    &[("image", &[2, 3, 48, 320]), ("ids", &[2, 9]), ("k", &[])],
                ),
            ],
            samples: 6,
        };
        assert_eq!(
            reference.sample_shapes(),
            BTreeMap::from([("image".to_owned(), vec![3, 48, 320])])
        );
    }
}
