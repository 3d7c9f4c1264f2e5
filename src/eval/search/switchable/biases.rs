//! Int32 biases dequantized once, when the switchable model is built for accelerators
//! ([`crate::eval::search::switchable::Gating::Select`]).
//!
//! ONNX Runtime's CUDA provider registers no int32 `DequantizeLinear` (its kernels take int8,
//! uint8, int4 and float8), so a QDQ model's bias dequantization runs on the host and its
//! result is copied to the device on every run, a copy from pageable memory that waits for the
//! device's queue each time. The values are constants: writing them as float initializers
//! computed as ONNX Runtime computes them (the int32 value as a float times the scale, the
//! zero point 0) gives the same bits with no host node. The CPU's model keeps the nodes: there
//! they fuse into the integer kernels.

use std::collections::{HashMap, HashSet};

use ndarray::ArrayD;

use crate::model::TensorArray;
use crate::model::ops;
use crate::model::proto::{GraphProto, NodeProto, TensorProto};

/// Replaces every `DequantizeLinear` of an int32 initializer with a zero (or no) zero point
/// by a float initializer holding its output (the int32 initializer is left for the
/// caller's pruning of what no node reads).
pub(super) fn fold_int32_dequantization(graph: &mut GraphProto) {
    let nodes = std::mem::take(&mut graph.node);
    let mut folded = Vec::new();
    let constants: HashMap<&str, &TensorProto> =
        graph.initializer.iter().map(|t| (t.name(), t)).collect();
    let outputs: HashSet<&str> = graph.output.iter().map(|o| o.name()).collect();
    let kept = nodes
        .into_iter()
        .filter(|node| {
            let writes_output = node.output.iter().any(|o| outputs.contains(o.as_str()));
            match (!writes_output)
                .then(|| dequantized(node, &constants))
                .flatten()
            {
                Some(tensor) => {
                    folded.push(tensor);
                    false
                }
                None => true,
            }
        })
        .collect();
    graph.node = kept;
    graph.initializer.extend(folded);
}

/// The output of `node` as a float initializer, when it dequantizes an int32 initializer
/// with a zero point of 0 by a scale that is one value or one per element of a vector.
fn dequantized(node: &NodeProto, constants: &HashMap<&str, &TensorProto>) -> Option<TensorProto> {
    if node.op_type() != ops::DEQUANTIZE_LINEAR || !node.domain().is_empty() {
        return None;
    }
    let read = |at: usize| -> Option<TensorArray> {
        let name = node.input.get(at).filter(|n| !n.is_empty())?;
        TensorArray::from_proto(constants.get(name.as_str())?, None).ok()
    };
    let TensorArray::Int32(values) = read(0)? else {
        return None;
    };
    let TensorArray::Float32(scale) = read(1)? else {
        return None;
    };
    let zero_point_is_zero = match node.input.get(2).filter(|n| !n.is_empty()) {
        None => true,
        Some(_) => matches!(read(2)?, TensorArray::Int32(zp) if zp.iter().all(|&z| z == 0)),
    };
    if !zero_point_is_zero {
        return None;
    }
    let float = scaled(&values, &scale)?;
    Some(TensorArray::Float32(float).to_proto(node.output.first()?))
}

/// `values` times `scale` (one value, or one per element of a vector), element by element in
/// float as ONNX Runtime's `DequantizeLinear` computes it.
fn scaled(values: &ArrayD<i32>, scale: &ArrayD<f32>) -> Option<ArrayD<f32>> {
    if scale.len() == 1 {
        let s = *scale.iter().next()?;
        return Some(values.mapv(|v| v as f32 * s));
    }
    if values.ndim() != 1 || scale.ndim() != 1 || scale.len() != values.len() {
        return None;
    }
    let mut out = values.mapv(|v| v as f32);
    out.iter_mut().zip(scale.iter()).for_each(|(v, s)| *v *= s);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bias_scaled_per_channel_or_per_tensor_is_its_values_times_the_scale() {
        let values = ndarray::arr1(&[3, -2, 0]).into_dyn();
        let per_channel = ndarray::arr1(&[0.5f32, 0.25, 2.0]).into_dyn();
        let per_tensor = ndarray::arr0(0.1f32).into_dyn();
        assert_eq!(
            scaled(&values, &per_channel)
                .unwrap()
                .into_raw_vec_and_offset()
                .0,
            vec![1.5, -0.5, 0.0]
        );
        let expected: Vec<f32> = [3.0f32, -2.0, 0.0].iter().map(|v| v * 0.1).collect();
        assert_eq!(
            scaled(&values, &per_tensor)
                .unwrap()
                .into_raw_vec_and_offset()
                .0,
            expected
        );
        // A scale that matches neither is left to the node.
        let odd = ndarray::arr1(&[1.0f32, 2.0]).into_dyn();
        assert!(scaled(&values, &odd).is_none());
    }
}
