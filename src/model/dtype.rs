//! ONNX element types: the subset the engine understands, their names and sizes.

use std::fmt;

use super::proto::tensor_proto::DataType as Proto;

/// An ONNX tensor element type that qdq-studio can read, write and convert.
///
/// Types the schema knows but the engine does not (strings, complex numbers, the 2/6-bit and
/// E5M2/FNUZ float8 families) are reported as [`UnsupportedDataType`] instead of being guessed.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum DataType {
    /// IEEE 754 binary32.
    Float32,
    /// IEEE 754 binary16.
    Float16,
    /// bfloat16 (8-bit exponent, 7-bit mantissa).
    BFloat16,
    /// IEEE 754 binary64.
    Float64,
    /// 8-bit float E4M3 with no infinities (the "FN" variant used for FP8 quantization).
    Float8E4M3FN,
    /// Signed 4-bit integer, two per byte, low nibble first.
    Int4,
    /// Unsigned 4-bit integer, two per byte, low nibble first.
    Uint4,
    /// Signed 8-bit integer.
    Int8,
    /// Unsigned 8-bit integer.
    Uint8,
    /// Signed 16-bit integer.
    Int16,
    /// Unsigned 16-bit integer.
    Uint16,
    /// Signed 32-bit integer.
    Int32,
    /// Unsigned 32-bit integer.
    Uint32,
    /// Signed 64-bit integer.
    Int64,
    /// Unsigned 64-bit integer.
    Uint64,
    /// Boolean, one byte per element.
    Bool,
}

/// An element type code found in a model that the engine does not handle.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported tensor element type {name} (ONNX code {code})")]
pub struct UnsupportedDataType {
    /// The raw `TensorProto.DataType` code.
    pub code: i32,
    /// The schema's name for the code, or `unknown` for codes the schema does not define.
    pub name: String,
}

impl DataType {
    /// Every supported type, in a stable order (used by tests and UIs).
    pub const ALL: [DataType; 16] = [
        DataType::Float32,
        DataType::Float16,
        DataType::BFloat16,
        DataType::Float64,
        DataType::Float8E4M3FN,
        DataType::Int4,
        DataType::Uint4,
        DataType::Int8,
        DataType::Uint8,
        DataType::Int16,
        DataType::Uint16,
        DataType::Int32,
        DataType::Uint32,
        DataType::Int64,
        DataType::Uint64,
        DataType::Bool,
    ];

    /// Maps an ONNX `TensorProto.DataType` code to a supported type.
    pub fn from_onnx(code: i32) -> Result<Self, UnsupportedDataType> {
        let proto = Proto::try_from(code).ok();
        let dtype = match proto {
            Some(Proto::Float) => DataType::Float32,
            Some(Proto::Float16) => DataType::Float16,
            Some(Proto::Bfloat16) => DataType::BFloat16,
            Some(Proto::Double) => DataType::Float64,
            Some(Proto::Float8e4m3fn) => DataType::Float8E4M3FN,
            Some(Proto::Int4) => DataType::Int4,
            Some(Proto::Uint4) => DataType::Uint4,
            Some(Proto::Int8) => DataType::Int8,
            Some(Proto::Uint8) => DataType::Uint8,
            Some(Proto::Int16) => DataType::Int16,
            Some(Proto::Uint16) => DataType::Uint16,
            Some(Proto::Int32) => DataType::Int32,
            Some(Proto::Uint32) => DataType::Uint32,
            Some(Proto::Int64) => DataType::Int64,
            Some(Proto::Uint64) => DataType::Uint64,
            Some(Proto::Bool) => DataType::Bool,
            _ => {
                return Err(UnsupportedDataType {
                    code,
                    name: proto
                        .map_or_else(|| "unknown".to_owned(), |p| p.as_str_name().to_owned()),
                });
            }
        };
        Ok(dtype)
    }

    /// The ONNX `TensorProto.DataType` code of this type.
    pub fn to_onnx(self) -> i32 {
        let proto = match self {
            DataType::Float32 => Proto::Float,
            DataType::Float16 => Proto::Float16,
            DataType::BFloat16 => Proto::Bfloat16,
            DataType::Float64 => Proto::Double,
            DataType::Float8E4M3FN => Proto::Float8e4m3fn,
            DataType::Int4 => Proto::Int4,
            DataType::Uint4 => Proto::Uint4,
            DataType::Int8 => Proto::Int8,
            DataType::Uint8 => Proto::Uint8,
            DataType::Int16 => Proto::Int16,
            DataType::Uint16 => Proto::Uint16,
            DataType::Int32 => Proto::Int32,
            DataType::Uint32 => Proto::Uint32,
            DataType::Int64 => Proto::Int64,
            DataType::Uint64 => Proto::Uint64,
            DataType::Bool => Proto::Bool,
        };
        proto as i32
    }

