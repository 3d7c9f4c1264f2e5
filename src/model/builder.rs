//! A small builder for ONNX models, used for test fixtures, fuzzing, benchmarks and the
//! runtime's EP probes.
//!
//! ```
//! use qdq_studio::model::{ModelBuilder, DataType, TensorArray};
//! let mut b = ModelBuilder::new(17);
//! b.input("x", DataType::Float32, &[1, 4]);
//! b.initializer("w", TensorArray::Float32(ndarray::ArrayD::zeros(ndarray::IxDyn(&[4, 2]))));
//! b.node("MatMul", &["x", "w"], &["y"]).name("mm");
//! b.output("y", DataType::Float32, &[1, 2]);
//! let model = b.build();
//! assert_eq!(model.graph().node.len(), 1);
//! ```

use super::Model;
use super::dtype::DataType;
use super::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto,
    TypeProto, ValueInfoProto, attribute_proto::AttributeType, tensor_shape_proto::Dimension,
    tensor_shape_proto::dimension::Value as DimValue, type_proto,
};
use super::tensor::TensorArray;

/// Builds a [`Model`] node by node.
#[derive(Debug, Clone)]
pub struct ModelBuilder {
    proto: ModelProto,
}

/// A node being added; set its name and attributes through it.
#[derive(Debug)]
pub struct NodeBuilder<'a> {
    node: &'a mut NodeProto,
}

impl NodeBuilder<'_> {
    /// Names the node.
    pub fn name(self, name: &str) -> Self {
        self.node.name = Some(name.to_owned());
        self
    }

    /// Sets the node's domain (for contrib or custom ops).
    pub fn domain(self, domain: &str) -> Self {
        self.node.domain = Some(domain.to_owned());
        self
    }

    fn attr(self, attribute: AttributeProto) -> Self {
        self.node.attribute.push(attribute);
        self
    }

    /// Adds an integer attribute.
    pub fn attr_int(self, name: &str, value: i64) -> Self {
        self.attr(AttributeProto {
            name: Some(name.to_owned()),
            r#type: Some(AttributeType::Int as i32),
            i: Some(value),
            ..Default::default()
        })
    }

    /// Adds a float attribute.
    pub fn attr_float(self, name: &str, value: f32) -> Self {
        self.attr(AttributeProto {
            name: Some(name.to_owned()),
            r#type: Some(AttributeType::Float as i32),
            f: Some(value),
            ..Default::default()
        })
    }

    /// Adds an integer-list attribute.
    pub fn attr_ints(self, name: &str, values: &[i64]) -> Self {
        self.attr(AttributeProto {
            name: Some(name.to_owned()),
            r#type: Some(AttributeType::Ints as i32),
            ints: values.to_vec(),
            ..Default::default()
        })
    }

    /// Adds a tensor attribute (e.g. a Constant node's `value`).
    pub fn attr_tensor(self, name: &str, value: &TensorArray) -> Self {
        self.attr(AttributeProto {
            name: Some(name.to_owned()),
            r#type: Some(AttributeType::Tensor as i32),
            t: Some(value.to_proto("")),
            ..Default::default()
        })
    }

    /// Adds a graph attribute (a subgraph body).
    pub fn attr_graph(self, name: &str, graph: GraphProto) -> Self {
        self.attr(AttributeProto {
            name: Some(name.to_owned()),
            r#type: Some(AttributeType::Graph as i32),
            g: Some(graph),
            ..Default::default()
        })
    }
}

/// A tensor value-info with element type and shape; negative dims become symbolic (`N0`, ...).
pub fn value_info(name: &str, dtype: DataType, shape: &[i64]) -> ValueInfoProto {
    let dims = shape
        .iter()
        .enumerate()
        .map(|(i, &d)| Dimension {
            value: Some(if d >= 0 {
                DimValue::DimValue(d)
            } else {
                DimValue::DimParam(format!("N{i}"))
            }),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.to_owned()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(dtype.to_onnx()),
                shape: Some(TensorShapeProto { dim: dims }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A tensor value-info with element type and no shape (not even its rank): what ONNX Runtime
/// infers or takes as fed.
pub fn any_shape_info(name: &str, dtype: DataType) -> ValueInfoProto {
    let mut info = value_info(name, dtype, &[]);
    if let Some(TypeProto {
        value: Some(type_proto::Value::TensorType(t)),
        ..
    }) = info.r#type.as_mut()
    {
        t.shape = None;
    }
    info
}

impl ModelBuilder {
    /// A model importing the default ONNX domain at `opset`, IR version 8 (opset ≤ 18) or
    /// IR 10 (newer opsets, which need it for int4 and float8).
    pub fn new(opset: i64) -> Self {
        ModelBuilder {
            proto: ModelProto {
                ir_version: Some(if opset > 18 { 10 } else { 8 }),
                producer_name: Some("qdq-studio".to_owned()),
                producer_version: Some(env!("CARGO_PKG_VERSION").to_owned()),
                opset_import: vec![OperatorSetIdProto {
                    domain: Some(String::new()),
                    version: Some(opset),
                }],
                graph: Some(GraphProto {
                    name: Some("graph".to_owned()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        }
    }

    fn graph(&mut self) -> &mut GraphProto {
        self.proto.graph.get_or_insert_with(GraphProto::default)
    }

    /// Imports another operator domain (e.g. `com.microsoft`).
    pub fn import(&mut self, domain: &str, version: i64) -> &mut Self {
        self.proto.opset_import.push(OperatorSetIdProto {
            domain: Some(domain.to_owned()),
            version: Some(version),
        });
        self
    }

    /// Declares a graph input.
    pub fn input(&mut self, name: &str, dtype: DataType, shape: &[i64]) -> &mut Self {
        self.graph().input.push(value_info(name, dtype, shape));
        self
    }

    /// Declares a graph input of unknown shape (not even its rank).
    pub fn input_any_shape(&mut self, name: &str, dtype: DataType) -> &mut Self {
        self.graph().input.push(any_shape_info(name, dtype));
        self
    }

    /// Declares a graph output.
    pub fn output(&mut self, name: &str, dtype: DataType, shape: &[i64]) -> &mut Self {
        self.graph().output.push(value_info(name, dtype, shape));
        self
    }

    /// Adds an initializer.
    pub fn initializer(&mut self, name: &str, value: TensorArray) -> &mut Self {
        self.graph().initializer.push(value.to_proto(name));
        self
    }

    /// Adds a node (unnamed until [`NodeBuilder::name`] is called).
    pub fn node(&mut self, op_type: &str, inputs: &[&str], outputs: &[&str]) -> NodeBuilder<'_> {
        let graph = self.graph();
        graph.node.push(NodeProto {
            op_type: Some(op_type.to_owned()),
            input: inputs.iter().map(|s| (*s).to_owned()).collect(),
            output: outputs.iter().map(|s| (*s).to_owned()).collect(),
            ..Default::default()
        });
        let at = graph.node.len() - 1;
        NodeBuilder {
            node: &mut graph.node[at],
        }
    }

    /// The graph built so far, as a subgraph body for If/Loop/Scan.
    pub fn into_graph(mut self) -> GraphProto {
        self.proto.graph.take().unwrap_or_default()
    }

    /// Finishes the model.
    pub fn build(&self) -> Model {
        Model::from_proto(self.proto.clone())
    }
}
