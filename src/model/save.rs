//! Saving models atomically, inline or with external data.
//!
//! Outputs are written to temporary files in the target folder, flushed to disk, then renamed
//! over the destination, so a crash or a full disk never leaves a half-written model under the
//! final name. Writing over any of the input model's own files is refused.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use prost::Message;

use super::error::ModelError;
use super::external::ExternalRef;
use super::onnx_model::{Model, inline_tensor};
use super::proto::{StringStringEntryProto, TensorProto, tensor_proto::DataLocation};
use super::tensor::TensorArray;
use super::visit::for_each_tensor_mut;

/// Protobuf messages cannot exceed 2 GiB; stay a little below it.
pub const PROTOBUF_LIMIT: u64 = (i32::MAX as u64) - 16 * 1024 * 1024;

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
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let parent = parent
        .canonicalize()
        .map_err(|_| ModelError::NoOutputFolder {
            path: parent.clone(),
        })?;
    Ok(parent.join(file_name))
}

fn refuse_inputs(model: &Model, outputs: &[&Path]) -> Result<(), ModelError> {
    let inputs = model.source_files();
    for output in outputs {
        let existing = output
            .canonicalize()
            .unwrap_or_else(|_| output.to_path_buf());
        if inputs.contains(&existing) {
            return Err(ModelError::WouldOverwriteInput {
                path: output.to_path_buf(),
            });
        }
    }
    Ok(())
}

/// A file being written in the target folder, renamed into place by [`Staged::commit`].
struct Staged {
    file: BufWriter<tempfile::NamedTempFile>,
    target: PathBuf,
}

impl Staged {
    fn new(target: &Path) -> Result<Self, ModelError> {
        let folder = target.parent().unwrap_or(Path::new("."));
        let temp = tempfile::Builder::new()
            .prefix(".qdq-studio-")
            .suffix(".tmp")
            .tempfile_in(folder)
            .map_err(|source| ModelError::Write {
                path: target.to_path_buf(),
                source,
            })?;
        Ok(Staged {
            file: BufWriter::new(temp),
            target: target.to_path_buf(),
        })
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), ModelError> {
        self.file
            .write_all(bytes)
            .map_err(|source| ModelError::Write {
                path: self.target.clone(),
                source,
            })
    }

    /// Flushes, fsyncs and renames the file over its target.
    fn commit(self) -> Result<u64, ModelError> {
        let target = self.target;
        let err = |source| ModelError::Write {
            path: target.clone(),
            source,
        };
        let temp = self.file.into_inner().map_err(|e| err(e.into_error()))?;
        temp.as_file().sync_all().map_err(err)?;
        let len = temp.as_file().metadata().map_err(err)?.len();
        temp.persist(&target).map_err(|e| err(e.error))?;
        sync_folder(&target);
        Ok(len)
    }
}

/// Makes a rename durable on Unix (fsync of the folder); a no-op where folders cannot be opened.
fn sync_folder(path: &Path) {
    #[cfg(unix)]
    if let Some(folder) = path.parent()
        && let Ok(dir) = File::open(folder)
    {
        // Best effort: the rename already happened; a failed folder fsync only weakens
        // durability against power loss, never correctness of what was written.
        let _ = dir.sync_all();
    }
    #[cfg(not(unix))]
    let _ = path;
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
                    let mut staged = Staged::new(&model_path)?;
                    staged.write(&proto.encode_to_vec())?;
                    let model_bytes = staged.commit()?;
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
        let mut data = Staged::new(&data_path)?;
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
            data.write(&vec![0u8; (padded - offset) as usize])?;
            data.write(&bytes)?;
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
        let data_bytes = data.commit()?;
        let mut staged = Staged::new(&model_path)?;
        staged.write(&encoded)?;
        let model_bytes = staged.commit()?;
        Ok(SaveReport {
            model_path,
            data_path: Some(data_path),
            forced_external,
            model_bytes,
            data_bytes,
        })
    }
}

fn set_external(tensor: &mut TensorProto, location: &str, offset: u64, length: u64) {
    let entry = |key: &str, value: String| StringStringEntryProto {
        key: Some(key.to_owned()),
        value: Some(value),
    };
    tensor.raw_data = None;
    tensor.float_data.clear();
    tensor.int32_data.clear();
    tensor.int64_data.clear();
    tensor.double_data.clear();
    tensor.uint64_data.clear();
    tensor.data_location = Some(DataLocation::External as i32);
    tensor.external_data = vec![
        entry("location", location.to_owned()),
        entry("offset", offset.to_string()),
        entry("length", length.to_string()),
    ];
}

/// Removes temporary files a crashed save left in `folder` (named `.qdq-studio-*.tmp`).
/// Returns how many were removed. Files younger than a minute are left alone, since another
/// save may still be writing them.
pub fn clean_stale_temp_files(folder: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return 0;
    };
    let now = std::time::SystemTime::now();
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| now.duration_since(t).ok())
                .is_some_and(|age| age.as_secs() > 60);
            name.starts_with(".qdq-studio-") && name.ends_with(".tmp") && old
        })
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}
