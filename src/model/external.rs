//! External data: tensors whose bytes live in files beside the model.
//!
//! Locations are resolved relative to the model's folder and must stay inside it: absolute
//! paths, `..` components and symlinks that escape the folder are refused, because a model
//! downloaded from anywhere must not make the tool read (or later overwrite) arbitrary files.
//! Each referenced file is memory-mapped once by [`Model`](super::Model) and shared by all
//! tensors that point into it.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use bytes::Bytes;

use super::dtype::DataType;
use super::error::ModelError;
use super::proto::{StringStringEntryProto, TensorProto, tensor_proto::DataLocation};

/// Files smaller than this are read into memory instead of being memory-mapped.
const MMAP_THRESHOLD: u64 = 16 * 1024 * 1024;

/// Where one tensor's bytes are, as written in its `external_data` entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalRef {
    /// The location string, relative to the model's folder.
    pub location: String,
    /// Byte offset into the file.
    pub offset: u64,
    /// Byte length, if the model states it.
    pub length: Option<u64>,
}

impl ExternalRef {
    /// Reads the `external_data` entries of `tensor`; `None` when its data is stored inline.
    pub fn of(tensor: &TensorProto) -> Result<Option<Self>, ModelError> {
        if tensor.data_location != Some(DataLocation::External as i32) {
            return Ok(None);
        }
        let malformed = |reason: String| ModelError::ExternalMalformed {
            tensor: tensor.name().to_owned(),
            reason,
        };
        let mut location = None;
        let mut offset = 0;
        let mut length = None;
        for entry in &tensor.external_data {
            let value = entry.value();
            match entry.key() {
                "location" => location = Some(value.to_owned()),
                "offset" => {
                    offset = value
                        .parse()
                        .map_err(|_| malformed(format!("offset '{value}' is not a number")))?
                }
                "length" => {
                    length = Some(
                        value
                            .parse()
                            .map_err(|_| malformed(format!("length '{value}' is not a number")))?,
                    )
                }
                _ => {}
            }
        }
        let location = location.ok_or_else(|| malformed("no 'location' key".to_owned()))?;
        Ok(Some(ExternalRef {
            location,
            offset,
            length,
        }))
    }
}

/// True when `location` is absolute on any platform (Unix root, Windows drive or UNC prefix).
fn is_absolute_anywhere(location: &str) -> bool {
    let bytes = location.as_bytes();
    let drive = bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':';
    location.starts_with('/')
        || location.starts_with('\\')
        || drive
        || Path::new(location).is_absolute()
}

/// Resolves `location` inside `folder`, refusing anything that could leave it.
pub fn resolve_location(
    tensor: &str,
    location: &str,
    folder: &Path,
) -> Result<PathBuf, ModelError> {
    if is_absolute_anywhere(location) {
        return Err(ModelError::ExternalAbsolute {
            tensor: tensor.to_owned(),
            location: location.to_owned(),
        });
    }
    let outside = || ModelError::ExternalOutside {
        tensor: tensor.to_owned(),
        location: location.to_owned(),
        folder: folder.to_path_buf(),
    };
    // Both separators count: a model written on Windows may say `data\weights.bin`.
    let normalized = location.replace('\\', "/");
    let relative = Path::new(&normalized);
    if relative
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(outside());
    }
    let path = folder.join(relative);
    if !path.exists() {
        return Err(ModelError::ExternalMissing {
            tensor: tensor.to_owned(),
            path,
        });
    }
    let canonical_folder = dunce::canonicalize(folder).map_err(|source| ModelError::Read {
        path: folder.to_path_buf(),
        source,
    })?;
    let canonical = dunce::canonicalize(&path).map_err(|source| ModelError::Read {
        path: path.clone(),
        source,
    })?;
    if !canonical.starts_with(&canonical_folder) {
        return Err(outside());
    }
    Ok(canonical)
}

/// True when `file` (all of a file, as [`map_file`] returned it) is memory-mapped.
pub fn is_mapped(file: &Bytes) -> bool {
    file.len() as u64 >= MMAP_THRESHOLD
}

/// Hands the pages under `data` back to the system when they lie in one of `mapped` (the
/// address ranges of memory-mapped input files): they stay in the page cache and are read
/// again if touched, but stop counting in this process's memory. A pass over a large model's
/// weights then holds only the weight at hand. Nothing happens for data elsewhere (heap
/// memory must keep its contents) or off Unix. `mapped` holds the maps, so they are alive.
pub fn release_pages(data: &[u8], mapped: &[Bytes]) {
    let start = data.as_ptr() as usize;
    let end = start + data.len();
    let inside = |m: &Bytes| {
        let from = m.as_ptr() as usize;
        is_mapped(m) && from <= start && end <= from + m.len()
    };
    if !data.is_empty() && mapped.iter().any(inside) {
        drop_pages(start, end);
    }
}

/// Drops this process's copies of the mapped pages over `start..end` (`MADV_DONTNEED`).
#[cfg(unix)]
fn drop_pages(start: usize, end: usize) {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    // Whole pages only: a mapping starts on a page boundary, so rounding the start down
    // and the end up stays inside it.
    let first = start - start % page;
    let last = end.next_multiple_of(page);
    // SAFETY: the range lies in a read-only shared file mapping (`memmap2::Mmap::map`):
    // MADV_DONTNEED drops this process's copies of the pages and the next access reads
    // the same bytes from the file again, so no data seen through the mapping changes.
    let status = unsafe {
        libc::madvise(
            first as *mut libc::c_void,
            last - first,
            libc::MADV_DONTNEED,
        )
    };
    if status != 0 {
        tracing::debug!("madvise failed: {}", std::io::Error::last_os_error());
    }
}

