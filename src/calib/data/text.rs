//! Text as data for a token model: a text file tokenized with the model's own tokenizer (the
//! `tokenizer.json` of its folder, read by Hugging Face's `tokenizers` crate) and cut into
//! sequences of the model's length. Each sequence is a sample; the other token inputs get what
//! random token data gives them ([`super::random::role_values`]: masks of ones, positions from
//! 0, empty past keys/values). The sequences are also the ground truth of a language model's
//! next-token scores: compare reads perplexity off them.
//!
//! Why tokenized here rather than in a script: a perplexity is only comparable with others
//! when the text, the tokenizer and the cut are the same; the user gives a file and gets the
//! number, as `lm-eval` and ModelOpt's LLM examples do with their datasets.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ndarray::{ArrayD, IxDyn};

use super::roles::{self, InputRole};
use super::truth::{GroundTruth, TruthValues};
use super::{ArraySpec, Batch, BatchCursor, BatchSource, DataError, InputSpec};
use crate::model::{DataType, TensorArray};

/// The ground truth's name in messages: the sequences' own next tokens.
pub const TRUTH_KEY: &str = "next tokens";

/// Bytes of text tokenized at a time (cut after a line), so that a large file stops being
/// read once enough sequences are had.
const CHUNK_BYTES: usize = 1 << 16;

/// How a text file becomes samples.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TextSpec {
    /// The text (UTF-8).
    pub path: PathBuf,
    /// The `tokenizer.json` that tokenizes it.
    pub tokenizer: PathBuf,
    /// Tokens per sequence (`None`: the model's fixed sequence length, else
    /// [`roles::DEFAULT_SEQUENCE`], bounded by a position table).
    pub sequence: Option<usize>,
    /// Sequences taken at most, from the start of the text.
    pub max_samples: usize,
}

/// Sequences taken from a text when the user sets no limit.
pub const DEFAULT_TEXT_SAMPLES: usize = 128;

/// The tokenizer file Hugging Face, Optimum and onnxruntime-genai folders keep beside the model.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// Whether `path` names a text file (`.txt`), the data a text source reads.
pub fn is_text_file(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("txt"))
}

/// The `tokenizer.json` in `model`'s folder, when there is one.
pub fn tokenizer_beside(model: &Path) -> Option<PathBuf> {
    let path = crate::util::folder_of(model).join(TOKENIZER_FILE);
    path.is_file().then_some(path)
}

/// A text's token sequences, fed batch by batch.
#[derive(Debug)]
pub struct TextSource {
    label: String,
    arrays: Vec<ArraySpec>,
    roles: Vec<InputRole>,
    sequences: Arc<Vec<Vec<i64>>>,
    tokens: usize,
    note: String,
    cursor: BatchCursor,
}

impl TextSource {
    /// Tokenizes `spec`'s text for a model with `inputs`: one sequence per sample, as many
    /// whole sequences as the text holds up to the limit.
    pub fn open(spec: &TextSpec, inputs: &[InputSpec]) -> Result<Self, DataError> {
        let sequence = sequence_length(spec.sequence, inputs)?;
        let roles: Vec<InputRole> = inputs.iter().map(|i| i.role).collect();
        let mut arrays = array_specs(inputs, sequence)?;
        let tokenizer = tokenizers::Tokenizer::from_file(&spec.tokenizer).map_err(|e| {
            DataError::Tokenizer {
                path: spec.tokenizer.clone(),
                reason: e.to_string(),
            }
        })?;
        let text = std::fs::read_to_string(&spec.path).map_err(|e| DataError::Open {
            path: spec.path.clone(),
            reason: e.to_string(),
        })?;
        let limit = spec.max_samples.max(1);
        let wanted = sequence.saturating_mul(limit);
        let ids = tokenize(&tokenizer, &text, wanted, &spec.tokenizer)?;
        let sequences: Vec<Vec<i64>> = ids
            .chunks_exact(sequence)
            .take(limit)
            .map(<[i64]>::to_vec)
            .collect();
        if sequences.is_empty() {
            return Err(DataError::TextTooShort {
                path: spec.path.clone(),
                tokens: ids.len(),
                sequence,
            });
        }
        check_vocabulary(inputs, &sequences, &spec.tokenizer)?;
        for array in &mut arrays {
            array.shape[0] = sequences.len();
        }
        let note = if ids.len() >= wanted {
            format!(
                "text: the first {} sequences of {sequence} tokens (--text_samples)",
                sequences.len()
            )
        } else {
            let rest = ids.len() % sequence;
            let left_out = if rest > 0 {
                format!(" ({rest} tokens past the last left out)")
            } else {
                String::new()
            };
            format!(
                "text: {} tokens, {} sequences of {sequence}{left_out}",
                ids.len(),
                sequences.len(),
            )
        };
        Ok(TextSource {
            note,
            label: format!(
                "{} ({} sequences of {sequence} tokens)",
                spec.path.display(),
                sequences.len()
            ),
            arrays,
            roles,
            tokens: ids.len(),
            sequences: Arc::new(sequences),
            cursor: BatchCursor::default(),
        })
    }

