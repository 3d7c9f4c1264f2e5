//! The layout of a decoder's past keys/values inputs, so that random data for the first step
//! of generation is empty along the past sequence and right everywhere else.
//!
//! Why: exporters leave more of these axes symbolic than the sequence. onnxruntime-genai's
//! model builder declares `[batch_size, num_kv_heads, past_sequence_length, head_size]` with
//! the head size symbolic in some of its models; an empty past with a head size of 0 fails in
//! GroupQueryAttention ("past_key dimension 3 should match the packed KV head dimension").
//! The head count and head size are in the graph: GroupQueryAttention's `kv_num_heads` and
//! MultiHeadAttention's `num_heads` attributes, the width of the projection feeding the
//! attention's query (divided by the heads, and for a packed QKV projection by the heads of
//! all three), or the declared shape of what an exporter's Concat appends the past to.

use crate::model::ops;
use crate::model::{Dim, Graph, Node};

/// What the graph tells of a past input's axes besides the batch and the sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct KvLayout {
    heads: Option<usize>,
    head_size: Option<usize>,
}

/// The past sequence axis of a past input declared `dims`: the symbolic axis whose name says
/// sequence or length, else axis 2 of a rank-4 input (batch, heads, sequence, head size: the
/// layout of onnxruntime-genai, Optimum and Hugging Face exports), else the last but one.
pub fn sequence_axis(dims: &[Dim]) -> Option<usize> {
    let named = dims.iter().position(|d| match d {
        Dim::Symbolic(name) => {
            let name = name.to_ascii_lowercase();
            ["seq", "len", "past", "total"]
                .iter()
                .any(|word| name.contains(word))
        }
        _ => false,
    });
    named
        .filter(|&axis| axis > 0)
        .or_else(|| (dims.len() >= 3).then(|| if dims.len() == 4 { 2 } else { dims.len() - 2 }))
}

/// `dims`, the declared shape of past input `name`, with its head-count and head-size axes
/// fixed where the graph tells them (see the module docs); other axes as declared.
pub fn refined_shape(graph: &Graph, name: &str, dims: &[Dim]) -> Vec<Dim> {
    let layout = kv_layout(graph, name);
    let sequence = sequence_axis(dims);
    let rank = dims.len();
    dims.iter()
        .enumerate()
        .map(|(axis, dim)| {
            let known = match axis {
                _ if !matches!(dim, Dim::Symbolic(_) | Dim::Unknown) => None,
                0 => None,
                _ if Some(axis) == sequence => None,
                _ if axis + 1 == rank => layout.head_size,
                1 => layout.heads,
                _ => None,
            };
            known.map_or_else(|| dim.clone(), |v| Dim::Fixed(v as i64))
        })
        .collect()
}

/// The head count and head size the consumers of past input `name` imply.
fn kv_layout(graph: &Graph, name: &str) -> KvLayout {
    let Some(info) = graph.tensor(name) else {
        return KvLayout::default();
    };
    for &id in &info.consumers {
        let node = graph.node(id);
        let layout = match node.op_type.as_str() {
            ops::GROUP_QUERY_ATTENTION => grouped_query(graph, node),
            ops::MULTI_HEAD_ATTENTION => multi_head(graph, node),
            ops::CONCAT => appended_to(graph, node, name),
            _ => KvLayout::default(),
        };
        if layout != KvLayout::default() {
            return layout;
        }
    }
    KvLayout::default()
}

/// GroupQueryAttention: `kv_num_heads` heads; the head size from the query's width over
/// `num_heads` (or, packed with the keys and values, over all their heads).
fn grouped_query(graph: &Graph, node: &Node) -> KvLayout {
    let positive = |v: Option<i64>| v.filter(|v| *v > 0).map(|v| v as usize);
    let heads = positive(node.int_attribute("num_heads"));
    let kv_heads = positive(node.int_attribute("kv_num_heads"));
    let packed = node.inputs.get(1).is_none_or(String::is_empty);
    let width = node.inputs.first().and_then(|q| projection_width(graph, q));
    let divisor = match (heads, kv_heads, packed) {
        (Some(h), Some(kv), true) => Some(h + 2 * kv),
        (Some(h), _, false) => Some(h),
        _ => None,
    };
    KvLayout {
        heads: kv_heads,
        head_size: exact_division(width, divisor),
    }
}

/// MultiHeadAttention: `num_heads` heads, the head size from the query's width.
fn multi_head(graph: &Graph, node: &Node) -> KvLayout {
    let heads = node
        .int_attribute("num_heads")
        .filter(|v| *v > 0)
        .map(|v| v as usize);
    let width = node.inputs.first().and_then(|q| projection_width(graph, q));
    KvLayout {
        heads,
        head_size: exact_division(width, heads),
    }
}

