//! [`Prepared`]: a model as the quantizer sees it. Nodes are named first (unnamed ones get
//! `OpType_N` from their place in the file, as the studio and recipes call them), then the
//! recipe's pre-processing runs on the copy. Calibration, quantization and the explanation of
//! the plan all work on this one form, so the tensor and node names they use agree.

use std::collections::HashMap;

use super::kernel_pairs::{Measured, Reduction, overflowing_share};
use super::params::WeightQuant;
use super::preprocess::{PreprocessReport, preprocess, write_observed_shapes};
use super::rewrite::weight_params;
use crate::calib::stats::CalibrationStats;
use crate::model::DataType;
use crate::model::infer::{elem_types, is_quantizable_code};
use crate::model::{Graph, Model, ModelError, NodeId};
use crate::recipe::{Preprocessing, Recipe};

use super::plan::{FloatPath, Plan, PlanFacts, plan};

/// A named, pre-processed copy of a model with its graph index.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The model after naming and pre-processing.
    pub model: Model,
    /// Its graph index.
    pub graph: Graph,
    /// What pre-processing changed.
    pub report: PreprocessReport,
    /// The pre-processing options it was made with.
    pub options: Preprocessing,
    /// Every tensor's element type, declared or inferred ([`crate::model::infer`]).
    types: HashMap<String, i32>,
    /// The kernel pair shares [`Self::overflowing_share`] measured.
    overflow_shares: Measured,
    /// What pre-processing added to compute in float ([`Self::float_path`]).
    float_path: FloatPath,
}

/// Writes every node's effective name into the model (unnamed ones get `OpType_N`), so
/// recipes can name them and the output keeps the names.
pub fn name_nodes(model: &mut Model) {
    let graph = Graph::build(model);
    if let Some(g) = model.proto_mut().graph.as_mut() {
        for renamed in graph.renamed() {
            g.node[renamed.id.0].name = Some(renamed.name.clone());
        }
    }
}

impl Prepared {
    /// Names `model`'s nodes and pre-processes a copy as `options` say; the input is never
    /// changed.
    pub fn new(model: &Model, options: &Preprocessing) -> Result<Self, ModelError> {
        let mut named = model.clone();
        name_nodes(&mut named);
        let (prepared, report) = preprocess(&named, options)?;
        let graph = Graph::build(&prepared);
        let types = elem_types(&prepared, &graph);
        let float_path = super::outlier_rows::float_path(&report.outlier_rows);
        Ok(Prepared {
            model: prepared,
            graph,
            report,
            options: *options,
            types,
            overflow_shares: Measured::default(),
            float_path,
        })
    }

    /// The nodes and tensors pre-processing added to compute in float (the outlier rows'
    /// paths), which the plan leaves in float.
    pub fn float_path(&self) -> &FloatPath {
        &self.float_path
    }

    /// Records the shapes calibration observed as `value_info` (see
    /// [`write_observed_shapes`]) and re-indexes the graph.
    pub fn record_observed_shapes(&mut self, stats: &CalibrationStats) {
        self.report.shapes_written = write_observed_shapes(&mut self.model, stats);
        self.reindex();
    }

    /// Re-indexes the graph after the model was changed in place (bias correction), and
    /// forgets what was measured on the model before.
    pub fn reindex(&mut self) {
        self.graph = Graph::build(&self.model);
        self.overflow_shares.clear();
    }

    /// The share of the weight `name`'s kernel pairs (laid out `along`) able to overflow at
    /// the storage `how` gives a weight of its rank ([`overflowing_share`]); `None` when it is
    /// no weight or `how` quantizes nothing. Measured once per weight and storage: the
    /// saturation guard asks at every plan (each recipe edit in the studio, several times a
    /// quantization), and decoding and quantizing the weights each time cost 0.3 s a plan on
    /// MiniLM per tensor.
    pub fn overflowing_share(
        &self,
        name: &str,
        along: Reduction,
        how: &dyn Fn(usize) -> Option<WeightQuant>,
    ) -> Option<f64> {
        // An initializer's rank is in its header; a Constant node's is known once decoded.
        let rank = self
            .model
            .graph()
            .initializer
            .iter()
            .find(|t| t.name() == name)
            .map(|t| t.dims.len());
        if let Some(key) = rank.and_then(how).map(|h| (name.to_owned(), h, along))
            && let Some(share) = self.overflow_shares.get(&key)
        {
            return Some(share);
        }
        let values = self.model.weight(name).ok()??.into_f32();
        self.model.release_weight(name);
        let how = how(values.ndim())?;
        let params = weight_params(&values, &how);
        let share = overflowing_share(&values, &how, &params, along);
        self.overflow_shares
            .insert((name.to_owned(), how, along), share);
        Some(share)
    }

    /// True when `tensor` is of a float type Q/DQ can quantize (float64 is not one): as
    /// declared, else as `stats` observed it (only calibrated tensors are float then, unless
    /// the statistics hold only a plan's tensors), else as inferred.
    pub fn is_float(&self, tensor: &str, stats: Option<&CalibrationStats>) -> bool {
        let inferred = || {
            self.types
                .get(tensor)
                .is_some_and(|&c| is_quantizable_code(c))
        };
        match self.graph.tensor(tensor).and_then(|t| t.elem_type) {
            Some(code) => is_quantizable_code(code),
            None => match stats.map(|s| (s, s.tensors.get(tensor))) {
                Some((_, Some(seen))) => seen.dtype.is_none_or(DataType::is_quantizable),
                Some((stats, None)) => stats.info.planned_only && inferred(),
                None => inferred(),
            },
        }
    }

    /// The quantizer's plan for this model under `recipe`: float tensors as [`Self::is_float`]
    /// finds them with `stats`, Clip bounds as [`Self::clip_min`] reads them.
    pub fn plan(&self, recipe: &Recipe, stats: Option<&CalibrationStats>) -> Plan {
        self.plan_where(recipe, &|t: &str| self.is_float(t, stats))
    }

    /// The plan before calibration, for choosing what calibration observes: every tensor of
    /// a type declared or inferred as that type says, and every other one taken as float
    /// (calibration may find it float, and then the plan quantizes it).
    pub fn plan_before_calibration(&self, recipe: &Recipe) -> Plan {
        self.plan_where(recipe, &|t: &str| {
            self.types.get(t).is_none_or(|&c| is_quantizable_code(c))
        })
    }

    /// The plan with float tensors as `is_float` finds them.
    fn plan_where(&self, recipe: &Recipe, is_float: &dyn Fn(&str) -> bool) -> Plan {
        let clip_min = |id| self.clip_min(id);
        let original_op_types = self.report.simplified.original_op_types();
        let facts = PlanFacts {
            is_float,
            clip_min: &clip_min,
            float_path: &self.float_path,
            original_op_types: &original_op_types,
        };
        plan(&self.graph, recipe, &facts)
    }

    /// A Clip node's lower bound when it is a constant (its `min` input or attribute;
    /// the float minimum when it has none).
    pub fn clip_min(&self, id: NodeId) -> Option<f32> {
        let node = self.model.graph().node.get(id.0)?;
        match node.input.get(1).filter(|m| !m.is_empty()) {
            Some(min) => self
                .model
                .weight(min)
                .ok()
                .flatten()
                .and_then(|a| a.to_f32().iter().next().copied()),
            None => node
                .attribute
                .iter()
                .find(|a| a.name() == "min")
                .map(|a| a.f())
                .or(Some(f32::MIN)),
        }
    }
}