    /// Tokens read from the text (whole sequences and the rest before the limit).
    pub fn tokens(&self) -> usize {
        self.tokens
    }
}

/// The sequence length: the user's, else the model's (see [`TextSpec::sequence`]); a length
/// the model cannot take (another fixed length, past its position table) is refused.
fn sequence_length(asked: Option<usize>, inputs: &[InputSpec]) -> Result<usize, DataError> {
    let bounds = roles::SequenceBounds::of_inputs(inputs);
    let Some(asked) = asked else {
        return Ok(bounds.default_length());
    };
    let refuse = |reason: String| DataError::Mismatch {
        problems: vec![reason],
    };
    if asked == 0 {
        return Err(refuse("--seq_len must be at least 1".to_owned()));
    }
    if let Some(fixed) = bounds.fixed.filter(|&f| f != asked) {
        return Err(refuse(format!(
            "the model takes sequences of exactly {fixed} tokens, not --seq_len {asked}"
        )));
    }
    if let Some(rows) = bounds.positions.filter(|&rows| rows < asked) {
        return Err(refuse(format!(
            "the model's position table has {rows} rows: --seq_len {asked} is longer"
        )));
    }
    Ok(asked)
}

/// The array each input gets: `[1, ...]` (axis 0 the samples) with the sequence axes
/// `sequence` long. Text
/// feeds token models only: an input of plain values is refused.
fn array_specs(inputs: &[InputSpec], sequence: usize) -> Result<Vec<ArraySpec>, DataError> {
    let mut problems = Vec::new();
    let mut arrays = Vec::new();
    for input in inputs {
        if input.role == InputRole::Values {
            problems.push(format!(
                "input '{}' takes values, not tokens: text feeds token models (ids, masks, positions, past keys/values)",
                input.name
            ));
            continue;
        }
        let shape = input
            .shape
            .as_deref()
            .and_then(|dims| roles::token_shape(input.role, dims, sequence));
        let one_sequence = |shape: &[usize]| shape[1..].iter().product::<usize>() == sequence;
        match shape {
            Some(shape) if matches!(input.role, InputRole::TokenIds { .. }) && !one_sequence(&shape) => {
                problems.push(format!(
                    "input '{}' takes ids of shape {shape:?}, not one sequence of {sequence} per sample",
                    input.name
                ));
            }
            Some(shape) => arrays.push(ArraySpec {
                name: input.name.clone(),
                dtype: input.dtype.unwrap_or(DataType::Int64),
                shape,
            }),
            None => problems.push(format!(
                "input '{}' has axes the graph does not tell ({}): give the model's folder with its configuration",
                input.name,
                input.role.describe()
            )),
        }
    }
    if problems.is_empty() {
        Ok(arrays)
    } else {
        Err(DataError::Mismatch { problems })
    }
}

