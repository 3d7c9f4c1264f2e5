//! Placement tuned for speed on the execution provider (`quantize --tune_latency`): the QDQ
//! model is timed on the EP, and the Q/DQ groups that cost more than they save are left out
//! of quantization, as long as the output SQNR stays within the allowed loss of the untuned
//! model's.
//!
//! Why: a provider runs a Q/DQ group fast only where it fuses it into an integer kernel. On
//! ONNX Runtime's CPU provider a small mobile CNN's elementwise chains (hard-swish's Add, Div
//! and Mul) run as tiny QLinearAdd/QLinearMul kernels with standalone DequantizeLinear and
//! QuantizeLinear between them: more kernels than the float model runs (PP-OCR's direction
//! classifier at 0.77x float speed). What fuses, and what it costs, is measured here rather
//! than assumed: the rules differ between providers and versions.
//!
//! The search is greedy over a short list of tries, each a recipe the untuned one would
//! become, quantized, timed and (when faster) scored:
//! 1. the quantized Conv/MatMul/Gemm nodes the untuned model ran in float (their group did not
//!    fuse: Q/DQ around a float kernel, pure overhead), left out together;
//! 2. the Conv/MatMul/Gemm nodes whose integer kernel, with the Q/DQ and unfused ops it brings,
//!    costs more than their float kernel, from ONNX Runtime's profiles of the float and the
//!    untuned model ([`crate::eval::compare::latency::kernel_costs`]), left out together;
//! 3. every quantized op type but the compute ops (Conv, ConvTranspose, MatMul, Gemm), left
//!    out together: the compute ops' integer kernels alone;
//! 4. each such op type alone, the one with the most nodes first.
//!
//! A try is kept when it is faster than the best so far by more than [`MIN_GAIN`], the two
//! timed in turn (alternating blocks of runs on live sessions,
//! [`crate::eval::compare::latency::measure_in_turn`]: a machine's speed drifts by more than
//! the gains looked for, and timed in turn the drift falls on both alike), and its worst
//! output SQNR holds the floor. What is kept is written into the recipe
//! (`op_types_to_exclude`, `nodes_to_exclude`), so the recipe reproduces the tuned model.

use crate::calib::data::BatchSource;
use crate::eval::compare::EvalError;
use crate::eval::compare::latency::kernel_costs::{SlowerInInt8, slower_in_int8};
use crate::eval::compare::latency::kernels::quantized_compute;
use crate::eval::compare::latency::{Latency, kernel_report, measure_in_turn, profile_in_turn};
use crate::eval::search::evaluator::{Evaluator, exact, quant_error};
use crate::jobs::{JobContext, RateMeter};
use crate::model::{Graph, Model};
use crate::quant;
use crate::recipe::Recipe;

/// A try is kept only when it is at least this much faster than the best so far (a fraction
/// of its time): less is within the timing's noise.
pub const MIN_GAIN: f64 = 0.03;

/// How the tuning times and judges.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TuneOptions {
    /// The output SQNR (dB) the tuned model may lose against the untuned one.
    pub max_loss_db: f64,
    /// Untimed runs before each timing.
    pub warmup: usize,
    /// Timed runs (the median counts).
    pub runs: usize,
}

impl Default for TuneOptions {
    fn default() -> Self {
        TuneOptions {
            max_loss_db: 1.0,
            warmup: 10,
            runs: 50,
        }
    }
}

/// One try of the search.
#[derive(Debug, Clone, PartialEq)]
pub struct Try {
    /// What it leaves out (`op type Mul (27 nodes)`).
    pub what: String,
    /// Its median milliseconds, when it quantized and ran.
    pub ms: Option<f64>,
    /// The best model's so far, timed in turn with it.
    pub against_ms: Option<f64>,
    /// Its worst output SQNR, when it was faster and so scored.
    pub sqnr_db: Option<f64>,
    /// Whether it was kept.
    pub kept: bool,
}

