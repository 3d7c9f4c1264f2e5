//! Execution providers: parsing the user's choice, and turning it into ONNX Runtime's.
//!
//! Every provider the user asks for is registered with `error_on_failure`, so a requested GPU
//! provider that cannot start is an error with ONNX Runtime's reason, never a silent CPU run.

use std::fmt;

use ort::ep::{self, ArbitrarilyConfigurableExecutionProvider, ExecutionProviderDispatch};

use super::SessionOptions;
use super::error::RuntimeError;

/// An execution provider the user can ask for, with its device.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum EpSpec {
    /// The CPU provider (always present).
    Cpu,
    /// CUDA on a device.
    Cuda(i32),
    /// TensorRT on a device.
    TensorRt(i32),
    /// DirectML on a device.
    DirectMl(i32),
    /// OpenVINO on a device type (`CPU`, `GPU`, `NPU`, ...).
    OpenVino(String),
    /// Core ML (macOS).
    CoreMl,
}

impl EpSpec {
    /// Parses `cpu`, `cuda[:N]`, `trt`/`tensorrt[:N]`, `dml`/`directml[:N]`,
    /// `openvino[:DEVICE]`, `coreml` (ModelOpt's spellings are accepted).
    pub fn parse(text: &str) -> Result<EpSpec, RuntimeError> {
        let lower = text.trim().to_ascii_lowercase();
        let (name, device) = match lower.split_once(':') {
            Some((n, d)) => (n, Some(d)),
            None => (lower.as_str(), None),
        };
        let index = |d: Option<&str>| -> Result<i32, RuntimeError> {
            d.map_or(Ok(0), |d| {
                d.parse()
                    .map_err(|_| RuntimeError::UnknownEp(text.to_owned()))
            })
        };
        let spec = match name {
            "cpu" if device.is_none() => EpSpec::Cpu,
            "cuda" => EpSpec::Cuda(index(device)?),
            "trt" | "tensorrt" => EpSpec::TensorRt(index(device)?),
            "dml" | "directml" => EpSpec::DirectMl(index(device)?),
            "openvino" | "ov" => {
                EpSpec::OpenVino(device.map_or_else(|| "CPU".to_owned(), str::to_ascii_uppercase))
            }
            "coreml" if device.is_none() => EpSpec::CoreMl,
            _ => return Err(RuntimeError::UnknownEp(text.to_owned())),
        };
        Ok(spec)
    }

    /// ONNX Runtime's name of the provider (`CUDAExecutionProvider`, ...).
    pub fn ort_name(&self) -> &'static str {
        match self {
            EpSpec::Cpu => "CPUExecutionProvider",
            EpSpec::Cuda(_) => "CUDAExecutionProvider",
            EpSpec::TensorRt(_) => "TensorrtExecutionProvider",
            EpSpec::DirectMl(_) => "DmlExecutionProvider",
            EpSpec::OpenVino(_) => "OpenVINOExecutionProvider",
            EpSpec::CoreMl => "CoreMLExecutionProvider",
        }
    }

    /// The runtime flavour that carries this provider, for hints.
    pub fn flavor_hint(&self) -> &'static str {
        match self {
            EpSpec::Cpu => "every build has it",
            EpSpec::Cuda(_) | EpSpec::TensorRt(_) => {
                "install the GPU runtime with `qdq-studio runtime install --flavor gpu` (it needs NVIDIA's CUDA and cuDNN libraries; TensorRT also needs TensorRT's)"
            }
            EpSpec::DirectMl(_) => {
                "install the DirectML runtime with `qdq-studio runtime install --flavor directml` (Windows only)"
            }
            EpSpec::OpenVino(_) => {
                "install the OpenVINO runtime with `qdq-studio runtime install --flavor openvino`"
            }
            EpSpec::CoreMl => "the macOS build of ONNX Runtime has it",
        }
    }

    /// The ort dispatch for this provider, failing loudly when it cannot register; `options`
    /// say whether the CPU provider keeps its arena ([`SessionOptions::arena`]) and whether
    /// CUDA runs on one stream ([`SessionOptions::one_gpu_stream`]).
    pub fn dispatch(&self, options: &SessionOptions) -> ExecutionProviderDispatch {
        let dispatch = match self {
            EpSpec::Cpu => ep::CPU::default()
                .with_arena_allocator(options.arena)
                .build(),
            EpSpec::Cuda(device) => ep::CUDA::default()
                .with_device_id(*device)
                .with_arbitrary_config(
                    "use_ep_level_unified_stream",
                    u8::from(options.one_gpu_stream),
                )
                .build(),
            EpSpec::TensorRt(device) => ep::TensorRT::default().with_device_id(*device).build(),
            EpSpec::DirectMl(device) => ep::DirectML::default().with_device_id(*device).build(),
            EpSpec::OpenVino(device) => ep::OpenVINO::default().with_device_type(device).build(),
            EpSpec::CoreMl => ep::CoreML::default().build(),
        };
        dispatch.error_on_failure()
    }

    /// Every provider qdq-studio can drive, with a default device, for catalogues.
    pub fn known() -> Vec<EpSpec> {
        vec![
            EpSpec::Cpu,
            EpSpec::Cuda(0),
            EpSpec::TensorRt(0),
            EpSpec::DirectMl(0),
            EpSpec::OpenVino("CPU".to_owned()),
            EpSpec::CoreMl,
        ]
    }
}

