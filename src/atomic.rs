//! Atomic, crash-safe file output.
//!
//! Every output is written to a temporary file in its target folder (`.qdq-studio-*.tmp`),
//! flushed to disk, then renamed over the destination: a crash or a full disk never leaves a
//! half-written file under the final name.
//!
//! Files that belong together (a model and its external data) are committed by
//! [`commit_all`]: the earlier files are renamed first, each existing destination moved aside
//! to a backup, and the last file's rename is the commit point. Until then the old pair is
//! recoverable.
//!
//! A killed process cannot clean up after itself, so every temporary file is first recorded in
//! a journal under the app's cache (`pending-writes/`), which its process holds locked while
//! it writes. [`recover`] runs at every start: for each journal whose lock is free (its process
//! died) it deletes the temporary files and either rolls the interrupted commit back (puts the
//! backups back, removes destinations that did not exist before) or, when the commit point was
//! passed, forward (deletes the backups).

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

/// The folder under the app's cache that holds the journals of saves in progress.
pub const JOURNAL_FOLDER: &str = "pending-writes";

/// Journals with no entries younger than this are left alone by [`recover`]: their process
/// may have created them and not yet taken the lock.
const EMPTY_JOURNAL_GRACE_SECS: u64 = 60;

/// The journal folder of this user: `<cache>/pending-writes`, `None` without a cache folder.
pub fn journal_folder() -> Option<PathBuf> {
    crate::runtime::default_cache_dir()
        .ok()
        .map(|dir| dir.join(JOURNAL_FOLDER))
}

/// One line of a journal.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Entry {
    /// A temporary file that will be renamed to `target`; the last one is the commit point.
    Temp { path: PathBuf, target: PathBuf },
    /// `target`'s previous content, moved aside to `path` until the commit point.
    Backup { path: PathBuf, target: PathBuf },
    /// `target` did not exist before this save: removed if the save is rolled back.
    Fresh { target: PathBuf },
}

/// A journal file, locked by this process for as long as it lives; removed when dropped.
#[derive(Debug)]
struct Journal {
    path: PathBuf,
    file: File,
}

impl Journal {
    /// Creates and locks a new journal in `folder`.
    fn create(folder: &Path) -> std::io::Result<Journal> {
        std::fs::create_dir_all(folder)?;
        let (file, path) = tempfile::Builder::new()
            .prefix("write-")
            .suffix(".journal")
            .tempfile_in(folder)?
            .keep()
            .map_err(|e| e.error)?;
        file.lock()?;
        Ok(Journal { path, file })
    }

    /// Appends an entry and makes it durable before the caller acts on it.
    fn record(&mut self, entry: &Entry) -> std::io::Result<()> {
        let mut line = serde_json::to_string(entry).map_err(std::io::Error::other)?;
        line.push('\n');
        self.file.write_all(line.as_bytes())?;
        self.file.sync_data()
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        // The save finished or failed cleanly: nothing is left to recover. Best effort: a
        // journal that cannot be removed is recovered (as a no-op) on the next start.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A file being written, renamed into place by [`AtomicFile::commit`] (or [`commit_all`]);
/// dropped uncommitted, the temporary file is deleted.
pub struct AtomicFile {
    file: BufWriter<tempfile::NamedTempFile>,
    target: PathBuf,
    journal: Option<Journal>,
}

impl std::fmt::Debug for AtomicFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtomicFile")
            .field("target", &self.target)
            .field("temp", &self.file.get_ref().path())
            .finish_non_exhaustive()
    }
}

fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

impl AtomicFile {
    /// Starts writing `target` (its folder must exist), journaled in the user's journal folder.
    pub fn create(target: &Path) -> std::io::Result<Self> {
        Self::create_journaled(target, journal_folder().as_deref())
    }

