//! The scan's variants run from a cut ([`crate::eval::search::switchable::prefix`]): each variant
//! shares everything before its first differing node with the recipe or with the float
//! model, so the values crossing a cut are taken once per batch from that base's run and
//! only the nodes after the cut run per variant, in sessions of the model cut there.
//!
//! Each suffix is specialized to the variants it runs: an `If` whose gates they all set
//! alike is replaced by the branch it selects. The cuts are chosen from the scan's own
//! measured costs ([`best_cuts`]): for each base, a cut costs a session of its suffix per
//! worker and a run of the nodes before it, and a variant runs the nodes between its cut
//! and its own first difference for nothing. A small model whose runs cost less than its
//! sessions takes none (the bundled sample).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use ort::value::DynValue;

use crate::eval::compare::reference::Reference;
use crate::eval::compare::{EvalError, OutputMetrics};
use crate::eval::search::switchable::Switchable;
use crate::eval::search::switchable::prefix::{self, Layout};
use crate::eval::search::switched_scan::{GatedRuns, SessionPool, on_workers};
use crate::model::{DataType, TensorArray};

/// How many cuts a scan's runs take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Cuts {
    /// As many as make the runs cheapest by the scan's measured costs ([`best_cuts`]), none
    /// under [`MIN_VARIANTS`] variants.
    #[default]
    ByCost,
    /// Up to this many, whatever they cost (0: every variant runs the whole model).
    AtMost(usize),
}

/// Fewest distinct variants for cuts to pay their sessions.
const MIN_VARIANTS: usize = 16;

/// The bases a cut's variants read their values from (the recipe, the float model).
const BASES: f64 = 2.0;

/// Most cuts a scan takes.
const MAX_CUTS: usize = 32;

/// Variants a suffix is specialized to at most: each `If` its variants do not all set
/// alike stays in it and runs on every run (with the node it holds cut off from its
/// neighbours' fusions), and a suffix's sessions cost little to open once few `If`s are
/// left. PP-OCR rec (cuts after 39 % of the nodes): its variants ran 15-25 % faster on parts
/// of 8 than on one suffix for all of a cut (cut 171: 22.5 s against 26.4 s; cut 233: 9.4 s
/// against 12.3 s); the earlier cuts, whose runs are most of the model, about alike.
const PART: usize = 8;

/// Share of the available memory the values crossing one cut may take (every batch's, for
/// both bases); a cut needing more runs its variants on the whole model.
const MEMORY_SHARE: u64 = 4;

/// The score of one variant's gates: on the whole model (`None`) or on a suffix.
pub(super) type Score<'a> = dyn Fn(&[bool], Option<Feed>) -> Result<f64, EvalError> + Sync + 'a;

/// A suffix's sessions and what they are fed: the values crossing its cut on every batch
/// (of the variant's base), and the switches it reads.
#[derive(Clone, Copy)]
pub(super) struct Feed<'a> {
    pool: &'a SessionPool,
    values: &'a [Vec<(String, DynValue)>],
    switches: &'a [usize],
    /// What it is fed for [`prefix::OPAQUE`], when it reads it.
    opaque: Option<&'a (String, TensorArray)>,
}

impl Feed<'_> {
    /// The output metrics of the variant `gates` select, run on the suffix over `data`.
    pub fn metrics(
        &self,
        data: &Reference,
        gates: &[bool],
        cancel: &crate::jobs::CancelToken,
    ) -> Result<Vec<OutputMetrics>, EvalError> {
        let all = Switchable::gate_inputs(gates);
        let mut read: Vec<(String, TensorArray)> = self
            .switches
            .iter()
            .filter_map(|&s| all.get(s).cloned())
            .collect();
        read.extend(self.opaque.cloned());
        self.pool
            .with(|session| data.compare_fed(session, self.values, &read, cancel))?
    }
}

