//! ONNX Runtime: finding (or fetching) the shared library, loading it, listing its execution
//! providers and whether each can run here, and creating sessions on the providers the user
//! chose.
//!
//! The library is loaded at run time (ort's `load-dynamic`), never linked or downloaded at
//! build time, so one binary works with the CPU, GPU, DirectML or OpenVINO builds. The search
//! order is: `ORT_DYLIB_PATH`; beside the executable (packaged builds); the app's cache; an
//! installed Python `onnxruntime`; else, when allowed, the pinned official build is fetched
//! into the cache.

pub mod ep;
pub mod error;
mod locate;
pub mod pins;
pub mod value;
pub mod wheel;

use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use ort::ep::ExecutionProvider;
use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;

pub use ep::{EpSpec, EpState, EpStatus};
pub use error::{Attempt, RuntimeError, explain_load_error};
pub use locate::{LibrarySource, install, installed_flavors, unpack_for_platform};
pub use pins::Flavor;
pub use wheel::{FetchEvent, FetchOptions};

use crate::model::{DataType, ModelBuilder};

/// The oldest ONNX Runtime minor version the crate's API level accepts (1.24).
pub const MIN_MINOR_VERSION: u32 = ort::MINOR_VERSION;

/// How to find the library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadOptions {
    /// Fetch the pinned build when no library is found.
    pub allow_download: bool,
    /// The flavour to fetch in that case.
    pub flavor: Flavor,
    /// The app's cache folder (see [`default_cache_dir`]).
    pub cache_dir: PathBuf,
    /// Download settings.
    pub fetch: FetchOptions,
}

impl LoadOptions {
    /// Default options: download the CPU build into the default cache when nothing is found.
    pub fn new() -> Result<Self, RuntimeError> {
        Ok(LoadOptions {
            allow_download: true,
            flavor: Flavor::Cpu,
            cache_dir: default_cache_dir()?,
            fetch: FetchOptions::default(),
        })
    }
}

/// The app's cache folder (see [`crate::util::cache_dir`]), as a runtime error when there is
/// no home folder to hold it.
pub fn default_cache_dir() -> Result<PathBuf, RuntimeError> {
    crate::util::cache_dir().map_err(|source| RuntimeError::Cache {
        path: PathBuf::from("~"),
        source,
    })
}

/// What was loaded and from where.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RuntimeInfo {
    /// The library file.
    pub path: PathBuf,
    /// The version it reports (`1.31.1`).
    pub version: String,
    /// Where the loader found it.
    pub source: LibrarySource,
}