    /// Starts writing `target`, journaled in `journals` (`None`: not journaled, so a crash
    /// leaves the temporary file behind).
    pub fn create_journaled(target: &Path, journals: Option<&Path>) -> std::io::Result<Self> {
        let mut builder = tempfile::Builder::new();
        builder.prefix(".qdq-studio-").suffix(".tmp");
        // Outputs are ordinary user files, readable like any other (tempfile defaults to 0600).
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            builder.permissions(std::fs::Permissions::from_mode(0o644));
        }
        let temp = builder.tempfile_in(folder_of(target))?;
        let journal = journals.and_then(|folder| {
            let mut journal = Journal::create(folder)
                .inspect_err(|e| tracing::warn!("no journal in {}: {e}", folder.display()))
                .ok()?;
            journal
                .record(&Entry::Temp {
                    path: temp.path().to_path_buf(),
                    target: target.to_path_buf(),
                })
                .inspect_err(|e| tracing::warn!("cannot write journal: {e}"))
                .ok()?;
            Some(journal)
        });
        Ok(AtomicFile {
            file: BufWriter::with_capacity(1 << 20, temp),
            target: target.to_path_buf(),
            journal,
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
        let journals = self
            .journal
            .as_ref()
            .and_then(|j| j.path.parent().map(Path::to_path_buf));
        Ok(commit_all(vec![self], journals.as_deref())?
            .first()
            .copied()
            .unwrap_or(0))
    }

    /// Flushes and fsyncs the temporary file; returns its length.
    fn flush_to_disk(&mut self) -> std::io::Result<u64> {
        self.file.flush()?;
        let file = self.file.get_ref().as_file();
        file.sync_all()?;
        Ok(file.metadata()?.len())
    }
}

/// A unique name beside `target` for moving its old content aside.
fn backup_name(target: &Path, index: usize) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    folder_of(target).join(format!(
        ".qdq-studio-{}-{nanos}-{index}.backup.tmp",
        std::process::id()
    ))
}

/// Commits files that belong together, in order; the last file's rename is the commit point
/// (put the file that references the others last: the model after its external data).
/// Returns each file's size. `journals` is where the commit is journaled (see [`recover`]).
pub fn commit_all(
    mut files: Vec<AtomicFile>,
    journals: Option<&Path>,
) -> std::io::Result<Vec<u64>> {
    let lens = files
        .iter_mut()
        .map(AtomicFile::flush_to_disk)
        .collect::<std::io::Result<Vec<u64>>>()?;
    let mut journal = journals.and_then(|folder| {
        Journal::create(folder)
            .inspect_err(|e| tracing::warn!("no journal in {}: {e}", folder.display()))
            .ok()
    });
    let mut record = |entry: Entry| match journal.as_mut() {
        Some(j) => j.record(&entry),
        None => Ok(()),
    };
    for file in &files {
        record(Entry::Temp {
            path: file.file.get_ref().path().to_path_buf(),
            target: file.target.clone(),
        })?;
    }
    let mut backups = Vec::new();
    let last = files.len().saturating_sub(1);
    for (i, file) in files.iter().enumerate().take(last) {
        if file.target.exists() {
            let backup = backup_name(&file.target, i);
            record(Entry::Backup {
                path: backup.clone(),
                target: file.target.clone(),
            })?;
            std::fs::rename(&file.target, &backup)?;
            backups.push(backup);
        } else {
            record(Entry::Fresh {
                target: file.target.clone(),
            })?;
        }
    }
    for file in files {
        let AtomicFile {
            file,
            target,
            journal,
        } = file;
        let temp = file.into_inner().map_err(|e| e.into_error())?;
        temp.persist(&target).map_err(|e| e.error)?;
        sync_folder(&target);
        // The combined journal now covers this file.
        drop(journal);
    }
    for backup in backups {
        // Best effort: a leftover backup is removed by the next start's recovery only if the
        // journal survives, so report it.
        if let Err(e) = std::fs::remove_file(&backup) {
            tracing::warn!("cannot remove {}: {e}", backup.display());
        }
    }
    Ok(lens)
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

/// What [`recover`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Journals of dead processes that were processed and removed.
    pub journals: usize,
    /// Temporary files and backups deleted.
    pub removed: Vec<PathBuf>,
    /// Destinations put back from their backup (an interrupted commit rolled back).
    pub restored: Vec<PathBuf>,
}

impl Recovery {
    /// True when nothing needed recovering.
    pub fn is_empty(&self) -> bool {
        self.journals == 0
    }
}

fn remove_if_present(path: &Path, removed: &mut Vec<PathBuf>) {
    if std::fs::remove_file(path).is_ok() {
        removed.push(path.to_path_buf());
    }
}