/// What a scan's runs cost, measured on it: wall seconds to open the sessions of a suffix
/// specialized to a few variants (one per worker, side by side; taken on the whole model
/// fixed to the recipe, the longest suffix) and one worker's seconds for a run of the whole
/// model over the data.
#[derive(Debug, Clone, Copy)]
pub(super) struct Costs {
    /// Seconds to open a specialized suffix's sessions from the start.
    pub open: f64,
    /// One worker's seconds for one run over the data.
    pub run: f64,
    /// Sessions side by side.
    pub workers: usize,
}

/// Estimated wall seconds of the scan's runs from `cuts` (ascending), where each variant
/// runs from the furthest cut at or before its `shared` place and a part of the model costs
/// its share by `layout` (a suffix's sessions, a run). With cuts, every variant also takes
/// its share of its suffix's sessions ([`PART`] variants to a suffix), and each cut adds,
/// for each base, the session and the run of the nodes before it that give its values and
/// about half a suffix more. Without, the variants run on the whole model's sessions,
/// already open.
fn estimate(cuts: &[usize], shared: &[usize], layout: &Layout, costs: Costs) -> f64 {
    let workers = costs.workers.max(1) as f64;
    let part_share = if cuts.is_empty() {
        0.0
    } else {
        costs.open / PART as f64
    };
    let runs: f64 = shared
        .iter()
        .map(|&s| layout.after(prefix::cut_of(cuts, s)))
        .sum::<f64>()
        * (costs.run / workers + part_share);
    let per_cut: f64 = cuts
        .iter()
        .map(|&c| {
            let (after, before) = (layout.after(c), 1.0 - layout.after(c));
            BASES * (costs.open * (before + after / 2.0) + costs.run * before / workers)
        })
        .sum();
    runs + per_cut
}

/// The cuts that make `shared` (each variant's furthest usable place) cheapest to run by
/// [`estimate`], added one at a time (each the place that saves most) while that saves
/// time, up to [`MAX_CUTS`]: none when no cut beats the whole model.
fn best_cuts(shared: &[usize], layout: &Layout, costs: Costs) -> Vec<usize> {
    let mut places: Vec<usize> = shared.iter().copied().filter(|&s| s > 0).collect();
    places.sort_unstable();
    places.dedup();
    let mut cuts: Vec<usize> = Vec::new();
    let mut best = estimate(&cuts, shared, layout, costs);
    while cuts.len() < MAX_CUTS {
        let tried = places
            .iter()
            .filter(|p| cuts.binary_search(p).is_err())
            .map(|&p| {
                let mut with = cuts.clone();
                let at = with.partition_point(|&c| c < p);
                with.insert(at, p);
                (estimate(&with, shared, layout, costs), with)
            })
            .min_by(|a, b| a.0.total_cmp(&b.0));
        match tried {
            Some((seconds, with)) if seconds < best => {
                best = seconds;
                cuts = with;
            }
            _ => break,
        }
    }
    cuts
}

/// Each of `distinct` gate settings' furthest place shared with one of `bases`.
fn shared_places(layout: &Layout, bases: &[Vec<bool>], distinct: &[&[bool]]) -> Vec<usize> {
    distinct
        .iter()
        .map(|gates| {
            let places = bases.iter().map(|base| layout.shared_until(gates, base));
            places.max().unwrap_or(0)
        })
        .collect()
}

/// Where each of `distinct` gate settings runs from: the furthest of `cuts` it shares
/// with one of `bases`, and that base (its index). When both bases reach the same cut, the
/// variant takes the one it differs from in fewer switches: the suffix is specialized to
/// the gates all its variants set alike, and one variant differing from its base all
/// over leaves every `If` of the suffix in place (PP-OCR rec's first unit excluded differs
/// from the float model in 714 switches, from the recipe in 2; it took the float model,
/// and the start's variants ran 1310 `If`s each).
fn planned_runs(
    layout: &Layout,
    bases: &[Vec<bool>],
    distinct: &[&[bool]],
    cuts: &[usize],
) -> Vec<(usize, usize)> {
    let differing = |a: &[bool], b: &[bool]| a.iter().zip(b).filter(|(x, y)| x != y).count();
    distinct
        .iter()
        .map(|gates| {
            let runs = bases.iter().enumerate().map(|(b, base)| {
                let cut = prefix::cut_of(cuts, layout.shared_until(gates, base));
                (cut, std::cmp::Reverse(differing(gates, base)), b)
            });
            runs.max().map_or((0, 0), |(cut, _, b)| (cut, b))
        })
        .collect()
}

