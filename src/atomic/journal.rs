//! The journal of one save: a file under the app's cache, locked by the writing process for
//! as long as it lives, where every action that leaves something on disk is recorded (and
//! made durable) before it is taken.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// One line of a journal.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(super) enum Entry {
    /// A temporary file (recorded before it is created) that will be renamed to `target`.
    Temp { path: PathBuf, target: PathBuf },
    /// Every temporary file is complete and on disk; renaming `commit_point` (the last file's
    /// temporary) over its target commits the save.
    Ready { commit_point: PathBuf },
    /// `target`'s previous content, moved aside to `path` until the commit point.
    Backup { path: PathBuf, target: PathBuf },
    /// `target` did not exist before this save: removed if the save is rolled back.
    Fresh { target: PathBuf },
}

/// A journal file, locked by this process for as long as it lives; removed when dropped.
#[derive(Debug)]
pub(super) struct Journal {
    pub(super) path: PathBuf,
    file: Option<File>,
}

impl Journal {
    /// Creates and locks a new journal in `folder`.
    pub(super) fn create(folder: &Path) -> std::io::Result<Journal> {
        std::fs::create_dir_all(folder)?;
        let (file, path) = tempfile::Builder::new()
            .prefix("write-")
            .suffix(".journal")
            .tempfile_in(folder)?
            .keep()
            .map_err(|e| e.error)?;
        file.lock()?;
        Ok(Journal {
            path,
            file: Some(file),
        })
    }

    /// Appends an entry and makes it durable before the caller acts on it.
    pub(super) fn record(&mut self, entry: &Entry) -> std::io::Result<()> {
        let mut line = serde_json::to_string(entry).map_err(std::io::Error::other)?;
        line.push('\n');
        let Some(file) = self.file.as_mut() else {
            return Ok(());
        };
        file.write_all(line.as_bytes())?;
        file.sync_data()
    }

    /// Leaves the journal on disk and releases its lock, as a killed process would (tests of
    /// the recovery inject faults this way).
    #[cfg(test)]
    pub(super) fn abandon(mut self) {
        drop(self.file.take());
        std::mem::forget(self);
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        // The save finished or failed cleanly: nothing is left to recover. Best effort: a
        // journal that cannot be removed is recovered (as a no-op) on the next start.
        drop(self.file.take());
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Records `entry` in `journal` when there is one.
pub(super) fn record(journal: &mut Option<Journal>, entry: Entry) -> std::io::Result<()> {
    match journal.as_mut() {
        Some(j) => j.record(&entry),
        None => Ok(()),
    }
}
