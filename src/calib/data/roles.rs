//! What each input of a token model is for, so that random calibration data can be valid
//! input rather than noise: token ids inside the vocabulary (an id past the embedding table
//! makes ONNX Runtime's Gather fail), attention masks of ones, position ids counting from 0,
//! token types of 0 and empty past key/values (the first step of generation), as
//! ModelOpt-Windows does for LLMs when no data is given.
//!
//! Roles come from the graph (what the input feeds) first and the input's name second: the
//! vocabulary is the first dimension of the embedding table the ids index.

use serde::{Deserialize, Serialize};

use crate::model::ops;
use crate::model::{DataType, Dim, Graph, NodeId};

/// What one model input carries, for generating data it accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum InputRole {
    /// Plain values (images, features): uniform random numbers.
    #[default]
    Values,
    /// Token ids indexing an embedding table of `vocab` rows (unknown when the table was not
    /// found).
    TokenIds {
        /// Rows of the embedding table the ids index.
        vocab: Option<usize>,
    },
    /// An attention mask: all ones (every token attended).
    AttentionMask,
    /// Position ids: 0, 1, 2, ... along the sequence axis; `table` is the size of the position
    /// embedding they index, when found (it bounds the sequence length).
    PositionIds {
        /// Rows of the position embedding table.
        table: Option<usize>,
    },
    /// Token type (segment) ids: all zeros.
    TokenTypes,
    /// Cached keys/values of earlier steps: empty (no earlier step).
    Past,
}

impl InputRole {
    /// True for the roles only token models have (any of them makes a model a token model).
    pub fn is_token(self) -> bool {
        self != InputRole::Values
    }

    /// A few words for messages: "token ids (vocabulary 30522)", "attention mask (ones)".
    pub fn describe(self) -> String {
        match self {
            InputRole::Values => "values".to_owned(),
            InputRole::TokenIds { vocab: Some(v) } => format!("token ids below {v}"),
            InputRole::TokenIds { vocab: None } => {
                format!("token ids below {UNKNOWN_VOCAB} (no embedding table found)")
            }
            InputRole::AttentionMask => "attention mask of ones".to_owned(),
            InputRole::PositionIds { .. } => "position ids 0, 1, 2, ...".to_owned(),
            InputRole::TokenTypes => "token types of 0".to_owned(),
            InputRole::Past => "empty past keys/values".to_owned(),
        }
    }
}

/// True when any of `inputs` has a token role: the model takes tokens (transformers, LLMs).
pub fn is_token_model(inputs: &[super::InputSpec]) -> bool {
    inputs.iter().any(|input| input.role.is_token())
}

/// The id bound used when the embedding table cannot be found (the first hundred ids exist in
/// every vocabulary worth quantizing).
pub const UNKNOWN_VOCAB: usize = 100;

/// The role of graph input `name` of element type `dtype`.
pub fn role_of(graph: &Graph, name: &str, dtype: Option<DataType>) -> InputRole {
    let lower = name.to_ascii_lowercase();
    let integer = matches!(
        dtype,
        Some(DataType::Int64 | DataType::Int32 | DataType::Bool)
    );
    let float = dtype.is_some_and(DataType::is_float);
    if float && (lower.contains("past") || lower.starts_with("cache")) {
        return InputRole::Past;
    }
    if !integer {
        return InputRole::Values;
    }
    if lower.contains("mask") {
        return InputRole::AttentionMask;
    }
    if lower.contains("token_type") || lower.contains("segment") {
        return InputRole::TokenTypes;
    }
    let table = embedding_rows(graph, name);
    if lower.contains("position") {
        return InputRole::PositionIds { table };
    }
    if table.is_some() || lower.contains("ids") || lower.contains("token") {
        return InputRole::TokenIds { vocab: table };
    }
    InputRole::Values
}

/// The symbolic-dimension size random data gives a token model's sequence axes when the user
/// gives none (ModelOpt-Windows calibrates LLMs on sequences of this order).
pub const DEFAULT_SEQUENCE: usize = 128;

/// The concrete shape random data uses for a token model's input: fixed dims kept, the batch
/// axis 1 (the source replaces it by the sample count), the past sequence axis of past
/// keys/values 0 ([`super::past::sequence_axis`]) and every other symbolic axis `sequence`.
/// `None` for a past input with another symbolic axis (a head count or head size the graph
/// did not tell, [`super::past::refined_shape`]): the user gives its shape.
pub fn token_shape(role: InputRole, dims: &[Dim], sequence: usize) -> Option<Vec<usize>> {
    let past_sequence = super::past::sequence_axis(dims);
    dims.iter()
        .enumerate()
        .map(|(axis, dim)| match dim {
            Dim::Fixed(v) if *v >= 0 => Some(*v as usize),
            _ if axis == 0 => Some(1),
            _ if role == InputRole::Past => (Some(axis) == past_sequence).then_some(0),
            _ => Some(sequence),
        })
        .collect()
}

/// What a token model's inputs bound its sequences by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SequenceBounds {
    /// The length an ids input fixes (its axis 1), if any.
    pub fixed: Option<usize>,
    /// The rows of the smallest position table the position ids index, if any.
    pub positions: Option<usize>,
}