/// The scores of `distinct` gate settings, by `score`, each run from the furthest cut it
/// shares with the recipe or float model where cuts pay ([`best_cuts`]).
pub(super) fn scores(
    runs: &GatedRuns,
    distinct: &[&[bool]],
    score: &Score,
) -> Result<Vec<f64>, EvalError> {
    let switchable = runs.switchable;
    let bases: Vec<Vec<bool>> = std::iter::once(switchable.recipe_gates())
        .chain(switchable.float_gates())
        .collect();
    let layout = Layout::of(switchable.model());
    let places = shared_places(&layout, &bases, distinct);
    let cuts = cuts_for(runs, &layout, &places, &bases[0])?;
    let planned = planned_runs(&layout, &bases, distinct, &cuts);
    let mut by_cut: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (variant, (cut, _)) in planned.iter().enumerate() {
        by_cut.entry(*cut).or_default().push(variant);
    }
    let model = switchable.model();
    // With cuts taken, the variants before the first run from the start too, on a model
    // specialized to them (no values fed).
    let starts = cuts
        .first()
        .map(|_| 0)
        .into_iter()
        .chain(cuts.iter().copied());
    let crossing: BTreeMap<usize, Vec<String>> = starts
        .map(|cut| (cut, prefix::crossing(model, cut)))
        .collect();
    runs.cuts_taken.store(0, Ordering::Relaxed);
    if !cuts.is_empty() {
        runs.close_whole();
    }
    let mut scores = vec![f64::NAN; distinct.len()];
    for (cut, members) in by_cut {
        let group = Group {
            runs,
            distinct,
            planned: &planned,
            members: &members,
            bases: &bases,
        };
        let started = std::time::Instant::now();
        let got = match crossing.get(&cut) {
            Some(names) => group.run_cut(Cut { cut, names }, score)?,
            None => group.whole(score)?,
        };
        tracing::debug!(
            "cut {cut}: {} variants in {:.1} s",
            members.len(),
            started.elapsed().as_secs_f64()
        );
        for (variant, value) in members.iter().zip(got) {
            scores[*variant] = value;
        }
    }
    Ok(scores)
}

/// The cuts `runs` takes for variants whose furthest shared places are `places`, from its
/// measured costs (a run of the `recipe` gates timed now) unless set otherwise: none for
/// fewer than [`MIN_VARIANTS`].
fn cuts_for(
    runs: &GatedRuns,
    layout: &Layout,
    places: &[usize],
    recipe: &[bool],
) -> Result<Vec<usize>, EvalError> {
    let cuts = match runs.cuts {
        Cuts::AtMost(most) => return Ok(prefix::chosen_cuts(places, most)),
        Cuts::ByCost if places.len() < MIN_VARIANTS => return Ok(Vec::new()),
        Cuts::ByCost => {
            let costs = runs.costs(recipe)?;
            let cuts = best_cuts(places, layout, costs);
            tracing::debug!(
                "{costs:?}: cuts {cuts:?} of {} nodes, estimated {:.1} s against {:.1} s whole",
                layout.nodes(),
                estimate(&cuts, places, layout, costs),
                estimate(&[], places, layout, costs),
            );
            cuts
        }
    };
    Ok(cuts)
}

/// Whether the memory available now holds `need` more bytes (the whole model's sessions
/// are closed while the variants run from cuts, and open again for a variant that falls
/// back on them).
pub(super) fn memory_holds(need: u64) -> bool {
    crate::util::available_memory().is_none_or(|available| need <= available)
}

/// A cut and the values crossing it.
#[derive(Clone, Copy)]
struct Cut<'a> {
    cut: usize,
    names: &'a [String],
}

