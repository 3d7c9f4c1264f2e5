//! Saving models atomically, inline or with external data.
//!
//! Outputs are written through [`AtomicFile`]: a crash or a full disk never leaves a
//! half-written model under the final name. Writing over any of the input model's own files is refused.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use prost::Message;

use super::error::ModelError;
use super::external::ExternalRef;
use super::onnx_model::{Model, inline_tensor};
use super::proto::TensorProto;
use super::tensor::TensorArray;
use super::visit::for_each_tensor_mut;
use crate::atomic::AtomicFile;

pub use super::external::PROTOBUF_LIMIT;
use super::external::set_external;

/// Offsets of large external tensors are aligned to this, so runtimes can map them directly.
const PAGE_ALIGNMENT: u64 = 4096;

/// How to store tensor data when saving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaveOptions {
    /// Store tensors of at least `threshold` bytes in a `<file>.data` file beside the model.
    pub external_data: bool,
    /// Minimum tensor size, in bytes, to go to the external file.
    pub threshold: u64,
}

impl Default for SaveOptions {
    fn default() -> Self {
        SaveOptions {
            external_data: false,
            threshold: 1024,
        }
    }
}

/// What a save wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaveReport {
    /// The model file.
    pub model_path: PathBuf,
    /// The external data file, when one was written.
    pub data_path: Option<PathBuf>,
    /// True when external data was used although not asked for (the model exceeds 2 GB).
    pub forced_external: bool,
    /// Size of the model file in bytes.
    pub model_bytes: u64,
    /// Size of the data file in bytes.
    pub data_bytes: u64,
}

/// Where an output path ends up, resolved without requiring the file to exist.
fn resolve_output(path: &Path) -> Result<PathBuf, ModelError> {
    let file_name = path.file_name().ok_or_else(|| ModelError::Write {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file path"),
    })?;
    let parent = crate::util::folder_of(path);
    let parent = dunce::canonicalize(parent).map_err(|e| ModelError::NoOutputFolder {
        path: parent.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(parent.join(file_name))
}

fn refuse_inputs(model: &Model, outputs: &[&Path]) -> Result<(), ModelError> {
    let inputs = model.source_files();
    for output in outputs {
        let existing = dunce::canonicalize(output).unwrap_or_else(|_| output.to_path_buf());
        if inputs.contains(&existing) {
            return Err(ModelError::WouldOverwriteInput {
                path: output.to_path_buf(),
            });
        }
    }
    Ok(())
}

/// Starts an atomic write of `target`, mapping I/O errors to [`ModelError::Write`].
fn staged(target: &Path) -> Result<AtomicFile, ModelError> {
    AtomicFile::create(target).map_err(|source| ModelError::Write {
        path: target.to_path_buf(),
        source,
    })
}

fn write_err(file: &AtomicFile) -> impl Fn(std::io::Error) -> ModelError + '_ {
    move |source| ModelError::Write {
        path: file.target().to_path_buf(),
        source,
    }
}

/// The bytes a tensor would have in `raw_data`, converting typed fields when needed.
fn tensor_raw_bytes(model: &Model, tensor: &TensorProto) -> Result<Option<Bytes>, ModelError> {
    if let Some(bytes) = model.raw_bytes(tensor)? {
        return Ok(Some(bytes));
    }
    match TensorArray::from_proto(tensor, None) {
        Ok(array) => Ok(array.to_proto(tensor.name()).raw_data),
        // Types the engine cannot decode (strings, ...) stay in their typed fields.
        Err(ModelError::UnsupportedType { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

impl Model {
    /// Saves the model to `path` atomically and returns what was written.
    ///
    /// Refuses to overwrite the model's own input files, requires the output folder to exist,
    /// and switches to external data when the model would not fit in one protobuf.
    pub fn save(&self, path: &Path, options: &SaveOptions) -> Result<SaveReport, ModelError> {
        let model_path = resolve_output(path)?;
        let data_name = format!(
            "{}.data",
            model_path.file_name().unwrap_or_default().to_string_lossy()
        );
        let data_path = model_path.with_file_name(&data_name);
        refuse_inputs(self, &[&model_path, &data_path])?;

        let mut external = options.external_data;
        let mut forced_external = false;
        if !external {
            match self.to_inline_proto() {
                Ok(proto) => {
                    let mut file = staged(&model_path)?;
                    file.write(&proto.encode_to_vec())
                        .map_err(write_err(&file))?;
                    let model_bytes = commit(file)?;
                    return Ok(SaveReport {
                        model_path,
                        data_path: None,
                        forced_external,
                        model_bytes,
                        data_bytes: 0,
                    });
                }
                Err(ModelError::TooLargeInline { .. }) => {
                    external = true;
                    forced_external = true;
                }
                Err(e) => return Err(e),
            }
        }
        debug_assert!(external);
        let threshold = if forced_external {
            options.threshold.min(1024)
        } else {
            options.threshold
        };
        let mut proto = self.proto().clone();
        let mut data = staged(&data_path)?;
        let mut offset = 0u64;
        for_each_tensor_mut(&mut proto, &mut |tensor: &mut TensorProto| {
            let Some(bytes) = tensor_raw_bytes(self, tensor)? else {
                return Ok(());
            };
            let len = bytes.len() as u64;
            if len < threshold {
                if ExternalRef::of(tensor)?.is_some() {
                    inline_tensor(tensor, bytes);
                }
                return Ok(());
            }
            let alignment = if len >= PAGE_ALIGNMENT {
                PAGE_ALIGNMENT
            } else {
                64
            };
            let padded = offset.next_multiple_of(alignment);
            data.write(&vec![0u8; (padded - offset) as usize])
                .map_err(write_err(&data))?;
            data.write(&bytes).map_err(write_err(&data))?;
            set_external(tensor, &data_name, padded, len);
            offset = padded + len;
            Ok::<(), ModelError>(())
        })?;
        let encoded = proto.encode_to_vec();
        if encoded.len() as u64 > PROTOBUF_LIMIT {
            return Err(ModelError::TooLargeInline {
                bytes: encoded.len() as u64,
            });
        }
        let mut file = staged(&model_path)?;
        file.write(&encoded).map_err(write_err(&file))?;
        // The data first, the model last: the model's rename is the commit point, so a crash
        // never pairs an old model with new data.
        let journals = crate::atomic::journal_folder();
        let lens =
            crate::atomic::commit_all(vec![data, file], journals.as_deref()).map_err(|source| {
                ModelError::Write {
                    path: model_path.clone(),
                    source,
                }
            })?;
        let [data_bytes, model_bytes] = lens[..] else {
            unreachable!("commit_all returns one length per file")
        };
        Ok(SaveReport {
            model_path,
            data_path: Some(data_path),
            forced_external,
            model_bytes,
            data_bytes,
        })
    }
}

fn commit(file: AtomicFile) -> Result<u64, ModelError> {
    let path = file.target().to_path_buf();
    file.commit()
        .map_err(|source| ModelError::Write { path, source })
}
