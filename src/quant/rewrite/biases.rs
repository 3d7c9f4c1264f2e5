//! Phase 3b of the rewrite: int32 biases, whose scale is the input's times the weight's, each
//! replaced by a DequantizeLinear that writes the bias's own name.

use super::Rewriter;
use super::tensors::{dequantize, int_attr, scale_tensor};
use super::weights::check_finite;
use crate::model::TensorArray;
use crate::model::tensor::array;
use crate::quant::QuantError;
use crate::quant::plan::TensorRole;
use crate::quant::scale::{ScaleZp, quantize_bias};

impl Rewriter<'_> {
    /// Phase 3b: every bias whose input and weight were quantized.
    pub(super) fn biases(&mut self) -> Result<(), QuantError> {
        for (bias, role) in &self.plan.roles {
            if let TensorRole::Bias { input, weight } = role {
                self.bias(bias, input, weight)?;
            }
        }
        Ok(())
    }

    fn bias(&mut self, bias: &str, input: &str, weight: &str) -> Result<(), QuantError> {
        let params = &self.edits.out.params;
        let (Some(input_params), Some(weight_params)) = (params.get(input), params.get(weight))
        else {
            return Ok(());
        };
        let values = self.float_value(bias)?;
        check_finite(bias, &values)?;
        let input_scale = input_params.params[0].scale;
        let channels = values.len();
        let per_channel = weight_params.params.len() > 1;
        let scales: Vec<f32> = (0..channels)
            .map(|c| {
                let at = if weight_params.params.len() == channels {
                    c
                } else {
                    0
                };
                input_scale * weight_params.params[at].scale
            })
            .collect();
        let q: Vec<i32> = values
            .iter()
            .zip(&scales)
            .map(|(&b, &s)| quantize_bias(b, s))
            .collect();
        let as_params = |s: &f32| ScaleZp {
            scale: *s,
            zero_point: 0,
        };
        let bias_params: Vec<ScaleZp> = if per_channel {
            scales.iter().map(as_params).collect()
        } else {
            vec![as_params(&scales[0])]
        };
        let edits = &mut self.edits;
        edits.new_initializers.push(
            TensorArray::Int32(array(values.shape().to_vec(), q))
                .to_proto(&format!("{bias}_quantized")),
        );
        edits.new_initializers.push(scale_tensor(
            &format!("{bias}_quantized_scale"),
            &bias_params,
            None,
        ));
        let zeros: Vec<i32> = vec![0; bias_params.len()];
        let zero_shape = if zeros.len() == 1 {
            vec![]
        } else {
            vec![zeros.len()]
        };
        edits.new_initializers.push(
            TensorArray::Int32(array(zero_shape, zeros))
                .to_proto(&format!("{bias}_quantized_zero_point")),
        );
        let mut attributes = Vec::new();
        if per_channel {
            attributes.push(int_attr("axis", 0));
            edits.out.per_axis = true;
        }
        // The bias DQ keeps the bias's own name, so its consumer is unchanged.
        edits.weight_dq.push(dequantize(
            &format!("{bias}_DequantizeLinear"),
            [
                format!("{bias}_quantized"),
                format!("{bias}_quantized_scale"),
                format!("{bias}_quantized_zero_point"),
            ],
            bias.to_owned(),
            attributes,
        ));
        edits.drop_biases.insert(bias.to_owned());
        Ok(())
    }
}
