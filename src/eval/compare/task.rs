//! The user's task, beside fidelity: which kind each output is (detected, or chosen), the
//! ground truth kept in the evaluation data (`labels`, `texts`) and what reading it needs (a
//! CTC model's characters), resolved once before a comparison so that every batch is scored
//! the same way and every problem is found before the first run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::calib::data::BatchSource;
use crate::calib::data::truth::{GroundTruth, TruthValues};
use crate::eval::compare::{EvalError, OutputKind, output_kind};
use crate::model::{Graph, Model};

/// The model metadata entry holding a CTC model's characters, one per line (PaddleOCR's).
pub const CHARSET_METADATA: &str = "character";

/// What the user chose about the task; everything left `None` is detected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskOptions {
    /// Output kinds chosen by the user, by output name, over the detected ones.
    pub kinds: BTreeMap<String, OutputKind>,
    /// The data array holding ground truth (`None`: `labels` or `texts` when present).
    pub truth_key: Option<String>,
    /// A file listing a CTC model's characters, one per line (`None`: the model's
    /// `character` metadata).
    pub charset: Option<PathBuf>,
    /// Dense maps: values at or above this count as foreground for the IoU.
    pub iou_threshold: f32,
}

impl Default for TaskOptions {
    fn default() -> Self {
        TaskOptions {
            kinds: BTreeMap::new(),
            truth_key: None,
            charset: None,
            iou_threshold: 0.5,
        }
    }
}

/// A CTC model's characters: class 0 is the blank, class `i` is `chars[i - 1]`, and one class
/// past them is a space (PaddleOCR's `use_space_char`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charset {
    chars: Vec<String>,
}

impl Charset {
    /// The characters of a text, one per line (a final empty line ignored).
    pub fn from_lines(text: &str) -> Charset {
        Charset {
            chars: text
                .strip_suffix('\n')
                .unwrap_or(text)
                .split('\n')
                .map(|l| l.strip_suffix('\r').unwrap_or(l).to_owned())
                .collect(),
        }
    }

    /// Classes it can name: the blank, each character, and the space.
    pub fn classes(&self) -> usize {
        self.chars.len() + 2
    }

    /// The text read off a greedy CTC path already collapsed ([`crate::eval::compare::ctc_greedy`]);
    /// `None` when a class lies beyond the characters.
    pub fn decode(&self, classes: &[usize]) -> Option<String> {
        classes
            .iter()
            .map(|&c| match c.checked_sub(1) {
                Some(i) if i < self.chars.len() => Some(self.chars[i].as_str()),
                Some(i) if i == self.chars.len() => Some(" "),
                _ => None,
            })
            .collect()
    }
}

/// Ground truth as one output scores it.
#[derive(Debug, Clone)]
pub enum Scorer {
    /// Class labels, for class scores: top-1 and top-5 accuracy.
    Labels(Arc<Vec<i64>>),
    /// Texts, for CTC sequences: exact match and character error rate.
    Texts(Arc<Vec<String>>, Arc<Charset>),
    /// The token sequences fed, for a language model's per-token scores: each position's
    /// truth is the next token (perplexity and next-token accuracy).
    NextTokens(Arc<Vec<Vec<i64>>>),
}

/// The kind of output `truth` scores: labels class scores, texts a CTC sequence, token
/// sequences a language model's per-token scores.
fn scored_kind(truth: &TruthValues) -> OutputKind {
    match truth {
        TruthValues::Labels(_) => OutputKind::Classifier,
        TruthValues::Texts(_) => OutputKind::CtcSequence,
        TruthValues::Tokens(_) => OutputKind::TokenScores,
    }
}

/// The task resolved against a model and its data.
#[derive(Debug, Clone)]
pub struct Task {
    /// Each output's kind, in the graph's output order.
    pub kinds: Vec<OutputKind>,
    /// The ground truth's array name, when the data has ground truth an output can use.
    pub truth_key: Option<String>,
    /// Each output's scorer against the ground truth (`None`: no fitting truth).
    pub scorers: Vec<Option<Scorer>>,
    /// The dense-map IoU threshold.
    pub iou_threshold: f32,
}