impl SequenceBounds {
    /// The bounds of inputs with these roles and declared shapes.
    pub fn of(roles: &[(InputRole, Option<&[Dim]>)]) -> Self {
        let mut bounds = SequenceBounds::default();
        for (role, dims) in roles {
            if let InputRole::PositionIds { table: Some(rows) } = role {
                bounds.positions = Some(bounds.positions.map_or(*rows, |p| p.min(*rows)));
            }
            if let (InputRole::TokenIds { .. }, Some([_, Dim::Fixed(v), ..])) = (role, dims)
                && *v > 0
            {
                bounds.fixed = Some(*v as usize);
            }
        }
        bounds
    }

    /// The bounds of `inputs`.
    pub fn of_inputs(inputs: &[super::InputSpec]) -> Self {
        Self::of(
            &inputs
                .iter()
                .map(|i| (i.role, i.shape.as_deref()))
                .collect::<Vec<_>>(),
        )
    }

    /// The length data gets unless told: the fixed one, else [`DEFAULT_SEQUENCE`]; never
    /// past the position table.
    pub fn default_length(self) -> usize {
        let length = self.fixed.unwrap_or(DEFAULT_SEQUENCE);
        self.positions
            .map_or(length, |rows| length.min(rows))
            .max(1)
    }
}

/// Ops an id tensor passes through unchanged in value on its way to the embedding Gather.
const ID_PASSTHROUGH: &[&str] = &[
    ops::CAST,
    ops::RESHAPE,
    ops::UNSQUEEZE,
    ops::SQUEEZE,
    ops::FLATTEN,
];

/// Rows of the table that input `name` indexes in a Gather (axis 0, the table an initializer
/// or constant), following value-preserving ops; `None` when it indexes none.
fn embedding_rows(graph: &Graph, name: &str) -> Option<usize> {
    let mut frontier = vec![name.to_owned()];
    let mut seen = 0;
    while let Some(tensor) = frontier.pop() {
        seen += 1;
        if seen > 64 {
            return None;
        }
        for &id in &graph.tensor(&tensor)?.consumers {
            if let Some(rows) = gather_table_rows(graph, id, &tensor) {
                return Some(rows);
            }
            let node = graph.node(id);
            if ID_PASSTHROUGH.contains(&node.op_type.as_str())
                && node.inputs.first() == Some(&tensor)
            {
                frontier.extend(node.outputs.iter().cloned());
            }
        }
    }
    None
}

/// The first dimension of node `id`'s table when it is a Gather on axis 0 whose indices are
/// `indices` and whose table is a weight.
fn gather_table_rows(graph: &Graph, id: NodeId, indices: &str) -> Option<usize> {
    let node = graph.node(id);
    if node.op_type != ops::GATHER || node.inputs.get(1).map(String::as_str) != Some(indices) {
        return None;
    }
    if node.int_attribute("axis").unwrap_or(0) != 0 {
        return None;
    }
    let table = graph.tensor(node.inputs.first()?)?;
    if !table.kind.is_constant() {
        return None;
    }
    match table.shape.as_deref()?.first()? {
        Dim::Fixed(rows) if *rows > 0 => Some(*rows as usize),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ModelBuilder, TensorArray};

    fn graph() -> Graph {
        let mut b = ModelBuilder::new(17);
        b.input("tokens", DataType::Int32, &[-1, -1]);
        b.input("attention_mask", DataType::Int64, &[-1, -1]);
        b.input("lengths", DataType::Int64, &[-1]);
        b.input("past_value", DataType::Float16, &[-1, 2, -1, 4]);
        b.input("x", DataType::Float32, &[-1, 4]);
        b.initializer(
            "table",
            TensorArray::Float32(ndarray::ArrayD::zeros(vec![77, 4])),
        );
        b.node("Cast", &["tokens"], &["ids64"]).attr_int("to", 7);
        b.node("Gather", &["table", "ids64"], &["emb"]);
        Graph::build(&b.build())
    }

    #[test]
    fn roles_follow_what_each_input_feeds_then_its_name() {
        let graph = graph();
        let role = |name: &str, dtype| role_of(&graph, name, Some(dtype));
        assert_eq!(
            role("tokens", DataType::Int32),
            InputRole::TokenIds { vocab: Some(77) }
        );
        assert_eq!(
            role("attention_mask", DataType::Int64),
            InputRole::AttentionMask
        );
        assert_eq!(role("lengths", DataType::Int64), InputRole::Values);
        assert_eq!(role("past_value", DataType::Float16), InputRole::Past);
        assert_eq!(role("x", DataType::Float32), InputRole::Values);
    }

    #[test]
    fn past_axes_are_empty_and_the_sequence_fits_the_position_table() {
        let dims = [
            Dim::Symbolic("batch".into()),
            Dim::Fixed(2),
            Dim::Symbolic("past".into()),
            Dim::Fixed(4),
        ];
        assert_eq!(
            token_shape(InputRole::Past, &dims, 9),
            Some(vec![1, 2, 0, 4])
        );
        // A head size left symbolic is not guessed (0 made GroupQueryAttention fail).
        let unknown = [
            Dim::Symbolic("batch".into()),
            Dim::Fixed(2),
            Dim::Symbolic("past".into()),
            Dim::Symbolic("head_size".into()),
        ];
        assert_eq!(token_shape(InputRole::Past, &unknown, 9), None);
        let ids = [Dim::Symbolic("batch".into()), Dim::Symbolic("seq".into())];
        let positions = InputRole::PositionIds { table: Some(40) };
        let roles = [
            (InputRole::TokenIds { vocab: None }, Some(&ids[..])),
            (positions, None),
        ];
        assert_eq!(SequenceBounds::of(&roles).default_length(), 40);
        assert_eq!(token_shape(positions, &ids, 40), Some(vec![1, 40]));
    }
}
