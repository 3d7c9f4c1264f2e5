//! The int4 phase after the weights: AWQ-lite's activation scales put where
//! [`crate::quant::int4::fold`] decided (constants divided, or a `Mul` by `1/s` before the
//! MatMuls), and the int4 output forms ([`Rewriter::emit_nbits`] for MatMulNBits,
//! [`Rewriter::keeps_float_weights`] for ModelOpt's `rtn`).

use ndarray::ArrayD;

use super::tensors::{int_attr, node, scale_tensor};
use super::weights::QuantizedWeight;
use super::{Rewriter, TensorParams};
use crate::model::NodeId;
use crate::model::TensorArray;
use crate::model::ops;
use crate::model::proto::AttributeProto;
use crate::model::tensor::array;
use crate::quant::QuantError;
use crate::quant::int4::ScaleSite;
use crate::quant::int4::fold::division_by_scales;
use crate::quant::int4::nbits::Packed;
use crate::quant::plan::TensorRole;
use crate::recipe::{Int4Method, Int4Output, QuantMode};

/// `values` divided by `divisor` along the last axis (one value per channel).
fn divided_by_channel(values: &ArrayD<f32>, divisor: &[f32]) -> ArrayD<f32> {
    let mut out = values.as_standard_layout().into_owned();
    let n = divisor.len().max(1);
    if let Some(flat) = out.as_slice_mut() {
        for row in flat.chunks_mut(n) {
            for (v, d) in row.iter_mut().zip(divisor) {
                *v /= d;
            }
        }
    }
    out
}

impl Rewriter<'_> {
    /// True for ModelOpt's `rtn`: int4 weights stay float behind QuantizeLinear.
    pub(super) fn keeps_float_weights(&self) -> bool {
        self.recipe.mode == QuantMode::Int4 && self.recipe.int4_method == Int4Method::Rtn
    }

    /// The MatMul nodes that become MatMulNBits reading `weight`, when the recipe asks for
    /// that form and every reader is a MatMul taking it as the right-hand side.
    pub(super) fn nbits_readers(&self, weight: &str) -> Option<Vec<NodeId>> {
        if self.recipe.mode != QuantMode::Int4 || self.recipe.int4_output != Int4Output::Matmulnbits
        {
            return None;
        }
        let readers = &self.graph.tensor(weight)?.consumers;
        let all_matmul = readers.iter().all(|&id| {
            let n = self.graph.node(id);
            n.op_type == ops::MAT_MUL
                && n.domain.is_empty()
                && n.inputs.get(1).is_some_and(|w| w == weight)
                && n.inputs.first().is_some_and(|a| a != weight)
        });
        (all_matmul && !readers.is_empty()).then(|| readers.clone())
    }

    /// Writes a weight in MatMulNBits form and replaces its MatMul readers.
    pub(super) fn emit_nbits(&mut self, name: &str, q: QuantizedWeight, packed: Packed) {
        let (k, n) = (q.shape[0], q.shape[1]);
        let block = q.block_size.unwrap_or(packed.blocks.max(1));
        let b_name = format!("{name}_MatMulNBits_B");
        let scale_name = format!("{name}_MatMulNBits_scales");
        let zp_name = format!("{name}_MatMulNBits_zero_points");
        let edits = &mut self.edits;
        edits.new_initializers.push(
            TensorArray::Uint8(array(vec![n, packed.blocks, block / 2], packed.b))
                .to_proto(&b_name),
        );
        edits.new_initializers.push(scale_tensor(
            &scale_name,
            &packed.scales,
            Some(vec![n * packed.blocks]),
            q.scale_type,
        ));
        let mut inputs = vec![b_name, scale_name];
        if let Some(zp) = packed.zero_points {
            let len = zp.len();
            edits
                .new_initializers
                .push(TensorArray::Uint8(array(vec![len], zp)).to_proto(&zp_name));
            inputs.push(zp_name);
        }
        let mut attributes: Vec<AttributeProto> = vec![
            int_attr("K", k as i64),
            int_attr("N", n as i64),
            int_attr("bits", 4),
            int_attr("block_size", block as i64),
        ];
        if self.recipe.int4_accuracy_level > 0 {
            let level = i64::from(self.recipe.int4_accuracy_level);
            attributes.push(int_attr("accuracy_level", level));
        }
        for id in self.nbits_readers(name).unwrap_or_default() {
            let old = &self.model.graph().node[id.0];
            let mut node_inputs = vec![old.input[0].clone()];
            node_inputs.extend(inputs.iter().cloned());
            let mut replaced = node(
                "MatMulNBits",
                old.name(),
                node_inputs,
                old.output.clone(),
                attributes.clone(),
            );
            replaced.domain = Some("com.microsoft".to_owned());
            self.edits.replace_nodes.insert(id.0, replaced);
        }
        self.edits.drop_initializers.insert(name.to_owned());
        self.edits.out.params.insert(
            name.to_owned(),
            TensorParams {
                qtype: self.recipe.weight_type,
                params: q.params,
                axis: Some(0),
                block_size: q.block_size,
                range: None,
                scale_type: q.scale_type,
            },
        );
    }

    /// Puts AWQ-lite's divisions where the search decided.
    pub(super) fn awq_scales(&mut self) -> Result<(), QuantError> {
        for scale in &self.int4.scales {
            match &scale.site {
                ScaleSite::Constants(names) => {
                    // A quantized constant got the divisor as its transform already.
                    for name in names.iter().filter(|n| !self.plan.roles.contains_key(*n)) {
                        self.replace_divided(name, &scale.scales)?;
                    }
                }
                ScaleSite::ProducerWeight(w) => {
                    // A quantized weight got the divisor as its transform already.
                    if !matches!(self.plan.roles.get(w), Some(TensorRole::Weight { .. })) {
                        self.replace_divided(w, &scale.scales)?;
                    }
                }
                ScaleSite::Mul => self.insert_mul(&scale.activation, &scale.readers, &scale.scales),
            }
        }
        Ok(())
    }

    /// Replaces initializer `name` by its values divided per channel (last axis), in its
    /// own float type.
    fn replace_divided(&mut self, name: &str, divisor: &[f32]) -> Result<(), QuantError> {
        let original = self.initializer_array(name)?;
        let dtype = original.dtype();
        let divided = divided_by_channel(&original.into_f32(), divisor);
        let proto = TensorArray::Float32(divided)
            .cast_float(dtype)
            .to_proto(name);
        self.edits
            .replace_initializers
            .insert(name.to_owned(), proto);
        Ok(())
    }

    /// `Mul(x, 1/s)` after `x`'s producer, read by `readers` instead of `x`.
    fn insert_mul(&mut self, x: &str, readers: &[NodeId], scales: &[f32]) {
        let scaled = format!("{x}_awq_scaled");
        let (factor, mul) = division_by_scales(x, scales, self.float_type(x), "awq", &scaled);
        self.edits.new_initializers.push(factor);
        self.edits
            .qdq_after
            .entry(x.to_owned())
            .or_default()
            .push(mul);
        for reader in readers {
            self.edits.node_inputs.insert((reader.0, 0), scaled.clone());
        }
    }
}