/// An exporter's Concat of the past with this step's keys or values: the other input's
/// declared head count and head size.
fn appended_to(graph: &Graph, node: &Node, past: &str) -> KvLayout {
    let fixed = |dim: Option<&Dim>| match dim {
        Some(Dim::Fixed(v)) if *v > 0 => Some(*v as usize),
        _ => None,
    };
    node.inputs
        .iter()
        .filter(|i| i.as_str() != past)
        .filter_map(|i| graph.tensor(i)?.shape.as_deref())
        .find(|dims| dims.len() == 4)
        .map_or_else(KvLayout::default, |dims| KvLayout {
            heads: fixed(dims.get(1)),
            head_size: fixed(dims.get(3)),
        })
}

/// The last dimension of `tensor`: declared, or the columns of the constant weight of the
/// MatMul that computes it (through an Add of a bias).
fn projection_width(graph: &Graph, tensor: &str) -> Option<usize> {
    let declared = graph
        .tensor(tensor)
        .and_then(|t| t.shape.as_deref())
        .and_then(<[Dim]>::last);
    if let Some(Dim::Fixed(v)) = declared
        && *v > 0
    {
        return Some(*v as usize);
    }
    let mut producer = graph.producer_of(tensor)?;
    if producer.op_type == ops::ADD {
        producer = producer
            .inputs
            .iter()
            .filter_map(|i| graph.producer_of(i))
            .find(|p| p.op_type == ops::MAT_MUL)?;
    }
    if producer.op_type != ops::MAT_MUL {
        return None;
    }
    let weight = graph.tensor(producer.inputs.get(1)?)?;
    match weight.shape.as_deref()?.last()? {
        Dim::Fixed(v) if *v > 0 && weight.kind.is_constant() => Some(*v as usize),
        _ => None,
    }
}

/// `width / divisor` when both are known and it divides exactly.
fn exact_division(width: Option<usize>, divisor: Option<usize>) -> Option<usize> {
    let (width, divisor) = (width?, divisor?);
    (divisor > 0 && width % divisor == 0).then(|| width / divisor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DataType, ModelBuilder, TensorArray};

    /// A GroupQueryAttention over a packed QKV projection (4 query heads, 2 KV heads of 8),
    /// the past declared with a symbolic head count and head size.
    #[test]
    fn grouped_query_attention_fixes_the_heads_and_head_size_of_its_past() {
        let mut b = ModelBuilder::new(17);
        b.import("com.microsoft", 1);
        b.input("x", DataType::Float32, &[-1, -1, 32]);
        b.input(
            "past_key_values.0.key",
            DataType::Float32,
            &[-1, -1, -1, -1],
        );
        let w = ndarray::ArrayD::zeros(ndarray::IxDyn(&[32, 64]));
        b.initializer("w_qkv", TensorArray::Float32(w));
        b.node("MatMul", &["x", "w_qkv"], &["qkv"]);
        b.node(
            "GroupQueryAttention",
            &[
                "qkv",
                "",
                "",
                "past_key_values.0.key",
                "past_v",
                "seqlens",
                "total",
            ],
            &["out", "present.0.key", "present.0.value"],
        )
        .domain("com.microsoft")
        .attr_int("num_heads", 4)
        .attr_int("kv_num_heads", 2);
        b.output("out", DataType::Float32, &[-1, -1, 32]);
        let graph = Graph::build(&b.build());
        let dims = [
            Dim::Symbolic("batch_size".into()),
            Dim::Symbolic("num_kv_heads".into()),
            Dim::Symbolic("past_sequence_length".into()),
            Dim::Symbolic("head_size".into()),
        ];
        let refined = refined_shape(&graph, "past_key_values.0.key", &dims);
        assert_eq!(refined[1], Dim::Fixed(2));
        assert_eq!(refined[3], Dim::Fixed(8), "64 columns over 4 + 2 + 2 heads");
        assert_eq!(
            (refined[0].clone(), refined[2].clone()),
            (dims[0].clone(), dims[2].clone())
        );
        assert_eq!(sequence_axis(&dims), Some(2));
    }

    #[test]
    fn the_sequence_axis_is_named_or_the_third_of_four() {
        let sym = |n: &str| Dim::Symbolic(n.into());
        assert_eq!(
            sequence_axis(&[sym("b"), sym("h"), sym("s"), Dim::Fixed(8)]),
            Some(2)
        );
        assert_eq!(
            sequence_axis(&[sym("b"), sym("past_len"), Dim::Fixed(2), Dim::Fixed(8)]),
            Some(1)
        );
        assert_eq!(sequence_axis(&[sym("b")]), None);
    }
}
