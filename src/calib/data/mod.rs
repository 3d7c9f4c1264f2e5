//! Calibration data sources and their validation against the model's inputs.
//!
//! Every source yields batches of named arrays with samples on axis 0, read lazily. Before any
//! run, [`validate`] checks names, types, ranks and fixed dimensions against the model and
//! lists every mismatch, expected against got.

pub mod first;
pub mod float_cast;
pub mod images;
pub mod npy;
pub mod npz;
pub mod past;
pub mod pb_folder;
pub mod random;
pub mod roles;
pub mod text;
pub mod truth;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::model::{DataType, Dim, Graph, TensorArray};

/// Errors of calibration data.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// A file or folder could not be opened.
    #[error("cannot open {path}: {reason}")]
    Open {
        /// The path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The data is damaged or not in the expected format.
    #[error("'{name}' is corrupt: {reason}")]
    Corrupt {
        /// The array or file.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// An input of a type calibration cannot feed or observe (strings).
    #[error(
        "input '{input}' is a {dtype} tensor: qdq-studio calibrates and compares numeric inputs only"
    )]
    NonNumericInput {
        /// The input fed.
        input: String,
        /// Its element type as ONNX names it (`STRING`).
        dtype: String,
    },
    /// An array format that is refused (pickles, Fortran order, big-endian, ...).
    #[error("'{name}' cannot be used: {reason}")]
    UnsupportedNpy {
        /// The array.
        name: String,
        /// Why.
        reason: String,
    },
    /// Arrays disagree on the number of samples.
    #[error("the arrays hold different numbers of samples ({counts})")]
    SampleCounts {
        /// `name: count` for each array.
        counts: String,
    },
    /// The data does not fit the model; every problem is listed.
    #[error("the data does not fit the model: {}", .problems.join("; "))]
    Mismatch {
        /// One line per problem, expected against got.
        problems: Vec<String>,
    },
    /// The source has no samples.
    #[error("the calibration data holds no samples")]
    Empty,
    /// The ground-truth array asked for is not in the data.
    #[error("the data has no array '{key}' to read ground truth from ({available})")]
    NoTruth {
        /// The array asked for.
        key: String,
        /// What the data does hold beside the inputs, in words.
        available: String,
    },
    /// A tokenizer file could not be read or could not tokenize the text.
    #[error("cannot read the tokenizer {path}: {reason}")]
    Tokenizer {
        /// The `tokenizer.json`.
        path: PathBuf,
        /// Why, as the tokenizers crate says it.
        reason: String,
    },
    /// A text holds fewer tokens than one sequence.
    #[error(
        "{path} holds {tokens} tokens, fewer than one sequence of {sequence}: give a longer text or a shorter --seq_len"
    )]
    TextTooShort {
        /// The text.
        path: PathBuf,
        /// Tokens it holds.
        tokens: usize,
        /// Tokens one sequence takes.
        sequence: usize,
    },
    /// A calibration shape spec could not be parsed.
    #[error("bad --calibration_shapes '{spec}': {reason}")]
    BadShapeSpec {
        /// The spec as given.
        spec: String,
        /// Why.
        reason: String,
    },
}

/// An array a source provides: its name, type and full shape (samples on axis 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArraySpec {
    /// Name (the model input it feeds).
    pub name: String,
    /// Element type.
    pub dtype: DataType,
    /// Shape, samples first.
    pub shape: Vec<usize>,
}

/// One batch: named arrays with `samples` rows each.
#[derive(Debug, Clone)]
pub struct Batch {
    /// 0-based batch number.
    pub index: usize,
    /// Index of the batch's first sample in the source.
    pub first_sample: usize,
    /// Samples in this batch.
    pub samples: usize,
    /// Input name → array.
    pub inputs: Vec<(String, TensorArray)>,
}

/// Where a source with samples stacked on axis 0 stands: the next sample and the next batch
/// number. Shared by the sources so batch numbering is the same everywhere.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchCursor {
    next_sample: usize,
    next_batch: usize,
}

