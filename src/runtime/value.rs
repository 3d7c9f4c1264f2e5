//! Conversions between the engine's arrays and ONNX Runtime values.

use std::borrow::Cow;

use ndarray::ArrayD;

use super::error::RuntimeError;
use crate::model::TensorArray;

/// Moves an array into an ONNX Runtime input value.
pub fn to_value(array: TensorArray) -> Result<ort::value::DynValue, RuntimeError> {
    let dtype = array.dtype();
    let value = match array {
        TensorArray::Float32(a) => ort::value::Tensor::from_array(a)?.into_dyn(),
        TensorArray::Float16(a) => ort::value::Tensor::from_array(a)?.into_dyn(),
        TensorArray::BFloat16(a) => ort::value::Tensor::from_array(a)?.into_dyn(),
        TensorArray::Float64(a) => ort::value::Tensor::from_array(a)?.into_dyn(),
        TensorArray::Int8(a) => ort::value::Tensor::from_array(a)?.into_dyn(),
        TensorArray::Uint8(a) => ort::value::Tensor::from_array(a)?.into_dyn(),
        TensorArray::Int16(a) => ort::value::Tensor::from_array(a)?.into_dyn(),
        TensorArray::Uint16(a) => ort::value::Tensor::from_array(a)?.into_dyn(),
        TensorArray::Int32(a) => ort::value::Tensor::from_array(a)?.into_dyn(),
        TensorArray::Uint32(a) => ort::value::Tensor::from_array(a)?.into_dyn(),
        TensorArray::Int64(a) => ort::value::Tensor::from_array(a)?.into_dyn(),
        TensorArray::Uint64(a) => ort::value::Tensor::from_array(a)?.into_dyn(),
        TensorArray::Bool(a) => ort::value::Tensor::from_array(a)?.into_dyn(),
        TensorArray::Float8E4M3FN(_) | TensorArray::Int4(_) | TensorArray::Uint4(_) => {
            return Err(RuntimeError::Ort(format!(
                "{dtype} inputs cannot be fed to a session"
            )));
        }
    };
    Ok(value)
}

/// A float output as f32 with its original element type: a view of the session's buffer
/// where it already is float32, converted otherwise ([`float_output`]); `None` for other
/// types. A pass that only reads a run's tensors (calibration; the per-tensor errors read
/// 135 M values a sample on PP-OCR rec) then neither copies them nor maps fresh pages for
/// the copies.
pub fn float_view(
    value: &ort::value::DynValue,
) -> Option<(
    crate::model::DataType,
    ndarray::CowArray<'_, f32, ndarray::IxDyn>,
)> {
    match value.try_extract_array::<f32>() {
        Ok(view) => Some((crate::model::DataType::Float32, view.into())),
        Err(_) => float_output(value).map(|(dtype, a)| (dtype, a.into())),
    }
}

/// A float output as f32 (float16/bfloat16/float64 converted) with its original element type;
/// `None` for other types.
pub fn float_output(value: &ort::value::DynValue) -> Option<(crate::model::DataType, ArrayD<f32>)> {
    use crate::model::DataType;
    if let Ok(a) = value.try_extract_array::<f32>() {
        return Some((DataType::Float32, a.to_owned()));
    }
    if let Ok(a) = value.try_extract_array::<half::f16>() {
        return Some((DataType::Float16, a.mapv(half::f16::to_f32)));
    }
    if let Ok(a) = value.try_extract_array::<half::bf16>() {
        return Some((DataType::BFloat16, a.mapv(half::bf16::to_f32)));
    }
    if let Ok(a) = value.try_extract_array::<f64>() {
        return Some((DataType::Float64, a.mapv(|v| v as f32)));
    }
    None
}

/// A batch's arrays as owned session inputs. Keep them alive until the outputs are consumed:
/// ONNX Runtime returns a graph input that is also an output as the same buffer.
pub fn owned_inputs(
    inputs: Vec<(String, TensorArray)>,
) -> Result<Vec<(String, ort::value::DynValue)>, RuntimeError> {
    inputs
        .into_iter()
        .map(|(name, array)| Ok((name, to_value(array)?)))
        .collect()
}

/// Borrowed session inputs over [`owned_inputs`], for `Session::run`.
pub fn session_inputs(
    owned: &[(String, ort::value::DynValue)],
) -> Vec<(Cow<'_, str>, ort::session::SessionInputValue<'_>)> {
    owned
        .iter()
        .map(|(name, value)| (Cow::Borrowed(name.as_str()), value.into()))
        .collect()
}