/// The loaded ONNX Runtime: the library, its environment and what it offers.
///
/// ONNX Runtime allows one library and one environment per process (ort enforces both), so
/// the first successful [`Runtime::load`] fixes them for the life of the process and later
/// calls return the same runtime.
#[derive(Clone)]
pub struct Runtime {
    info: RuntimeInfo,
    environment: ort::environment::Environment,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// The process's runtime, mirroring ort's own one-per-process library and environment.
static LOADED: OnceLock<Runtime> = OnceLock::new();

/// Reads the version of an ONNX Runtime library without initialising it, so that an old or
/// foreign library yields an error instead of a crash later.
pub fn library_version(path: &Path) -> Result<String, RuntimeError> {
    // SAFETY: loading a shared library runs its initialisers; this is the point of the call and
    // what ONNX Runtime itself would do. The symbol is ONNX Runtime's documented C entry point
    // with the signature declared by ort-sys; the returned pointers are owned by the library.
    unsafe {
        let library = libloading::Library::new(path).map_err(|e| RuntimeError::NotALibrary {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let get_api_base: libloading::Symbol<
            '_,
            unsafe extern "C" fn() -> *const ort::sys::OrtApiBase,
        > = library
            .get(b"OrtGetApiBase")
            .map_err(|_| RuntimeError::MissingApi {
                path: path.to_path_buf(),
            })?;
        let base = get_api_base();
        if base.is_null() {
            return Err(RuntimeError::MissingApi {
                path: path.to_path_buf(),
            });
        }
        let version = ((*base).GetVersionString)();
        if version.is_null() {
            return Err(RuntimeError::MissingApi {
                path: path.to_path_buf(),
            });
        }
        Ok(CStr::from_ptr(version).to_string_lossy().into_owned())
    }
}

/// Checks that `path` is an ONNX Runtime recent enough for this build; returns its version.
pub fn check_library(path: &Path) -> Result<String, RuntimeError> {
    let version = library_version(path)?;
    let minor = version
        .split('.')
        .nth(1)
        .and_then(|m| m.parse::<u32>().ok())
        .unwrap_or(0);
    let major = version
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok())
        .unwrap_or(0);
    if major < 1 || (major == 1 && minor < MIN_MINOR_VERSION) {
        return Err(RuntimeError::BadVersion {
            path: path.to_path_buf(),
            found: version,
            min: MIN_MINOR_VERSION,
        });
    }
    Ok(version)
}

/// A tiny float model (`y = Relu(x)`, x: [1, 8]) used to probe providers.
fn probe_model() -> Result<Vec<u8>, RuntimeError> {
    let mut builder = ModelBuilder::new(13);
    builder.input("x", DataType::Float32, &[1, 8]);
    builder.node("Relu", &["x"], &["y"]).name("probe");
    builder.output("y", DataType::Float32, &[1, 8]);
    builder
        .build()
        .to_bytes()
        .map_err(|e| RuntimeError::Ort(e.to_string()))
}

/// How much ONNX Runtime may rewrite the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Optimization {
    /// None (calibration, as onnxruntime's calibrator: fused nodes would hide tensors).
    Disable,
    /// Constant folding and redundant-node removal only. FP8 QDQ models need this on the CPU:
    /// the extended QDQ fusions turn float8 DequantizeLinear+MatMul into kernels that have
    /// no float8 implementation.
    Basic,
    /// Everything (inference).
    All,
}

/// Session settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionOptions {
    /// Graph optimization level.
    pub optimization: Optimization,
    /// Threads inside one operator (0 = ONNX Runtime's default).
    pub intra_threads: usize,
    /// Whether those threads spin while waiting for work (ONNX Runtime's default) rather than
    /// sleep. Off where our own threads work on the same cores between runs: calibration
    /// folds each run's activations into statistics, and spinning workers took a tenth of
    /// its CPU from them (PP-OCR rec, measured with perf).
    pub spinning: bool,
    /// Whether kernels may pre-pack constant weights (a second copy, in their layout). Off
    /// for a session that is only opened to check that a model loads: a large model then
    /// costs one copy of its weights less.
    pub prepacking: bool,
    /// Whether ONNX Runtime keeps its own error log quiet (fatal only) for this session: for
    /// a session whose failing runs the caller expects and handles (a probe); the error
    /// still comes back to the caller.
    pub quiet_errors: bool,
    /// Whether the CPU provider keeps freed activation buffers in its arena for the next
    /// run (ONNX Runtime's own default, and what its Python API does) rather than handing
    /// each back to the system. A model of many mid-sized activations runs up to twice as
    /// fast with it (measured: the local-error model of PP-OCR rec, 60 ms a sample against
    /// 115 ms; calibrating PP-OCR det on 64 samples, 4.7 s against 8.9 s for 5 % more peak
    /// memory). Off for sessions only opened to check that a model loads.
    pub arena: bool,
    /// Whether ONNX Runtime may rewrite float convolutions on the CPU into its blocked
    /// channel layout (NCHWc), fusing the activations and residual Adds it finds next to them.
    /// Off where two graphs of the same arithmetic must give equal bits (a sensitivity
    /// scan's switchable model against each variant's own, `tests/sensitivity.rs`): which
    /// neighbours it fuses depends on the graph around a Conv, and a fused sum rounds
    /// differently. No other execution provider has this layout.
    pub blocked_layout: bool,
    /// Whether the CUDA provider runs the whole session on its one stream, with its one pair
    /// of cuBLAS and cuDNN handles (ONNX Runtime's `use_ep_level_unified_stream`), rather
    /// than making a stream and a pair of handles for every subgraph it runs. On for models
    /// of thousands of `If` branches (a sensitivity scan's switchable model): there the
    /// handles of the branches used up an H100's memory within the first runs
    /// ("cublasCreate: the resource allocation failed", measured with ONNX Runtime 1.31.1).
    pub one_gpu_stream: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            optimization: Optimization::All,
            intra_threads: 0,
            spinning: true,
            prepacking: true,
            quiet_errors: false,
            arena: true,
            blocked_layout: true,
            one_gpu_stream: false,
        }
    }
}

impl Runtime {
    /// Finds, checks and loads the library (see the module docs for the search order).
    ///
    /// `progress` hears about a download when one happens. Never panics when no library can be
    /// loaded: the error lists every place that was tried.
    pub fn load(
        options: &LoadOptions,
        progress: &mut dyn FnMut(FetchEvent),
    ) -> Result<Runtime, RuntimeError> {
        if let Some(runtime) = LOADED.get() {
            return Ok(runtime.clone());
        }
        let (path, version, source) = locate::find(options, progress)?;
        Self::init(path, version, source)
    }

    /// Loads a specific library file (after checking it).
    pub fn load_from(path: &Path) -> Result<Runtime, RuntimeError> {
        if let Some(runtime) = LOADED.get() {
            return Ok(runtime.clone());
        }
        let version = check_library(path)?;
        Self::init(path.to_path_buf(), version, LibrarySource::Explicit)
    }

