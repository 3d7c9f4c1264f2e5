//! ONNX model I/O and the graph index: loading (memory-mapped, external data validated),
//! atomic saving, tensor conversion to and from `ndarray`, and [`Graph`], the index the rest
//! of the engine works on.

pub mod attributes;
pub mod builder;
pub mod constant;
pub mod dtype;
pub mod error;
pub mod external;
pub mod graph;
pub mod infer;
pub mod legacy;
mod onnx_model;
pub mod ops;
pub mod pinned;
pub mod proto;
pub mod qdq;
pub mod save;
mod session_model;
pub mod tensor;
pub mod visit;
mod weight_index;

pub use builder::ModelBuilder;
pub use dtype::DataType;
pub use error::ModelError;
pub use graph::{Dim, Graph, GraphProblem, Node, NodeId, TensorInfo, TensorKind, format_shape};
pub use onnx_model::Model;
pub use save::{SaveOptions, SaveReport};
pub use session_model::{MEMORY_FILE, SessionModel};
pub use tensor::TensorArray;