/// What the tuning did.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyTuning {
    /// The tuned recipe (the untuned one when nothing was kept).
    pub recipe: Recipe,
    /// The float model's median milliseconds.
    pub float_ms: f64,
    /// The untuned QDQ model's.
    pub untuned_ms: f64,
    /// The tuned QDQ model's.
    pub tuned_ms: f64,
    /// The untuned model's worst output SQNR.
    pub untuned_db: f64,
    /// The tuned model's.
    pub tuned_db: f64,
    /// Every try, in order.
    pub tries: Vec<Try>,
    /// False when the tries kept something but the final timing in turn did not find the
    /// tuned model faster than the untuned one: the untuned recipe is kept then.
    pub confirmed: bool,
}

impl LatencyTuning {
    /// What was left out, one line a kept try.
    pub fn left_out(&self) -> Vec<&str> {
        self.tries
            .iter()
            .filter(|t| t.kept && self.confirmed)
            .map(|t| t.what.as_str())
            .collect()
    }

    /// One line: the speed before and after (as times and against float) and the SQNR.
    pub fn summary(&self) -> String {
        let left = self.left_out();
        let what = if !self.confirmed {
            "nothing left out (the tries kept were not faster in the final timing in turn)"
                .to_owned()
        } else if left.is_empty() {
            "nothing left out (no try was faster and accurate enough)".to_owned()
        } else {
            format!("left out {}", left.join(", "))
        };
        format!(
            "latency tuning: {what}; {:.2} -> {:.2} ms against float {:.2} ms ({:.2}x -> {:.2}x float speed), output SQNR {:.2} -> {:.2} dB",
            self.untuned_ms,
            self.tuned_ms,
            self.float_ms,
            self.float_ms / self.untuned_ms,
            self.float_ms / self.tuned_ms,
            self.untuned_db,
            self.tuned_db
        )
    }

    /// Every try, one line each.
    pub fn try_lines(&self) -> Vec<String> {
        self.tries
            .iter()
            .map(|t| {
                let ms = match (t.ms, t.against_ms) {
                    (Some(ms), Some(best)) => format!("{ms:.2} ms against the best's {best:.2} ms"),
                    (Some(ms), None) => format!("{ms:.2} ms"),
                    (None, _) => "did not run".to_owned(),
                };
                let db = t
                    .sqnr_db
                    .map_or(String::new(), |db| format!(", {db:.2} dB"));
                let verdict = match (t.kept, self.confirmed) {
                    (true, true) => "kept",
                    (true, false) => "kept, then not confirmed by the final timing",
                    (false, _) => "not kept",
                };
                format!("{}: {ms}{db}: {verdict}", t.what)
            })
            .collect()
    }
}

/// A try's exclusions, added to the best recipe so far, and what it is called.
struct Candidate {
    what: String,
    op_types: Vec<String>,
    nodes: Vec<String>,
}

/// Rounds of profiling the best model so far again after the tries, each proposing the compute
/// nodes its profile shows slower in int8 (step 2 of the module docs, on what is left).
const REFINE_ROUNDS: usize = 2;

/// The best recipe so far, its model, and its output SQNR.
struct Best {
    recipe: Recipe,
    model: Model,
    db: f64,
}

/// Times models on one sample of a source, on the evaluator's providers.
struct Clock<'a, 's> {
    eval: &'a Evaluator<'a>,
    source: &'s mut dyn BatchSource,
    options: &'a TuneOptions,
}

impl Clock<'_, '_> {
    /// `models` timed in turn (see [`measure_in_turn`]), with the kernel report of each
    /// QDQ model.
    fn in_turn<const N: usize>(&mut self, models: [&Model; N]) -> Result<[Latency; N], EvalError> {
        measure_in_turn(
            models,
            &mut *self.source,
            self.eval.runtime,
            self.eval.eps,
            1,
            self.options.warmup,
            self.options.runs,
        )
    }

