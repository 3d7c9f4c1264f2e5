//! Where the ONNX Runtime library is looked for, and installing it into the cache.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::error::{Attempt, RuntimeError};
use super::pins::{self, Flavor};
use super::wheel::{self, FetchEvent, FetchOptions};
use super::{LoadOptions, MIN_MINOR_VERSION, check_library};

/// Where a library was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LibrarySource {
    /// The `ORT_DYLIB_PATH` environment variable.
    EnvVar,
    /// Beside the executable (a packaged build).
    BesideExecutable,
    /// The app's cache (installed earlier).
    Cache,
    /// An installed Python `onnxruntime` package.
    Python,
    /// Fetched now into the cache.
    Downloaded,
    /// A path given by the caller.
    Explicit,
}

impl std::fmt::Display for LibrarySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LibrarySource::EnvVar => "ORT_DYLIB_PATH",
            LibrarySource::BesideExecutable => "beside the executable",
            LibrarySource::Cache => "the qdq-studio cache",
            LibrarySource::Python => "the Python onnxruntime package",
            LibrarySource::Downloaded => "downloaded into the cache",
            LibrarySource::Explicit => "given path",
        })
    }
}

/// True for the main ONNX Runtime library's file names (not its provider plug-ins).
fn is_main_library(name: &str) -> bool {
    match std::env::consts::OS {
        "windows" => name.eq_ignore_ascii_case("onnxruntime.dll"),
        "macos" => name.starts_with("libonnxruntime.") && name.ends_with(".dylib"),
        _ => name == "libonnxruntime.so" || name.starts_with("libonnxruntime.so."),
    }
}

