//! One model for a whole sensitivity scan: every node of the float graph as each variant of
//! the recipe computes it (with its input DQs and output Qs, or in float), each node choosing
//! at run time, from boolean gates fed as graph inputs (one scalar per switch), which of those
//! it runs. A scan is then one session and two runs per candidate instead of a quantization
//! and a session per variant.
//!
//! The variants are quantized by the real quantizer and read back ([`units`]), so a gate
//! setting reproduces its variant exactly: the switchable model's outputs equal the variant's
//! bit for bit with graph optimizations off, and with them on the units fuse into the integer
//! kernels the variant's own model runs (`tests/sensitivity.rs`). Recipes whose
//! quantization changes the graph's structure (int4 MatMulNBits, SmoothQuant's scaling
//! nodes) or models with subgraphs are [`NotSwitchable`]: the scan then quantizes each
//! variant on its own.

mod assemble;
mod biases;
pub mod prefix;
mod units;

use std::collections::{BTreeMap, HashMap};

use rayon::prelude::*;

use units::{Base, Form, FormKey, Slot, VariantForms};

use crate::calib::stats::CalibrationStats;
use crate::jobs::{JobContext, RateMeter};
use crate::model::{Graph, Model, TensorArray};
use crate::quant::{self, Prepared, QuantError};
use crate::recipe::{QuantMode, Recipe};
use crate::runtime::{EpSpec, Optimization};

/// Why a set of recipes cannot share one switchable model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotSwitchable(pub String);

/// What stops building a switchable model.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The variants cannot share one model (the scan quantizes each on its own instead).
    #[error(transparent)]
    NotSwitchable(#[from] NotSwitchable),
    /// A variant could not be quantized.
    #[error(transparent)]
    Quant(#[from] QuantError),
    /// The user cancelled.
    #[error("cancelled")]
    Cancelled,
}

/// How the switchable model selects each slot's form by its gates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Gating {
    /// A nest of `If` nodes whose branches hold one form each: only the chosen form runs, so
    /// a run costs what the variant's own model costs, its fused integer kernels included.
    /// For the CPU.
    #[default]
    Branches,
    /// Every form runs in the main graph and `Where` nodes pick the values of the chosen
    /// ones. For accelerators: an `If` costs a host round trip there (about 1 ms each on an
    /// H100 with the CUDA provider, measured on the bundled sample, which made a scan slower
    /// than on the CPU), while running every form costs little beside it: a pass of the
    /// sample's 32 samples joined took 0.031 s against 0.80 s with `If`s. The units do not
    /// fuse into integer kernels this way, which the CUDA provider has none of anyway; its
    /// int32 biases are written dequantized ([`biases`]).
    Select,
}

impl Gating {
    /// The gating for sessions on `eps` (in the order they are tried): [`Gating::Select`]
    /// when any is an accelerator, since the nodes it takes run there.
    pub fn for_providers(eps: &[EpSpec]) -> Gating {
        if eps.iter().any(|ep| *ep != EpSpec::Cpu) {
            Gating::Select
        } else {
            Gating::Branches
        }
    }
}

/// What one slot computes by default (the first recipe's form) and the other forms the
/// variants compute there, each with its switch.
#[derive(Debug, Clone, Default)]
struct Choices {
    default: FormKey,
    alternatives: Vec<(FormKey, usize)>,
    /// A switch on exactly when one of the alternatives' is: the slot's outermost `If` tests
    /// it ([`Gating::Branches`], slots of two alternatives or more), so a run that keeps the
    /// slot's default passes one `If` there rather than one per alternative.
    any: Option<usize>,
}

/// The switchable model of a set of recipe variants, and the gates that select each.
pub struct Switchable {
    model: Model,
    /// The float model as the quantizer prepared it, opset raised as the variants' (what new
    /// recipes are read against).
    base: Base,
    /// What the float model computes at every slot (a recipe that quantizes nothing).
    float_keys: BTreeMap<Slot, FormKey>,
    choices: BTreeMap<Slot, Choices>,
    switches: usize,
    variants: Vec<Vec<bool>>,
    /// Per variant: whether it quantizes nothing (the float model).
    floats: Vec<bool>,
    forms: usize,
    /// The graph optimizations the variants' own models are run with.
    optimization: Optimization,
    gating: Gating,
}

impl std::fmt::Debug for Switchable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Switchable")
            .field("switches", &self.switches)
            .field("variants", &self.variants.len())
            .field("forms", &self.forms)
            .finish()
    }
}

/// Refuses recipes whose quantization adds or replaces nodes beyond Q/DQ.
fn check_recipe(recipe: &Recipe) -> Result<(), NotSwitchable> {
    if recipe.mode == QuantMode::Int4 {
        return Err(NotSwitchable(
            "int4 weight-only quantization replaces nodes (MatMulNBits)".into(),
        ));
    }
    if recipe.smoothquant {
        return Err(NotSwitchable(
            "SmoothQuant adds scaling nodes and changes weights".into(),
        ));
    }
    Ok(())
}

