//! Local error per tensor: a node's own quantization measured with float inputs, told apart
//! from the cumulative error (everything upstream quantized too, [`super::tensors`]). A node
//! whose cumulative error is poor but whose local error is fine only carries an error made
//! upstream; the node with the poor local error is the cause.
//!
//! One run of one model gives every node's local error at once: the QDQ model cut so that
//! every float activation a node reads from another node's computation is the float model's
//! value of it, fed as an extra graph input (its "twin"). A node reading a Q/DQ chain then
//! reads its float input quantized by its own chain, its weights dequantized as in the QDQ
//! model; and a copy of the Q/DQ its output gets is added after it, so the measured tensor
//! carries this node's quantization alone: inputs, weights and output. Costs one run of the
//! QDQ model next to the float pass that had the twins.

use std::collections::{HashMap, HashSet};

use ort::session::Session;
use rayon::prelude::*;
use serde::Serialize;

use super::EvalError;
use super::tensor_pass::Outputs;
use super::tensors::sqnr;
use crate::calib::runner::calibration_tensors;
use crate::model::builder::any_shape_info;
use crate::model::infer::elem_types;
use crate::model::proto::{NodeProto, ValueInfoProto};
use crate::model::{DataType, Graph, Model, ModelError, NodeId, SessionModel, TensorArray};
use crate::model::{TensorKind, graph::Node};
use crate::runtime::value::to_value;
use crate::runtime::{EpSpec, Runtime, SessionOptions};

/// The prefix of every name the local model adds.
const PREFIX: &str = "qdq_studio_local";

/// The local error of one tensor.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LocalError {
    /// The float model's tensor name.
    pub tensor: String,
    /// SQNR (dB) of the float model's tensor against the value its producer computes from
    /// float inputs with only its own quantization.
    pub sqnr_db: f64,
}

/// A tensor whose local error is measured, and where the QDQ model computes it.
#[derive(Debug, Clone)]
pub enum Target {
    /// An activation quantized by a Q→DQ pair: the pair's nodes (the local value is the
    /// pair's input quantized by a copy of the pair).
    Pair {
        /// The float model's name of the tensor.
        float: String,
        /// The QuantizeLinear and the DequantizeLinear.
        q: NodeId,
        /// The DequantizeLinear reading it.
        dq: NodeId,
    },
    /// The output of a layer whose weight alone is quantized, named alike in both models.
    Output(String),
}

impl Target {
    fn float(&self) -> &str {
        match self {
            Target::Pair { float, .. } => float,
            Target::Output(name) => name,
        }
    }
}

/// A float activation fed to the local model in place of the QDQ model's own computation.
#[derive(Debug, Clone)]
struct Twin {
    /// The local model's graph input.
    input: String,
    /// The float model's tensor.
    float: String,
    /// Its element type.
    dtype: DataType,
}

/// The QDQ model cut for local errors (see the module docs), encoded for a session.
pub struct LocalModel {
    encoded: SessionModel,
    twins: Vec<Twin>,
    /// (float model's tensor, the local model's output holding its local value).
    measured: Vec<(String, String)>,
}

/// True for the ops that make up a Q/DQ chain (their outputs are never cut).
fn is_qdq(node: &Node) -> bool {
    matches!(node.op_type.as_str(), "QuantizeLinear" | "DequantizeLinear")
}

/// The float activations of `quant` that the local model takes from the float model: those a
/// node (other than a Q/DQ op) computes, of a float type, present in the float graph (under
/// their own name, or without the `_QuantizeLinear_Input` suffix some tools add).
fn twins(quant: &Model, qg: &Graph, fg: &Graph) -> HashMap<String, Twin> {
    let types = elem_types(quant, qg);
    let float_tensors: HashSet<String> = calibration_tensors(fg, None).into_iter().collect();
    qg.tensors()
        .iter()
        .filter(|t| t.kind == TensorKind::Activation)
        .filter(|t| t.producer.is_some_and(|p| !is_qdq(qg.node(p))))
        .filter_map(|t| {
            let dtype = types
                .get(&t.name)
                .and_then(|&c| DataType::from_onnx(c).ok())
                .filter(|d| d.is_plain_float())?;
            let float = [
                t.name.as_str(),
                t.name.trim_end_matches("_QuantizeLinear_Input"),
            ]
            .into_iter()
            .find(|n| float_tensors.contains(*n))?;
            let twin = Twin {
                input: format!("{}__{PREFIX}_float", t.name),
                float: float.to_owned(),
                dtype,
            };
            Some((t.name.clone(), twin))
        })
        .collect()
}

/// A copy of `node` reading `input` first and writing `output`, named `name`.
fn copy_of(node: &NodeProto, input: String, output: String, name: String) -> NodeProto {
    let mut copy = node.clone();
    if let Some(first) = copy.input.first_mut() {
        *first = input;
    }
    copy.output = vec![output];
    copy.name = Some(name);
    copy
}

