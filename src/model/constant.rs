//! Constant nodes as weights: the tensor a `Constant` node produces, whichever attribute holds it.

use ndarray::{ArrayD, IxDyn};

use super::proto::{NodeProto, TensorProto};
use super::tensor::TensorArray;
use crate::model::ops;

/// The tensor a Constant node outputs, from its `value`, `value_float`, `value_floats`,
/// `value_int` or `value_ints` attribute, named after the node's output. `None` for other
/// attributes (strings, sparse tensors) and for nodes that are not Constants.
pub fn constant_tensor(node: &NodeProto) -> Option<TensorProto> {
    if node.op_type() != ops::CONSTANT {
        return None;
    }
    let name = node.output.first()?.clone();
    let attribute = node.attribute.first()?;
    let array = match attribute.name() {
        "value" => {
            let mut tensor = attribute.t.clone()?;
            tensor.name = Some(name);
            return Some(tensor);
        }
        "value_float" => TensorArray::Float32(ArrayD::from_elem(IxDyn(&[]), attribute.f())),
        "value_floats" => TensorArray::Float32(
            ArrayD::from_shape_vec(IxDyn(&[attribute.floats.len()]), attribute.floats.clone())
                .ok()?,
        ),
        "value_int" => TensorArray::Int64(ArrayD::from_elem(IxDyn(&[]), attribute.i())),
        "value_ints" => TensorArray::Int64(
            ArrayD::from_shape_vec(IxDyn(&[attribute.ints.len()]), attribute.ints.clone()).ok()?,
        ),
        _ => return None,
    };
    Some(array.to_proto(&name))
}

/// The element type code and dims of the tensor a Constant node outputs, read from its
/// attribute without copying the values; `None` where [`constant_tensor`] gives none.
pub fn constant_type_and_dims(node: &NodeProto) -> Option<(i32, Vec<i64>)> {
    if node.op_type() != ops::CONSTANT {
        return None;
    }
    let attribute = node.attribute.first()?;
    let (float, int) = (
        super::DataType::Float32.to_onnx(),
        super::DataType::Int64.to_onnx(),
    );
    let length = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    match attribute.name() {
        "value" => attribute
            .t
            .as_ref()
            .map(|t| (t.data_type(), t.dims.clone())),
        "value_float" => Some((float, Vec::new())),
        "value_floats" => Some((float, vec![length(attribute.floats.len())])),
        "value_int" => Some((int, Vec::new())),
        "value_ints" => Some((int, vec![length(attribute.ints.len())])),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::proto::AttributeProto;

    #[test]
    fn every_numeric_constant_form_is_read() {
        let node = |attribute: AttributeProto| NodeProto {
            op_type: Some("Constant".into()),
            output: vec!["c".into()],
            attribute: vec![attribute],
            ..Default::default()
        };
        let floats = node(AttributeProto {
            name: Some("value_floats".into()),
            floats: vec![1.0, 2.0],
            ..Default::default()
        });
        let t = constant_tensor(&floats).unwrap();
        assert_eq!(t.name(), "c");
        assert_eq!(
            TensorArray::from_proto(&t, None)
                .unwrap()
                .to_f32()
                .as_slice()
                .unwrap(),
            &[1.0, 2.0]
        );
        let int = node(AttributeProto {
            name: Some("value_int".into()),
            i: Some(7),
            ..Default::default()
        });
        let t = constant_tensor(&int).unwrap();
        assert_eq!(
            TensorArray::from_proto(&t, None).unwrap(),
            TensorArray::Int64(ArrayD::from_elem(IxDyn(&[]), 7))
        );
        let strings = node(AttributeProto {
            name: Some("value_strings".into()),
            ..Default::default()
        });
        assert!(constant_tensor(&strings).is_none());
    }
}
