//! Atomic, crash-safe file output.
//!
//! Every output is written to a temporary file in its target folder (`.qdq-studio-*.tmp`),
//! flushed to disk, then renamed over the destination: a crash or a full disk never leaves a
//! half-written file under the final name.
//!
//! Files that belong together (a model and its external data) are committed by
//! [`commit_all`]: the earlier files are renamed first, each existing destination moved aside
//! to a backup, and the last file's rename is the commit point. Until then the old files are
//! recoverable; after it the new ones stand.
//!
//! A killed process cannot clean up after itself, so each save keeps a journal under the
//! app's cache (`pending-writes/`, see [`journal`]), locked while its process lives. Every
//! action is journaled before it is taken: a temporary file is recorded before it is created,
//! a `ready` entry names the commit point once every temporary file is complete, and each
//! backup is recorded before the rename that makes it. [`recover`] runs at every start: for
//! each journal whose lock is free (its process died) it rolls the save back (temporary files
//! deleted, backups put back, files the save created removed) unless the commit point's
//! temporary file is gone after `ready`, in which case it rolls forward (backups deleted).
//! Each save's fate is decided by its own journal alone, so the order journals are found in
//! does not matter.

mod journal;
mod recover;

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::util::folder_of;
use journal::{Entry, Journal, record};

pub use recover::{Recovery, recover, recover_at_start};

/// The folder under the app's cache that holds the journals of saves in progress.
pub const JOURNAL_FOLDER: &str = "pending-writes";

/// The journal folder of this user: `<cache>/pending-writes`, `None` without a cache folder.
pub fn journal_folder() -> Option<PathBuf> {
    crate::util::cache_dir()
        .ok()
        .map(|dir| dir.join(JOURNAL_FOLDER))
}

/// A name for a temporary (`kind` "tmp") or backup file beside `target`, unique to this
/// process, this moment and `attempt`.
fn sibling_name(target: &Path, kind: &str, attempt: usize) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    folder_of(target).join(format!(
        ".qdq-studio-{}-{nanos}-{attempt}.{kind}",
        std::process::id()
    ))
}

/// Creates `path`, failing if it exists. Outputs are ordinary user files, readable like any
/// other.
fn create_new(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o644);
    }
    options.open(path)
}

/// A file being written, renamed into place by [`AtomicFile::commit`] (or [`commit_all`]);
/// dropped uncommitted, the temporary file is deleted.
pub struct AtomicFile {
    file: Option<BufWriter<File>>,
    temp: PathBuf,
    target: PathBuf,
    journal: Option<Journal>,
}

impl std::fmt::Debug for AtomicFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtomicFile")
            .field("target", &self.target)
            .field("temp", &self.temp)
            .finish_non_exhaustive()
    }
}

impl AtomicFile {
    /// Starts writing `target` (its folder must exist), journaled in the user's journal folder.
    pub fn create(target: &Path) -> std::io::Result<Self> {
        Self::create_journaled(target, journal_folder().as_deref())
    }

