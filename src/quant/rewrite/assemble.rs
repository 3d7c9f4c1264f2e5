//! Phase 5 of the rewrite: the new node list in topological order (weight DQs first, then
//! each node followed by the Q/DQ pairs of its outputs), consumers rewired, folded Relu/Clip
//! nodes gone, and the float initializers no node reads any more dropped.

use std::collections::{HashMap, HashSet};

use super::{Edits, RewriteOutput};
use crate::model::proto::{NodeProto, OperatorSetIdProto};
use crate::model::{Graph, Model, TensorKind};
use crate::quant::plan::{Exclusion, Plan};

/// ONNX Runtime's contrib-op domain (MatMulNBits).
const MICROSOFT_DOMAIN: &str = "com.microsoft";

/// Where each folded Relu/Clip's input now goes: the producer writes the last output of the
/// folded chain (Conv → Relu → Clip writes the Clip's output). Each chain is walked once and
/// every tensor on it learns the end, so a chain of n folded nodes costs O(n), not O(n²).
fn producer_renames(plan: &Plan) -> HashMap<String, String> {
    let step: HashMap<&str, &str> = plan
        .removed
        .iter()
        .map(|(_, x, y)| (x.as_str(), y.as_str()))
        .collect();
    let mut ends: HashMap<String, String> = HashMap::with_capacity(step.len());
    for &start in step.keys() {
        let mut path = Vec::new();
        let mut at = start;
        let end = loop {
            if let Some(end) = ends.get(at) {
                break end.clone();
            }
            match step.get(at) {
                // A cycle cannot come from a topologically sorted graph; stop rather than loop.
                Some(&next) if path.len() <= step.len() => {
                    path.push(at);
                    at = next;
                }
                _ => break at.to_owned(),
            }
        };
        for x in path {
            ends.insert(x.to_owned(), end.clone());
        }
    }
    ends
}

impl Edits {
    /// Applies the edits to `model`'s graph, whose nodes `graph` indexes.
    pub(super) fn assemble(
        mut self,
        model: &mut Model,
        graph: &Graph,
        plan: &Plan,
    ) -> RewriteOutput {
        let Some(g) = model.proto_mut().graph.as_mut() else {
            return self.out;
        };
        let old_nodes = std::mem::take(&mut g.node);
        g.node = self.nodes(&old_nodes, graph, plan);
        for t in &mut g.initializer {
            if let Some(replacement) = self.replace_initializers.remove(t.name()) {
                *t = replacement;
            }
        }
        // Float weights stay only where a non-quantized node still reads them.
        let still_read: HashSet<&str> = g
            .node
            .iter()
            .flat_map(|n| n.input.iter().map(String::as_str))
            .collect();
        // Constant inputs of removed Relu/Clip nodes (Clip's min/max) are now unread.
        let removed_inputs: HashSet<&str> = plan
            .removed
            .iter()
            .flat_map(|(id, _, _)| old_nodes[id.0].input.iter().skip(1).map(String::as_str))
            .collect();
        let dropped: HashSet<String> = g
            .initializer
            .iter()
            .map(|t| t.name())
            .chain(g.input.iter().map(|i| i.name()))
            .filter(|name| {
                self.drop_biases.contains(*name)
                    || ((self.drop_initializers.contains(*name) || removed_inputs.contains(name))
                        && !still_read.contains(name))
            })
            .map(str::to_owned)
            .collect();
        g.initializer.retain(|t| !dropped.contains(t.name()));
        // Old models list initializers as graph inputs too: a dropped one must not stay an input.
        g.input.retain(|i| !dropped.contains(i.name()));
        g.initializer.append(&mut self.new_initializers);
        let contrib = g.node.iter().any(|n| n.domain() == MICROSOFT_DOMAIN);
        let imports = &mut model.proto_mut().opset_import;
        if contrib && !imports.iter().any(|o| o.domain() == MICROSOFT_DOMAIN) {
            imports.push(OperatorSetIdProto {
                domain: Some(MICROSOFT_DOMAIN.to_owned()),
                version: Some(1),
            });
        }
        self.out
    }

    /// The rewritten node list.
    fn nodes(&mut self, old: &[NodeProto], graph: &Graph, plan: &Plan) -> Vec<NodeProto> {
        let removed: HashSet<usize> = plan.removed.iter().map(|(id, _, _)| id.0).collect();
        let renames = producer_renames(plan);
        let mut nodes: Vec<NodeProto> = std::mem::take(&mut self.weight_dq);
        // Graph inputs, then initializers a caller may override (they are inputs too).
        let overridable = graph
            .tensors()
            .iter()
            .filter(|t| t.kind == TensorKind::Overridable)
            .map(|t| &t.name);
        for input in graph.inputs().iter().chain(overridable) {
            if let Some(pair) = self.qdq_after.remove(input) {
                nodes.extend(pair);
            }
        }
        for &id in graph.topological_order() {
            if removed.contains(&id.0) {
                continue;
            }
            let mut n = self
                .replace_nodes
                .remove(&id.0)
                .unwrap_or_else(|| old[id.0].clone());
            // An outlier-row path computes in float from the float activation.
            let float_path = plan.excluded.get(&id) == Some(&Exclusion::OutlierRowsPath);
            for (i, input) in n.input.iter_mut().enumerate() {
                if let Some(replacement) = self.node_inputs.get(&(id.0, i)) {
                    *input = replacement.clone();
                } else if let Some(replacement) = self.replaced_inputs.get(input.as_str())
                    && !input.is_empty()
                    && !float_path
                {
                    *input = replacement.clone();
                }
            }
            let mut after = Vec::new();
            for output in &mut n.output {
                if let Some(renamed) = renames.get(output.as_str()) {
                    *output = renamed.clone();
                }
                if let Some(pair) = self.qdq_after.remove(output.as_str()) {
                    after.extend(pair);
                }
                if let Some(renamed) = self.renamed_outputs.get(output.as_str()) {
                    *output = renamed.clone();
                }
            }
            nodes.push(n);
            nodes.extend(after);
        }
        nodes
    }
}
