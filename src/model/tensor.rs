//! Conversion between ONNX `TensorProto`s and `ndarray` arrays.
//!
//! Reads `raw_data` (little-endian, 4-bit types packed two per byte, low nibble first), the
//! typed fields (`float_data`, `int32_data`, ...) as the ONNX schema assigns them, and external
//! data through the caller. Writes always use `raw_data`, as `onnx.numpy_helper` does.
//! Sizes are checked against the data present before anything is allocated, so a tensor that
//! claims 2^40 elements costs an error, not memory.

use bytes::Bytes;
use float8::F8E4M3;
use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};

use super::dtype::DataType;
use super::error::ModelError;
use super::external::element_count;
use super::proto::TensorProto;

/// A tensor's values in memory, typed by its ONNX element type.
///
/// The 4-bit types are held unpacked, one element per `i8`/`u8`.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorArray {
    /// float32 values.
    Float32(ArrayD<f32>),
    /// float16 values.
    Float16(ArrayD<f16>),
    /// bfloat16 values.
    BFloat16(ArrayD<bf16>),
    /// float64 values.
    Float64(ArrayD<f64>),
    /// float8 E4M3FN values.
    Float8E4M3FN(ArrayD<F8E4M3>),
    /// int4 values, unpacked (each in -8..=7).
    Int4(ArrayD<i8>),
    /// uint4 values, unpacked (each in 0..=15).
    Uint4(ArrayD<u8>),
    /// int8 values.
    Int8(ArrayD<i8>),
    /// uint8 values.
    Uint8(ArrayD<u8>),
    /// int16 values.
    Int16(ArrayD<i16>),
    /// uint16 values.
    Uint16(ArrayD<u16>),
    /// int32 values.
    Int32(ArrayD<i32>),
    /// uint32 values.
    Uint32(ArrayD<u32>),
    /// int64 values.
    Int64(ArrayD<i64>),
    /// uint64 values.
    Uint64(ArrayD<u64>),
    /// bool values.
    Bool(ArrayD<bool>),
}

/// Applies `$body` to the array inside any variant, binding it to `$a`.
macro_rules! with_array {
    ($value:expr, $a:ident => $body:expr) => {
        match $value {
            TensorArray::Float32($a) => $body,
            TensorArray::Float16($a) => $body,
            TensorArray::BFloat16($a) => $body,
            TensorArray::Float64($a) => $body,
            TensorArray::Float8E4M3FN($a) => $body,
            TensorArray::Int4($a) => $body,
            TensorArray::Uint4($a) => $body,
            TensorArray::Int8($a) => $body,
            TensorArray::Uint8($a) => $body,
            TensorArray::Int16($a) => $body,
            TensorArray::Uint16($a) => $body,
            TensorArray::Int32($a) => $body,
            TensorArray::Uint32($a) => $body,
            TensorArray::Int64($a) => $body,
            TensorArray::Uint64($a) => $body,
            TensorArray::Bool($a) => $body,
        }
    };
}

/// Applies `$body` to the array inside any variant and wraps its result in the same variant.
macro_rules! map_array {
    ($value:expr, $a:ident => $body:expr) => {
        match $value {
            TensorArray::Float32($a) => TensorArray::Float32($body),
            TensorArray::Float16($a) => TensorArray::Float16($body),
            TensorArray::BFloat16($a) => TensorArray::BFloat16($body),
            TensorArray::Float64($a) => TensorArray::Float64($body),
            TensorArray::Float8E4M3FN($a) => TensorArray::Float8E4M3FN($body),
            TensorArray::Int4($a) => TensorArray::Int4($body),
            TensorArray::Uint4($a) => TensorArray::Uint4($body),
            TensorArray::Int8($a) => TensorArray::Int8($body),
            TensorArray::Uint8($a) => TensorArray::Uint8($body),
            TensorArray::Int16($a) => TensorArray::Int16($body),
            TensorArray::Uint16($a) => TensorArray::Uint16($body),
            TensorArray::Int32($a) => TensorArray::Int32($body),
            TensorArray::Uint32($a) => TensorArray::Uint32($body),
            TensorArray::Int64($a) => TensorArray::Int64($body),
            TensorArray::Uint64($a) => TensorArray::Uint64($body),
            TensorArray::Bool($a) => TensorArray::Bool($body),
        }
    };
}