    /// Starts writing `target`, journaled in `journals` (`None`: not journaled, so a crash
    /// leaves the temporary file behind). The temporary file is recorded before it exists.
    pub fn create_journaled(target: &Path, journals: Option<&Path>) -> std::io::Result<Self> {
        let mut journal = journals.and_then(|folder| {
            Journal::create(folder)
                .inspect_err(|e| tracing::warn!("no journal in {}: {e}", folder.display()))
                .ok()
        });
        for attempt in 0.. {
            let temp = sibling_name(target, "tmp", attempt);
            let entry = Entry::Temp {
                path: temp.clone(),
                target: target.to_path_buf(),
            };
            if let Err(e) = record(&mut journal, entry) {
                tracing::warn!("cannot write journal: {e}");
                journal = None;
            }
            match create_new(&temp) {
                Ok(file) => {
                    return Ok(AtomicFile {
                        file: Some(BufWriter::with_capacity(1 << 20, file)),
                        temp,
                        target: target.to_path_buf(),
                        journal,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 16 => {}
                Err(e) => return Err(e),
            }
        }
        unreachable!("the loop returns")
    }

    /// The final path.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Appends bytes.
    pub fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self.file.as_mut() {
            Some(file) => file.write_all(bytes),
            None => Err(std::io::Error::other("the file was already committed")),
        }
    }

    /// Flushes, fsyncs and renames the file over its target; returns its size.
    pub fn commit(self) -> std::io::Result<u64> {
        let journals = self
            .journal
            .as_ref()
            .and_then(|j| j.path.parent().map(Path::to_path_buf));
        Ok(commit_all(vec![self], journals.as_deref())?
            .first()
            .copied()
            .unwrap_or(0))
    }

    /// Flushes, fsyncs and closes the temporary file; returns its length.
    fn finish_writing(&mut self) -> std::io::Result<u64> {
        let Some(file) = self.file.take() else {
            return Ok(0);
        };
        let file = file.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok(file.metadata()?.len())
    }

    /// Gives up the file as a killed process would: the temporary file and the journal stay.
    #[cfg(test)]
    fn abandon(mut self) {
        drop(self.file.take());
        if let Some(journal) = self.journal.take() {
            journal.abandon();
        }
        self.temp = PathBuf::new();
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        drop(self.file.take());
        if !self.temp.as_os_str().is_empty() {
            // Best effort: a leftover temporary file is removed by the next start's recovery.
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// The steps of a commit, after each of which a test may "kill" it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Every file flushed and the save's journal covering them all.
    Journaled,
    /// `ready` recorded.
    Ready,
    /// File `i`'s destination moved aside (or recorded as new).
    Aside(usize),
    /// File `i` renamed into place.
    Renamed(usize),
    /// The backups removed.
    Done,
}

/// Commits files that belong together, in order; the last file's rename is the commit point
/// (put the file that references the others last: the model after its external data).
/// Returns each file's size. `journals` is where the commit is journaled when the files were
/// not (see [`recover`]). On an error before the commit point the old files are put back.
pub fn commit_all(files: Vec<AtomicFile>, journals: Option<&Path>) -> std::io::Result<Vec<u64>> {
    match commit_steps(files, journals, &mut |_| true)? {
        Some(lens) => Ok(lens),
        None => unreachable!("only a test's hook stops a commit"),
    }
}

/// [`commit_all`], calling `go_on` after each step: `false` stops there as a kill would
/// (`Ok(None)`).
fn commit_steps(
    mut files: Vec<AtomicFile>,
    journals: Option<&Path>,
    go_on: &mut dyn FnMut(Step) -> bool,
) -> std::io::Result<Option<Vec<u64>>> {
    let lens = files
        .iter_mut()
        .map(AtomicFile::finish_writing)
        .collect::<std::io::Result<Vec<u64>>>()?;
    let Some(last) = files.len().checked_sub(1) else {
        return Ok(Some(lens));
    };
    // The last file's journal (its temporary file is the commit point) covers the save.
    let mut journal = files[last].journal.take().or_else(|| {
        journals.and_then(|folder| {
            let mut j = Journal::create(folder).ok()?;
            let temp = &files[last];
            let entry = Entry::Temp {
                path: temp.temp.clone(),
                target: temp.target.clone(),
            };
            j.record(&entry).ok()?;
            Some(j)
        })
    });
    let mut entries: Vec<Entry> = Vec::new();
    let mut note = |journal: &mut Option<Journal>, entry: Entry| -> std::io::Result<()> {
        record(journal, entry.clone())?;
        entries.push(entry);
        Ok(())
    };
    for file in files.iter_mut().take(last) {
        note(
            &mut journal,
            Entry::Temp {
                path: file.temp.clone(),
                target: file.target.clone(),
            },
        )?;
        // Covered by the save's journal now.
        drop(file.journal.take());
    }
    let stopped = |files: Vec<AtomicFile>, journal: Option<Journal>| -> Option<Vec<u64>> {
        stop_as_killed(files, journal);
        None
    };
    if !go_on(Step::Journaled) {
        return Ok(stopped(files, journal));
    }
    note(
        &mut journal,
        Entry::Ready {
            commit_point: files[last].temp.clone(),
        },
    )?;
    if !go_on(Step::Ready) {
        return Ok(stopped(files, journal));
    }
    let result = rename_all(&mut files, &mut journal, &mut entries, go_on);
    match result {
        Ok(true) => {}
        Ok(false) => return Ok(stopped(files, journal)),
        Err(e) => {
            // Before the commit point: put the old files back as recovery would.
            recover::roll(&entries, &mut Recovery::default());
            return Err(e);
        }
    }
    for entry in &entries {
        if let Entry::Backup { path, .. } = entry {
            // Best effort: a leftover backup is removed by the next start's recovery only if
            // the journal survives, so report it.
            if let Err(e) = std::fs::remove_file(path) {
                tracing::warn!("cannot remove {}: {e}", path.display());
            }
        }
    }
    if !go_on(Step::Done) {
        return Ok(stopped(files, journal));
    }
    Ok(Some(lens))
}

/// Moves the earlier files' destinations aside, then renames every temporary file into place,
/// the last one (the commit point) last. `Ok(false)` when `go_on` stopped it.
fn rename_all(
    files: &mut [AtomicFile],
    journal: &mut Option<Journal>,
    entries: &mut Vec<Entry>,
    go_on: &mut dyn FnMut(Step) -> bool,
) -> std::io::Result<bool> {
    let last = files.len() - 1;
    for (i, file) in files.iter().enumerate().take(last) {
        let entry = if file.target.exists() {
            Entry::Backup {
                path: sibling_name(&file.target, &format!("{i}.backup.tmp"), 0),
                target: file.target.clone(),
            }
        } else {
            Entry::Fresh {
                target: file.target.clone(),
            }
        };
        record(journal, entry.clone())?;
        entries.push(entry.clone());
        if let Entry::Backup { path, target } = entry {
            std::fs::rename(&target, &path)?;
        }
        if !go_on(Step::Aside(i)) {
            return Ok(false);
        }
    }
    for (i, file) in files.iter_mut().enumerate() {
        std::fs::rename(&file.temp, &file.target)?;
        file.temp = PathBuf::new();
        sync_folder(&file.target);
        if !go_on(Step::Renamed(i)) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Leaves everything on disk as a killed process would: temporary files, backups, journal.
fn stop_as_killed(files: Vec<AtomicFile>, journal: Option<Journal>) {
    #[cfg(test)]
    {
        for file in files {
            file.abandon();
        }
        if let Some(journal) = journal {
            journal.abandon();
        }
    }
    #[cfg(not(test))]
    drop((files, journal));
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
    if let Ok(dir) = File::open(folder_of(path)) {
        // Best effort: the rename already happened; a failed folder fsync only weakens
        // durability against power loss, never what was written.
        let _ = dir.sync_all();
    }
    #[cfg(not(unix))]
    let _ = path;
}

#[cfg(test)]
mod tests;
