//! [`SessionModel`]: a model encoded for an ONNX Runtime session, whatever its size.
//!
//! A protobuf cannot pass 2 GB. Tensors read from the input's external-data files keep their
//! references (ONNX Runtime reads the input's own files, see
//! [`super::Model::to_session_proto`]); tensors made in memory (quantized weights, folded
//! BatchNormalizations) travel inline while they fit. When they do not, the large ones are
//! packed into one buffer that ONNX Runtime reads as an external data file held in memory
//! (`AddExternalInitializersFromMemory`): nothing is written to disk, and the tensors are
//! copied once, into that buffer, as the inline encoding would have copied them too.

use std::mem::MaybeUninit;
use std::path::PathBuf;
use std::sync::Arc;

use prost::Message;

use super::error::ModelError;
use super::external::{PROTOBUF_LIMIT, set_external};
use super::proto::{ModelProto, TensorProto};

/// The file name under which the in-memory buffer is handed to ONNX Runtime. No model file
/// names it: the name is reserved for this purpose and never touches the disk.
pub const MEMORY_FILE: &str = "qdq-studio-in-memory.data";

/// Tensors smaller than this stay inline when the large ones move to the memory file.
const MEMORY_FILE_THRESHOLD: usize = 1024;

/// Offsets in the memory file are aligned to this (enough for every element type and SIMD
/// loads).
const MEMORY_FILE_ALIGNMENT: usize = 64;

/// A model encoded for an ONNX Runtime session: the protobuf, the folder ONNX Runtime reads
/// the input's external data from (`None` when the model has none), and the buffer holding
/// tensors made in memory that did not fit in the protobuf.
#[derive(Debug, Clone)]
pub struct SessionModel {
    /// The encoded `ModelProto`.
    pub bytes: Vec<u8>,
    /// Where the external data files named by the model lie.
    pub external_folder: Option<PathBuf>,
    /// Contents of the external file [`MEMORY_FILE`], when the model references it.
    pub memory_file: Option<Arc<[u8]>>,
}

impl SessionModel {
    /// Encodes `proto`, moving the tensors it holds inline into a memory file when the
    /// protobuf would pass the 2 GB limit.
    pub fn encode(proto: ModelProto, external_folder: Option<PathBuf>) -> Result<Self, ModelError> {
        Self::encode_within(proto, external_folder, PROTOBUF_LIMIT)
    }

    /// [`SessionModel::encode`] with the protobuf limit given (tests use a small one).
    pub fn encode_within(
        mut proto: ModelProto,
        external_folder: Option<PathBuf>,
        limit: u64,
    ) -> Result<Self, ModelError> {
        let mut memory_file = None;
        if proto.encoded_len() as u64 > limit {
            memory_file = move_to_memory_file(&mut proto);
            let bytes = proto.encoded_len() as u64;
            if bytes > limit {
                return Err(ModelError::TooLargeInline { bytes });
            }
        }
        Ok(SessionModel {
            bytes: proto.encode_to_vec(),
            external_folder,
            memory_file,
        })
    }
}

/// Moves every large inline initializer of the main graph into one buffer and makes it
/// reference [`MEMORY_FILE`]; `None` when there was nothing to move.
fn move_to_memory_file(proto: &mut ModelProto) -> Option<Arc<[u8]>> {
    let graph = proto.graph.as_mut()?;
    let movable = |t: &TensorProto| {
        t.raw_data
            .as_ref()
            .is_some_and(|raw| raw.len() >= MEMORY_FILE_THRESHOLD)
    };
    let mut layout = Vec::new();
    let mut end = 0usize;
    for (index, tensor) in graph.initializer.iter().enumerate() {
        if movable(tensor) {
            let offset = end.next_multiple_of(MEMORY_FILE_ALIGNMENT);
            let len = tensor.raw_data.as_ref().map_or(0, |raw| raw.len());
            layout.push((index, offset, len));
            end = offset + len;
        }
    }
    if layout.is_empty() {
        return None;
    }
    let mut buffer = zeroed(end);
    let target = Arc::get_mut(&mut buffer)?;
    for &(index, offset, len) in &layout {
        let tensor = &mut graph.initializer[index];
        if let Some(raw) = tensor.raw_data.take() {
            target[offset..offset + len].copy_from_slice(&raw);
        }
        set_external(tensor, MEMORY_FILE, offset as u64, len as u64);
    }
    Some(buffer)
}

/// A zero-filled shared buffer, allocated in place (zeroed pages cost nothing until written;
/// building a `Vec` and converting it would copy the whole buffer once more).
fn zeroed(len: usize) -> Arc<[u8]> {
    let buffer: Arc<[MaybeUninit<u8>]> = Arc::new_zeroed_slice(len);
    // SAFETY: every byte was set to zero, a valid `u8`.
    unsafe { buffer.assume_init() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::proto::tensor_proto::DataLocation;
    use crate::model::{DataType, ModelBuilder, TensorArray};
    use ndarray::{ArrayD, IxDyn};

    fn model_with_weights() -> ModelProto {
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[1, 512]);
        let w = ArrayD::from_shape_fn(IxDyn(&[512, 4]), |ix| (ix[0] * 4 + ix[1]) as f32);
        b.initializer("w", TensorArray::Float32(w));
        b.initializer("bias", TensorArray::Float32(ArrayD::ones(IxDyn(&[4]))));
        b.node("MatMul", &["x", "w"], &["y0"]);
        b.node("Add", &["y0", "bias"], &["y"]);
        b.output("y", DataType::Float32, &[1, 4]);
        b.build().proto().clone()
    }

    #[test]
    fn a_model_within_the_limit_stays_inline() {
        let encoded = SessionModel::encode(model_with_weights(), None).unwrap();
        assert!(encoded.memory_file.is_none());
    }

    #[test]
    fn over_the_limit_large_tensors_move_to_the_memory_file() {
        let proto = model_with_weights();
        let encoded = SessionModel::encode_within(proto.clone(), None, 4096).unwrap();
        let buffer = encoded.memory_file.expect("a memory file");
        let decoded = ModelProto::decode(encoded.bytes.as_slice()).unwrap();
        let graph = decoded.graph.unwrap();
        let w = &graph.initializer[0];
        assert_eq!(w.data_location, Some(DataLocation::External as i32));
        assert!(w.raw_data.is_none());
        let original = proto.graph.unwrap().initializer[0]
            .raw_data
            .clone()
            .unwrap();
        assert_eq!(&buffer[..original.len()], &original[..]);
        // The 16-byte bias stays inline.
        assert!(graph.initializer[1].raw_data.is_some());
    }

    #[test]
    fn a_graph_too_large_even_without_its_tensors_is_refused() {
        let err = SessionModel::encode_within(model_with_weights(), None, 16).unwrap_err();
        assert!(matches!(err, ModelError::TooLargeInline { .. }), "{err}");
    }
}