impl BatchCursor {
    /// Claims the next batch of at most `max_samples` (at least 1) of `total` samples:
    /// `(batch index, first sample, sample count)`, or `None` at the end.
    pub fn claim(&mut self, max_samples: usize, total: usize) -> Option<(usize, usize, usize)> {
        let count = max_samples
            .max(1)
            .min(total.saturating_sub(self.next_sample));
        if count == 0 {
            return None;
        }
        let claimed = (self.next_batch, self.next_sample, count);
        self.next_sample += count;
        self.next_batch += 1;
        Some(claimed)
    }

    /// Back to the first sample.
    pub fn reset(&mut self) {
        *self = BatchCursor::default();
    }
}

/// A source of calibration batches.
pub trait BatchSource: Send {
    /// A label for messages (the path, "random data", ...).
    fn describe(&self) -> String;
    /// The arrays it provides.
    fn arrays(&self) -> Vec<ArraySpec>;
    /// Total samples.
    fn samples(&self) -> usize;
    /// Starts again from the first sample (for multi-pass calibration).
    fn rewind(&mut self) -> Result<(), DataError>;
    /// The next batch of at most `max_samples` samples; `None` at the end.
    fn next_batch(&mut self, max_samples: usize) -> Result<Option<Batch>, DataError>;
    /// True when each batch is a complete feed as stored (ONNX Runtime test-data sets), fed
    /// whole whatever the batch size: axis 0 is then not a sample axis to check or split.
    fn whole_feeds(&self) -> bool {
        false
    }
    /// What the source does to the data that the user should know (a conversion).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    /// The ground truth kept beside the inputs: the array named `key`, or when none is
    /// named the first of [`truth::TRUTH_KEYS`] present (`None` when there is none). A named
    /// array that is absent is an error. Only `.npz` files hold any.
    fn ground_truth(&self, key: Option<&str>) -> Result<Option<truth::GroundTruth>, DataError> {
        match key {
            None => Ok(None),
            Some(key) => Err(DataError::NoTruth {
                key: key.to_owned(),
                available: format!("{} holds model inputs only", self.describe()),
            }),
        }
    }
}

/// The shape of one sample of each array `source` provides (axis 0 dropped), which every
/// batch it gives shares; empty for a source of whole feeds, whose arrays are fed as stored.
pub fn sample_shapes(source: &dyn BatchSource) -> BTreeMap<String, Vec<usize>> {
    if source.whole_feeds() {
        return BTreeMap::new();
    }
    source
        .arrays()
        .into_iter()
        .filter(|a| !a.shape.is_empty())
        .map(|a| (a.name, a.shape[1..].to_vec()))
        .collect()
}

/// The batch size the model's inputs fix: the size the inputs with a fixed first axis all
/// declare (inputs whose first axis is symbolic or undeclared take any, scalars aside).
/// `None` when none fixes it, or they disagree (the data check then says what is wrong).
pub fn required_batch(inputs: &[InputSpec]) -> Option<usize> {
    let mut fixed = None;
    for input in inputs {
        // A symbolic first dim takes any batch; an undeclared shape says nothing either way.
        let Some(Dim::Fixed(n)) = input.shape.as_ref().and_then(|s| s.first()) else {
            continue;
        };
        let n = usize::try_from(*n).ok().filter(|n| *n > 0)?;
        if fixed.is_some_and(|f| f != n) {
            return None;
        }
        fixed = Some(n);
    }
    fixed
}

/// Another input whose fixed first dim is not `first` (then axis 0 is no shared batch axis).
fn other_fixed_batch(inputs: &[InputSpec], first: usize) -> Option<(&str, i64)> {
    inputs
        .iter()
        .find_map(|input| match input.shape.as_ref()?.first()? {
            Dim::Fixed(n) if *n >= 0 && *n as usize != first => Some((input.name.as_str(), *n)),
            _ => None,
        })
}

/// The batch a run uses: the model's fixed batch when it has one, else the one asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchChoice {
    /// Samples per batch.
    pub size: usize,
    /// True when the model fixes it (it may then not be lowered to fit memory).
    pub fixed: bool,
    /// One line when the model's batch replaced the one asked for.
    pub note: Option<String>,
}