/// The variants that run from one cut.
struct Group<'a> {
    runs: &'a GatedRuns<'a>,
    distinct: &'a [&'a [bool]],
    planned: &'a [(usize, usize)],
    members: &'a [usize],
    bases: &'a [Vec<bool>],
}

impl Group<'_> {
    /// The members' scores on the whole model.
    fn whole(&self, score: &Score) -> Result<Vec<f64>, EvalError> {
        self.each(self.members, &|gates| score(gates, None))
    }

    /// `run` on every one of `members`, in parallel over the runs' workers.
    fn each(
        &self,
        members: &[usize],
        run: &(dyn Fn(&[bool]) -> Result<f64, EvalError> + Sync),
    ) -> Result<Vec<f64>, EvalError> {
        on_workers(self.runs.workers, members, |&v| run(self.distinct[v]))
    }

    /// The members' scores on the model cut at `at`, fed each base's values there;
    /// the whole model's when those values would take too much memory.
    fn run_cut(&self, at: Cut, score: &Score) -> Result<Vec<f64>, EvalError> {
        let mut scores = BTreeMap::new();
        let mut fed = false;
        for b in 0..self.bases.len() {
            let members: Vec<usize> = self
                .members
                .iter()
                .copied()
                .filter(|&v| self.planned[v].1 == b)
                .collect();
            if members.is_empty() {
                continue;
            }
            let (got, from_cut) = self.run_cut_on(&at, b, &members, score)?;
            fed |= from_cut;
            scores.extend(members.into_iter().zip(got));
        }
        if fed && at.cut > 0 {
            self.runs.cuts_taken.fetch_add(1, Ordering::Relaxed);
        }
        Ok(self.members.iter().map(|v| scores[v]).collect())
    }

    /// The scores of `members` (variants sharing the cut with base `b`) on the model cut
    /// there, fed the base's values, [`PART`] of them at a time on a suffix specialized to
    /// them; on the whole model when those values would take too much memory or cannot be
    /// declared, or a suffix cannot run (the scan then costs what it did without cuts, and
    /// says why in the debug log). True beside the scores when the values were fed.
    fn run_cut_on(
        &self,
        at: &Cut,
        b: usize,
        members: &[usize],
        score: &Score,
    ) -> Result<(Vec<f64>, bool), EvalError> {
        let whole = |members: &[usize]| self.each(members, &|gates| score(gates, None));
        let Some(captured) = self.captured(at, b)? else {
            return Ok((whole(members)?, false));
        };
        let mut scores = Vec::with_capacity(members.len());
        for part in members.chunks(PART) {
            let suffix = match self.suffix(at, &captured, part) {
                Ok(suffix) => suffix,
                Err(EvalError::Cancelled) => return Err(EvalError::Cancelled),
                Err(e) => {
                    tracing::debug!(
                        "cut {}: its suffix cannot run ({e}), the whole model runs",
                        at.cut
                    );
                    None
                }
            };
            let Some(suffix) = suffix else {
                scores.extend(whole(part)?);
                continue;
            };
            let feed = Feed {
                pool: &suffix.pool,
                values: &captured.values,
                switches: &suffix.switches,
                opaque: suffix.opaque.as_ref(),
            };
            scores.extend(self.each(part, &|g| score(g, Some(feed)))?);
        }
        Ok((scores, true))
    }

    /// The values crossing the cut `at` on every batch of base `b`'s run, read off the
    /// nodes before the cut ([`prefix::head`]), and how a suffix declares them; `None` when
    /// they would take too much memory or cannot be declared or read.
    fn captured(&self, at: &Cut, b: usize) -> Result<Option<Captured>, EvalError> {
        let Cut { cut, names } = *at;
        let started = std::time::Instant::now();
        let data = self.runs.data();
        let values = match names.is_empty() {
            true => (0..data.batches()).map(|_| Vec::new()).collect(),
            false => match self.head_values(cut, b, names) {
                Ok(Some(values)) => values,
                Ok(None) => return Ok(None),
                Err(EvalError::Cancelled) => return Err(EvalError::Cancelled),
                Err(e) => {
                    tracing::debug!(
                        "cut {cut}: its values cannot be read ({e}), the whole model runs"
                    );
                    return Ok(None);
                }
            },
        };
        let bytes: u64 = values.iter().flatten().map(|(_, v)| value_bytes(v)).sum();
        let budget = crate::util::available_memory().map_or(u64::MAX, |m| m / MEMORY_SHARE);
        let Some(fed) = fed_values(names, values.iter()).filter(|_| bytes <= budget) else {
            tracing::debug!(
                "cut {cut}: its values ({bytes} bytes) are not fed, the whole model runs"
            );
            return Ok(None);
        };
        tracing::debug!(
            "cut {cut}, base {b}: {} values ({bytes} bytes) captured in {:.1} s",
            names.len(),
            started.elapsed().as_secs_f64()
        );
        Ok(Some(Captured { values, fed }))
    }

    /// `names`' values on every batch, from a session of base `b`'s nodes before `cut`;
    /// `None` when that session would not fit in memory.
    fn head_values(
        &self,
        cut: usize,
        b: usize,
        names: &[String],
    ) -> Result<Option<BatchValues>, EvalError> {
        let base = &self.bases[b];
        let head = prefix::head(self.runs.switchable.model(), cut, names, &|s| {
            base.get(s).copied()
        });
        let need = self.runs.sessions_bytes(head.initializer_bytes(), 1);
        if !memory_holds(need) {
            tracing::debug!(
                "cut {cut}: the session reading its values ({need} bytes) does not fit, the whole model runs"
            );
            return Ok(None);
        }
        let extra: Vec<_> = prefix::opaque_input(&head).into_iter().collect();
        let probe = self.runs.probe(&head)?;
        let data = self.runs.data();
        Ok(Some(probe.with(|s| data.batch_values(s, &extra, names))??))
    }

    /// The suffix from `at` specialized to `members`: its sessions and the switches they
    /// read; `None` when its sessions would not fit in memory.
    fn suffix(
        &self,
        at: &Cut,
        captured: &Captured,
        members: &[usize],
    ) -> Result<Option<Suffix>, EvalError> {
        let started = std::time::Instant::now();
        let fixed = |switch: usize| {
            let mut each = members
                .iter()
                .map(|&v| self.distinct[v].get(switch).copied());
            let first = each.next().flatten()?;
            each.all(|g| g == Some(first)).then_some(first)
        };
        let model = prefix::suffix(self.runs.switchable.model(), at.cut, &captured.fed, &fixed);
        let need = self
            .runs
            .sessions_bytes(model.nested_initializer_bytes(), self.runs.workers);
        if !memory_holds(need) {
            tracing::debug!(
                "cut {}: its sessions ({need} bytes) do not fit beside the whole model's, the whole model runs",
                at.cut
            );
            return Ok(None);
        }
        let switches = prefix::gated_switches(&model);
        let pool = self.runs.open_pool(&model)?;
        tracing::debug!(
            "cut {}: {} sessions of {} nodes ({} gates) for {} variants opened in {:.2} s",
            at.cut,
            self.runs.workers,
            model.graph().node.len(),
            switches.len(),
            members.len(),
            started.elapsed().as_secs_f64()
        );
        Ok(Some(Suffix {
            pool,
            switches,
            opaque: prefix::opaque_input(&model),
        }))
    }
}

