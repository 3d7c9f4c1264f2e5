//! Atomic file output: write to a temporary file in the target folder, flush it to disk, then
//! rename it over the destination. A crash or a full disk never leaves a half-written file
//! under the final name; leftovers are named `.qdq-studio-*.tmp` and cleaned on next start.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// A file being written, renamed into place by [`AtomicFile::commit`]; dropped uncommitted, the
/// temporary file is deleted.
pub struct AtomicFile {
    file: BufWriter<tempfile::NamedTempFile>,
    target: PathBuf,
}

impl std::fmt::Debug for AtomicFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtomicFile")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl AtomicFile {
    /// Starts writing `target` (its folder must exist).
    pub fn create(target: &Path) -> std::io::Result<Self> {
        let folder = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let mut builder = tempfile::Builder::new();
        builder.prefix(".qdq-studio-").suffix(".tmp");
        // Outputs are ordinary user files, readable like any other (tempfile defaults to 0600).
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            builder.permissions(std::fs::Permissions::from_mode(0o644));
        }
        let temp = builder.tempfile_in(folder)?;
        Ok(AtomicFile {
            file: BufWriter::with_capacity(1 << 20, temp),
            target: target.to_path_buf(),
        })
    }

    /// The final path.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Appends bytes.
    pub fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.file.write_all(bytes)
    }

    /// Flushes, fsyncs and renames the file over its target; returns its size.
    pub fn commit(self) -> std::io::Result<u64> {
        let temp = self.file.into_inner().map_err(|e| e.into_error())?;
        temp.as_file().sync_all()?;
        let len = temp.as_file().metadata()?.len();
        temp.persist(&self.target).map_err(|e| e.error)?;
        sync_folder(&self.target);
        Ok(len)
    }
}

/// Writes `bytes` to `path` atomically.
pub fn write(path: &Path, bytes: &[u8]) -> std::io::Result<u64> {
    let mut file = AtomicFile::create(path)?;
    file.write(bytes)?;
    file.commit()
}

/// Makes a rename durable on Unix (fsync of the folder); a no-op elsewhere.
fn sync_folder(path: &Path) {
    #[cfg(unix)]
    if let Some(folder) = path.parent()
        && let Ok(dir) = File::open(folder)
    {
        // Best effort: the rename already happened; a failed folder fsync only weakens
        // durability against power loss, never what was written.
        let _ = dir.sync_all();
    }
    #[cfg(not(unix))]
    let _ = path;
}

/// Removes temporary files a crashed save left in `folder` (`.qdq-studio-*.tmp` older than a
/// minute, so a save in progress elsewhere is left alone). Returns how many were removed.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_uncommitted_file_leaves_nothing_and_a_committed_one_replaces_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.bin");
        std::fs::write(&target, b"old").unwrap();
        {
            let mut f = AtomicFile::create(&target).unwrap();
            f.write(b"half").unwrap();
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        write(&target, b"new").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o644);
        }
    }
}
