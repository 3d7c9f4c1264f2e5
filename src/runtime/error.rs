//! Errors of finding, fetching and loading ONNX Runtime, and of its execution providers.

use std::path::PathBuf;

/// One place the loader looked for a library, and what it found there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// Where it looked (`ORT_DYLIB_PATH`, `beside the executable`, ...).
    pub source: String,
    /// What happened (`not set`, `no library`, the load error...).
    pub outcome: String,
}

/// Anything that can go wrong providing ONNX Runtime.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// No usable library was found and none could be fetched.
    #[error("no usable ONNX Runtime library (1.{min}+ needed); tried: {}", format_attempts(.attempts))]
    NotFound {
        /// The minimum minor version needed.
        min: u32,
        /// Every place that was tried.
        attempts: Vec<Attempt>,
    },
    /// A file could not be loaded as a shared library.
    #[error("{path} is not a loadable library: {reason}")]
    NotALibrary {
        /// The file.
        path: PathBuf,
        /// What the dynamic loader said.
        reason: String,
    },
    /// A library loaded but does not export ONNX Runtime's API.
    #[error("{path} is not ONNX Runtime (it does not export OrtGetApiBase)")]
    MissingApi {
        /// The file.
        path: PathBuf,
    },
    /// The library is ONNX Runtime, but too old.
    #[error("{path} is ONNX Runtime {found}, but qdq-studio needs 1.{min} or newer")]
    BadVersion {
        /// The file.
        path: PathBuf,
        /// The version it reported.
        found: String,
        /// The minimum minor version needed.
        min: u32,
    },
    /// The wheel download (through pip) failed.
    #[error("downloading {package}=={version} failed: {reason}")]
    Download {
        /// The package.
        package: String,
        /// The version.
        version: String,
        /// pip's last words, or why pip could not run.
        reason: String,
    },
    /// The downloaded file's checksum is not the pinned one.
    #[error(
        "{file}: sha256 {actual} does not match the pinned {expected}; the download was discarded"
    )]
    HashMismatch {
        /// The downloaded file name.
        file: String,
        /// The pinned digest.
        expected: String,
        /// The digest of what arrived.
        actual: String,
    },
    /// No wheel of this flavour exists for this platform.
    #[error("no {flavor} ONNX Runtime build is published for {platform}")]
    NoWheelForPlatform {
        /// The flavour asked for.
        flavor: String,
        /// This platform.
        platform: String,
    },
    /// The wheel could not be unpacked into the cache.
    #[error("cannot unpack {file}: {reason}")]
    Extract {
        /// The wheel.
        file: String,
        /// What went wrong.
        reason: String,
    },
    /// A cache folder could not be created or written.
    #[error("cache folder {path}: {source}")]
    Cache {
        /// The folder.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// An execution provider name the CLI or a recipe gave is not one qdq-studio knows.
    #[error(
        "unknown execution provider '{0}'; known: cpu, cuda[:N], tensorrt (trt)[:N], directml (dml)[:N], openvino[:DEVICE], coreml"
    )]
    UnknownEp(String),
    /// The loaded library was built without this execution provider.
    #[error(
        "the {ep} execution provider is not in the loaded ONNX Runtime ({library}); it offers: {available}. {hint}"
    )]
    EpNotInLibrary {
        /// The EP asked for.
        ep: String,
        /// The loaded library.
        library: PathBuf,
        /// The EPs it has.
        available: String,
        /// Which runtime flavour has it.
        hint: String,
    },
    /// The EP is in the library but could not be registered (missing driver or libraries).
    #[error("the {ep} execution provider cannot run here: {reason}")]
    EpUnavailable {
        /// The EP.
        ep: String,
        /// ONNX Runtime's reason.
        reason: String,
    },
    /// An ONNX Runtime call failed.
    #[error("ONNX Runtime: {0}")]
    Ort(String),
}

impl From<ort::Error> for RuntimeError {
    fn from(e: ort::Error) -> Self {
        RuntimeError::Ort(e.to_string())
    }
}

fn format_attempts(attempts: &[Attempt]) -> String {
    attempts
        .iter()
        .map(|a| format!("{}: {}", a.source, a.outcome))
        .collect::<Vec<_>>()
        .join("; ")
}

/// ONNX Runtime's reason for refusing to load a model, with what to do where it is known:
/// a node whose op version has no kernel names the node, the op and its opset, and says to
/// convert the model to a newer opset.
pub fn explain_load_error(text: &str) -> String {
    const NO_KERNEL: &str = "Could not find an implementation for ";
    let Some(rest) = text.split(NO_KERNEL).nth(1) else {
        return text.to_owned();
    };
    let op = rest.split('(').next().unwrap_or_default();
    let version = rest
        .split_once('(')
        .and_then(|(_, v)| v.split(')').next())
        .unwrap_or_default();
    let node = rest
        .split_once("node with name '")
        .and_then(|(_, n)| n.split('\'').next())
        .unwrap_or_default();
    format!(
        "node '{node}' is {op} from opset {version}, which this ONNX Runtime has no kernel for (for its input types); convert the model to a newer opset (for example with onnx.version_converter) and try again"
    )
}

#[cfg(test)]
mod explain_tests {
    use super::explain_load_error;

    #[test]
    fn a_missing_kernel_names_the_node_op_and_opset() {
        let text = "Could not find an implementation for Add(6) node with name 'add_1'";
        let explained = explain_load_error(text);
        assert!(
            explained.starts_with("node 'add_1' is Add from opset 6,")
                && explained.contains("newer opset"),
            "{explained}"
        );
        assert_eq!(explain_load_error("other"), "other");
    }
}