/// Values a model wrote, per batch of the data: name and value.
type BatchValues = Vec<Vec<(String, DynValue)>>;

/// The values crossing a cut on every batch of one base's run, and how a suffix declares
/// them.
struct Captured {
    values: BatchValues,
    fed: Vec<prefix::Fed>,
}

/// A suffix ready to run: its sessions, the switches it reads, and what it is fed for
/// [`prefix::OPAQUE`] when it reads it.
struct Suffix {
    pool: SessionPool,
    switches: Vec<usize>,
    opaque: Option<(String, TensorArray)>,
}

/// Bytes a tensor value holds.
fn value_bytes(value: &DynValue) -> u64 {
    match value.dtype() {
        ort::value::ValueType::Tensor { ty, shape, .. } => {
            let bits = element_type(*ty).map_or(64, |d| d.bits()) as u64;
            (shape.num_elements() as u64 * bits).div_ceil(8)
        }
        _ => 0,
    }
}

/// The element type of an ONNX Runtime tensor as the model's.
fn element_type(ty: ort::value::TensorElementType) -> Option<DataType> {
    DataType::from_onnx(ort::sys::ONNXTensorElementDataType::from(ty) as i32).ok()
}

/// How each of `names` is declared to a suffix: its element type and the shape every
/// captured batch (of every base) agrees with; `None` when a value is not a tensor of a
/// type the model knows, or its rank or type differs between batches.
fn fed_values<'a>(
    names: &[String],
    batches: impl Iterator<Item = &'a Vec<(String, DynValue)>> + Clone,
) -> Option<Vec<prefix::Fed>> {
    names
        .iter()
        .enumerate()
        .map(|(at, name)| {
            let mut types = batches.clone().map(|b| match b.get(at)?.1.dtype() {
                ort::value::ValueType::Tensor { ty, shape, .. } => {
                    let dims: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
                    Some((element_type(*ty)?, dims))
                }
                _ => None,
            });
            let first = types.next()??;
            let rest: Vec<(DataType, Vec<usize>)> = types.collect::<Option<_>>()?;
            if rest.iter().any(|(d, _)| *d != first.0) {
                return None;
            }
            let shapes =
                std::iter::once(first.1.as_slice()).chain(rest.iter().map(|(_, s)| s.as_slice()));
            // A scalar is what a branch writes for a value its form does not compute (the
            // bases' placeholder): the forms after the cut that read the real value must
            // still pass ONNX's shape inference, so its shape is left open.
            let placeholder = std::iter::once(&first.1)
                .chain(rest.iter().map(|(_, s)| s))
                .any(Vec::is_empty);
            Some(prefix::Fed {
                name: name.clone(),
                dtype: first.0,
                shape: prefix::agreed_shape(shapes).filter(|_| !placeholder),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(nodes: usize) -> Layout {
        let mut builder = crate::model::builder::ModelBuilder::new(17);
        builder.input("x0", DataType::Float32, &[1]).output(
            &format!("x{nodes}"),
            DataType::Float32,
            &[1],
        );
        for n in 0..nodes {
            builder.node("Relu", &[&format!("x{n}")], &[&format!("x{}", n + 1)]);
        }
        Layout::of(&builder.build())
    }

    #[test]
    fn a_variant_reaching_the_same_cut_from_both_bases_runs_from_the_nearer_one() {
        let layout = layout(10);
        let bases = vec![vec![false; 4], vec![true; 4]];
        let near_recipe = [true, false, false, false];
        let near_float = [true, true, true, false];
        let distinct: Vec<&[bool]> = vec![&near_recipe, &near_float];
        let planned = planned_runs(&layout, &bases, &distinct, &[]);
        assert_eq!(planned, vec![(0, 0), (0, 1)]);
    }

    #[test]
    fn cuts_are_taken_where_the_runs_they_save_outweigh_their_sessions() {
        let layout = layout(100);
        // 200 variants spread evenly over the nodes.
        let shared: Vec<usize> = (0..200).map(|v| v / 2).collect();
        let dear_runs = Costs {
            open: 1.0,
            run: 1.0,
            workers: 2,
        };
        let cuts = best_cuts(&shared, &layout, dear_runs);
        assert!(cuts.len() >= 4, "{cuts:?}");
        assert!(
            estimate(&cuts, &shared, &layout, dear_runs)
                < estimate(&[], &shared, &layout, dear_runs)
        );
        // Runs that cost little against a session: the whole model.
        let cheap_runs = Costs {
            open: 1.0,
            run: 0.01,
            workers: 2,
        };
        assert!(best_cuts(&shared, &layout, cheap_runs).is_empty());
    }
}
