//! [`Model`]: an ONNX `ModelProto` together with where its bytes came from.
//!
//! Loading memory-maps large files and decodes them without copying tensor payloads (byte
//! fields are `bytes::Bytes` slices of the map). Every external-data reference is validated
//! at load time, so a model that loads is a model whose tensors can all be read.
//!
//! Known limitation: prost drops fields it does not know. The schema in `proto/onnx.proto` is
//! the official one of onnx 1.23; a model written by a newer ONNX with new fields loses them
//! on save. Models of the current schema re-encode byte for byte (tested on real models).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use prost::Message;

use super::error::ModelError;
use super::external::{
    ExternalRef, check_tensor, is_mapped, map_file, release_pages, resolve_location,
};
use super::proto::{GraphProto, ModelProto, TensorProto};
use super::session_model::SessionModel;
use super::tensor::TensorArray;
use super::visit::for_each_tensor_mut;

/// An ONNX model in memory, with the external data it references.
#[derive(Debug, Clone)]
pub struct Model {
    proto: ModelProto,
    path: Option<PathBuf>,
    folder: PathBuf,
    external: HashMap<(String, u64), Bytes>,
    external_files: Vec<PathBuf>,
    /// The memory-mapped external data files, whole (see [`Model::release_pages`]).
    mapped: Vec<Bytes>,
    legacy: Option<super::legacy::LegacyOpset>,
    /// Where each weight is, by name (built on first use).
    weights: super::weight_index::WeightIndex,
}

impl Model {
    /// What loading did to a model older than opset 7 (`None` for newer ones): see
    /// [`super::legacy`].
    pub fn legacy_opset(&self) -> Option<&super::legacy::LegacyOpset> {
        self.legacy.as_ref()
    }