    /// Size of one element in bits (4 for the packed 4-bit types).
    pub fn bits(self) -> usize {
        match self {
            DataType::Int4 | DataType::Uint4 => 4,
            DataType::Float8E4M3FN | DataType::Int8 | DataType::Uint8 | DataType::Bool => 8,
            DataType::Float16 | DataType::BFloat16 | DataType::Int16 | DataType::Uint16 => 16,
            DataType::Float32 | DataType::Int32 | DataType::Uint32 => 32,
            DataType::Float64 | DataType::Int64 | DataType::Uint64 => 64,
        }
    }

    /// Bytes needed to store `elements` elements in `raw_data` (packed types round up).
    pub fn storage_bytes(self, elements: u64) -> u64 {
        (elements * self.bits() as u64).div_ceil(8)
    }

    /// The integer range `[min, max]` of the 4/8/16-bit integer types a QuantizeLinear can
    /// produce (`None` for the others): the range a scale and zero point map back to floats.
    pub fn quantized_range(self) -> Option<(i64, i64)> {
        match self {
            DataType::Int4 => Some((-8, 7)),
            DataType::Uint4 => Some((0, 15)),
            DataType::Int8 => Some((-128, 127)),
            DataType::Uint8 => Some((0, 255)),
            DataType::Int16 => Some((-32768, 32767)),
            DataType::Uint16 => Some((0, 65535)),
            _ => None,
        }
    }

    /// True for the floating-point types, the ones calibration observes.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DataType::Float32
                | DataType::Float16
                | DataType::BFloat16
                | DataType::Float64
                | DataType::Float8E4M3FN
        )
    }

    /// True for float32, float16, bfloat16 and float64: the float types data arrives in and
    /// is converted between ([`crate::model::TensorArray::cast_float`]).
    pub fn is_plain_float(self) -> bool {
        matches!(
            self,
            DataType::Float32 | DataType::Float16 | DataType::BFloat16 | DataType::Float64
        )
    }

    /// True for the float types Q/DQ can quantize (QuantizeLinear takes float32, and float16
    /// and bfloat16 from opset 19; never float64, which stays in float).
    pub fn is_quantizable(self) -> bool {
        matches!(
            self,
            DataType::Float32 | DataType::Float16 | DataType::BFloat16
        )
    }

    /// The short lowercase name used in the CLI, recipes and reports (`float32`, `int4`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DataType::Float32 => "float32",
            DataType::Float16 => "float16",
            DataType::BFloat16 => "bfloat16",
            DataType::Float64 => "float64",
            DataType::Float8E4M3FN => "float8e4m3fn",
            DataType::Int4 => "int4",
            DataType::Uint4 => "uint4",
            DataType::Int8 => "int8",
            DataType::Uint8 => "uint8",
            DataType::Int16 => "int16",
            DataType::Uint16 => "uint16",
            DataType::Int32 => "int32",
            DataType::Uint32 => "uint32",
            DataType::Int64 => "int64",
            DataType::Uint64 => "uint64",
            DataType::Bool => "bool",
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Human name of any ONNX element code, supported or not (for messages and `inspect`).
pub fn onnx_type_name(code: i32) -> String {
    match DataType::from_onnx(code) {
        Ok(dtype) => dtype.name().to_owned(),
        Err(e) => e.name.to_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_for_every_supported_type() {
        for dtype in DataType::ALL {
            assert_eq!(DataType::from_onnx(dtype.to_onnx()), Ok(dtype));
        }
    }

    #[test]
    fn unknown_and_unsupported_codes_are_named() {
        let err = DataType::from_onnx(8).unwrap_err();
        assert_eq!(err.name, "STRING");
        let err = DataType::from_onnx(999).unwrap_err();
        assert_eq!(err.name, "unknown");
        assert!(err.to_string().contains("999"));
    }

    #[test]
    fn packed_storage_rounds_up() {
        assert_eq!(DataType::Int4.storage_bytes(3), 2);
        assert_eq!(DataType::Float16.storage_bytes(3), 6);
    }
}