    fn init(
        path: PathBuf,
        version: String,
        source: LibrarySource,
    ) -> Result<Runtime, RuntimeError> {
        // Two threads may race to load; the loser's `init_from` finds ort's library already set
        // and `build` fails with "only one environment", so take the winner's runtime then.
        let builder = ort::init_from(&path).map_err(|e| RuntimeError::NotALibrary {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let built = builder
            .with_name("qdq-studio")
            .with_telemetry(false)
            .build();
        let environment = match built {
            Ok(environment) => environment,
            Err(e) => return LOADED.get().cloned().ok_or_else(|| RuntimeError::from(e)),
        };
        let runtime = Runtime {
            info: RuntimeInfo {
                path,
                version,
                source,
            },
            environment,
        };
        Ok(LOADED.get_or_init(|| runtime).clone())
    }

    /// What was loaded.
    pub fn info(&self) -> &RuntimeInfo {
        &self.info
    }

    /// True when the loaded library was built with this provider.
    pub fn has_ep(&self, spec: &EpSpec) -> bool {
        let available = match spec {
            EpSpec::Cpu => ort::ep::CPU::is_available(),
            EpSpec::Cuda(_) => ort::ep::CUDA::is_available(),
            EpSpec::TensorRt(_) => ort::ep::TensorRT::is_available(),
            EpSpec::DirectMl(_) => ort::ep::DirectML::is_available(),
            EpSpec::OpenVino(_) => ort::ep::OpenVINO::is_available(),
            EpSpec::CoreMl => ort::ep::CoreML::is_available(),
        };
        available.unwrap_or(false)
    }

    /// Every known provider with its state here: in the library or not, and if so whether it
    /// registers and runs a probe model (with ONNX Runtime's reason when it does not).
    pub fn probe_eps(&self) -> Vec<EpStatus> {
        let model = probe_model();
        EpSpec::known()
            .into_iter()
            .map(|spec| {
                let state = if !self.has_ep(&spec) {
                    EpState::NotInLibrary(spec.flavor_hint().to_owned())
                } else {
                    match &model {
                        Ok(bytes) => match self.probe(&spec, bytes) {
                            Ok(()) => EpState::Ready,
                            Err(RuntimeError::EpUnavailable { reason, .. }) => {
                                EpState::Unavailable(reason)
                            }
                            Err(e) => EpState::Unavailable(e.to_string()),
                        },
                        Err(e) => EpState::Unavailable(e.to_string()),
                    }
                };
                EpStatus {
                    ort_name: spec.ort_name().to_owned(),
                    ep: spec,
                    state,
                }
            })
            .collect()
    }

    fn probe(&self, spec: &EpSpec, model: &[u8]) -> Result<(), RuntimeError> {
        let mut session =
            self.session_from_bytes(model, std::slice::from_ref(spec), SessionOptions::default())?;
        let input = ndarray::Array2::<f32>::from_elem((1, 8), -1.0);
        let value = ort::value::Tensor::from_array(input)?;
        let outputs = session.run(ort::inputs!["x" => value])?;
        let y = outputs["y"].try_extract_array::<f32>()?;
        if y.iter().all(|&v| v == 0.0) {
            Ok(())
        } else {
            Err(RuntimeError::EpUnavailable {
                ep: spec.to_string(),
                reason: "the probe model computed a wrong result".to_owned(),
            })
        }
    }

    fn builder(
        &self,
        eps: &[EpSpec],
        options: SessionOptions,
    ) -> Result<ort::session::builder::SessionBuilder, RuntimeError> {
        let mut builder = Session::builder(&self.environment)?;
        builder = builder
            .with_optimization_level(match options.optimization {
                Optimization::Disable => GraphOptimizationLevel::Disable,
                Optimization::Basic => GraphOptimizationLevel::Level1,
                Optimization::All => GraphOptimizationLevel::All,
            })
            .map_err(ort::Error::from)?;
        if !options.prepacking {
            builder = builder
                .with_config_entry("session.disable_prepacking", "1")
                .map_err(ort::Error::from)?;
        }
        if !options.blocked_layout {
            builder = builder
                .with_disabled_optimizers("NchwcTransformer")
                .map_err(ort::Error::from)?;
        }
        if options.quiet_errors {
            builder = builder
                .with_log_level(ort::logging::LogLevel::Fatal)
                .map_err(ort::Error::from)?;
        }
        if options.intra_threads > 0 {
            builder = builder
                .with_intra_threads(options.intra_threads)
                .map_err(ort::Error::from)?;
        }
        if !options.spinning {
            builder = builder
                .with_intra_op_spinning(false)
                .map_err(ort::Error::from)?;
        }
        for spec in eps {
            if !self.has_ep(spec) {
                return Err(RuntimeError::EpNotInLibrary {
                    ep: spec.to_string(),
                    library: self.info.path.clone(),
                    available: self.library_eps().join(", "),
                    hint: spec.flavor_hint().to_owned(),
                });
            }
            builder = builder
                .with_execution_providers([spec.dispatch(&options)])
                .map_err(|e| RuntimeError::EpUnavailable {
                    ep: spec.to_string(),
                    reason: ep::explain_failure(&e.to_string()),
                })?;
        }
        Ok(builder)
    }

    /// Providers compiled into the loaded library (qdq-studio's names).
    pub fn library_eps(&self) -> Vec<String> {
        EpSpec::known()
            .into_iter()
            .filter(|s| self.has_ep(s))
            .map(|s| s.to_string())
            .collect()
    }

    /// A session over an in-memory model on `eps`, in priority order. Every provider must
    /// register; the CPU provider always backs the nodes the others do not take.
    pub fn session_from_bytes(
        &self,
        model: &[u8],
        eps: &[EpSpec],
        options: SessionOptions,
    ) -> Result<Session, RuntimeError> {
        let mut builder = self.builder(eps, options)?;
        builder
            .commit_from_memory(model)
            .map_err(|e| map_session_error(eps, e))
    }

    /// A session over a model in memory whose external data (if any) ONNX Runtime reads
    /// from the model's own files (see [`crate::model::Model::to_session_proto`]).
    pub fn session_from_model(
        &self,
        model: &crate::model::SessionModel,
        eps: &[EpSpec],
        options: SessionOptions,
    ) -> Result<Session, RuntimeError> {
        let builder = self.builder(eps, options)?;
        Self::commit_model(builder, model, eps)
    }

    /// [`Runtime::session_from_model`] for a model that uses the operators of `domain`
    /// (qdq-studio's own operator the evaluation layer adds), registered on the session.
    pub fn session_with_operators(
        &self,
        model: &crate::model::SessionModel,
        eps: &[EpSpec],
        options: SessionOptions,
        domain: ort::operator::OperatorDomain,
    ) -> Result<Session, RuntimeError> {
        let builder = self
            .builder(eps, options)?
            .with_operators(domain)
            .map_err(ort::Error::from)?;
        Self::commit_model(builder, model, eps)
    }

    /// [`Runtime::session_from_model`] with ONNX Runtime's per-node profiling on, written to
    /// a file named from `prefix` once [`Session::end_profiling`] is called.
    pub fn profiled_session_from_model(
        &self,
        model: &crate::model::SessionModel,
        eps: &[EpSpec],
        options: SessionOptions,
        prefix: &Path,
    ) -> Result<Session, RuntimeError> {
        let builder = self
            .builder(eps, options)?
            .with_profiling(prefix)
            .map_err(ort::Error::from)?;
        Self::commit_model(builder, model, eps)
    }

    /// Creates the session of `model` (external data resolved from its folder or memory).
    fn commit_model(
        mut builder: ort::session::builder::SessionBuilder,
        model: &crate::model::SessionModel,
        eps: &[EpSpec],
    ) -> Result<Session, RuntimeError> {
        if let Some(folder) = &model.external_folder {
            builder = builder
                .with_config_entry(
                    "session.model_external_initializers_file_folder_path",
                    folder.to_string_lossy(),
                )
                .map_err(ort::Error::from)?;
        }
        if let Some(buffer) = &model.memory_file {
            builder = builder
                .with_external_initializer_file_in_memory(
                    crate::model::MEMORY_FILE,
                    Arc::clone(buffer),
                )
                .map_err(ort::Error::from)?;
        }
        builder
            .commit_from_memory(&model.bytes)
            .map_err(|e| map_session_error(eps, e))
    }

    /// A session over a model file (external data resolved by ONNX Runtime beside it).
    pub fn session_from_file(
        &self,
        path: &Path,
        eps: &[EpSpec],
        options: SessionOptions,
    ) -> Result<Session, RuntimeError> {
        let mut builder = self.builder(eps, options)?;
        builder
            .commit_from_file(path)
            .map_err(|e| map_session_error(eps, e))
    }
}

/// A provider that registered but failed while the session was created gets named.
fn map_session_error(eps: &[EpSpec], error: ort::Error) -> RuntimeError {
    let text = error.to_string();
    match eps
        .iter()
        .find(|s| **s != EpSpec::Cpu && text.contains(s.ort_name()))
    {
        Some(spec) => RuntimeError::EpUnavailable {
            ep: spec.to_string(),
            reason: ep::explain_failure(&text),
        },
        None => RuntimeError::Ort(text),
    }
}

/// The runtime already loaded in this process, if any.
pub fn loaded() -> Option<Runtime> {
    LOADED.get().cloned()
}
