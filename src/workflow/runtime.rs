//! The ONNX Runtime every step runs on: the one already loaded in this process, else found or
//! fetched (the CPU build) with the download reported; and installing another build.

use std::path::PathBuf;

use super::WorkflowError;
use crate::jobs::{JobContext, Progress};
use crate::runtime::{FetchEvent, Flavor, LoadOptions, Runtime};

/// The process's ONNX Runtime, found or fetched; `progress` hears about a download.
pub fn runtime(progress: &mut dyn FnMut(FetchEvent)) -> Result<Runtime, WorkflowError> {
    if let Some(runtime) = crate::runtime::loaded() {
        return Ok(runtime);
    }
    Ok(Runtime::load(&LoadOptions::new()?, progress)?)
}

/// The process's ONNX Runtime, a download shown as `ctx`'s progress.
pub fn runtime_for_job(ctx: &JobContext) -> Result<Runtime, WorkflowError> {
    runtime(&mut |event| {
        if let FetchEvent::Downloading { package, version } = event {
            ctx.report(Progress {
                stage: format!("Downloading {package} {version}"),
                ..Progress::default()
            });
        }
    })
}

/// Installs the pinned `flavor` build into the cache, with its download as `ctx`'s progress;
/// the version it reports and the library's path.
pub fn install(flavor: Flavor, ctx: &JobContext) -> Result<(String, PathBuf), WorkflowError> {
    let options = LoadOptions::new()?;
    let path = crate::runtime::install(&options.cache_dir, flavor, &options.fetch, &mut |event| {
        let stage = match event {
            FetchEvent::Downloading { package, version } => {
                format!("Downloading {package} {version}")
            }
            FetchEvent::Verifying => "Verifying the checksum".to_owned(),
            FetchEvent::Extracting { .. } => "Unpacking".to_owned(),
            FetchEvent::Log(_) | FetchEvent::Done => return,
        };
        ctx.report(Progress {
            stage,
            ..Progress::default()
        });
    })?;
    let version = crate::runtime::check_library(&path)?;
    Ok((version, path))
}