    /// The compute nodes of `untuned` (a QDQ model of the evaluator's float one) that the two
    /// models' profiles, taken in turn, show slower in int8; empty when a profile cannot be
    /// had (it only proposes a try, which the clock then decides).
    fn slower_in_int8(&mut self, untuned: &Model) -> Vec<SlowerInInt8> {
        let Ok([float, int8]) = profile_in_turn(
            [self.eval.float, untuned],
            &mut *self.source,
            self.eval.runtime,
            self.eval.eps,
            self.options.runs,
        ) else {
            return Vec::new();
        };
        let quantized: Vec<String> = quantized_compute(&Graph::build(untuned))
            .into_iter()
            .collect();
        slower_in_int8(&Graph::build(self.eval.float), &float, &int8, &quantized)
    }
}

/// Tunes `recipe`'s placement for speed on `eval`'s providers, timing on one sample of
/// `source` (see the module docs). Each try is timed in turn with the best so far; the
/// figures reported are the float, untuned and tuned models timed in turn at the end.
pub fn tune_latency(
    eval: &Evaluator<'_>,
    recipe: &Recipe,
    source: &mut dyn BatchSource,
    options: &TuneOptions,
    ctx: &JobContext,
) -> Result<LatencyTuning, EvalError> {
    let mut clock = Clock {
        eval,
        source,
        options,
    };
    let untuned = quant::quantize(eval.float, Some(eval.stats), recipe).map_err(quant_error)?;
    // Only the kernels: every try is timed in turn with the best, from the untuned model on.
    let report = kernel_report(
        &untuned.model,
        &mut *clock.source,
        eval.runtime,
        eval.eps,
        1,
    )?;
    let untuned_db = eval.model_sqnr(&untuned.model)?;
    let float_compute = report.map(|k| k.float_compute).unwrap_or_default();
    let slower = clock.slower_in_int8(&untuned.model);
    let candidates = candidates(eval.float, &untuned, &float_compute, &slower);
    let mut best = Best {
        recipe: recipe.clone(),
        model: untuned.model.clone(),
        db: untuned_db,
    };
    let mut tries = Vec::new();
    let floor = untuned_db - options.max_loss_db;
    let meter = RateMeter::new("tuning latency", (candidates.len() + REFINE_ROUNDS) as u64);
    let mut done = 0;
    for candidate in candidates {
        ctx.checkpoint().map_err(|_| EvalError::Cancelled)?;
        tries.extend(try_one(&mut clock, candidate, &mut best, floor)?);
        done += 1;
        ctx.report(meter.progress(done, format!("try {done}")));
    }
    // What is left quantized now has float neighbours, with Q/DQ of their own: profiled again.
    for _ in 0..REFINE_ROUNDS {
        ctx.checkpoint().map_err(|_| EvalError::Cancelled)?;
        let slower = clock.slower_in_int8(&best.model);
        let Some(candidate) = slower_candidate(&slower, &[]) else {
            break;
        };
        let tried = try_one(&mut clock, candidate, &mut best, floor)?;
        let kept = tried.as_ref().is_some_and(|t| t.kept);
        tries.extend(tried);
        done += 1;
        ctx.report(meter.progress(done, format!("try {done}")));
        if !kept {
            break;
        }
    }
    let [float_ms, untuned_ms, best_ms] = clock
        .in_turn([eval.float, &untuned.model, &best.model])?
        .map(|latency| latency.median_ms);
    // Each try was timed against the best so far; a chain of small gains can still end
    // slower than where it started.
    let confirmed = best_ms < untuned_ms || best.recipe == *recipe;
    let (recipe, tuned_ms, tuned_db) = if confirmed {
        (best.recipe, best_ms, best.db)
    } else {
        (recipe.clone(), untuned_ms, untuned_db)
    };
    Ok(LatencyTuning {
        recipe,
        float_ms,
        untuned_ms,
        tuned_ms,
        untuned_db,
        tuned_db,
        tries,
        confirmed,
    })
}

