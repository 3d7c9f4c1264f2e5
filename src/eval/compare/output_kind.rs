//! What a model output carries, found from its rank, the op that produces it and its name,
//! so that compare shows only the metrics that fit: top-1 agreement means something for class
//! scores, nothing for a sentence embedding or a transformer's hidden states.

use serde::{Deserialize, Serialize};

use crate::model::Graph;
use crate::model::ops;

/// The kind of a model output, which decides the task metrics shown beside the fidelity ones
/// (SQNR, cosine, MSE and largest error are shown for every output).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputKind {
    /// Class scores `[N, classes]` (after a Softmax, or a final linear layer): top-1 and top-5
    /// agreement.
    Classifier,
    /// Per-position class probabilities `[N, T, classes]` after a Softmax, read by greedy CTC
    /// (OCR, speech): per-position top-1 and whole-sequence agreement.
    CtcSequence,
    /// Per-token scores `[N, T, vocab]` (a language model's logits): top-1 and top-5
    /// agreement per token.
    TokenScores,
    /// One vector per sample `[N, D]` (a sentence embedding, pooled features): cosine and
    /// nearest-neighbour agreement.
    Embedding,
    /// Per-token hidden states `[N, T, H]`: fidelity metrics only.
    HiddenStates,
    /// Dense maps `[N, C, H, W]` (segmentation, detection heat maps): fidelity metrics only.
    DenseMap,
    /// Anything else: fidelity metrics only.
    Values,
}

impl OutputKind {
    /// Every kind, in the order menus list them.
    pub const ALL: [OutputKind; 7] = [
        OutputKind::Classifier,
        OutputKind::CtcSequence,
        OutputKind::TokenScores,
        OutputKind::Embedding,
        OutputKind::HiddenStates,
        OutputKind::DenseMap,
        OutputKind::Values,
    ];

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            OutputKind::Classifier => "classifier",
            OutputKind::CtcSequence => "ctc_sequence",
            OutputKind::TokenScores => "token_scores",
            OutputKind::Embedding => "embedding",
            OutputKind::HiddenStates => "hidden_states",
            OutputKind::DenseMap => "dense_map",
            OutputKind::Values => "values",
        }
    }

    /// The kind named `name` (see [`OutputKind::name`]).
    pub fn parse(name: &str) -> Option<OutputKind> {
        OutputKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// A label for people.
    pub fn label(self) -> &'static str {
        match self {
            OutputKind::Classifier => "class scores",
            OutputKind::CtcSequence => "CTC sequence",
            OutputKind::TokenScores => "token scores",
            OutputKind::Embedding => "embedding",
            OutputKind::HiddenStates => "hidden states",
            OutputKind::DenseMap => "dense map",
            OutputKind::Values => "values",
        }
    }

    /// Whether per-row (per-position) argmax agreement fits this kind.
    pub fn has_classes(self) -> bool {
        matches!(
            self,
            OutputKind::Classifier | OutputKind::CtcSequence | OutputKind::TokenScores
        )
    }

    /// The kind an output of `rank` dimensions has when nothing else is known of it.
    pub fn from_rank(rank: usize) -> OutputKind {
        match rank {
            2 => OutputKind::Classifier,
            3 => OutputKind::HiddenStates,
            4 => OutputKind::DenseMap,
            _ => OutputKind::Values,
        }
    }
}

/// Ops that only move or relabel values: the kind is that of what they carry.
const PASS_THROUGH: [&str; 7] = [
    ops::IDENTITY,
    ops::RESHAPE,
    ops::FLATTEN,
    ops::SQUEEZE,
    ops::UNSQUEEZE,
    ops::CAST,
    ops::TRANSPOSE,
];

/// The op that really produced `tensor`: its producer, looked through [`PASS_THROUGH`] ops.
fn producing_op(graph: &Graph, tensor: &str) -> Option<String> {
    let mut name = tensor.to_owned();
    for _ in 0..16 {
        let node = graph.node(graph.tensor(&name)?.producer?);
        // A Concat of one input (PyTorch exports end sentence-transformers so) passes it on.
        let single_concat = node.op_type == ops::CONCAT && node.inputs.len() == 1;
        if !PASS_THROUGH.contains(&node.op_type.as_str()) && !single_concat {
            return Some(node.op_type.clone());
        }
        name = node.inputs.first()?.clone();
    }
    None
}