/// Finishes, in `journals`, what killed processes left: deletes their temporary files and rolls
/// each interrupted commit back or forward (see the module docs). Journals of live processes
/// are skipped (they hold the lock). Never fails: what cannot be read is left for next time.
pub fn recover(journals: &Path) -> Recovery {
    let mut report = Recovery::default();
    let Ok(listing) = std::fs::read_dir(journals) else {
        return report;
    };
    for item in listing.filter_map(Result::ok) {
        let path = item.path();
        if path.extension().is_none_or(|e| e != "journal") {
            continue;
        }
        let Ok(file) = OpenOptions::new().read(true).write(true).open(&path) else {
            continue;
        };
        if file.try_lock().is_err() {
            continue; // Its process is alive and writing.
        }
        // A line cut short by the kill is ignored: its action had not started.
        let entries: Vec<Entry> = BufReader::new(&file)
            .lines()
            .map_while(Result::ok)
            .filter_map(|line| serde_json::from_str(&line).ok())
            .collect();
        if entries.is_empty() {
            let young = item
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_none_or(|age| age.as_secs() < EMPTY_JOURNAL_GRACE_SECS);
            if young {
                continue;
            }
        }
        roll(&entries, &mut report);
        drop(file);
        if std::fs::remove_file(&path).is_ok() {
            report.journals += 1;
        }
    }
    report
}

/// Rolls one journal's save back (commit point not reached) or forward.
fn roll(entries: &[Entry], report: &mut Recovery) {
    let commit_point = entries.iter().rev().find_map(|e| match e {
        Entry::Temp { path, .. } => Some(path),
        _ => None,
    });
    let committed = commit_point.is_none_or(|temp| !temp.exists());
    for entry in entries {
        match entry {
            Entry::Temp { path, .. } => remove_if_present(path, &mut report.removed),
            Entry::Backup { path, target } if !committed && path.exists() => {
                if std::fs::rename(path, target).is_ok() {
                    report.restored.push(target.clone());
                }
            }
            Entry::Backup { path, .. } => remove_if_present(path, &mut report.removed),
            Entry::Fresh { target } if !committed => {
                remove_if_present(target, &mut report.removed);
            }
            Entry::Fresh { .. } => {}
        }
    }
}

