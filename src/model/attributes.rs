//! A node's attributes by name (the protobuf keeps them as a list).

use super::proto::{AttributeProto, NodeProto};

/// The attribute `name` of `node`.
pub fn find<'a>(node: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    node.attribute.iter().find(|a| a.name() == name)
}

/// A float attribute's value.
pub fn float(node: &NodeProto, name: &str) -> Option<f32> {
    find(node, name).map(AttributeProto::f)
}

/// An integer attribute's value.
pub fn int(node: &NodeProto, name: &str) -> Option<i64> {
    find(node, name).map(AttributeProto::i)
}

/// An integer-list attribute's values.
pub fn ints<'a>(node: &'a NodeProto, name: &str) -> Option<&'a [i64]> {
    find(node, name).map(|a| a.ints.as_slice())
}

/// A string attribute's value (lossy UTF-8).
pub fn string(node: &NodeProto, name: &str) -> Option<String> {
    find(node, name).map(|a| String::from_utf8_lossy(a.s()).into_owned())
}