/// Off Unix nothing is done: the pages stay counted until their map is dropped.
#[cfg(not(unix))]
fn drop_pages(_start: usize, _end: usize) {}

/// Maps a regular file read-only, or reads it when it is small (never more than the size it
/// declares). A folder, pipe or device is an error before it is opened.
pub fn map_file(path: &Path) -> Result<Bytes, ModelError> {
    let read_err = |source| ModelError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = crate::util::open_regular(path).map_err(read_err)?;
    let len = file.metadata().map_err(read_err)?.len();
    if len < MMAP_THRESHOLD {
        let mut bytes = Vec::with_capacity(len as usize);
        file.take(len).read_to_end(&mut bytes).map_err(read_err)?;
        return Ok(Bytes::from(bytes));
    }
    // SAFETY: the map is read-only. Another process truncating the file while it is mapped
    // would fault; qdq-studio itself never writes to an input file (see `save`), which is the
    // same contract every memory-mapping model loader (ONNX Runtime included) relies on.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(read_err)?;
    Ok(Bytes::from_owner(map))
}

/// Number of elements of a tensor from its dims; an error for negative or overflowing dims.
pub fn element_count(name: &str, dims: &[i64]) -> Result<u64, ModelError> {
    let invalid = || ModelError::InvalidDims {
        tensor: name.to_owned(),
        dims: dims.to_vec(),
    };
    dims.iter().try_fold(1u64, |acc, &d| {
        let d = u64::try_from(d).map_err(|_| invalid())?;
        acc.checked_mul(d).ok_or_else(invalid)
    })
}

/// Bytes the tensor's shape and type need in raw form; `None` for types the engine does not
/// know (their size is then taken from the model as written).
pub fn expected_bytes(tensor: &TensorProto) -> Result<Option<u64>, ModelError> {
    let count = element_count(tensor.name(), &tensor.dims)?;
    Ok(DataType::from_onnx(tensor.data_type())
        .ok()
        .map(|d| d.storage_bytes(count)))
}

/// Checks what can be checked of a tensor without decoding it: an element type ONNX defines,
/// non-negative dimensions whose product fits, and (for inline `raw_data`) as many bytes as
/// the shape needs. Run on every tensor at load, so a model that loads never claims terabytes
/// over a few bytes, and the error names the tensor before any session sees it.
pub fn check_tensor(tensor: &TensorProto) -> Result<(), ModelError> {
    let code = tensor.data_type();
    // 0 is UNDEFINED: a tensor must say what it holds (ONNX Runtime would fail on it later
    // with a multi-line message from its sources).
    if code == 0 || super::proto::tensor_proto::DataType::try_from(code).is_err() {
        return Err(ModelError::UnknownElementType {
            tensor: tensor.name().to_owned(),
            code,
        });
    }
    let expected = expected_bytes(tensor)?;
    let inline = tensor
        .raw_data
        .as_ref()
        .filter(|r| !r.is_empty() && ExternalRef::of(tensor).ok().flatten().is_none());
    if let (Some(raw), Some(expected)) = (inline, expected)
        && raw.len() as u64 != expected
    {
        let dtype =
            DataType::from_onnx(code).map_or_else(|_| code.to_string(), |d| d.name().to_owned());
        return Err(ModelError::DataLength {
            tensor: tensor.name().to_owned(),
            dims: tensor.dims.clone(),
            dtype,
            expected,
            actual: raw.len() as u64,
            unit: "bytes",
        });
    }
    Ok(())
}

/// Protobuf messages cannot exceed 2 GiB; stay a little below it.
pub const PROTOBUF_LIMIT: u64 = (i32::MAX as u64) - 16 * 1024 * 1024;

/// Makes `tensor` reference `length` bytes at `offset` of the external file `location`.
pub(crate) fn set_external(tensor: &mut TensorProto, location: &str, offset: u64, length: u64) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_locations_are_refused_on_every_platform_spelling() {
        let dir = tempfile::tempdir().unwrap();
        for loc in [
            "/etc/passwd",
            "\\\\server\\share\\w.bin",
            "C:\\w.bin",
            "c:/w.bin",
        ] {
            let err = resolve_location("w", loc, dir.path()).unwrap_err();
            assert!(
                matches!(err, ModelError::ExternalAbsolute { .. }),
                "{loc}: {err}"
            );
        }
    }

    #[test]
    fn parent_components_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for loc in ["../w.bin", "a/../../w.bin", "a\\..\\..\\w.bin"] {
            let err = resolve_location("w", loc, dir.path()).unwrap_err();
            assert!(
                matches!(err, ModelError::ExternalOutside { .. }),
                "{loc}: {err}"
            );
        }
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_escaping_the_folder_are_refused() {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.bin"), [0u8; 8]).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.bin"), dir.path().join("w.bin"))
            .unwrap();
        let err = resolve_location("w", "w.bin", dir.path()).unwrap_err();
        assert!(matches!(err, ModelError::ExternalOutside { .. }), "{err}");
    }

    #[test]
    fn dims_that_overflow_or_are_negative_are_errors() {
        assert!(element_count("t", &[1 << 40, 1 << 40]).is_err());
        assert!(element_count("t", &[-1, 3]).is_err());
        assert_eq!(element_count("t", &[]).unwrap(), 1);
    }
}