/// `text`'s token ids, read chunk by chunk (each cut after a line) until `wanted` are had.
/// No special tokens are added: the text is one stream, cut into sequences afterwards.
fn tokenize(
    tokenizer: &tokenizers::Tokenizer,
    text: &str,
    wanted: usize,
    path: &Path,
) -> Result<Vec<i64>, DataError> {
    let mut ids = Vec::new();
    let mut rest = text;
    while !rest.is_empty() && ids.len() < wanted {
        let (chunk, after) = rest.split_at(chunk_end(rest));
        let encoding = tokenizer
            .encode(chunk, false)
            .map_err(|e| DataError::Tokenizer {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        ids.extend(encoding.get_ids().iter().map(|&id| i64::from(id)));
        rest = after;
    }
    Ok(ids)
}

/// Where the first chunk of `text` ends: after the first line break past [`CHUNK_BYTES`], or
/// at the end.
fn chunk_end(text: &str) -> usize {
    if text.len() <= CHUNK_BYTES {
        return text.len();
    }
    text.as_bytes()[CHUNK_BYTES..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(text.len(), |i| CHUNK_BYTES + i + 1)
}

/// Refuses ids past the model's embedding table: the tokenizer is not the model's.
fn check_vocabulary(
    inputs: &[InputSpec],
    sequences: &[Vec<i64>],
    tokenizer: &Path,
) -> Result<(), DataError> {
    let largest = sequences.iter().flatten().copied().max().unwrap_or(0);
    for input in inputs {
        if let InputRole::TokenIds { vocab: Some(rows) } = input.role
            && largest >= rows as i64
        {
            return Err(DataError::Mismatch {
                problems: vec![format!(
                    "{} gives token id {largest}, past the {rows} rows of the embedding table that input '{}' indexes: is it this model's tokenizer?",
                    tokenizer.display(),
                    input.name
                )],
            });
        }
    }
    Ok(())
}

impl BatchSource for TextSource {
    fn describe(&self) -> String {
        self.label.clone()
    }

    fn arrays(&self) -> Vec<ArraySpec> {
        self.arrays.clone()
    }

    fn samples(&self) -> usize {
        self.sequences.len()
    }

    fn notes(&self) -> Vec<String> {
        vec![self.note.clone()]
    }

    fn rewind(&mut self) -> Result<(), DataError> {
        self.cursor.reset();
        Ok(())
    }

    fn next_batch(&mut self, max_samples: usize) -> Result<Option<Batch>, DataError> {
        let Some((index, first_sample, count)) =
            self.cursor.claim(max_samples, self.sequences.len())
        else {
            return Ok(None);
        };
        let rows = &self.sequences[first_sample..first_sample + count];
        let inputs = self
            .arrays
            .iter()
            .zip(&self.roles)
            .map(|(spec, &role)| {
                let mut shape = spec.shape.clone();
                shape[0] = count;
                let array = match role {
                    InputRole::TokenIds { .. } => ids_array(spec.dtype, &shape, rows),
                    _ => super::random::role_values(spec.dtype, &shape, role),
                };
                (spec.name.clone(), array)
            })
            .collect();
        Ok(Some(Batch {
            index,
            first_sample,
            samples: count,
            inputs,
        }))
    }

    fn ground_truth(&self, key: Option<&str>) -> Result<Option<GroundTruth>, DataError> {
        match key {
            None | Some(TRUTH_KEY) => Ok(Some(GroundTruth {
                key: TRUTH_KEY.to_owned(),
                values: TruthValues::Tokens(self.sequences.clone()),
            })),
            Some(key) => Err(DataError::NoTruth {
                key: key.to_owned(),
                available: format!("text data holds its '{TRUTH_KEY}' only"),
            }),
        }
    }
}

/// The ids of `rows` as an array of `shape` (`[rows, sequence]`, checked at open), of the ids'
/// element type.
fn ids_array(dtype: DataType, shape: &[usize], rows: &[Vec<i64>]) -> TensorArray {
    let flat: Vec<i64> = rows.iter().flatten().copied().collect();
    let shape = IxDyn(shape);
    match dtype {
        DataType::Int32 => TensorArray::Int32(
            ArrayD::from_shape_vec(shape.clone(), flat.iter().map(|&v| v as i32).collect())
                .unwrap_or_else(|_| ArrayD::zeros(shape)),
        ),
        _ => TensorArray::Int64(
            ArrayD::from_shape_vec(shape.clone(), flat).unwrap_or_else(|_| ArrayD::zeros(shape)),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Dim;

    /// A word-level tokenizer over `words` (id = position), splitting on whitespace, with
    /// `[UNK]` for the rest.
    pub(crate) fn word_tokenizer(words: &[&str]) -> String {
        let vocab: Vec<String> = words
            .iter()
            .enumerate()
            .map(|(i, w)| format!("\"{w}\": {i}"))
            .collect();
        format!(
            r#"{{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
"normalizer": null, "pre_tokenizer": {{"type": "Whitespace"}}, "post_processor": null,
"decoder": null, "model": {{"type": "WordLevel", "vocab": {{{}}}, "unk_token": "[UNK]"}}}}"#,
            vocab.join(", ")
        )
    }

    fn ids_input(len: i64, vocab: Option<usize>) -> InputSpec {
        InputSpec {
            name: "input_ids".into(),
            dtype: Some(DataType::Int64),
            shape: Some(vec![
                Dim::Symbolic("batch".into()),
                if len > 0 {
                    Dim::Fixed(len)
                } else {
                    Dim::Symbolic("sequence".into())
                },
            ]),
            role: InputRole::TokenIds { vocab },
        }
    }

    fn mask_input() -> InputSpec {
        InputSpec {
            name: "attention_mask".into(),
            dtype: Some(DataType::Int64),
            shape: Some(vec![
                Dim::Symbolic("batch".into()),
                Dim::Symbolic("seq".into()),
            ]),
            role: InputRole::AttentionMask,
        }
    }

    fn spec(dir: &Path, text: &str, tokenizer: &str, sequence: Option<usize>) -> TextSpec {
        std::fs::write(dir.join("text.txt"), text).unwrap();
        std::fs::write(dir.join("tokenizer.json"), tokenizer).unwrap();
        TextSpec {
            path: dir.join("text.txt"),
            tokenizer: dir.join("tokenizer.json"),
            sequence,
            max_samples: DEFAULT_TEXT_SAMPLES,
        }
    }

    #[test]
    fn text_becomes_whole_sequences_of_the_tokenizers_ids_with_their_truth() {
        let dir = tempfile::tempdir().unwrap();
        let tokenizer = word_tokenizer(&["[UNK]", "the", "cat", "sat", "on", "mat"]);
        let text = "the cat sat\non the mat the dog sat";
        let spec = spec(dir.path(), text, &tokenizer, None);
        let mut source = TextSource::open(&spec, &[ids_input(4, Some(6)), mask_input()]).unwrap();
        // 9 tokens ("dog" unknown): two sequences of 4, one token left over.
        assert_eq!((source.samples(), source.tokens()), (2, 9));
        assert_eq!(
            source.notes(),
            ["text: 9 tokens, 2 sequences of 4 (1 tokens past the last left out)"]
        );
        let batch = source.next_batch(8).unwrap().unwrap();
        let TensorArray::Int64(ids) = &batch.inputs[0].1 else {
            panic!("ids are int64")
        };
        assert_eq!(ids.shape(), [2, 4]);
        assert_eq!(
            ids.iter().copied().collect::<Vec<_>>(),
            [1, 2, 3, 4, 1, 5, 1, 0]
        );
        let TensorArray::Int64(mask) = &batch.inputs[1].1 else {
            panic!("the mask is int64")
        };
        assert_eq!(mask.shape(), [2, 4]);
        assert!(mask.iter().all(|&v| v == 1));
        let truth = source.ground_truth(None).unwrap().unwrap();
        assert_eq!(truth.len(), 2);
        assert!(matches!(&truth.values, TruthValues::Tokens(t) if t[1] == [1, 5, 1, 0]));
        assert!(source.ground_truth(Some("labels")).is_err());
    }

    #[test]
    fn short_texts_foreign_tokenizers_and_impossible_lengths_are_one_line_each() {
        let dir = tempfile::tempdir().unwrap();
        let tokenizer = word_tokenizer(&["[UNK]", "a", "b", "c", "d", "e", "f", "g"]);
        let short = spec(dir.path(), "a b c", &tokenizer, None);
        let err = TextSource::open(&short, &[ids_input(4, None)]).unwrap_err();
        assert!(err.to_string().contains("3 tokens"), "{err}");
        let long = spec(dir.path(), "a b c d e f g g", &tokenizer, None);
        let err = TextSource::open(&long, &[ids_input(4, Some(5))]).unwrap_err();
        assert!(
            err.to_string().contains("token id 7, past the 5 rows"),
            "{err}"
        );
        let asked = TextSpec {
            sequence: Some(3),
            ..long.clone()
        };
        let err = TextSource::open(&asked, &[ids_input(4, None)]).unwrap_err();
        assert!(err.to_string().contains("exactly 4 tokens"), "{err}");
        std::fs::write(&long.tokenizer, "{\"model\": 3}").unwrap();
        let err = TextSource::open(&long, &[ids_input(4, None)]).unwrap_err();
        assert!(
            err.to_string().contains("cannot read the tokenizer"),
            "{err}"
        );
        let image = InputSpec {
            name: "pixels".into(),
            dtype: Some(DataType::Float32),
            shape: Some(vec![Dim::Fixed(1), Dim::Fixed(3)]),
            role: InputRole::Values,
        };
        let err = TextSource::open(&long, &[image]).unwrap_err();
        assert!(
            err.to_string().contains("takes values, not tokens"),
            "{err}"
        );
    }

    #[test]
    fn long_texts_are_tokenized_in_chunks_cut_after_a_line() {
        let line = "a b c d e f g\n";
        let text = line.repeat(CHUNK_BYTES / line.len() * 3);
        let end = chunk_end(&text);
        assert!(end > CHUNK_BYTES && text[..end].ends_with('\n'));
        let dir = tempfile::tempdir().unwrap();
        let tokenizer = word_tokenizer(&["[UNK]", "a", "b", "c", "d", "e", "f", "g"]);
        let mut spec = spec(dir.path(), &text, &tokenizer, Some(7));
        spec.max_samples = 3;
        let source = TextSource::open(&spec, &[mask_input(), ids_input(-1, None)]).unwrap();
        assert_eq!(source.samples(), 3);
        assert_eq!(
            source.notes(),
            ["text: the first 3 sequences of 7 tokens (--text_samples)"]
        );
        // The first chunk alone held enough: the rest of the text was not tokenized.
        assert!(source.tokens() < text.len() / 4, "{}", source.tokens());
    }
}