/// Runs [`recover`] on the user's journal folder and logs what it did; called at every start.
pub fn recover_at_start() -> Recovery {
    let Some(folder) = journal_folder() else {
        return Recovery::default();
    };
    let report = recover(&folder);
    if !report.is_empty() {
        tracing::info!(
            "finished {} interrupted save(s): removed {} temporary file(s), restored {}",
            report.journals,
            report.removed.len(),
            report.restored.len()
        );
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn an_uncommitted_file_leaves_nothing_and_a_committed_one_replaces_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let journals = dir.path().join("journals");
        let target = dir.path().join("out.bin");
        std::fs::write(&target, b"old").unwrap();
        {
            let mut f = AtomicFile::create_journaled(&target, Some(&journals)).unwrap();
            f.write(b"half").unwrap();
            assert_eq!(names(&journals).len(), 1, "the temp file is journaled");
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"old");
        assert_eq!(names(dir.path()), ["journals", "out.bin"]);
        assert!(names(&journals).is_empty());
        let mut f = AtomicFile::create_journaled(&target, Some(&journals)).unwrap();
        f.write(b"new").unwrap();
        f.commit().unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        assert!(names(&journals).is_empty());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o644);
        }
    }

    #[test]
    fn a_pair_commits_together_and_replaces_both() {
        let dir = tempfile::tempdir().unwrap();
        let journals = dir.path().join("journals");
        let (data, model) = (dir.path().join("m.onnx.data"), dir.path().join("m.onnx"));
        std::fs::write(&data, b"old data").unwrap();
        std::fs::write(&model, b"old model").unwrap();
        let mut d = AtomicFile::create_journaled(&data, Some(&journals)).unwrap();
        d.write(b"new data").unwrap();
        let mut m = AtomicFile::create_journaled(&model, Some(&journals)).unwrap();
        m.write(b"new model!").unwrap();
        assert_eq!(commit_all(vec![d, m], Some(&journals)).unwrap(), [8, 10]);
        assert_eq!(std::fs::read(&data).unwrap(), b"new data");
        assert_eq!(std::fs::read(&model).unwrap(), b"new model!");
        assert_eq!(names(dir.path()), ["journals", "m.onnx", "m.onnx.data"]);
        assert!(names(&journals).is_empty());
    }

    /// Writes a journal as a killed process would have left it.
    fn dead_journal(journals: &Path, entries: &[Entry]) {
        std::fs::create_dir_all(journals).unwrap();
        let mut text = String::new();
        for e in entries {
            text += &serde_json::to_string(e).unwrap();
            text.push('\n');
        }
        text += "{\"kind\":\"te"; // a line cut short by the kill
        std::fs::write(journals.join("write-dead.journal"), text).unwrap();
    }

    #[test]
    fn recovery_rolls_back_a_commit_killed_before_its_commit_point() {
        let dir = tempfile::tempdir().unwrap();
        let journals = dir.path().join("journals");
        let (data, model) = (dir.path().join("m.onnx.data"), dir.path().join("m.onnx"));
        let (data_tmp, model_tmp) = (dir.path().join(".a.tmp"), dir.path().join(".b.tmp"));
        let backup = dir.path().join(".c.backup.tmp");
        // Killed after the data's rename, before the model's: the old model is in place, the
        // new data is under the final name, the old data in the backup.
        std::fs::write(&model, b"old model").unwrap();
        std::fs::write(&data, b"new data").unwrap();
        std::fs::write(&backup, b"old data").unwrap();
        std::fs::write(&model_tmp, b"new model").unwrap();
        dead_journal(
            &journals,
            &[
                Entry::Temp {
                    path: data_tmp.clone(),
                    target: data.clone(),
                },
                Entry::Temp {
                    path: model_tmp.clone(),
                    target: model.clone(),
                },
                Entry::Backup {
                    path: backup.clone(),
                    target: data.clone(),
                },
            ],
        );
        let report = recover(&journals);
        assert_eq!(report.journals, 1);
        assert_eq!(report.restored, std::slice::from_ref(&data));
        assert_eq!(std::fs::read(&data).unwrap(), b"old data");
        assert_eq!(std::fs::read(&model).unwrap(), b"old model");
        assert_eq!(names(dir.path()), ["journals", "m.onnx", "m.onnx.data"]);
        assert!(names(&journals).is_empty());
    }

    #[test]
    fn recovery_rolls_forward_past_the_commit_point_and_drops_fresh_files_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let journals = dir.path().join("journals");
        let (data, model) = (dir.path().join("m.onnx.data"), dir.path().join("m.onnx"));
        let backup = dir.path().join(".c.backup.tmp");
        // Killed after the model's rename: keep the new pair, drop the backup.
        std::fs::write(&model, b"new model").unwrap();
        std::fs::write(&data, b"new data").unwrap();
        std::fs::write(&backup, b"old data").unwrap();
        let temps = [
            Entry::Temp {
                path: dir.path().join(".a.tmp"),
                target: data.clone(),
            },
            Entry::Temp {
                path: dir.path().join(".b.tmp"),
                target: model.clone(),
            },
        ];
        let mut entries = temps.to_vec();
        entries.push(Entry::Backup {
            path: backup.clone(),
            target: data.clone(),
        });
        dead_journal(&journals, &entries);
        let report = recover(&journals);
        assert!(report.restored.is_empty());
        assert_eq!(report.removed, [backup]);
        assert_eq!(std::fs::read(&data).unwrap(), b"new data");

        // A first save killed between the renames: the new data had no old file; remove it.
        std::fs::remove_file(&model).unwrap();
        std::fs::write(dir.path().join(".b.tmp"), b"new model").unwrap();
        let mut entries = temps.to_vec();
        entries.push(Entry::Fresh {
            target: data.clone(),
        });
        dead_journal(&journals, &entries);
        recover(&journals);
        assert_eq!(names(dir.path()), ["journals"]);
    }

    #[test]
    fn a_live_process_journal_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let journals = dir.path().join("journals");
        let target = dir.path().join("out.bin");
        let mut f = AtomicFile::create_journaled(&target, Some(&journals)).unwrap();
        f.write(b"in progress").unwrap();
        let report = recover(&journals);
        assert!(report.is_empty(), "{report:?}");
        assert_eq!(names(&journals).len(), 1);
        f.commit().unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"in progress");
    }
}