/// One try: quantized, timed in turn with the best, scored when faster, and made the best
/// when its SQNR holds `floor`. `None` when it would change nothing (what it leaves out
/// already is).
fn try_one(
    clock: &mut Clock<'_, '_>,
    candidate: Candidate,
    best: &mut Best,
    floor: f64,
) -> Result<Option<Try>, EvalError> {
    let eval = clock.eval;
    let tried = apply(&candidate, &best.recipe);
    let mut t = Try {
        what: candidate.what,
        ms: None,
        against_ms: None,
        sqnr_db: None,
        kept: false,
    };
    let faster = |ms: f64, than: f64| ms < than * (1.0 - MIN_GAIN);
    if tried == best.recipe {
        return Ok(None);
    }
    let Ok(q) = quant::quantize(eval.float, Some(eval.stats), &tried) else {
        return Ok(Some(t));
    };
    let [best_ms, ms] = clock
        .in_turn([&best.model, &q.model])?
        .map(|latency| latency.median_ms);
    (t.ms, t.against_ms) = (Some(ms), Some(best_ms));
    if !faster(ms, best_ms) {
        return Ok(Some(t));
    }
    let db = eval.model_sqnr(&q.model)?;
    t.sqnr_db = Some(db);
    if db >= floor {
        t.kept = true;
        *best = Best {
            recipe: tried,
            model: q.model,
            db,
        };
    }
    Ok(Some(t))
}

/// `candidate`'s exclusions added to `recipe` (the best so far).
fn apply(candidate: &Candidate, recipe: &Recipe) -> Recipe {
    let mut tried = recipe.clone();
    for (list, added) in [
        (&mut tried.op_types_to_exclude, &candidate.op_types),
        (&mut tried.nodes_to_exclude, &candidate.nodes),
    ] {
        for item in added {
            if !list.contains(item) {
                list.push(item.clone());
            }
        }
    }
    tried
}

/// The try that leaves out the compute nodes of `slower` (but those of `skip`), if any.
fn slower_candidate(slower: &[SlowerInInt8], skip: &[String]) -> Option<Candidate> {
    let slower: Vec<&SlowerInInt8> = slower.iter().filter(|s| !skip.contains(&s.node)).collect();
    if slower.is_empty() {
        return None;
    }
    let (int8, float) = slower
        .iter()
        .fold((0.0, 0.0), |(i, f), s| (i + s.int8_us, f + s.float_us));
    Some(Candidate {
        what: format!(
            "the {} Conv/MatMul/Gemm slower in int8 with the Q/DQ they bring ({int8:.0} us against {float:.0} us in float, from the profiles)",
            slower.len()
        ),
        op_types: Vec::new(),
        nodes: slower.iter().map(|s| exact(&s.node)).collect(),
    })
}

/// The tries, in order (see the module docs): each holds only the exclusions it adds.
fn candidates(
    float: &Model,
    untuned: &quant::Quantized,
    float_compute: &[String],
    slower: &[SlowerInInt8],
) -> Vec<Candidate> {
    let mut list = Vec::new();
    if !float_compute.is_empty() {
        list.push(Candidate {
            what: format!(
                "the {} quantized Conv/MatMul/Gemm that ran in float",
                float_compute.len()
            ),
            op_types: Vec::new(),
            nodes: float_compute.iter().map(|n| exact(n)).collect(),
        });
    }
    list.extend(slower_candidate(slower, float_compute));
    let mut others: Vec<(String, usize)> = untuned
        .quantized_by_op_type(&Graph::build(float))
        .into_iter()
        .filter(|(op, _)| !crate::model::ops::is_compute(op))
        .collect();
    others.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    if others.len() > 1 {
        list.push(Candidate {
            what: format!(
                "every op type but Conv/MatMul/Gemm ({})",
                others
                    .iter()
                    .map(|(op, _)| op.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            op_types: others.iter().map(|(op, _)| op.clone()).collect(),
            nodes: Vec::new(),
        });
    }
    for (op, count) in others {
        list.push(Candidate {
            what: format!("op type {op} ({count} node(s))"),
            op_types: vec![op],
            nodes: Vec::new(),
        });
    }
    list
}
