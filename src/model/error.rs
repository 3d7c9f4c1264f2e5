//! Errors of model loading, saving, tensor conversion and graph indexing.
//!
//! Every variant names what the user needs to find the problem: the file, the tensor, the node,
//! the offset. Messages are one line so the CLI can print them as they are.

use std::path::PathBuf;

use super::dtype::UnsupportedDataType;

/// Anything that can go wrong reading, writing or interpreting an ONNX model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The model file could not be opened or read.
    #[error("cannot read model {path}: {source}")]
    Read {
        /// The file that was being read.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The bytes are not a valid ONNX protobuf (truncated, corrupt, or another format).
    #[error("{path} is not a valid ONNX model: {reason}")]
    Decode {
        /// The file that was being decoded.
        path: PathBuf,
        /// What the protobuf decoder reported.
        reason: String,
    },
    /// The file decoded, but it holds no graph.
    #[error("{path} has no graph: it is not an ONNX model (or only a fragment of one)")]
    NoGraph {
        /// The file that was decoded.
        path: PathBuf,
    },
    /// A tensor stores its data externally, but the location is absolute.
    #[error(
        "tensor '{tensor}': external data location '{location}' is absolute; only paths relative to the model's folder are allowed"
    )]
    ExternalAbsolute {
        /// The tensor name.
        tensor: String,
        /// The location as written in the model.
        location: String,
    },
    /// A tensor's external data location leaves the model's folder (`..` or a symlink).
    #[error(
        "tensor '{tensor}': external data location '{location}' points outside the model's folder {folder}"
    )]
    ExternalOutside {
        /// The tensor name.
        tensor: String,
        /// The location as written in the model.
        location: String,
        /// The model's folder.
        folder: PathBuf,
    },
    /// A tensor's external data file cannot be read (a folder, a pipe, a device, no permission).
    #[error("tensor '{tensor}': cannot read external data file {path}: {source}")]
    ExternalRead {
        /// The tensor name.
        tensor: String,
        /// The resolved file path.
        path: PathBuf,
        /// Why it cannot be read.
        #[source]
        source: std::io::Error,
    },
    /// A tensor's external data file does not exist.
    #[error("tensor '{tensor}': external data file {path} is missing")]
    ExternalMissing {
        /// The tensor name.
        tensor: String,
        /// The resolved path of the missing file.
        path: PathBuf,
    },
    /// A tensor's external data file is shorter than the model says.
    #[error(
        "tensor '{tensor}': external data file {path} has {file_len} bytes, but the tensor needs offset {offset} + length {length}"
    )]
    ExternalShort {
        /// The tensor name.
        tensor: String,
        /// The resolved file path.
        path: PathBuf,
        /// The byte offset written in the model.
        offset: u64,
        /// The byte length the tensor needs.
        length: u64,
        /// The file's actual length.
        file_len: u64,
    },
    /// An external-data entry is malformed (no location, a non-numeric offset, ...).
    #[error("tensor '{tensor}': malformed external data entry: {reason}")]
    ExternalMalformed {
        /// The tensor name.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// A tensor uses an element type the engine does not handle.
    #[error("tensor '{tensor}': {source}")]
    UnsupportedType {
        /// The tensor name.
        tensor: String,
        /// The unsupported type.
        source: UnsupportedDataType,
    },
    /// A tensor's dimensions are negative or their product overflows.
    #[error("tensor '{tensor}': invalid dimensions {dims:?}")]
    InvalidDims {
        /// The tensor name.
        tensor: String,
        /// The dimensions as written.
        dims: Vec<i64>,
    },
    /// A tensor's data does not have as many bytes or values as its shape needs.
    #[error(
        "tensor '{tensor}': shape {dims:?} of {dtype} needs {expected} {unit}, but the tensor holds {actual}"
    )]
    DataLength {
        /// The tensor name.
        tensor: String,
        /// The dimensions.
        dims: Vec<i64>,
        /// The element type name.
        dtype: String,
        /// How many bytes or values the shape needs.
        expected: u64,
        /// How many there are.
        actual: u64,
        /// "bytes" or "values".
        unit: &'static str,
    },
    /// The array's element type does not match the one asked for.
    #[error("tensor '{tensor}' holds {actual}, not {expected}")]
    TypeMismatch {
        /// The tensor name.
        tensor: String,
        /// The type asked for.
        expected: String,
        /// The type found.
        actual: String,
    },
    /// A node reads a tensor that nothing produces (no node, input or initializer).
    #[error(
        "node '{node}' ({op_type}) reads tensor '{tensor}', which no node, graph input or initializer produces"
    )]
    DanglingInput {
        /// The node's (effective) name.
        node: String,
        /// The node's op type.
        op_type: String,
        /// The missing tensor.
        tensor: String,
    },
    /// A node writes a tensor that is already defined.
    #[error(
        "node '{node}' ({op_type}) writes tensor '{tensor}', which is already defined (by another node, a graph input or an initializer); ONNX graphs assign each tensor once"
    )]
    Redefined {
        /// The node writing it again.
        node: String,
        /// Its op type.
        op_type: String,
        /// The tensor.
        tensor: String,
    },
    /// Two initializers, or two graph inputs, share a name.
    #[error(
        "two {what}s are named '{tensor}'; ONNX graphs name each tensor once (which one a runtime would use is undefined)"
    )]
    Duplicate {
        /// "initializer" or "graph input".
        what: &'static str,
        /// The name.
        tensor: String,
    },
    /// The graph declares no outputs.
    #[error("the graph declares no outputs, so running it computes nothing")]
    NoOutputs,
    /// A tensor's element type is not one ONNX defines.
    #[error(
        "tensor '{tensor}': element type {code} is not an ONNX element type (0 means none was set)"
    )]
    UnknownElementType {
        /// The tensor name.
        tensor: String,
        /// The code as written.
        code: i32,
    },
    /// The graph has a cycle, so it has no topological order.
    #[error("the graph has a cycle through {count} node(s), including {sample}")]
    Cycle {
        /// How many nodes could not be ordered.
        count: usize,
        /// A few of their names.
        sample: String,
    },
    /// Saving would overwrite one of the input model's own files.
    #[error("refusing to write {path}: it is one of the input model's own files")]
    WouldOverwriteInput {
        /// The path that would have been overwritten.
        path: PathBuf,
    },
    /// The output folder does not exist and cannot be made.
    #[error("cannot create output folder {path}: {reason}")]
    NoOutputFolder {
        /// The missing folder.
        path: PathBuf,
        /// Why it cannot be made.
        reason: String,
    },
    /// Writing the output failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file that was being written.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The model is too large to store inline and external data was refused.
    #[error(
        "the model needs {bytes} bytes inline, over the 2 GB protobuf limit; save it with external data"
    )]
    TooLargeInline {
        /// The encoded size.
        bytes: u64,
    },
}
