//! Phases 1 and 2 of the rewrite: each activation's scale and zero point from its range, then
//! the activations that share another tensor's.

use std::collections::HashMap;

use super::{Rewriter, TensorParams};
use crate::model::DataType;
use crate::quant::QuantError;
use crate::quant::params::activation_quant;
use crate::quant::plan::TensorRole;
use crate::quant::scale::{scale_zp_for, store_scales, stored_scale};

impl Rewriter<'_> {
    /// Phase 1: activations with their own parameters, from the range the recipe gives them.
    pub(super) fn activation_params(&mut self) -> Result<(), QuantError> {
        for (name, role) in &self.plan.roles {
            if *role != TensorRole::Activation {
                continue;
            }
            let how = activation_quant(self.recipe, name, &self.softmax);
            let range = how.range(self.stats)?;
            let scale_type = self.float_type(name);
            let mut p = scale_zp_for(range.lo, range.hi, how.qtype, how.symmetric, false);
            p.scale = stored_scale(p.scale, scale_type, false);
            self.edits.out.params.insert(
                name.clone(),
                TensorParams {
                    qtype: how.qtype,
                    params: vec![p],
                    axis: None,
                    block_size: None,
                    range: Some((range.lo, range.hi)),
                    scale_type,
                },
            );
        }
        Ok(())
    }

    /// Phase 2: shared-scale activations take their source's parameters (chains resolve in
    /// as many sweeps as they are long), their scale kept in their own float type.
    pub(super) fn shared_params(&mut self) {
        let own_types: HashMap<&str, DataType> = self
            .plan
            .roles
            .iter()
            .filter(|(_, r)| matches!(r, TensorRole::Shared(_)))
            .map(|(n, _)| (n.as_str(), self.float_type(n)))
            .collect();
        let params = &mut self.edits.out.params;
        for _ in 0..self.plan.roles.len() {
            let mut changed = false;
            for (name, role) in &self.plan.roles {
                if let TensorRole::Shared(source) = role
                    && !params.contains_key(name)
                    && let Some(mut p) = params.get(source).cloned()
                {
                    let own = own_types[name.as_str()];
                    if own != p.scale_type {
                        store_scales(&mut p.params, own, false);
                        p.scale_type = own;
                    }
                    params.insert(name.clone(), p);
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
    }
}
