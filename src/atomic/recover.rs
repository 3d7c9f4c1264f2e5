//! Recovery at start: what killed saves left is rolled back or forward, each save by its own
//! journal (see the [module docs](super)).

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use super::journal::Entry;
use super::journal_folder;

/// Journals with no entries younger than this are left alone by [`recover`]: their process
/// may have created them and not yet taken the lock.
const EMPTY_JOURNAL_GRACE_SECS: u64 = 60;

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

/// The temporary file whose rename commits the save, once every temporary file was complete
/// (`None` before that: then nothing was renamed yet). Journals written before `ready`
/// existed name it by their last temporary file, and recorded backups only once ready.
fn commit_point(entries: &[Entry]) -> Option<&PathBuf> {
    let ready = entries.iter().find_map(|e| match e {
        Entry::Ready { commit_point } => Some(commit_point),
        _ => None,
    });
    let legacy = || {
        let renaming = entries
            .iter()
            .any(|e| matches!(e, Entry::Backup { .. } | Entry::Fresh { .. }));
        let last_temp = entries.iter().rev().find_map(|e| match e {
            Entry::Temp { path, .. } => Some(path),
            _ => None,
        });
        last_temp.filter(|_| renaming)
    };
    ready.or_else(legacy)
}

/// Rolls one journal's save back (commit point not reached) or forward.
pub(super) fn roll(entries: &[Entry], report: &mut Recovery) {
    let committed = commit_point(entries).is_some_and(|temp| !temp.exists());
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
            Entry::Fresh { .. } | Entry::Ready { .. } => {}
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
