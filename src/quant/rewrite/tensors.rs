//! The protos the rewrite adds: quantized tensors, scales, zero points and Q/DQ nodes.

use crate::model::proto::{AttributeProto, NodeProto, TensorProto, attribute_proto::AttributeType};
use crate::model::tensor::array;
use crate::model::{DataType, TensorArray};
use crate::quant::scale::ScaleZp;
use crate::recipe::QuantType;

/// A quantized tensor stored directly in `qtype`'s storage type (never through a wide
/// buffer), filled in parallel row by row: `value(row, column)` gives the integer (the FP8
/// bits for FP8) of each element, rows being `row_len` consecutive elements in logical order
/// (the last one may be shorter).
pub(super) fn collect_quantized(
    qtype: QuantType,
    shape: &[usize],
    row_len: usize,
    value: impl Fn(usize, usize) -> i64 + Sync + Send,
) -> TensorArray {
    let len: usize = shape.iter().product();
    let shape = shape.to_vec();
    let row_len = row_len.max(1);
    match qtype {
        QuantType::Uint8 => {
            TensorArray::Uint8(array(shape, rows(len, row_len, &value, |v| v as u8)))
        }
        QuantType::Int8 => TensorArray::Int8(array(shape, rows(len, row_len, &value, |v| v as i8))),
        QuantType::Uint16 => {
            TensorArray::Uint16(array(shape, rows(len, row_len, &value, |v| v as u16)))
        }
        QuantType::Int16 => {
            TensorArray::Int16(array(shape, rows(len, row_len, &value, |v| v as i16)))
        }
        QuantType::Int4 => TensorArray::Int4(array(shape, rows(len, row_len, &value, |v| v as i8))),
        QuantType::Uint4 => {
            TensorArray::Uint4(array(shape, rows(len, row_len, &value, |v| v as u8)))
        }
        QuantType::Float8e4m3fn => TensorArray::Float8E4M3FN(array(
            shape,
            rows(len, row_len, &value, |v| float8::F8E4M3::from_bits(v as u8)),
        )),
    }
}

/// `len` values, `row_len` to a row, each `store(value(row, column))`, rows in parallel.
fn rows<T: Copy + Default + Send>(
    len: usize,
    row_len: usize,
    value: &(impl Fn(usize, usize) -> i64 + Sync),
    store: impl Fn(i64) -> T + Sync,
) -> Vec<T> {
    use rayon::prelude::*;
    let mut out = vec![T::default(); len];
    out.par_chunks_mut(row_len)
        .enumerate()
        .for_each(|(row, chunk)| {
            for (column, slot) in chunk.iter_mut().enumerate() {
                *slot = store(value(row, column));
            }
        });
    out
}

/// `shape`, or a scalar for one value and a vector otherwise.
fn shape_or_default(shape: Option<Vec<usize>>, len: usize) -> Vec<usize> {
    shape.unwrap_or_else(|| if len == 1 { vec![] } else { vec![len] })
}

/// Zero points as a tensor of the quantized type.
pub(crate) fn zero_point_tensor(
    name: &str,
    params: &[ScaleZp],
    qtype: QuantType,
    shape: Option<Vec<usize>>,
) -> TensorProto {
    let values: Vec<i64> = params.iter().map(|p| p.zero_point).collect();
    let shape = shape_or_default(shape, values.len());
    let len = values.len();
    collect_quantized(qtype, &shape, len, |_, i| values[i]).to_proto(name)
}

/// Scales as a tensor of `float_type` (float32, float16 or bfloat16; the scales are already
/// values of that type, see [`crate::quant::scale::stored_scale`]).
pub(crate) fn scale_tensor(
    name: &str,
    params: &[ScaleZp],
    shape: Option<Vec<usize>>,
    float_type: DataType,
) -> TensorProto {
    let values: Vec<f32> = params.iter().map(|p| p.scale).collect();
    let shape = shape_or_default(shape, values.len());
    TensorArray::Float32(array(shape, values))
        .cast_float(float_type)
        .to_proto(name)
}

/// A node of the default domain.
pub(crate) fn node(
    op: &str,
    name: &str,
    inputs: Vec<String>,
    outputs: Vec<String>,
    attributes: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        op_type: Some(op.to_owned()),
        name: Some(name.to_owned()),
        input: inputs,
        output: outputs,
        attribute: attributes,
        ..Default::default()
    }
}

/// An integer attribute.
pub(crate) fn int_attr(name: &str, value: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.to_owned()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(value),
        ..Default::default()
    }
}

/// A DequantizeLinear reading `{prefix}` initializers: `inputs` are the quantized values,
/// scale and zero point.
pub(super) fn dequantize(
    name: &str,
    inputs: [String; 3],
    output: String,
    attributes: Vec<AttributeProto>,
) -> NodeProto {
    node(
        "DequantizeLinear",
        name,
        inputs.to_vec(),
        vec![output],
        attributes,
    )
}