impl TensorArray {
    /// `parts` joined along axis 0 (`None` when they differ in type or in another axis, or
    /// have no axis).
    pub fn concatenate(parts: &[&TensorArray]) -> Option<TensorArray> {
        macro_rules! join {
            ($($variant:ident),*) => {
                match parts.first()? {
                    $(TensorArray::$variant(_) => {
                        let views = parts
                            .iter()
                            .map(|p| match p {
                                TensorArray::$variant(a) => Some(a.view()),
                                _ => None,
                            })
                            .collect::<Option<Vec<_>>>()?;
                        ndarray::concatenate(ndarray::Axis(0), &views)
                            .ok()
                            .map(TensorArray::$variant)
                    })*
                }
            };
        }
        join!(
            Float32,
            Float16,
            BFloat16,
            Float64,
            Float8E4M3FN,
            Int4,
            Uint4,
            Int8,
            Uint8,
            Int16,
            Uint16,
            Int32,
            Uint32,
            Int64,
            Uint64,
            Bool
        )
    }

    /// The element type.
    pub fn dtype(&self) -> DataType {
        match self {
            TensorArray::Float32(_) => DataType::Float32,
            TensorArray::Float16(_) => DataType::Float16,
            TensorArray::BFloat16(_) => DataType::BFloat16,
            TensorArray::Float64(_) => DataType::Float64,
            TensorArray::Float8E4M3FN(_) => DataType::Float8E4M3FN,
            TensorArray::Int4(_) => DataType::Int4,
            TensorArray::Uint4(_) => DataType::Uint4,
            TensorArray::Int8(_) => DataType::Int8,
            TensorArray::Uint8(_) => DataType::Uint8,
            TensorArray::Int16(_) => DataType::Int16,
            TensorArray::Uint16(_) => DataType::Uint16,
            TensorArray::Int32(_) => DataType::Int32,
            TensorArray::Uint32(_) => DataType::Uint32,
            TensorArray::Int64(_) => DataType::Int64,
            TensorArray::Uint64(_) => DataType::Uint64,
            TensorArray::Bool(_) => DataType::Bool,
        }
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        with_array!(self, a => a.shape())
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        with_array!(self, a => a.len())
    }

    /// True when the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A float array as `to` (float32, float16, bfloat16 or float64; rounded to nearest);
    /// any other array, or another target, is returned as it is.
    pub fn cast_float(&self, to: DataType) -> TensorArray {
        if !self.dtype().is_plain_float() || self.dtype() == to {
            return self.clone();
        }
        if let (TensorArray::Float64(a), DataType::Float16 | DataType::BFloat16) = (self, to) {
            // Straight from f64, so a value is rounded once.
            return match to {
                DataType::Float16 => TensorArray::Float16(a.mapv(f16::from_f64)),
                _ => TensorArray::BFloat16(a.mapv(bf16::from_f64)),
            };
        }
        let wide = self.to_f32();
        match to {
            DataType::Float32 => TensorArray::Float32(wide),
            DataType::Float16 => TensorArray::Float16(wide.mapv(f16::from_f32)),
            DataType::BFloat16 => TensorArray::BFloat16(wide.mapv(bf16::from_f32)),
            DataType::Float64 => match self {
                TensorArray::Float16(a) => TensorArray::Float64(a.mapv(f16::to_f64)),
                TensorArray::BFloat16(a) => TensorArray::Float64(a.mapv(bf16::to_f64)),
                _ => TensorArray::Float64(wide.mapv(f64::from)),
            },
            _ => self.clone(),
        }
    }

    /// The values in row-major order laid out as `shape` (ONNX's Reshape of a constant);
    /// `None` when `shape` holds another number of elements.
    pub fn reshaped(&self, shape: &[usize]) -> Option<TensorArray> {
        if shape.iter().product::<usize>() != self.len() {
            return None;
        }
        Some(map_array!(self, a => {
            ArrayD::from_shape_vec(IxDyn(shape), a.iter().cloned().collect()).ok()?
        }))
    }

    /// The array with its axes reversed (a matrix transposed), in standard layout.
    pub fn transposed(&self) -> TensorArray {
        map_array!(self, a => a.t().as_standard_layout().into_owned())
    }

    /// The values as f32, moving a float32 array rather than copying it (see [`Self::to_f32`]).
    pub fn into_f32(self) -> ArrayD<f32> {
        match self {
            TensorArray::Float32(a) => a,
            other => other.to_f32(),
        }
    }