/// The quantized model of `recipe`, or `None` when it quantizes nothing (the float model).
fn quantized(
    float: &Model,
    stats: &CalibrationStats,
    recipe: &Recipe,
) -> Result<Option<Model>, QuantError> {
    match quant::quantize(float, Some(stats), recipe) {
        Ok(q) => Ok(Some(q.model)),
        Err(QuantError::NothingToQuantize { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The default-domain opset of a model.
fn opset_of(model: &Model) -> i64 {
    quant::opset::default_opset(model.proto()).unwrap_or(1)
}

/// The float model as the quantizer prepares it for `recipe`, raised to `opset` and with the
/// opset imports and IR version of `like` (the first variant).
fn prepared_base(
    float: &Model,
    stats: &CalibrationStats,
    recipe: &Recipe,
    like: Option<&Model>,
) -> Result<Model, BuildError> {
    let mut prepared =
        Prepared::new(float, &recipe.prepared_options()).map_err(QuantError::from)?;
    if recipe.preprocessing.write_observed_shapes {
        prepared.record_observed_shapes(stats);
    }
    let Prepared {
        mut model, graph, ..
    } = prepared;
    if let Some(like) = like {
        let rank = |t: &str| stats.tensors.get(t)?.shapes.first().map(Vec::len);
        quant::opset::raise(model.proto_mut(), &graph, opset_of(like), &rank)?;
        let proto = model.proto_mut();
        proto.opset_import = like.proto().opset_import.clone();
        proto.ir_version = proto.ir_version.max(like.proto().ir_version);
    }
    Ok(model)
}

impl Switchable {
    /// Quantizes each of `recipes` (variants of the first: other nodes or op types selected)
    /// and builds the model that runs any of them by its gates, selecting forms as `gating`
    /// says. Progress per variant; cancellable between variants.
    pub fn build(
        float: &Model,
        stats: &CalibrationStats,
        recipes: &[Recipe],
        gating: Gating,
        ctx: &JobContext,
    ) -> Result<Switchable, BuildError> {
        let first = recipes
            .first()
            .ok_or_else(|| NotSwitchable("no recipe to switch between".into()))?;
        for recipe in recipes {
            check_recipe(recipe)?;
        }
        if Graph::build(float)
            .nodes()
            .iter()
            .any(|n| !n.subgraphs.is_empty())
        {
            return Err(NotSwitchable("the model has subgraphs (If, Loop, Scan)".into()).into());
        }
        let first_model = quantized(float, stats, first)?;
        let optimization = first_model.as_ref().map_or(Optimization::All, |m| {
            quant::cpu_session_options(m).optimization
        });
        let base_model = prepared_base(float, stats, first, first_model.as_ref())?;
        let base = Base::new(&base_model);
        let float_forms = units::read(&base, &base_model)?;
        let float_keys = float_forms
            .iter()
            .map(|(slot, (key, _))| (*slot, key.clone()))
            .collect();
        let meter = RateMeter::new("building the switchable model", recipes.len() as u64);
        let opset = opset_of(&base_model);
        let read = |model: Option<Model>| match model {
            None => Ok(float_forms.clone()),
            Some(model) => variant_forms(&base, &model, opset),
        };
        let mut table = FormTable::default();
        let mut read_variants = Vec::with_capacity(recipes.len());
        let mut floats = Vec::with_capacity(recipes.len());
        floats.push(first_model.is_none());
        read_variants.push(table.intern(read(first_model)?));
        // The other variants are quantized and read a few at a time in parallel, then their
        // forms merged: memory holds one chunk's quantized models at most.
        let chunk = rayon::current_num_threads().max(1) * 2;
        for recipes in recipes[1..].chunks(chunk) {
            ctx.checkpoint().map_err(|_| BuildError::Cancelled)?;
            let read: Vec<Result<(bool, VariantForms), BuildError>> = recipes
                .par_iter()
                .map(|recipe| {
                    let model = quantized(float, stats, recipe)?;
                    Ok((model.is_none(), read(model)?))
                })
                .collect();
            for variant in read {
                let (float, read) = variant?;
                floats.push(float);
                read_variants.push(table.intern(read));
            }
            let done = read_variants.len() as u64;
            ctx.report(meter.progress(done, format!("variant {done}")));
        }
        let (mut choices, mut switches) = choices(&read_variants);
        if gating == Gating::Branches {
            switches = add_any_switches(&mut choices, switches);
        }
        let variants = read_variants
            .iter()
            .map(|v| gates(&choices, switches, v).unwrap_or_default())
            .collect();
        let model = assemble::assemble(base_model, &choices, &table.forms, switches, gating);
        Ok(Switchable {
            model,
            base,
            float_keys,
            choices,
            switches,
            variants,
            floats,
            forms: table.forms.len(),
            optimization,
            gating,
        })
    }

    /// The switchable model (float inputs plus one boolean input per switch).
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Bytes of the model's initializers, those its branches hold included.
    pub fn initializer_bytes(&self) -> u64 {
        self.model.nested_initializer_bytes()
    }

    /// The graph optimizations to run it with: those of the variants' own models, so that
    /// its units fuse into the same integer kernels.
    pub fn optimization(&self) -> Optimization {
        self.optimization
    }

    /// How the model selects its forms.
    pub fn gating(&self) -> Gating {
        self.gating
    }

    /// How many switches (gate inputs) the model has.
    pub fn switches(&self) -> usize {
        self.switches
    }

    /// The gates that run the `variant`-th recipe given to [`Switchable::build`].
    pub fn gates(&self, variant: usize) -> Option<&[bool]> {
        self.variants.get(variant).map(Vec::as_slice)
    }

    /// How many recipes it was built from.
    pub fn variants(&self) -> usize {
        self.variants.len()
    }

    /// Whether the `variant`-th recipe quantizes nothing (its gates select the float model).
    pub fn is_float(&self, variant: usize) -> bool {
        self.floats.get(variant).copied().unwrap_or(false)
    }

    /// The gates that run the first recipe given to [`Switchable::build`] (every form its
    /// default).
    pub fn recipe_gates(&self) -> Vec<bool> {
        vec![false; self.switches]
    }

    /// The gates that run the float model, when every slot's float form is among the
    /// choices (a scan's variants that quantize one node each bring them all).
    pub fn float_gates(&self) -> Option<Vec<bool>> {
        gates(&self.choices, self.switches, &self.float_keys)
    }

    /// The gates as session inputs: one boolean scalar per switch.
    pub fn gate_inputs(gates: &[bool]) -> Vec<(String, TensorArray)> {
        gates
            .iter()
            .enumerate()
            .map(|(switch, &on)| {
                let gate = TensorArray::Bool(ndarray::arr0(on).into_dyn());
                (assemble::gate_name(switch), gate)
            })
            .collect()
    }

    /// The gates that run `recipe` (quantized and read here), or `None` when it reads some
    /// chain the model does not hold (a scale that only that combination gives).
    pub fn gates_for(
        &self,
        float: &Model,
        stats: &CalibrationStats,
        recipe: &Recipe,
    ) -> Result<Option<Vec<bool>>, BuildError> {
        check_recipe(recipe)?;
        let Some(model) = quantized(float, stats, recipe)? else {
            return Ok(gates(&self.choices, self.switches, &self.float_keys));
        };
        let opset = quant::opset::default_opset(self.model.proto()).unwrap_or(1);
        let read = variant_forms(&self.base, &model, opset)?;
        let keys: BTreeMap<Slot, FormKey> = read.into_iter().map(|(s, (k, _))| (s, k)).collect();
        Ok(gates(&self.choices, self.switches, &keys))
    }
}

/// What a quantized variant computes at every slot of `base` (whose default-domain opset is
/// `opset`; a variant may have a lower one, its nodes are then read as `base` spells them).
fn variant_forms(base: &Base, model: &Model, opset: i64) -> Result<VariantForms, NotSwitchable> {
    if opset_of(model) > opset {
        return Err(NotSwitchable(format!(
            "a variant needs opset {} and the first only {opset}",
            opset_of(model)
        )));
    }
    units::read(base, model)
}

/// Every distinct form, numbered in the order first seen.
#[derive(Default)]
struct FormTable {
    forms: HashMap<FormKey, (usize, Form)>,
}

impl FormTable {
    /// Keeps the forms `read` brings that are new, and returns its slots' keys.
    fn intern(&mut self, read: VariantForms) -> BTreeMap<Slot, FormKey> {
        read.into_iter()
            .map(|(slot, (key, form))| {
                let next = self.forms.len();
                self.forms
                    .entry(key.clone())
                    .or_insert_with(|| (next, form));
                (slot, key)
            })
            .collect()
    }
}

/// Each slot's default (the first variant's source) and the alternatives the others read
/// there, numbered as switches.
fn choices(variants: &[BTreeMap<Slot, FormKey>]) -> (BTreeMap<Slot, Choices>, usize) {
    let mut choices: BTreeMap<Slot, Choices> = BTreeMap::new();
    let mut switches = 0;
    let Some(first) = variants.first() else {
        return (choices, 0);
    };
    for (slot, key) in first {
        choices.insert(
            *slot,
            Choices {
                default: key.clone(),
                alternatives: Vec::new(),
                any: None,
            },
        );
    }
    for variant in &variants[1..] {
        for (slot, key) in variant {
            let choice = choices.entry(*slot).or_default();
            if choice.default != *key && !choice.alternatives.iter().any(|(k, _)| k == key) {
                choice.alternatives.push((key.clone(), switches));
                switches += 1;
            }
        }
    }
    (choices, switches)
}

/// Gives each slot of two alternatives or more its [`Choices::any`] switch, numbered from
/// `switches` on; returns the count with them. Measured on PP-OCR rec's switchable model (one
/// thread, every gate off, ONNX Runtime's profile): 1310 `If`s ran a sample, 54 ms against
/// 22 ms in the kernels they hold; the model's 370 slots hold 1310 alternatives. With these
/// switches a pass of its 32 samples on two workers took 0.78 s against 1.0 s; the runs
/// from cuts, whose suffixes hold only their variants' slots as `If`s, changed little.
fn add_any_switches(choices: &mut BTreeMap<Slot, Choices>, mut switches: usize) -> usize {
    for choice in choices.values_mut() {
        if choice.alternatives.len() >= 2 {
            choice.any = Some(switches);
            switches += 1;
        }
    }
    switches
}

/// The gate vector selecting `variant`'s source at every slot, or `None` when one of them is
/// not among the choices.
fn gates(
    choices: &BTreeMap<Slot, Choices>,
    switches: usize,
    variant: &BTreeMap<Slot, FormKey>,
) -> Option<Vec<bool>> {
    let mut gates = vec![false; switches];
    for (slot, key) in variant {
        let choice = choices.get(slot)?;
        if choice.default == *key {
            continue;
        }
        let (_, switch) = choice.alternatives.iter().find(|(k, _)| k == key)?;
        gates[*switch] = true;
        if let Some(any) = choice.any {
            gates[any] = true;
        }
    }
    Some(gates)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(node: usize) -> Slot {
        Slot::Unit(node)
    }

    fn variant(keys: &[(usize, &str)]) -> BTreeMap<Slot, FormKey> {
        keys.iter()
            .map(|(n, k)| (slot(*n), k.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn each_distinct_alternative_gets_one_switch_and_variants_their_gates() {
        let recipe = variant(&[(0, "q0"), (1, "q1")]);
        let without_0 = variant(&[(0, "f0"), (1, "q1")]);
        let only_1 = variant(&[(0, "f0"), (1, "q1b")]);
        let (choices, switches) = choices(&[recipe.clone(), without_0.clone(), only_1.clone()]);
        // f0 once (shared by two variants), q1b once.
        assert_eq!(switches, 2);
        assert_eq!(gates(&choices, switches, &recipe), Some(vec![false, false]));
        assert_eq!(
            gates(&choices, switches, &without_0),
            Some(vec![true, false])
        );
        assert_eq!(gates(&choices, switches, &only_1), Some(vec![true, true]));
        // A source no variant brought cannot be selected.
        let unknown = variant(&[(0, "q0"), (1, "other")]);
        assert_eq!(gates(&choices, switches, &unknown), None);
    }

    #[test]
    fn a_slot_of_several_alternatives_gets_a_switch_on_with_any_of_them() {
        let recipe = variant(&[(0, "q0"), (1, "q1")]);
        let float_0 = variant(&[(0, "f0"), (1, "q1")]);
        let other_0 = variant(&[(0, "g0"), (1, "q1")]);
        let float_1 = variant(&[(0, "q0"), (1, "f1")]);
        let (mut choices, switches) = choices(&[
            recipe.clone(),
            float_0.clone(),
            other_0.clone(),
            float_1.clone(),
        ]);
        assert_eq!(switches, 3);
        // Slot 0 has two alternatives (switches 0 and 1): its own switch 3. Slot 1 has one.
        let switches = add_any_switches(&mut choices, switches);
        assert_eq!(switches, 4);
        assert_eq!(choices[&slot(0)].any, Some(3));
        assert_eq!(choices[&slot(1)].any, None);
        let gates = |v| super::gates(&choices, switches, v);
        assert_eq!(gates(&recipe), Some(vec![false; 4]));
        assert_eq!(gates(&float_0), Some(vec![true, false, false, true]));
        assert_eq!(gates(&other_0), Some(vec![false, true, false, true]));
        assert_eq!(gates(&float_1), Some(vec![false, false, true, false]));
    }

    #[test]
    fn recipes_that_change_the_graph_beyond_qdq_are_not_switchable() {
        assert!(check_recipe(&Recipe::default()).is_ok());
        let int4 = Recipe {
            mode: QuantMode::Int4,
            ..Recipe::default()
        };
        assert!(check_recipe(&int4).is_err());
        let smooth = Recipe {
            smoothquant: true,
            ..Recipe::default()
        };
        assert!(check_recipe(&smooth).is_err());
    }
}