impl Task {
    /// Kinds detected (or chosen in `options`) for the outputs of `graph` (`model`'s), and
    /// the ground truth of `source` matched to the outputs that can use it. A truth array
    /// named in `options` that no output can use is an error; one found by its usual name is
    /// then left aside.
    pub fn resolve(
        model: &Model,
        graph: &Graph,
        options: &TaskOptions,
        source: &dyn BatchSource,
    ) -> Result<Task, EvalError> {
        let outputs = graph.outputs();
        let kinds = kinds(graph, outputs, &options.kinds)?;
        let mut task = Task {
            scorers: vec![None; outputs.len()],
            kinds,
            truth_key: None,
            iou_threshold: options.iou_threshold,
        };
        let Some(truth) = source.ground_truth(options.truth_key.as_deref())? else {
            return Ok(task);
        };
        if truth.len() != source.samples() {
            return Err(EvalError::Truth(format!(
                "'{}' holds {} values for {} samples",
                truth.key,
                truth.len(),
                source.samples()
            )));
        }
        let scorer = match scorer(&truth, model, options, &task.kinds)? {
            Some(scorer) => scorer,
            None if options.truth_key.is_none() => return Ok(task),
            None => return Err(unusable(&truth, &task.kinds)),
        };
        let wanted = scored_kind(&truth.values);
        for (slot, kind) in task.scorers.iter_mut().zip(&task.kinds) {
            if *kind == wanted {
                *slot = Some(scorer.clone());
            }
        }
        task.truth_key = Some(truth.key);
        Ok(task)
    }
}

/// Detected kinds, with `chosen` over them; a chosen output the graph lacks is an error.
fn kinds(
    graph: &Graph,
    outputs: &[String],
    chosen: &BTreeMap<String, OutputKind>,
) -> Result<Vec<OutputKind>, EvalError> {
    if let Some(unknown) = chosen.keys().find(|name| !outputs.contains(name)) {
        return Err(EvalError::Truth(format!(
            "the model has no output '{unknown}' to set the kind of (outputs: {})",
            outputs.join(", ")
        )));
    }
    Ok(outputs
        .iter()
        .map(|o| {
            chosen
                .get(o)
                .copied()
                .unwrap_or_else(|| output_kind::detect(graph, o, None))
        })
        .collect())
}

/// The scorer `truth` gives when some output fits it (labels: class scores; texts: a CTC
/// sequence, with the characters read).
fn scorer(
    truth: &GroundTruth,
    model: &Model,
    options: &TaskOptions,
    kinds: &[OutputKind],
) -> Result<Option<Scorer>, EvalError> {
    if !kinds.contains(&scored_kind(&truth.values)) {
        return Ok(None);
    }
    Ok(Some(match &truth.values {
        TruthValues::Labels(labels) => Scorer::Labels(Arc::new(labels.clone())),
        TruthValues::Texts(texts) => {
            let charset = charset(model, options.charset.as_deref())?;
            Scorer::Texts(Arc::new(texts.clone()), Arc::new(charset))
        }
        TruthValues::Tokens(sequences) => Scorer::NextTokens(sequences.clone()),
    }))
}

/// Why `truth` fits no output.
fn unusable(truth: &GroundTruth, kinds: &[OutputKind]) -> EvalError {
    let needs = scored_kind(&truth.values);
    let have: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
    EvalError::Truth(format!(
        "'{}' holds {}, which need an output of kind {} (the outputs are: {}); set one with --output_kind NAME={}",
        truth.key,
        truth.describe(),
        needs.name(),
        have.join(", "),
        needs.name()
    ))
}

/// The characters from `file`, else from the model's `character` metadata.
fn charset(model: &Model, file: Option<&Path>) -> Result<Charset, EvalError> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            EvalError::Truth(format!("cannot read --charset {}: {e}", path.display()))
        })?;
        return Ok(Charset::from_lines(&text));
    }
    model
        .proto()
        .metadata_props
        .iter()
        .find(|p| p.key.as_deref() == Some(CHARSET_METADATA))
        .and_then(|p| p.value.as_deref())
        .map(Charset::from_lines)
        .ok_or_else(|| {
            EvalError::Truth(
                "reading texts needs the model's characters: it has no 'character' metadata; give --charset FILE (one character per line)".to_owned(),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paddle_charsets_read_blank_characters_then_space() {
        let charset = Charset::from_lines("a\nb\r\nc\n");
        assert_eq!(charset.classes(), 5);
        assert_eq!(charset.decode(&[1, 2, 4, 3]).as_deref(), Some("ab c"));
        assert_eq!(charset.decode(&[5]), None);
        assert_eq!(charset.decode(&[]).as_deref(), Some(""));
    }
}