    /// The values as f32 (integers and bools converted, wider floats rounded), for statistics
    /// and quantization of any weight type.
    pub fn to_f32(&self) -> ArrayD<f32> {
        match self {
            TensorArray::Float32(a) => a.clone(),
            TensorArray::Float16(a) => a.mapv(f16::to_f32),
            TensorArray::BFloat16(a) => a.mapv(bf16::to_f32),
            TensorArray::Float64(a) => a.mapv(|v| v as f32),
            TensorArray::Float8E4M3FN(a) => a.mapv(|v| v.to_f32()),
            TensorArray::Int4(a) | TensorArray::Int8(a) => a.mapv(f32::from),
            TensorArray::Uint4(a) | TensorArray::Uint8(a) => a.mapv(f32::from),
            TensorArray::Int16(a) => a.mapv(f32::from),
            TensorArray::Uint16(a) => a.mapv(f32::from),
            TensorArray::Int32(a) => a.mapv(|v| v as f32),
            TensorArray::Uint32(a) => a.mapv(|v| v as f32),
            TensorArray::Int64(a) => a.mapv(|v| v as f32),
            TensorArray::Uint64(a) => a.mapv(|v| v as f32),
            TensorArray::Bool(a) => a.mapv(|v| if v { 1.0 } else { 0.0 }),
        }
    }

    /// Decodes `tensor`. `external` holds the bytes of an externally stored tensor (resolved by
    /// the [`Model`](super::Model)); pass `None` for inline tensors.
    pub fn from_proto(tensor: &TensorProto, external: Option<&Bytes>) -> Result<Self, ModelError> {
        let name = tensor.name();
        let dtype = DataType::from_onnx(tensor.data_type()).map_err(|source| {
            ModelError::UnsupportedType {
                tensor: name.to_owned(),
                source,
            }
        })?;
        let count = element_count(name, &tensor.dims)?;
        let shape: Vec<usize> = tensor.dims.iter().map(|&d| d as usize).collect();
        let raw = external.or(tensor.raw_data.as_ref().filter(|r| !r.is_empty()));
        let length_error = |expected: u64, actual: u64, unit| ModelError::DataLength {
            tensor: name.to_owned(),
            dims: tensor.dims.clone(),
            dtype: dtype.name().to_owned(),
            expected,
            actual,
            unit,
        };
        if let Some(raw) = raw {
            let expected = dtype.storage_bytes(count);
            if raw.len() as u64 != expected {
                return Err(length_error(expected, raw.len() as u64, "bytes"));
            }
            return Ok(decode_raw(dtype, shape, count as usize, raw));
        }
        let typed = TypedField::of(tensor, dtype);
        let needed = match dtype {
            DataType::Int4 | DataType::Uint4 => count.div_ceil(2),
            _ => count,
        };
        if typed.len() as u64 != needed {
            return Err(length_error(needed, typed.len() as u64, "values"));
        }
        Ok(decode_typed(dtype, shape, count as usize, &typed))
    }

    /// Encodes the array as a `TensorProto` named `name`, with the data in `raw_data`.
    pub fn to_proto(&self, name: &str) -> TensorProto {
        let dims = self.shape().iter().map(|&d| d as i64).collect();
        let raw = encode_raw(self);
        TensorProto {
            name: Some(name.to_owned()),
            dims,
            data_type: Some(self.dtype().to_onnx()),
            raw_data: Some(Bytes::from(raw)),
            ..Default::default()
        }
    }
}