impl LocalModel {
    /// The local model of `quant` (indexed by `qg`) measuring `targets`, against the float
    /// model indexed by `fg`.
    pub fn build(
        quant: &Model,
        qg: &Graph,
        fg: &Graph,
        targets: &[Target],
    ) -> Result<Self, ModelError> {
        let twins = twins(quant, qg, fg);
        let (mut proto, external_folder) = quant.to_session_proto();
        // A loaded model always has a graph; an empty one measures nothing.
        let graph = proto.graph.get_or_insert_with(Default::default);
        let mut added = Vec::new();
        let mut measured = Vec::new();
        for (i, target) in targets.iter().enumerate() {
            let local = match target {
                Target::Pair { q, dq, .. } => {
                    let (Some(q), Some(dq)) = (graph.node.get(q.0), graph.node.get(dq.0)) else {
                        continue;
                    };
                    let Some(input) = q.input.first().cloned() else {
                        continue;
                    };
                    let quantized = format!("{PREFIX}_q{i}");
                    let local = format!("{PREFIX}_v{i}");
                    added.push(copy_of(
                        q,
                        input,
                        quantized.clone(),
                        format!("{PREFIX}_Q{i}"),
                    ));
                    added.push(copy_of(
                        dq,
                        quantized,
                        local.clone(),
                        format!("{PREFIX}_DQ{i}"),
                    ));
                    local
                }
                Target::Output(name) => name.clone(),
            };
            measured.push((target.float().to_owned(), local));
        }
        let mut used: Vec<Twin> = Vec::new();
        let mut seen = HashSet::new();
        for node in graph
            .node
            .iter_mut()
            .filter(|n| n.op_type() != "DequantizeLinear")
        {
            for input in &mut node.input {
                if let Some(twin) = twins.get(input.as_str()) {
                    if seen.insert(twin.input.clone()) {
                        used.push(twin.clone());
                    }
                    *input = twin.input.clone();
                }
            }
        }
        graph.node.extend(added);
        graph
            .input
            .extend(used.iter().map(|t| any_shape_info(&t.input, t.dtype)));
        let outputs: HashSet<String> = graph.output.iter().map(|o| o.name().to_owned()).collect();
        graph.output.extend(
            measured
                .iter()
                .filter(|(_, local)| !outputs.contains(local))
                .map(|(_, local)| ValueInfoProto {
                    name: Some(local.clone()),
                    ..Default::default()
                }),
        );
        Ok(LocalModel {
            encoded: SessionModel::encode(proto, external_folder)?,
            twins: used,
            measured,
        })
    }

    /// The float model's tensors a run needs: the twins fed and the tensors measured.
    pub fn float_names(&self) -> impl Iterator<Item = &str> {
        self.twins
            .iter()
            .map(|t| t.float.as_str())
            .chain(self.measured.iter().map(|(f, _)| f.as_str()))
    }

    /// A session over the local model.
    pub fn session(
        &self,
        runtime: &Runtime,
        eps: &[EpSpec],
        options: SessionOptions,
    ) -> Result<Session, EvalError> {
        Ok(runtime.session_from_model(&self.encoded, eps, options)?)
    }

    /// Runs `session` (over this model) on a batch: `inputs` as the data gave them, the twins
    /// from `float` (the float model's tensors of the same batch). The local values, keyed by
    /// the float model's tensor names.
    pub fn run(
        &self,
        session: &mut Session,
        inputs: &[(String, ort::value::DynValue)],
        float: &Outputs,
        batch: usize,
    ) -> Result<Outputs, EvalError> {
        let twins = self
            .twins
            .iter()
            .map(|t| {
                let value = float.get(&t.float).ok_or_else(|| EvalError::Run {
                    batch,
                    model: "local",
                    reason: format!("the float model gave no value of {}", t.float),
                })?;
                let array = TensorArray::Float32(value.clone()).cast_float(t.dtype);
                Ok((t.input.clone(), to_value(array)?))
            })
            .collect::<Result<Vec<_>, EvalError>>()?;
        let names: Vec<String> = self.measured.iter().map(|(_, l)| l.clone()).collect();
        let values = super::run_outputs_of(session, &[inputs, &twins], &names, batch, "local")?;
        Ok(self
            .measured
            .iter()
            .zip(values)
            .filter_map(|((float, _), value)| Some((float.clone(), value?)))
            .collect())
    }

    /// Empty sums for this model's measured tensors.
    pub fn sums(&self) -> LocalSums {
        LocalSums {
            tensors: self.measured.iter().map(|(f, _)| f.clone()).collect(),
            sums: vec![[0.0; 2]; self.measured.len()],
        }
    }
}

/// Running signal² and noise² of every measured tensor over the batches seen.
pub struct LocalSums {
    tensors: Vec<String>,
    sums: Vec<[f64; 2]>,
}

impl LocalSums {
    /// Adds one batch: the float model's tensors `float` and the local values `local`.
    pub fn add(&mut self, float: &Outputs, local: &Outputs) {
        self.sums
            .par_iter_mut()
            .zip(self.tensors.par_iter())
            .for_each(|(s, tensor)| {
                let (Some(reference), Some(test)) = (float.get(tensor), local.get(tensor)) else {
                    return;
                };
                if reference.len() == test.len() {
                    for (&a, &b) in reference.iter().zip(test.iter()) {
                        s[0] += f64::from(a).powi(2);
                        s[1] += f64::from(a - b).powi(2);
                    }
                }
            });
    }

    /// The local error of every tensor that was seen, one per tensor, in `order` (the float
    /// graph's position of each tensor).
    pub fn finish(self, order: &HashMap<&str, usize>) -> Vec<LocalError> {
        let mut errors: Vec<LocalError> = self
            .tensors
            .into_iter()
            .zip(self.sums)
            .filter(|(_, s)| s[0] > 0.0 || s[1] > 0.0)
            .map(|(tensor, s)| LocalError {
                tensor,
                sqnr_db: sqnr(s[0], s[1]),
            })
            .collect();
        errors.sort_by_key(|e| {
            (
                order.get(e.tensor.as_str()).copied().unwrap_or(0),
                e.tensor.clone(),
            )
        });
        errors.dedup_by(|a, b| a.tensor == b.tensor);
        errors
    }
}
