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

/// A run's outputs by name. `SessionOutputs::get` compares the name with every output in
/// turn, so reading each output of an observing model (one per tensor: 10,000 on a graph of
/// 10,000 nodes) that way is quadratic; this indexes them once.
pub struct NamedOutputs<'x, 'r> {
    outputs: &'x ort::session::SessionOutputs<'r>,
    /// Each name's position among the values; `None` when an output was removed from the
    /// run's outputs (names and positions no longer line up), and every lookup searches.
    by_name: Option<std::collections::HashMap<&'r str, usize>>,
}

impl<'x, 'r> NamedOutputs<'x, 'r> {
    /// Indexes `outputs`.
    pub fn new(outputs: &'x ort::session::SessionOutputs<'r>) -> Self {
        let by_name: std::collections::HashMap<&'r str, usize> = outputs
            .keys()
            .enumerate()
            .map(|(at, name)| (name, at))
            .collect();
        // `keys` skips removed outputs while positions count them: check that the last name
        // sits at its position (one search), else fall back to searching.
        let aligned = outputs.keys().last().is_none_or(|last| {
            let at = outputs.len() - 1;
            outputs
                .get(last)
                .is_some_and(|v| std::ptr::eq(v, &outputs[at]))
        });
        Self {
            outputs,
            by_name: aligned.then_some(by_name),
        }
    }

    /// The output `name`, if the run gave one.
    pub fn get(&self, name: &str) -> Option<&'x ort::value::DynValue> {
        let Some(by_name) = &self.by_name else {
            // ort asserts on an empty name; no output has one.
            return (!name.is_empty()).then(|| self.outputs.get(name)).flatten();
        };
        let at = *by_name.get(name)?;
        (at < self.outputs.len()).then(|| &self.outputs[at])
    }
}
