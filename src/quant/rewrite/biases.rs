//! Phase 3b of the rewrite: int32 biases, whose scale is the input's times the weight's, each
//! replaced by a DequantizeLinear that writes the bias's own name.

use super::Rewriter;
use super::tensors::{dequantize, int_attr, node, scale_tensor};
use crate::model::tensor::array;
use crate::model::{DataType, TensorArray};
use crate::quant::QuantError;
use crate::quant::params::check_finite;
use crate::quant::plan::TensorRole;
use crate::quant::scale::{ScaleZp, quantize_bias, rounded_to};

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
        let values =
            super::weights::transformed(&values, self.int4.transforms.get(bias)).into_owned();
        check_finite(bias, &values)?;
        let input_scale = input_params.params[0].scale;
        let channels = values.len();
        let per_channel = weight_params.params.len() > 1;
        let products: Vec<f32> = (0..channels)
            .map(|c| {
                let at = if weight_params.params.len() == channels {
                    c
                } else {
                    0
                };
                input_scale * weight_params.params[at].scale
            })
            .collect();
        let products = if per_channel {
            products
        } else {
            products.into_iter().take(1).collect()
        };
        let bias_values: Vec<f32> = values.iter().copied().collect();
        let bias_type = self.float_type(bias);
        let (scales, scale_type) = bias_scales(products, &bias_values, bias_type, per_channel);
        let q: Vec<i32> = bias_values
            .iter()
            .enumerate()
            .map(|(c, &b)| quantize_bias(b, scales[if per_channel { c } else { 0 }]))
            .collect();
        let bias_params: Vec<ScaleZp> = scales
            .iter()
            .map(|&scale| ScaleZp {
                scale,
                zero_point: 0,
            })
            .collect();
        let edits = &mut self.edits;
        edits.out.half_scales |= scale_type != DataType::Float32;
        edits.new_initializers.push(
            TensorArray::Int32(array(values.shape().to_vec(), q))
                .to_proto(&format!("{bias}_quantized")),
        );
        edits.new_initializers.push(scale_tensor(
            &format!("{bias}_quantized_scale"),
            &bias_params,
            None,
            scale_type,
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
        // The bias DQ keeps the bias's own name, so its consumer is unchanged; a float32
        // scale for a half bias is followed by a Cast back to the bias's type.
        let cast = scale_type != bias_type;
        let dq_output = if cast {
            format!("{bias}_DequantizeLinear_Output")
        } else {
            bias.to_owned()
        };
        edits.weight_dq.push(dequantize(
            &format!("{bias}_DequantizeLinear"),
            [
                format!("{bias}_quantized"),
                format!("{bias}_quantized_scale"),
                format!("{bias}_quantized_zero_point"),
            ],
            dq_output.clone(),
            attributes,
        ));
        if cast {
            edits.weight_dq.push(node(
                "Cast",
                &format!("{bias}_Cast"),
                vec![dq_output],
                vec![bias.to_owned()],
                vec![int_attr("to", i64::from(bias_type.to_onnx()))],
            ));
        }
        edits.drop_biases.insert(bias.to_owned());
        Ok(())
    }
}

/// The int32 bias's scales (one, or one per channel) and their type, from the products of
/// input and weight scales. A float32 bias keeps them (onnxruntime's maths). A half bias
/// takes them in its own type unless that would round one to zero or clip the bias; then,
/// as onnxruntime does, they stay float32, raised so every bias value fits int32 (and a DQ
/// in float32 is cast back).
fn bias_scales(
    products: Vec<f32>,
    bias: &[f32],
    bias_type: DataType,
    per_channel: bool,
) -> (Vec<f32>, DataType) {
    if bias_type == DataType::Float32 {
        return (products, DataType::Float32);
    }
    let limit = f64::from(i32::MAX);
    let magnitude = |c: usize| -> f64 {
        if per_channel {
            f64::from(bias[c].abs())
        } else {
            bias.iter().fold(0f64, |m, b| m.max(f64::from(b.abs())))
        }
    };
    let half: Vec<f32> = products.iter().map(|&p| rounded_to(p, bias_type)).collect();
    let fits = half
        .iter()
        .enumerate()
        .all(|(c, &h)| h > 0.0 && h.is_finite() && magnitude(c) <= limit * f64::from(h));
    if fits {
        return (half, bias_type);
    }
    let raised = products
        .iter()
        .enumerate()
        .map(|(c, &p)| {
            let scale = f64::from(p).max(magnitude(c) / limit * 1.0001) as f32;
            if scale == 0.0 { 1.0 } else { scale }
        })
        .collect();
    (raised, DataType::Float32)
}
