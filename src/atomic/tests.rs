//! The journal protocol, recovery from hand-made states, and commits killed at every step.

use super::journal::Entry;
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

/// Every step a commit can be killed after, for a pair of files.
fn every_step(files: usize) -> Vec<Step> {
    let mut steps = vec![Step::Journaled, Step::Ready];
    steps.extend((0..files - 1).map(Step::Aside));
    steps.extend((0..files).map(Step::Renamed));
    steps.push(Step::Done);
    steps
}

/// A model + data pair saved over an existing pair, the process killed after `kill` (or, with
/// `None`, before the commit began: while writing), then recovered.
fn kill_and_recover(kill: Option<Step>) -> (Vec<u8>, Vec<u8>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let journals = dir.path().join("journals");
    let (data, model) = (dir.path().join("m.onnx.data"), dir.path().join("m.onnx"));
    std::fs::write(&data, b"old data").unwrap();
    std::fs::write(&model, b"old model").unwrap();
    let mut d = AtomicFile::create_journaled(&data, Some(&journals)).unwrap();
    d.write(b"new data").unwrap();
    let mut m = AtomicFile::create_journaled(&model, Some(&journals)).unwrap();
    m.write(b"new model").unwrap();
    match kill {
        None => {
            d.abandon();
            m.abandon();
        }
        Some(kill) => {
            let done = commit_steps(vec![d, m], Some(&journals), &mut |step| step != kill).unwrap();
            assert!(done.is_none(), "stopped at {kill:?}");
        }
    }
    assert!(
        !names(&journals).is_empty(),
        "a killed save leaves its journal"
    );
    let report = recover(&journals);
    assert!(report.journals >= 1, "{kill:?}: {report:?}");
    assert!(
        names(&journals).is_empty(),
        "{kill:?}: every journal finished"
    );
    (
        std::fs::read(&data).unwrap_or_default(),
        std::fs::read(&model).unwrap_or_default(),
        names(dir.path()),
    )
}

#[test]
fn a_pair_killed_at_any_step_recovers_to_the_old_pair_or_the_new_one() {
    let mut outcomes = Vec::new();
    let kills = std::iter::once(None).chain(every_step(2).into_iter().map(Some));
    for kill in kills {
        let (data, model, files) = kill_and_recover(kill);
        assert_eq!(
            files,
            ["journals", "m.onnx", "m.onnx.data"],
            "{kill:?}: no temp left"
        );
        let pair = (data.as_slice(), model.as_slice());
        let new = pair == (b"new data".as_slice(), b"new model".as_slice());
        let old = pair == (b"old data".as_slice(), b"old model".as_slice());
        assert!(old || new, "{kill:?} left a mixed pair: {pair:?}");
        outcomes.push((kill, new));
    }
    // Before the model's rename the old pair stands; from it on, the new one.
    for (kill, new) in outcomes {
        let committed = matches!(kill, Some(Step::Renamed(1) | Step::Done));
        assert_eq!(new, committed, "{kill:?}");
    }
}

#[test]
fn a_kill_between_journaling_a_temp_file_and_creating_it_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let journals = dir.path().join("journals");
    let target = dir.path().join("out.bin");
    let never_created = dir.path().join(".qdq-studio-1-2-0.tmp");
    let mut journal = Journal::create(&journals).unwrap();
    journal
        .record(&Entry::Temp {
            path: never_created,
            target: target.clone(),
        })
        .unwrap();
    journal.abandon();
    let report = recover(&journals);
    assert_eq!(report.journals, 1);
    assert_eq!(names(dir.path()), ["journals"]);
    assert!(names(&journals).is_empty());
}