    /// Loads and validates an `.onnx` file and its external data; a model older than opset 7
    /// is upgraded in memory ([`super::legacy`]).
    pub fn load(path: &Path) -> Result<Model, ModelError> {
        let bytes = map_file(path)?;
        let canonical = dunce::canonicalize(path).map_err(|source| ModelError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let folder = canonical
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let mut model = Self::decode(bytes, &canonical, folder)?;
        model.path = Some(canonical);
        Ok(model)
    }

    /// Decodes a model held in memory; external data (if any) is resolved against `folder`.
    /// `origin` names the model in error messages.
    pub fn decode(bytes: Bytes, origin: &Path, folder: PathBuf) -> Result<Model, ModelError> {
        let proto = ModelProto::decode(bytes).map_err(|e| ModelError::Decode {
            path: origin.to_path_buf(),
            reason: e.to_string(),
        })?;
        if proto.graph.is_none() {
            return Err(ModelError::NoGraph {
                path: origin.to_path_buf(),
            });
        }
        let mut model = Model {
            proto,
            path: None,
            folder,
            external: HashMap::new(),
            external_files: Vec::new(),
            mapped: Vec::new(),
            legacy: None,
            weights: Default::default(),
        };
        for_each_tensor_mut(&mut model.proto, &mut |tensor: &mut TensorProto| {
            check_tensor(tensor)
        })?;
        model.resolve_external()?;
        // Upgraded copies of initializers keep their external references, resolved above.
        if let Some((upgraded, outcome)) = super::legacy::upgrade(&model.proto) {
            if let Some(proto) = upgraded {
                model.proto = proto;
            }
            model.legacy = Some(outcome);
        }
        Ok(model)
    }

    /// Wraps a `ModelProto` built in memory (no file, no external data).
    pub fn from_proto(proto: ModelProto) -> Model {
        Model {
            proto,
            path: None,
            folder: PathBuf::from("."),
            external: HashMap::new(),
            external_files: Vec::new(),
            mapped: Vec::new(),
            legacy: None,
            weights: Default::default(),
        }
    }

    fn resolve_external(&mut self) -> Result<(), ModelError> {
        let folder = self.folder.clone();
        let mut files: HashMap<PathBuf, Bytes> = HashMap::new();
        let mut resolved = HashMap::new();
        for_each_tensor_mut(&mut self.proto, &mut |tensor: &mut TensorProto| {
            let Some(reference) = ExternalRef::of(tensor)? else {
                return Ok(());
            };
            let path = resolve_location(tensor.name(), &reference.location, &folder)?;
            let data = match files.get(&path) {
                Some(data) => data.clone(),
                None => {
                    let data = map_file(&path).map_err(|e| match e {
                        ModelError::Read { path, source } => ModelError::ExternalRead {
                            tensor: tensor.name().to_owned(),
                            path,
                            source,
                        },
                        other => other,
                    })?;
                    files.insert(path.clone(), data.clone());
                    data
                }
            };
            let slice = slice_external(tensor, &reference, &path, &data)?;
            resolved.insert((reference.location, reference.offset), slice);
            Ok::<(), ModelError>(())
        })?;
        self.external = resolved;
        self.mapped = files.values().filter(|f| is_mapped(f)).cloned().collect();
        self.external_files = files.into_keys().collect();
        self.external_files.sort();
        Ok(())
    }

    /// The decoded protobuf.
    pub fn proto(&self) -> &ModelProto {
        &self.proto
    }

    /// Mutable access to the protobuf, for rewriting passes. External references added by a
    /// pass must point at data this model already resolved.
    pub fn proto_mut(&mut self) -> &mut ModelProto {
        self.weights.reset();
        &mut self.proto
    }

    /// The main graph (always present: loading refuses models without one).
    pub fn graph(&self) -> &GraphProto {
        // `decode` refuses graph-less models and `from_proto` callers build one.
        static EMPTY: std::sync::OnceLock<GraphProto> = std::sync::OnceLock::new();
        self.proto
            .graph
            .as_ref()
            .unwrap_or_else(|| EMPTY.get_or_init(GraphProto::default))
    }

    /// The canonical path the model was loaded from, if it came from a file.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The folder external data is resolved against.
    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// The external data files this model reads (canonical paths, sorted).
    pub fn external_files(&self) -> &[PathBuf] {
        &self.external_files
    }

    /// Every file this model was read from: the model itself and its external data.
    pub fn source_files(&self) -> Vec<PathBuf> {
        self.path
            .iter()
            .cloned()
            .chain(self.external_files.iter().cloned())
            .collect()
    }

    /// The raw bytes of a tensor stored in `raw_data` or externally; `None` for tensors whose
    /// values are in the typed fields.
    pub fn raw_bytes(&self, tensor: &TensorProto) -> Result<Option<Bytes>, ModelError> {
        match ExternalRef::of(tensor)? {
            Some(reference) => Ok(self
                .external
                .get(&(reference.location, reference.offset))
                .cloned()),
            None => Ok(tensor.raw_data.clone().filter(|r| !r.is_empty())),
        }
    }

    /// Lets the system reclaim the memory-mapped pages of an external tensor once it has been
    /// read (see [`super::external::release_pages`]); inline tensors are left alone.
    pub fn release_pages(&self, tensor: &TensorProto) {
        if let Ok(Some(reference)) = ExternalRef::of(tensor)
            && let Some(data) = self.external.get(&(reference.location, reference.offset))
        {
            release_pages(data, &self.mapped);
        }
    }

    /// Decodes a tensor of this model (inline or external) into an array.
    pub fn tensor_array(&self, tensor: &TensorProto) -> Result<TensorArray, ModelError> {
        let external = match ExternalRef::of(tensor)? {
            Some(reference) => self
                .external
                .get(&(reference.location, reference.offset))
                .cloned(),
            None => None,
        };
        TensorArray::from_proto(tensor, external.as_ref())
    }

    /// The value of a weight: an initializer of the main graph, or the tensor a Constant node
    /// produces (`value`, `value_float(s)`, `value_int(s)`). `None` for activations.
    pub fn weight(&self, name: &str) -> Result<Option<TensorArray>, ModelError> {
        use super::weight_index::Found;
        match self.weights.find(self.graph(), name) {
            Some(Found::Initializer(init)) => self.tensor_array(init).map(Some),
            Some(Found::Constant(node)) => match super::constant::constant_tensor(node) {
                Some(tensor) => self.tensor_array(&tensor).map(Some),
                None => Ok(None),
            },
            None => Ok(None),
        }
    }

    /// [`Model::release_pages`] for the initializer `name`, once a reader is done with it.
    pub fn release_weight(&self, name: &str) {
        if let Some(super::weight_index::Found::Initializer(tensor)) =
            self.weights.find(self.graph(), name)
        {
            self.release_pages(tensor);
        }
    }

    /// A copy of the protobuf with every external tensor brought inline, for handing the model
    /// to ONNX Runtime from memory. Fails over the 2 GB protobuf limit.
    pub fn to_inline_proto(&self) -> Result<ModelProto, ModelError> {
        let mut proto = self.proto.clone();
        for_each_tensor_mut(&mut proto, &mut |tensor: &mut TensorProto| {
            if let Some(reference) = ExternalRef::of(tensor)? {
                let data = self
                    .external
                    .get(&(reference.location, reference.offset))
                    .cloned();
                inline_tensor(tensor, data.unwrap_or_default());
            }
            Ok::<(), ModelError>(())
        })?;
        let bytes = proto.encoded_len() as u64;
        if bytes > super::external::PROTOBUF_LIMIT {
            return Err(ModelError::TooLargeInline { bytes });
        }
        Ok(proto)
    }

    /// Encodes the model inline (see [`Model::to_inline_proto`]).
    pub fn to_bytes(&self) -> Result<Vec<u8>, ModelError> {
        Ok(self.to_inline_proto()?.encode_to_vec())
    }

    /// Bytes the main graph's initializers hold, as their shapes and types say (what a
    /// session over the model keeps of its weights, at least).
    pub fn initializer_bytes(&self) -> u64 {
        own_initializer_bytes(self.graph())
    }

    /// Bytes of every initializer, those of the graphs nodes hold (`If` branches, loop
    /// bodies) included: the weights a session of the model holds before kernels pack
    /// their own copies.
    pub fn nested_initializer_bytes(&self) -> u64 {
        nested_initializer_bytes(self.graph())
    }

    /// True when some tensor's data lives in an external file.
    pub fn has_external_data(&self) -> bool {
        !self.external.is_empty()
    }

    /// The protobuf to hand ONNX Runtime and the folder its external data lies in.
    ///
    /// A model with external data keeps its references: ONNX Runtime reads (memory-maps,
    /// where the offsets allow) the input's own data files, told their folder through the
    /// session option `session.model_external_initializers_file_folder_path`. Of the ways
    /// ONNX Runtime offers, this is the one that copies no weight (bringing them inline copies
    /// each once and cannot pass 2 GB; `AddExternalInitializers` needs a value per tensor
    /// kept alive beside the session; writing the graph next to the weights would write beside
    /// the input). Tensors made in memory (quantized weights, folded BatchNormalizations)
    /// travel inline, or in a memory file past 2 GB ([`SessionModel::encode`]).
    pub fn to_session_proto(&self) -> (ModelProto, Option<PathBuf>) {
        let folder = self.has_external_data().then(|| self.folder.clone());
        (self.proto.clone(), folder)
    }

    /// [`Model::to_session_proto`], encoded.
    pub fn to_session_model(&self) -> Result<SessionModel, ModelError> {
        let (proto, external_folder) = self.to_session_proto();
        SessionModel::encode(proto, external_folder)
    }
}

/// Makes `tensor` hold `data` in `raw_data` instead of referencing an external file.
pub(crate) fn inline_tensor(tensor: &mut TensorProto, data: Bytes) {
    tensor.raw_data = Some(data);
    tensor.external_data.clear();
    tensor.data_location = None;
}

fn slice_external(
    tensor: &TensorProto,
    reference: &ExternalRef,
    path: &Path,
    data: &Bytes,
) -> Result<Bytes, ModelError> {
    let expected = super::external::expected_bytes(tensor)?;
    let length = reference
        .length
        .or(expected)
        .unwrap_or_else(|| (data.len() as u64).saturating_sub(reference.offset));
    if let Some(expected) = expected
        && expected != length
    {
        return Err(ModelError::DataLength {
            tensor: tensor.name().to_owned(),
            dims: tensor.dims.clone(),
            dtype: super::dtype::onnx_type_name(tensor.data_type()),
            expected,
            actual: length,
            unit: "bytes",
        });
    }
    match reference.offset.checked_add(length) {
        Some(end) if end <= data.len() as u64 => {
            Ok(data.slice(reference.offset as usize..end as usize))
        }
        _ => Err(ModelError::ExternalShort {
            tensor: tensor.name().to_owned(),
            path: path.to_path_buf(),
            offset: reference.offset,
            length,
            file_len: data.len() as u64,
        }),
    }
}

/// [`Model::nested_initializer_bytes`] of one graph and the graphs its nodes hold.
fn nested_initializer_bytes(graph: &GraphProto) -> u64 {
    let nested: u64 = graph
        .node
        .iter()
        .flat_map(|n| &n.attribute)
        .flat_map(|a| a.g.iter().chain(&a.graphs))
        .map(nested_initializer_bytes)
        .sum();
    own_initializer_bytes(graph) + nested
}

/// Bytes of `graph`'s own initializers (external data included, as its tensors declare).
fn own_initializer_bytes(graph: &GraphProto) -> u64 {
    graph
        .initializer
        .iter()
        .filter_map(|t| super::external::expected_bytes(t).ok().flatten())
        .sum()
}