impl BatchChoice {
    /// Of `samples`, how many a run uses: with a batch the model fixes, the samples that fill
    /// whole batches (a remainder cannot be run); otherwise all.
    pub fn usable(&self, samples: usize, whole_feeds: bool) -> usize {
        if self.fixed && !whole_feeds && samples > self.size {
            samples - samples % self.size
        } else {
            samples
        }
    }
}

/// The batch to run `inputs` with when `requested` samples per batch were asked for.
pub fn choose_batch(inputs: &[InputSpec], requested: usize) -> BatchChoice {
    let requested = requested.max(1);
    match required_batch(inputs) {
        Some(size) => BatchChoice {
            size,
            fixed: true,
            note: (size != requested).then(|| {
                format!("the model's batch dimension is fixed at {size}: running batches of {size} samples")
            }),
        },
        None => BatchChoice {
            size: requested,
            fixed: false,
            note: None,
        },
    }
}

/// A model input as calibration sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputSpec {
    /// Input name.
    pub name: String,
    /// Element type, when declared.
    pub dtype: Option<DataType>,
    /// Declared shape, when declared.
    pub shape: Option<Vec<Dim>>,
    /// What the input carries (token ids, a mask, ...), for random data it accepts.
    pub role: roles::InputRole,
}

/// The user-fed inputs of a graph.
pub fn model_inputs(graph: &Graph) -> Vec<InputSpec> {
    graph
        .inputs()
        .iter()
        .map(|name| {
            let info = graph.tensor(name);
            let dtype = info
                .and_then(|t| t.elem_type)
                .and_then(|c| DataType::from_onnx(c).ok());
            let role = roles::role_of(graph, name, dtype);
            let mut shape = info.and_then(|t| t.shape.clone());
            // Past keys/values: the head count and head size the graph implies.
            if let (roles::InputRole::Past, Some(dims)) = (role, shape.as_mut()) {
                *dims = past::refined_shape(graph, name, dims);
            }
            InputSpec {
                name: name.clone(),
                dtype,
                shape,
                role,
            }
        })
        .collect()
}