/// Which typed field of a `TensorProto` holds a given element type, per the ONNX schema.
enum TypedField<'a> {
    Float(&'a [f32]),
    Double(&'a [f64]),
    Int32(&'a [i32]),
    Int64(&'a [i64]),
    Uint64(&'a [u64]),
}

impl<'a> TypedField<'a> {
    fn of(tensor: &'a TensorProto, dtype: DataType) -> Self {
        match dtype {
            DataType::Float32 => TypedField::Float(&tensor.float_data),
            DataType::Float64 => TypedField::Double(&tensor.double_data),
            DataType::Int64 => TypedField::Int64(&tensor.int64_data),
            DataType::Uint32 | DataType::Uint64 => TypedField::Uint64(&tensor.uint64_data),
            _ => TypedField::Int32(&tensor.int32_data),
        }
    }

    fn len(&self) -> usize {
        match self {
            TypedField::Float(v) => v.len(),
            TypedField::Double(v) => v.len(),
            TypedField::Int32(v) => v.len(),
            TypedField::Int64(v) => v.len(),
            TypedField::Uint64(v) => v.len(),
        }
    }

    fn int32(&self) -> &[i32] {
        match self {
            TypedField::Int32(v) => v,
            _ => &[],
        }
    }
}

/// An array of `shape` from `values`, whose length the caller has already matched to the
/// shape (a mismatch is a bug in the caller, never a property of the input data).
pub(crate) fn array<T>(shape: Vec<usize>, values: Vec<T>) -> ArrayD<T> {
    ArrayD::from_shape_vec(IxDyn(&shape), values).unwrap_or_else(|_| unreachable!("length checked"))
}

fn unpack_nibbles(bytes: impl Iterator<Item = u8>, count: usize) -> Vec<u8> {
    bytes.flat_map(|b| [b & 0x0F, b >> 4]).take(count).collect()
}

fn sign_extend_4(v: u8) -> i8 {
    ((v << 4) as i8) >> 4
}

fn decode_raw(dtype: DataType, shape: Vec<usize>, count: usize, raw: &[u8]) -> TensorArray {
    macro_rules! le {
        ($t:ty, $n:literal) => {
            raw.chunks_exact($n)
                .map(|c| {
                    <$t>::from_le_bytes(c.try_into().unwrap_or_else(|_| unreachable!("chunk size")))
                })
                .collect::<Vec<$t>>()
        };
    }
    match dtype {
        DataType::Float32 => TensorArray::Float32(array(shape, le!(f32, 4))),
        DataType::Float64 => TensorArray::Float64(array(shape, le!(f64, 8))),
        DataType::Float16 => TensorArray::Float16(array(
            shape,
            le!(u16, 2).into_iter().map(f16::from_bits).collect(),
        )),
        DataType::BFloat16 => TensorArray::BFloat16(array(
            shape,
            le!(u16, 2).into_iter().map(bf16::from_bits).collect(),
        )),
        DataType::Float8E4M3FN => TensorArray::Float8E4M3FN(array(
            shape,
            raw.iter().map(|&b| F8E4M3::from_bits(b)).collect(),
        )),
        DataType::Int4 => TensorArray::Int4(array(
            shape,
            unpack_nibbles(raw.iter().copied(), count)
                .into_iter()
                .map(sign_extend_4)
                .collect(),
        )),
        DataType::Uint4 => {
            TensorArray::Uint4(array(shape, unpack_nibbles(raw.iter().copied(), count)))
        }
        DataType::Int8 => TensorArray::Int8(array(shape, raw.iter().map(|&b| b as i8).collect())),
        DataType::Uint8 => TensorArray::Uint8(array(shape, raw.to_vec())),
        DataType::Int16 => TensorArray::Int16(array(shape, le!(i16, 2))),
        DataType::Uint16 => TensorArray::Uint16(array(shape, le!(u16, 2))),
        DataType::Int32 => TensorArray::Int32(array(shape, le!(i32, 4))),
        DataType::Uint32 => TensorArray::Uint32(array(shape, le!(u32, 4))),
        DataType::Int64 => TensorArray::Int64(array(shape, le!(i64, 8))),
        DataType::Uint64 => TensorArray::Uint64(array(shape, le!(u64, 8))),
        DataType::Bool => TensorArray::Bool(array(shape, raw.iter().map(|&b| b != 0).collect())),
    }
}

fn decode_typed(
    dtype: DataType,
    shape: Vec<usize>,
    count: usize,
    typed: &TypedField<'_>,
) -> TensorArray {
    let ints = typed.int32();
    match (dtype, typed) {
        (DataType::Float32, TypedField::Float(v)) => TensorArray::Float32(array(shape, v.to_vec())),
        (DataType::Float64, TypedField::Double(v)) => {
            TensorArray::Float64(array(shape, v.to_vec()))
        }
        (DataType::Int64, TypedField::Int64(v)) => TensorArray::Int64(array(shape, v.to_vec())),
        (DataType::Uint32, TypedField::Uint64(v)) => {
            TensorArray::Uint32(array(shape, v.iter().map(|&x| x as u32).collect()))
        }
        (DataType::Uint64, TypedField::Uint64(v)) => TensorArray::Uint64(array(shape, v.to_vec())),
        (DataType::Float16, _) => TensorArray::Float16(array(
            shape,
            ints.iter().map(|&x| f16::from_bits(x as u16)).collect(),
        )),
        (DataType::BFloat16, _) => TensorArray::BFloat16(array(
            shape,
            ints.iter().map(|&x| bf16::from_bits(x as u16)).collect(),
        )),
        (DataType::Float8E4M3FN, _) => TensorArray::Float8E4M3FN(array(
            shape,
            ints.iter().map(|&x| F8E4M3::from_bits(x as u8)).collect(),
        )),
        (DataType::Int4, _) => TensorArray::Int4(array(
            shape,
            unpack_nibbles(ints.iter().map(|&x| x as u8), count)
                .into_iter()
                .map(sign_extend_4)
                .collect(),
        )),
        (DataType::Uint4, _) => TensorArray::Uint4(array(
            shape,
            unpack_nibbles(ints.iter().map(|&x| x as u8), count),
        )),
        (DataType::Int8, _) => {
            TensorArray::Int8(array(shape, ints.iter().map(|&x| x as i8).collect()))
        }
        (DataType::Uint8, _) => {
            TensorArray::Uint8(array(shape, ints.iter().map(|&x| x as u8).collect()))
        }
        (DataType::Int16, _) => {
            TensorArray::Int16(array(shape, ints.iter().map(|&x| x as i16).collect()))
        }
        (DataType::Uint16, _) => {
            TensorArray::Uint16(array(shape, ints.iter().map(|&x| x as u16).collect()))
        }
        (DataType::Int32, _) => TensorArray::Int32(array(shape, ints.to_vec())),
        (DataType::Bool, _) => {
            TensorArray::Bool(array(shape, ints.iter().map(|&x| x != 0).collect()))
        }
        // `TypedField::of` pairs every remaining type with the field matched above.
        _ => unreachable!("typed field chosen by TypedField::of"),
    }
}

fn pack_nibbles(values: impl Iterator<Item = u8>) -> Vec<u8> {
    let nibbles: Vec<u8> = values.map(|v| v & 0x0F).collect();
    nibbles
        .chunks(2)
        .map(|p| p[0] | (p.get(1).copied().unwrap_or(0) << 4))
        .collect()
}

fn encode_raw(value: &TensorArray) -> Vec<u8> {
    // Elements in logical order through a slice (ndarray's n-dimensional iterator costs a
    // branch per element; these arrays are standard-layout, so no copy is made).
    macro_rules! flat {
        ($a:expr) => {
            $a.as_standard_layout().as_slice().unwrap_or(&[]).iter()
        };
    }
    macro_rules! le {
        ($a:expr) => {
            flat!($a).flat_map(|v| v.to_le_bytes()).collect()
        };
    }
    match value {
        TensorArray::Float32(a) => le!(a),
        TensorArray::Float64(a) => le!(a),
        TensorArray::Float16(a) => flat!(a).flat_map(|v| v.to_bits().to_le_bytes()).collect(),
        TensorArray::BFloat16(a) => flat!(a).flat_map(|v| v.to_bits().to_le_bytes()).collect(),
        TensorArray::Float8E4M3FN(a) => flat!(a).map(|v| v.to_bits()).collect(),
        TensorArray::Int4(a) => pack_nibbles(flat!(a).map(|&v| v as u8)),
        TensorArray::Uint4(a) => pack_nibbles(flat!(a).copied()),
        TensorArray::Int8(a) => flat!(a).map(|&v| v as u8).collect(),
        TensorArray::Uint8(a) => flat!(a).copied().collect(),
        TensorArray::Int16(a) => le!(a),
        TensorArray::Uint16(a) => le!(a),
        TensorArray::Int32(a) => le!(a),
        TensorArray::Uint32(a) => le!(a),
        TensorArray::Int64(a) => le!(a),
        TensorArray::Uint64(a) => le!(a),
        TensorArray::Bool(a) => flat!(a).map(|&v| u8::from(v)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(value: TensorArray) {
        let proto = value.to_proto("t");
        let back = TensorArray::from_proto(&proto, None).unwrap();
        assert_eq!(back, value);
    }

    #[test]
    fn every_type_round_trips_through_raw_data() {
        let s = |n| IxDyn(&[n]);
        round_trip(TensorArray::Float32(
            ArrayD::from_shape_vec(s(3), vec![1.5, -2.0, f32::MAX]).unwrap(),
        ));
        round_trip(TensorArray::Float16(ArrayD::from_elem(
            s(2),
            f16::from_f32(0.5),
        )));
        round_trip(TensorArray::BFloat16(ArrayD::from_elem(
            s(2),
            bf16::from_f32(-3.0),
        )));
        round_trip(TensorArray::Float64(ArrayD::from_elem(s(2), 1e300)));
        round_trip(TensorArray::Float8E4M3FN(ArrayD::from_elem(
            s(2),
            F8E4M3::from_f32(448.0),
        )));
        round_trip(TensorArray::Int4(
            ArrayD::from_shape_vec(s(3), vec![-8, 7, -1]).unwrap(),
        ));
        round_trip(TensorArray::Uint4(
            ArrayD::from_shape_vec(s(3), vec![0, 15, 9]).unwrap(),
        ));
        round_trip(TensorArray::Int8(
            ArrayD::from_shape_vec(s(2), vec![-128, 127]).unwrap(),
        ));
        round_trip(TensorArray::Uint8(
            ArrayD::from_shape_vec(s(2), vec![0, 255]).unwrap(),
        ));
        round_trip(TensorArray::Int16(ArrayD::from_elem(s(1), -300)));
        round_trip(TensorArray::Uint16(ArrayD::from_elem(s(1), 65535)));
        round_trip(TensorArray::Int32(ArrayD::from_elem(s(1), i32::MIN)));
        round_trip(TensorArray::Uint32(ArrayD::from_elem(s(1), u32::MAX)));
        round_trip(TensorArray::Int64(ArrayD::from_elem(s(1), i64::MIN)));
        round_trip(TensorArray::Uint64(ArrayD::from_elem(s(1), u64::MAX)));
        round_trip(TensorArray::Bool(
            ArrayD::from_shape_vec(s(2), vec![true, false]).unwrap(),
        ));
    }

    #[test]
    fn int4_packs_low_nibble_first() {
        let value = TensorArray::Int4(ArrayD::from_shape_vec(IxDyn(&[3]), vec![1, -1, 2]).unwrap());
        let proto = value.to_proto("t");
        assert_eq!(proto.raw_data.as_deref(), Some(&[0xF1u8, 0x02][..]));
    }

    #[test]
    fn fp8_saturates_and_decodes_448() {
        assert_eq!(F8E4M3::from_f32(1e6).to_bits(), 0x7E);
        assert_eq!(F8E4M3::from_bits(0x7E).to_f32(), 448.0);
    }

    #[test]
    fn typed_fields_are_read_as_the_schema_assigns_them() {
        let t = TensorProto {
            name: Some("h".into()),
            dims: vec![2],
            data_type: Some(DataType::Float16.to_onnx()),
            int32_data: vec![
                i32::from(f16::from_f32(1.0).to_bits()),
                i32::from(f16::from_f32(-2.0).to_bits()),
            ],
            ..Default::default()
        };
        let a = TensorArray::from_proto(&t, None).unwrap();
        assert_eq!(a.to_f32().as_slice().unwrap(), &[1.0, -2.0]);
        let t = TensorProto {
            name: Some("i4".into()),
            dims: vec![3],
            data_type: Some(DataType::Int4.to_onnx()),
            int32_data: vec![0xF1, 0x02],
            ..Default::default()
        };
        let a = TensorArray::from_proto(&t, None).unwrap();
        assert_eq!(
            a,
            TensorArray::Int4(ArrayD::from_shape_vec(IxDyn(&[3]), vec![1, -1, 2]).unwrap())
        );
    }

    #[test]
    fn wrong_lengths_and_huge_dims_are_errors_not_allocations() {
        let t = TensorProto {
            name: Some("w".into()),
            dims: vec![1 << 20, 1 << 20],
            data_type: Some(DataType::Float32.to_onnx()),
            raw_data: Some(Bytes::from_static(&[0; 8])),
            ..Default::default()
        };
        let err = TensorArray::from_proto(&t, None).unwrap_err();
        assert!(matches!(err, ModelError::DataLength { .. }), "{err}");
        let t = TensorProto {
            name: Some("w".into()),
            dims: vec![2],
            data_type: Some(DataType::Float32.to_onnx()),
            float_data: vec![1.0],
            ..Default::default()
        };
        assert!(
            TensorArray::from_proto(&t, None)
                .unwrap_err()
                .to_string()
                .contains("needs 2 values")
        );
    }

    #[test]
    fn unsupported_types_name_the_tensor() {
        let t = TensorProto {
            name: Some("s".into()),
            data_type: Some(8),
            ..Default::default()
        };
        let err = TensorArray::from_proto(&t, None).unwrap_err();
        assert!(
            err.to_string().contains("'s'") && err.to_string().contains("STRING"),
            "{err}"
        );
    }
}