/// Main-library files in `folder`, most specific (longest) name first.
fn libraries_in(folder: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| is_main_library(&e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    found
}

fn runtime_root(cache_dir: &Path) -> PathBuf {
    cache_dir.join("runtime")
}

fn flavor_dir(cache_dir: &Path, flavor: Flavor, version: &str) -> PathBuf {
    runtime_root(cache_dir).join(format!("{}-{version}", flavor.name()))
}

/// The flavours installed in the cache, the active one (last installed) first.
pub fn installed_flavors(cache_dir: &Path) -> Vec<(Flavor, PathBuf)> {
    let active = std::fs::read_to_string(runtime_root(cache_dir).join("active"))
        .ok()
        .and_then(|s| Flavor::parse(s.trim()));
    let mut order: Vec<Flavor> = active.into_iter().collect();
    order.extend(Flavor::ALL.into_iter().filter(|f| Some(*f) != active));
    order
        .into_iter()
        .filter_map(|flavor| {
            let wheel = pins::wheel_for(flavor)?;
            let dir = flavor_dir(cache_dir, flavor, wheel.version);
            let library = dir.join(pins::library_file_name(wheel.version));
            library.exists().then_some((flavor, library))
        })
        .collect()
}

/// Asks Python where its `onnxruntime` package is, without importing it (fast).
fn python_onnxruntime_dir(fetch: &FetchOptions) -> Result<PathBuf, String> {
    let script = "import importlib.util as u; s = u.find_spec('onnxruntime'); \
                  print(s.submodule_search_locations[0] if s and s.submodule_search_locations else '')";
    let pythons = fetch.python.clone().map_or_else(
        || vec!["python3".to_owned(), "python".to_owned()],
        |p| vec![p],
    );
    for python in pythons {
        let Ok(output) = Command::new(&python)
            .args(["-c", script])
            .stdin(Stdio::null())
            .output()
        else {
            continue;
        };
        let dir = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        if dir.is_empty() {
            return Err("not installed".to_owned());
        }
        return Ok(PathBuf::from(dir).join("capi"));
    }
    Err("no Python interpreter".to_owned())
}

/// Tries each library in `candidates`, recording why each was refused.
fn first_usable(
    source: &str,
    candidates: Vec<PathBuf>,
    attempts: &mut Vec<Attempt>,
) -> Option<(PathBuf, String)> {
    if candidates.is_empty() {
        attempts.push(Attempt {
            source: source.to_owned(),
            outcome: "no library".to_owned(),
        });
    }
    for path in candidates {
        match check_library(&path) {
            Ok(version) => return Some((path, version)),
            Err(e) => attempts.push(Attempt {
                source: source.to_owned(),
                outcome: e.to_string(),
            }),
        }
    }
    None
}

/// Finds a usable library; see the module docs of [`super`] for the order.
pub(super) fn find(
    options: &LoadOptions,
    progress: &mut dyn FnMut(FetchEvent),
) -> Result<(PathBuf, String, LibrarySource), RuntimeError> {
    let mut attempts = Vec::new();
    match std::env::var_os("ORT_DYLIB_PATH").filter(|v| !v.is_empty()) {
        // An explicit choice is honoured or reported, never silently replaced by another library.
        Some(path) => {
            let path = PathBuf::from(path);
            let version = check_library(&path)?;
            return Ok((path, version, LibrarySource::EnvVar));
        }
        None => attempts.push(Attempt {
            source: "ORT_DYLIB_PATH".to_owned(),
            outcome: "not set".to_owned(),
        }),
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        // Beside it (portable folders, Windows), in `lib/` below it, or in `../lib/qdq-studio`
        // (the Linux package: /usr/bin/qdq-studio with /usr/lib/qdq-studio/).
        let candidates = [
            libraries_in(&dir),
            libraries_in(&dir.join("lib")),
            libraries_in(&dir.join("../lib/qdq-studio")),
        ]
        .concat();
        if let Some((path, version)) = first_usable(
            &format!("beside the executable ({})", dir.display()),
            candidates,
            &mut attempts,
        ) {
            return Ok((path, version, LibrarySource::BesideExecutable));
        }
    }
    let cached: Vec<PathBuf> = installed_flavors(&options.cache_dir)
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    let cache_label = format!("cache ({})", runtime_root(&options.cache_dir).display());
    if let Some((path, version)) = first_usable(&cache_label, cached, &mut attempts) {
        return Ok((path, version, LibrarySource::Cache));
    }
    match python_onnxruntime_dir(&options.fetch) {
        Ok(dir) => {
            if let Some((path, version)) =
                first_usable("Python onnxruntime", libraries_in(&dir), &mut attempts)
            {
                return Ok((path, version, LibrarySource::Python));
            }
        }
        Err(outcome) => attempts.push(Attempt {
            source: "Python onnxruntime".to_owned(),
            outcome,
        }),
    }
    if !options.allow_download {
        attempts.push(Attempt {
            source: "download".to_owned(),
            outcome: "not allowed (run `qdq-studio runtime install`)".to_owned(),
        });
        return Err(RuntimeError::NotFound {
            min: MIN_MINOR_VERSION,
            attempts,
        });
    }
    match install(&options.cache_dir, options.flavor, &options.fetch, progress) {
        Ok(path) => {
            let version = check_library(&path)?;
            Ok((path, version, LibrarySource::Downloaded))
        }
        Err(e) => {
            attempts.push(Attempt {
                source: "download".to_owned(),
                outcome: e.to_string(),
            });
            Err(RuntimeError::NotFound {
                min: MIN_MINOR_VERSION,
                attempts,
            })
        }
    }
}

/// Installs the pinned `flavor` build into the cache (idempotent) and marks it active.
/// Returns the main library's path. Concurrent installs (several test binaries, two app
/// windows) serialise on a lock file.
pub fn install(
    cache_dir: &Path,
    flavor: Flavor,
    fetch: &FetchOptions,
    progress: &mut dyn FnMut(FetchEvent),
) -> Result<PathBuf, RuntimeError> {
    let wheel = pins::wheel_for(flavor).ok_or_else(|| RuntimeError::NoWheelForPlatform {
        flavor: flavor.name().to_owned(),
        platform: pins::platform(),
    })?;
    let root = runtime_root(cache_dir);
    let target = flavor_dir(cache_dir, flavor, wheel.version);
    let library_name = pins::library_file_name(wheel.version);
    wheel::ensure_unpacked(
        wheel,
        &target,
        Path::new(&library_name),
        &pins::runtime_library_name,
        fetch,
        progress,
    )?;
    let active = root.join("active");
    std::fs::write(&active, flavor.name()).map_err(|source| RuntimeError::Cache {
        path: active.clone(),
        source,
    })?;
    progress(FetchEvent::Done);
    Ok(target.join(library_name))
}

/// Downloads the pinned `flavor` build for another platform (`os`, `arch`: `windows`,
/// `x86_64`), checks its sha256 as an install does, and unpacks its runtime libraries into
/// `folder` (replaced whole) without making anything active: what a package for that platform
/// ships beside its executable. Returns the files written.
pub fn unpack_for_platform(
    flavor: Flavor,
    os: &str,
    arch: &str,
    folder: &Path,
    fetch: &FetchOptions,
    progress: &mut dyn FnMut(FetchEvent),
) -> Result<Vec<PathBuf>, RuntimeError> {
    let wheel = pins::wheel_for_platform(flavor, os, arch).ok_or_else(|| {
        RuntimeError::NoWheelForPlatform {
            flavor: flavor.name().to_owned(),
            platform: format!("{os}-{arch}"),
        }
    })?;
    let written =
        wheel::download_and_extract(wheel, folder, &pins::runtime_library_name, fetch, progress)?;
    progress(FetchEvent::Done);
    Ok(written)
}