fn shape_text(shape: &[usize]) -> String {
    format!(
        "[{}]",
        shape
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn dims_text(dims: &[Dim]) -> String {
    format!(
        "[{}]",
        dims.iter()
            .map(Dim::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Checks that `source` feeds `inputs` in batches of `batch_size` (its `samples` first
/// samples); lists every mismatch.
pub fn validate_source(
    inputs: &[InputSpec],
    source: &dyn BatchSource,
    samples: usize,
    batch_size: usize,
) -> Result<(), DataError> {
    let batch = if source.whole_feeds() {
        Batching::WholeFeeds
    } else {
        Batching::Samples(batch_size)
    };
    validate(inputs, &source.arrays(), samples, batch)
}

/// How data is grouped into the feeds a model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Batching {
    /// Samples stacked on axis 0, this many per run.
    Samples(usize),
    /// Each stored set fed as it is (axis 0 is not checked against the model's batch).
    WholeFeeds,
}

/// Checks that `arrays` feed `inputs` as `batching` groups them; lists every mismatch.
pub fn validate(
    inputs: &[InputSpec],
    arrays: &[ArraySpec],
    samples: usize,
    batching: Batching,
) -> Result<(), DataError> {
    let mut problems = Vec::new();
    let by_name: BTreeMap<&str, &ArraySpec> = arrays.iter().map(|a| (a.name.as_str(), a)).collect();
    for input in inputs {
        let Some(array) = by_name.get(input.name.as_str()) else {
            problems.push(format!(
                "input '{}' has no array (the file has: {})",
                input.name,
                names(arrays)
            ));
            continue;
        };
        if let Some(dtype) = input.dtype
            && dtype != array.dtype
        {
            problems.push(format!(
                "'{}': expected {dtype}, got {}",
                input.name, array.dtype
            ));
        }
        let Some(dims) = &input.shape else { continue };
        if dims.len() != array.shape.len() {
            problems.push(format!(
                "'{}': expected rank {} {}, got rank {} {} (samples go on axis 0)",
                input.name,
                dims.len(),
                dims_text(dims),
                array.shape.len(),
                shape_text(&array.shape)
            ));
            continue;
        }
        for (axis, (dim, &got)) in dims.iter().zip(&array.shape).enumerate() {
            let Dim::Fixed(want) = dim else { continue };
            if *want < 0 {
                continue;
            }
            if axis == 0 {
                let Batching::Samples(batch_size) = batching else {
                    continue;
                };
                let want = *want as usize;
                if let Some((other, n)) = other_fixed_batch(inputs, want) {
                    problems.push(format!(
                        "'{}': axis 0 is fixed at {want} and '{other}' fixes it at {n}, so the inputs share no batch axis; give the data as ONNX test-data folders (test_data_set_N/input_M.pb), whose sets are fed whole",
                        input.name
                    ));
                } else if want != batch_size {
                    problems.push(format!(
                        "'{}': the model's batch dimension is fixed at {want}; use a batch size of {want}",
                        input.name
                    ));
                } else if samples > 0 && want > samples {
                    problems.push(format!(
                        "'{}': the model's batch dimension is fixed at {want}, and the data holds only {samples} sample(s)",
                        input.name
                    ));
                } else if want > 0 && !samples.is_multiple_of(want) {
                    problems.push(format!(
                        "'{}': the model's batch dimension is fixed at {want}, but {samples} samples do not split into batches of {want}",
                        input.name
                    ));
                }
                continue;
            }
            if *want as usize != got {
                problems.push(format!(
                    "'{}': axis {axis} must be {want}, got {got} (model {}, data {})",
                    input.name,
                    dims_text(dims),
                    shape_text(&array.shape)
                ));
            }
        }
    }
    let expected: Vec<&str> = inputs.iter().map(|i| i.name.as_str()).collect();
    for array in arrays {
        if !expected.contains(&array.name.as_str()) {
            problems.push(format!(
                "array '{}' is not a model input (inputs: {})",
                array.name,
                expected.join(", ")
            ));
        }
    }
    if problems.is_empty() && samples == 0 {
        return Err(DataError::Empty);
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(DataError::Mismatch { problems })
    }
}

fn names(arrays: &[ArraySpec]) -> String {
    if arrays.is_empty() {
        "nothing".to_owned()
    } else {
        arrays
            .iter()
            .map(|a| a.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Where calibration data comes from, as the user states it (and a recipe records it).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DataSpec {
    /// A `.npz` (or `.npy` for single-input models) file.
    Npz {
        /// The file.
        path: PathBuf,
    },
    /// A folder of png/jpg images for the model's single image input.
    Images {
        /// The folder.
        path: PathBuf,
        /// How images become tensors.
        preprocess: images::Preprocess,
    },
    /// ONNX Runtime test-data folders (`test_data_set_*/input_*.pb`).
    PbFolder {
        /// A folder holding `test_data_set_*` folders, or one of them.
        path: PathBuf,
    },
    /// A text file tokenized into sequences, for token models.
    Text(text::TextSpec),
    /// Random data from the input specs.
    Random {
        /// Samples to generate.
        samples: usize,
        /// Concrete shapes for inputs with symbolic dims (`name` → dims, batch included).
        shapes: BTreeMap<String, Vec<usize>>,
        /// The generator's seed.
        seed: u64,
    },
}

impl DataSpec {
    /// Chooses the source kind from a path: a folder of images, a folder of ONNX Runtime test
    /// data, or a `.npz`/`.npy` file. Images get `preprocess`.
    pub fn from_path(path: &Path, preprocess: images::Preprocess) -> DataSpec {
        if !path.is_dir() {
            return DataSpec::Npz {
                path: path.to_path_buf(),
            };
        }
        let has_images = std::fs::read_dir(path).is_ok_and(|entries| {
            entries.filter_map(Result::ok).any(|e| {
                let name = e.file_name().to_string_lossy().to_ascii_lowercase();
                name.ends_with(".png") || name.ends_with(".jpg") || name.ends_with(".jpeg")
            })
        });
        if has_images {
            DataSpec::Images {
                path: path.to_path_buf(),
                preprocess,
            }
        } else {
            DataSpec::PbFolder {
                path: path.to_path_buf(),
            }
        }
    }

    /// The data in a few words: its path, or random data said to be unrepresentative (the
    /// sample count is the caller's: a run may use fewer).
    pub fn describe(&self) -> String {
        match self {
            DataSpec::Npz { path }
            | DataSpec::Images { path, .. }
            | DataSpec::PbFolder { path } => path.display().to_string(),
            DataSpec::Text(text) => format!("the text {}", text.path.display()),
            DataSpec::Random { seed, .. } => {
                format!("random data, not representative (seed {seed})")
            }
        }
    }

    /// Opens the source for a model with these inputs; float data of another precision than
    /// an input's is converted to it (see [`float_cast`]).
    pub fn open(&self, inputs: &[InputSpec]) -> Result<Box<dyn BatchSource>, DataError> {
        let single = inputs.first().map(|i| i.name.clone()).unwrap_or_default();
        let source: Box<dyn BatchSource> = match self {
            DataSpec::Npz { path } => {
                let names: Vec<&str> = inputs.iter().map(|i| i.name.as_str()).collect();
                Box::new(npz::NpzSource::open(path, &single, &names)?)
            }
            DataSpec::Images { path, preprocess } => Box::new(images::ImageFolderSource::open(
                path,
                &single,
                preprocess.clone(),
            )?),
            DataSpec::PbFolder { path } => Box::new(pb_folder::PbFolderSource::open(path, inputs)?),
            DataSpec::Text(text) => Box::new(text::TextSource::open(text, inputs)?),
            DataSpec::Random {
                samples,
                shapes,
                seed,
            } => Box::new(random::RandomSource::new(inputs, shapes, *samples, *seed)?),
        };
        Ok(float_cast::FloatCast::wrap(source, inputs))
    }
}

/// Parses ModelOpt's `--calibration_shapes in0:1x3x224x224,in1:1x128`.
pub fn parse_shapes(spec: &str) -> Result<BTreeMap<String, Vec<usize>>, DataError> {
    let bad = |reason: &str| DataError::BadShapeSpec {
        spec: spec.to_owned(),
        reason: reason.to_owned(),
    };
    let mut shapes = BTreeMap::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, dims) = part
            .rsplit_once(':')
            .ok_or_else(|| bad("expected name:AxBxC"))?;
        let dims = dims
            .split('x')
            .map(|d| {
                d.trim()
                    .parse::<usize>()
                    .map_err(|_| bad(&format!("'{d}' is not a size")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        shapes.insert(name.trim().to_owned(), dims);
    }
    Ok(shapes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(name: &str, dtype: DataType, dims: Vec<Dim>) -> InputSpec {
        InputSpec {
            name: name.into(),
            dtype: Some(dtype),
            shape: Some(dims),
            role: Default::default(),
        }
    }

    fn array(name: &str, dtype: DataType, shape: &[usize]) -> ArraySpec {
        ArraySpec {
            name: name.into(),
            dtype,
            shape: shape.to_vec(),
        }
    }

    #[test]
    fn every_mismatch_is_listed_expected_against_got() {
        let inputs = [
            input(
                "x",
                DataType::Float32,
                vec![Dim::Symbolic("N".into()), Dim::Fixed(3), Dim::Fixed(8)],
            ),
            input(
                "ids",
                DataType::Int64,
                vec![Dim::Symbolic("N".into()), Dim::Fixed(4)],
            ),
            input("mask", DataType::Bool, vec![Dim::Fixed(1)]),
        ];
        let arrays = [
            array("x", DataType::Float16, &[10, 3, 9]),
            array("ids", DataType::Int64, &[10, 4, 1]),
            array("extra", DataType::Float32, &[10]),
        ];
        let Err(DataError::Mismatch { problems }) =
            validate(&inputs, &arrays, 10, Batching::Samples(2))
        else {
            panic!("expected a mismatch");
        };
        let text = problems.join("\n");
        assert!(
            text.contains("'x': expected float32, got float16"),
            "{text}"
        );
        assert!(text.contains("'x': axis 2 must be 8, got 9"), "{text}");
        assert!(text.contains("'ids': expected rank 2"), "{text}");
        assert!(text.contains("input 'mask' has no array"), "{text}");
        assert!(
            text.contains("array 'extra' is not a model input"),
            "{text}"
        );
    }

    /// Inputs fixing axis 0 at different sizes have no batch axis: the advice says so instead
    /// of sending the user from one batch size to the other; a symbolic first axis takes the
    /// fixed one's.
    #[test]
    fn inputs_that_disagree_on_axis_0_are_told_apart_from_a_wrong_batch_size() {
        let x = input("x", DataType::Float32, vec![Dim::Fixed(2), Dim::Fixed(3)]);
        let shape = input("shape", DataType::Float32, vec![Dim::Fixed(4)]);
        assert_eq!(required_batch(&[x.clone(), shape.clone()]), None);
        let arrays = [
            array("x", DataType::Float32, &[2, 3]),
            array("shape", DataType::Float32, &[4]),
        ];
        let text = validate(&[x.clone(), shape], &arrays, 2, Batching::Samples(2))
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("'shape': axis 0 is fixed at 4 and 'x' fixes it at 2, so the inputs share no batch axis"),
            "{text}"
        );
        assert!(!text.contains("use a batch size"), "{text}");
        let ids = input("ids", DataType::Float32, vec![Dim::Symbolic("n".into())]);
        assert_eq!(required_batch(&[ids, x.clone()]), Some(2));
        let huge = input("h", DataType::Float32, vec![Dim::Fixed(1 << 32)]);
        let text = validate(
            &[huge],
            &[array("h", DataType::Float32, &[16])],
            16,
            Batching::Samples(1 << 32),
        )
        .unwrap_err()
        .to_string();
        assert!(
            text.contains("fixed at 4294967296, and the data holds only 16 sample(s)"),
            "{text}"
        );
    }

    #[test]
    fn a_fixed_batch_dimension_needs_that_batch_size() {
        let inputs = [input(
            "x",
            DataType::Float32,
            vec![Dim::Fixed(1), Dim::Fixed(2)],
        )];
        let arrays = [array("x", DataType::Float32, &[5, 2])];
        assert!(validate(&inputs, &arrays, 5, Batching::Samples(1)).is_ok());
        let err = validate(&inputs, &arrays, 5, Batching::Samples(4)).unwrap_err();
        assert!(err.to_string().contains("use a batch size of 1"), "{err}");
        assert!(matches!(
            validate(
                &inputs,
                &[array("x", DataType::Float32, &[0, 2])],
                0,
                Batching::Samples(1)
            ),
            Err(DataError::Empty)
        ));
    }

    #[test]
    fn the_cursor_numbers_batches_and_ends_with_a_short_one() {
        let mut cursor = BatchCursor::default();
        assert_eq!(cursor.claim(4, 10), Some((0, 0, 4)));
        assert_eq!(cursor.claim(4, 10), Some((1, 4, 4)));
        assert_eq!(cursor.claim(4, 10), Some((2, 8, 2)));
        assert_eq!(cursor.claim(4, 10), None);
        cursor.reset();
        assert_eq!(cursor.claim(0, 10), Some((0, 0, 1)), "at least one sample");
    }

    #[test]
    fn calibration_shapes_parse() {
        let shapes = parse_shapes("in0:1x3x224x224, in1:1x128").unwrap();
        assert_eq!(shapes["in0"], [1, 3, 224, 224]);
        assert_eq!(shapes["in1"], [1, 128]);
        assert!(parse_shapes("in0:1xAx2").is_err());
        assert!(parse_shapes("nocolon").is_err());
    }
}
