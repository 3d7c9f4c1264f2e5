//! Phase 4 of the rewrite: the Q/DQ pair after every quantized activation (onnxruntime's
//! names), with one scale and zero point per scale source.

use std::collections::HashSet;

use super::Rewriter;
use super::tensors::{dequantize, node, scale_tensor, zero_point_tensor};
use crate::quant::plan::TensorRole;

impl Rewriter<'_> {
    /// The tensor whose scale `name` uses (itself, or the end of its chain of shared scales).
    /// A shared tensor of another float type than its source (across a Cast) has its own.
    fn scale_source(&self, name: &str) -> String {
        let params = &self.edits.out.params;
        let own_type = params.get(name).map(|p| p.scale_type);
        let mut current = name.to_owned();
        while let Some(TensorRole::Shared(source)) = self.plan.roles.get(&current) {
            if params.get(source).map(|p| p.scale_type) != own_type {
                break;
            }
            current = source.clone();
        }
        current
    }

    /// Phase 4: a QuantizeLinear → DequantizeLinear pair after each quantized activation;
    /// consumers read the pair's output. A graph output keeps its name on the pair's output,
    /// its producer writing `{name}_QuantizeLinear_Input` instead.
    pub(super) fn qdq_pairs(&mut self) {
        let graph_outputs: HashSet<&str> =
            self.model.graph().output.iter().map(|o| o.name()).collect();
        let names: Vec<String> = self
            .plan
            .roles
            .iter()
            .filter(|(_, r)| matches!(r, TensorRole::Activation | TensorRole::Shared(_)))
            .map(|(n, _)| n)
            .filter(|n| self.edits.out.params.contains_key(*n))
            .cloned()
            .collect();
        let mut written_scales: HashSet<String> = HashSet::new();
        for name in names {
            let source = self.scale_source(&name);
            let params = &self.edits.out.params[&name];
            if written_scales.insert(source.clone()) {
                let scale = scale_tensor(
                    &format!("{source}_scale"),
                    &params.params,
                    None,
                    params.scale_type,
                );
                let zero_point = zero_point_tensor(
                    &format!("{source}_zero_point"),
                    &params.params,
                    params.qtype,
                    None,
                );
                self.edits.new_initializers.extend([scale, zero_point]);
            }
            let is_output = graph_outputs.contains(name.as_str());
            self.qdq_pair(&name, &source, is_output);
        }
    }

    fn qdq_pair(&mut self, name: &str, source: &str, is_output: bool) {
        let edits = &mut self.edits;
        let q_input = if is_output {
            format!("{name}_QuantizeLinear_Input")
        } else {
            name.to_owned()
        };
        if is_output {
            edits
                .renamed_outputs
                .insert(name.to_owned(), q_input.clone());
        }
        let dq_output = if is_output {
            name.to_owned()
        } else {
            format!("{name}_DequantizeLinear_Output")
        };
        let (scale, zero_point) = (format!("{source}_scale"), format!("{source}_zero_point"));
        let q_output = format!("{name}_QuantizeLinear_Output");
        let pair = [
            node(
                "QuantizeLinear",
                &format!("{name}_QuantizeLinear"),
                vec![q_input, scale.clone(), zero_point.clone()],
                vec![q_output.clone()],
                vec![],
            ),
            dequantize(
                &format!("{name}_DequantizeLinear"),
                [q_output, scale, zero_point],
                dq_output.clone(),
                vec![],
            ),
        ];
        edits
            .qdq_after
            .entry(name.to_owned())
            .or_default()
            .extend(pair);
        if !is_output {
            edits.replaced_inputs.insert(name.to_owned(), dq_output);
        }
    }
}