/// The kind of the graph output `output`, from its declared rank (`rank` when it is not
/// declared), the op producing it and its name.
pub fn detect(graph: &Graph, output: &str, rank: Option<usize>) -> OutputKind {
    let declared = graph
        .tensor(output)
        .and_then(|t| t.shape.as_ref())
        .map(Vec::len);
    let Some(rank) = declared.or(rank) else {
        return OutputKind::Values;
    };
    let op = producing_op(graph, output).unwrap_or_default();
    let name = output.to_ascii_lowercase();
    // A decoder's key/value cache (`present.N.key`, `present_key_values...`): no map to read.
    if name.starts_with("present") || name.contains("key_values") {
        return OutputKind::Values;
    }
    let named_logits = name.contains("logit");
    let softmax = matches!(op.as_str(), ops::SOFTMAX | ops::LOG_SOFTMAX);
    match rank {
        2 if softmax || named_logits => OutputKind::Classifier,
        2 if is_pooling(&op) || name.contains("embed") || name.contains("pool") => {
            OutputKind::Embedding
        }
        2 => OutputKind::Classifier,
        3 if softmax => OutputKind::CtcSequence,
        3 if named_logits => OutputKind::TokenScores,
        3 => OutputKind::HiddenStates,
        4 => OutputKind::DenseMap,
        _ => OutputKind::Values,
    }
}

/// Ops that end a pooled or normalized vector rather than class scores.
fn is_pooling(op: &str) -> bool {
    matches!(
        op,
        "ReduceMean"
            | ops::REDUCE_SUM
            | ops::REDUCE_MAX
            | ops::GLOBAL_AVERAGE_POOL
            | ops::GLOBAL_MAX_POOL
            | ops::LP_NORMALIZATION
            | ops::DIV
            | ops::TANH
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DataType, ModelBuilder};

    fn kind_of(op: &str, rank: usize, name: &str) -> OutputKind {
        let shape: Vec<i64> = (0..rank).map(|i| if i == 0 { -1 } else { 8 }).collect();
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &shape);
        b.node(op, &["x"], &["h"]);
        b.node("Identity", &["h"], &[name]);
        b.output(name, DataType::Float32, &shape);
        let graph = Graph::build(&b.build());
        detect(&graph, name, None)
    }

    #[test]
    fn kinds_come_from_rank_producer_and_name() {
        assert_eq!(kind_of("Softmax", 2, "prob"), OutputKind::Classifier);
        assert_eq!(kind_of("Relu", 2, "logits"), OutputKind::Classifier);
        assert_eq!(kind_of("Relu", 2, "fc_out"), OutputKind::Classifier);
        assert_eq!(kind_of("ReduceMean", 2, "y"), OutputKind::Embedding);
        assert_eq!(
            kind_of("Relu", 2, "sentence_embedding"),
            OutputKind::Embedding
        );
        assert_eq!(kind_of("Softmax", 3, "y"), OutputKind::CtcSequence);
        assert_eq!(kind_of("Relu", 3, "logits"), OutputKind::TokenScores);
        assert_eq!(
            kind_of("Relu", 3, "last_hidden_state"),
            OutputKind::HiddenStates
        );
        assert_eq!(kind_of("Sigmoid", 4, "maps"), OutputKind::DenseMap);
        assert_eq!(kind_of("Concat", 4, "present.0.key"), OutputKind::Values);
        assert_eq!(kind_of("Relu", 1, "y"), OutputKind::Values);
    }

    /// paraphrase-MiniLM's export: mean pooling (ReduceSum / Clip → Div) then a one-input
    /// Concat.
    #[test]
    fn a_pooled_sentence_embedding_behind_a_one_input_concat_is_an_embedding() {
        let mut b = ModelBuilder::new(17);
        b.input("h", DataType::Float32, &[-1, 8]);
        b.input("n", DataType::Float32, &[-1, 1]);
        b.node("Div", &["h", "n"], &["mean"]);
        b.node("Concat", &["mean"], &["461"]).attr_int("axis", 1);
        b.output("461", DataType::Float32, &[-1, 8]);
        let graph = Graph::build(&b.build());
        assert_eq!(detect(&graph, "461", None), OutputKind::Embedding);
    }

    #[test]
    fn names_round_trip() {
        for kind in OutputKind::ALL {
            assert_eq!(OutputKind::parse(kind.name()), Some(kind));
        }
        assert_eq!(OutputKind::parse("nonsense"), None);
    }
}
