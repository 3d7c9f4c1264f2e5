//! ONNX Runtime's test-data folders: `test_data_set_*/input_<i>.pb`, each a `TensorProto`.
//!
//! Each set is one batch (its tensors carry their own batch dimension). A tensor's name picks
//! the input it feeds; unnamed tensors feed inputs by their index `i`.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use prost::Message;

use super::{ArraySpec, Batch, BatchSource, DataError, InputSpec};
use crate::model::TensorArray;
use crate::model::proto::TensorProto;
use crate::model::proto::tensor_proto::DataType;

/// One `test_data_set_*` folder's input files, in input order.
#[derive(Debug, Clone)]
struct DataSet {
    files: Vec<PathBuf>,
}

/// A folder of ONNX Runtime test-data sets as a batch source.
#[derive(Debug)]
pub struct PbFolderSource {
    root: PathBuf,
    sets: Vec<DataSet>,
    input_names: Vec<String>,
    arrays: Vec<ArraySpec>,
    samples: usize,
    position: usize,
}

fn read_set(
    set: &DataSet,
    input_names: &[String],
) -> Result<Vec<(String, TensorArray)>, DataError> {
    set.files
        .iter()
        .enumerate()
        .map(|(i, file)| {
            let bytes = crate::util::read_regular(file).map_err(|e| DataError::Open {
                path: file.clone(),
                reason: e.to_string(),
            })?;
            let corrupt = |reason: String| DataError::Corrupt {
                name: file.display().to_string(),
                reason,
            };
            let proto =
                TensorProto::decode(Bytes::from(bytes)).map_err(|e| corrupt(e.to_string()))?;
            let name = if proto.name().is_empty() {
                input_names
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| format!("input_{i}"))
            } else {
                proto.name().to_owned()
            };
            if proto.data_type() == DataType::String as i32 {
                return Err(DataError::NonNumericInput {
                    input: name,
                    dtype: "STRING".to_owned(),
                });
            }
            let array =
                TensorArray::from_proto(&proto, None).map_err(|e| corrupt(e.to_string()))?;
            Ok((name, array))
        })
        .collect()
}

impl PbFolderSource {
    /// Opens `root`: a folder holding `test_data_set_*` folders, or one such folder.
    pub fn open(root: &Path, inputs: &[InputSpec]) -> Result<Self, DataError> {
        let open_err = |e: std::io::Error| DataError::Open {
            path: root.to_path_buf(),
            reason: e.to_string(),
        };
        let mut set_dirs: Vec<PathBuf> = std::fs::read_dir(root)
            .map_err(open_err)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.is_dir()
                    && p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("test_data_set_"))
            })
            .collect();
        if set_dirs.is_empty() {
            set_dirs.push(root.to_path_buf());
        }
        set_dirs.sort();
        let mut sets = Vec::new();
        for dir in &set_dirs {
            let mut files: Vec<(usize, PathBuf)> = std::fs::read_dir(dir)
                .map_err(open_err)?
                .filter_map(Result::ok)
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let index = name
                        .strip_prefix("input_")?
                        .strip_suffix(".pb")?
                        .parse()
                        .ok()?;
                    Some((index, e.path()))
                })
                .collect();
            files.sort();
            if !files.is_empty() {
                sets.push(DataSet {
                    files: files.into_iter().map(|(_, p)| p).collect(),
                });
            }
        }
        if sets.is_empty() {
            return Err(DataError::Open {
                path: root.to_path_buf(),
                reason: "no test_data_set_*/input_*.pb files".to_owned(),
            });
        }
        let input_names: Vec<String> = inputs.iter().map(|i| i.name.clone()).collect();
        let first = read_set(&sets[0], &input_names)?;
        let arrays: Vec<ArraySpec> = first
            .iter()
            .map(|(name, a)| ArraySpec {
                name: name.clone(),
                dtype: a.dtype(),
                shape: a.shape().to_vec(),
            })
            .collect();
        // Each set is fed whole, so it counts at least once even when its first axis is
        // empty (an input of no elements is still a run).
        let per_set = arrays
            .first()
            .and_then(|a| a.shape.first().copied())
            .unwrap_or(1)
            .max(1);
        let samples = per_set * sets.len();
        let mut source = PbFolderSource {
            root: root.to_path_buf(),
            sets,
            input_names,
            arrays,
            samples,
            position: 0,
        };
        for array in &mut source.arrays {
            if let Some(first) = array.shape.first_mut() {
                *first = samples;
            }
        }
        Ok(source)
    }
}

impl BatchSource for PbFolderSource {
    fn describe(&self) -> String {
        format!(
            "{} ({} test data sets)",
            self.root.display(),
            self.sets.len()
        )
    }

    fn arrays(&self) -> Vec<ArraySpec> {
        self.arrays.clone()
    }

    fn samples(&self) -> usize {
        self.samples
    }

    fn rewind(&mut self) -> Result<(), DataError> {
        self.position = 0;
        Ok(())
    }

    fn whole_feeds(&self) -> bool {
        true
    }

    /// Returns the next whole set; `max_samples` is ignored (each set is its own batch).
    fn next_batch(&mut self, _max_samples: usize) -> Result<Option<Batch>, DataError> {
        let Some(set) = self.sets.get(self.position) else {
            return Ok(None);
        };
        let inputs = read_set(set, &self.input_names)?;
        let samples = inputs
            .first()
            .and_then(|(_, a)| a.shape().first().copied())
            .unwrap_or(1)
            .max(1);
        let batch = Batch {
            index: self.position,
            first_sample: self.position * samples,
            samples,
            inputs,
        };
        self.position += 1;
        Ok(Some(batch))
    }
}