impl fmt::Display for EpSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EpSpec::Cpu => f.write_str("cpu"),
            EpSpec::Cuda(d) => write!(f, "cuda:{d}"),
            EpSpec::TensorRt(d) => write!(f, "tensorrt:{d}"),
            EpSpec::DirectMl(d) => write!(f, "directml:{d}"),
            EpSpec::OpenVino(d) => write!(f, "openvino:{d}"),
            EpSpec::CoreMl => f.write_str("coreml"),
        }
    }
}

impl From<EpSpec> for String {
    fn from(spec: EpSpec) -> String {
        spec.to_string()
    }
}

impl TryFrom<String> for EpSpec {
    type Error = RuntimeError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        EpSpec::parse(&text)
    }
}

/// Whether a provider can run on this machine with the loaded library.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", content = "reason", rename_all = "snake_case")]
pub enum EpState {
    /// Registered and ran a probe model.
    Ready,
    /// In the library, but registering or running it failed; ONNX Runtime's reason.
    Unavailable(String),
    /// Not compiled into the loaded library; which flavour has it.
    NotInLibrary(String),
}

/// A provider and its state, as `qdq-studio runtime` and the studio list them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EpStatus {
    /// The provider.
    pub ep: EpSpec,
    /// ONNX Runtime's name for it.
    pub ort_name: String,
    /// Its state.
    pub state: EpState,
}

/// Which vendor package provides a shared library an EP failed to load.
fn library_vendor(library: &str) -> Option<String> {
    let lower = library.to_ascii_lowercase();
    let major = lower
        .rsplit_once(".so.")
        .map(|(_, v)| v)
        .or_else(|| {
            lower
                .strip_suffix(".dll")
                .and_then(|s| s.rsplit_once('_'))
                .map(|(_, v)| v)
        })
        .and_then(|v| v.split('.').next())
        .filter(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()));
    let with_major = |name: &str| major.map_or_else(|| name.to_owned(), |m| format!("{name} {m}"));
    let vendor = if lower.contains("cudnn") {
        with_major("NVIDIA cuDNN")
    } else if lower.contains("nvinfer") {
        with_major("NVIDIA TensorRT")
    } else if lower.starts_with("libcuda.so") || lower == "nvcuda.dll" {
        "the NVIDIA driver".to_owned()
    } else if lower.starts_with("libcu") || lower.starts_with("cu") || lower.starts_with("libnv") {
        with_major("NVIDIA CUDA")
    } else if lower.contains("openvino") {
        "Intel OpenVINO".to_owned()
    } else {
        return None;
    };
    Some(vendor)
}

/// Turns ONNX Runtime's provider-registration error into one readable sentence: the missing
/// library and who ships it, without the C++ source location.
pub fn explain_failure(text: &str) -> String {
    if let Some((_, error)) = text.split_once("with error: ") {
        let error = error.trim();
        let library = error.split(':').next().unwrap_or(error).trim();
        if error.contains("cannot open shared object file") || error.contains("could not be found")
        {
            return match library_vendor(library) {
                Some(vendor) => format!(
                    "missing {library} (from {vendor}); install it and put it on the library path"
                ),
                None => format!("missing {library}; install it and put it on the library path"),
            };
        }
        return error.to_owned();
    }
    let trimmed = text
        .rsplit_once("[ONNXRuntimeError] : ")
        .map_or(text, |(_, rest)| rest);
    trimmed.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_failures_are_explained() {
        let raw = "/onnxruntime_src/onnxruntime/core/session/provider_bridge_ort.cc:2043 onnxruntime::Provider& \
                   onnxruntime::ProviderLibrary::Get() [ONNXRuntimeError] : 1 : FAIL : Failed to load library \
                   /c/libonnxruntime_providers_cuda.so with error: libcublasLt.so.13: cannot open shared object file: \
                   No such file or directory";
        assert_eq!(
            explain_failure(raw),
            "missing libcublasLt.so.13 (from NVIDIA CUDA 13); install it and put it on the library path"
        );
        assert_eq!(
            explain_failure("x.cc:1 f() [ONNXRuntimeError] : 1 : FAIL : bad"),
            "1 : FAIL : bad"
        );
        assert_eq!(
            library_vendor("cudnn64_9.dll").as_deref(),
            Some("NVIDIA cuDNN 9")
        );
        assert_eq!(
            library_vendor("libnvinfer.so.10").as_deref(),
            Some("NVIDIA TensorRT 10")
        );
        assert_eq!(library_vendor("libfoo.so.1"), None);
    }

    #[test]
    fn modelopt_spellings_parse() {
        assert_eq!(EpSpec::parse("cpu").unwrap(), EpSpec::Cpu);
        assert_eq!(EpSpec::parse("cuda:1").unwrap(), EpSpec::Cuda(1));
        assert_eq!(EpSpec::parse("trt").unwrap(), EpSpec::TensorRt(0));
        assert_eq!(EpSpec::parse("dml:2").unwrap(), EpSpec::DirectMl(2));
        assert_eq!(
            EpSpec::parse("openvino:gpu").unwrap(),
            EpSpec::OpenVino("GPU".into())
        );
        assert_eq!(EpSpec::parse("CUDA").unwrap(), EpSpec::Cuda(0));
    }

    #[test]
    fn unknown_names_and_bad_devices_are_errors() {
        for bad in ["tpu", "cuda:x", "cpu:1", ""] {
            assert!(
                matches!(EpSpec::parse(bad), Err(RuntimeError::UnknownEp(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn display_round_trips() {
        for spec in EpSpec::known() {
            assert_eq!(EpSpec::parse(&spec.to_string()).unwrap(), spec);
        }
    }
}
