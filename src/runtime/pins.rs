//! The official ONNX Runtime builds qdq-studio can install, pinned by file and sha256.
//!
//! The builds are Microsoft's Python wheels; only their shared libraries are used. The
//! DirectML and OpenVINO flavours are published less often than the CPU and CUDA ones, which
//! is why the crate targets ONNX Runtime's API version 24 (1.24) rather than 1.31.

use super::wheel::PinnedWheel;

/// A build flavour of ONNX Runtime: which execution providers its library carries.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Flavor {
    /// CPU only (`onnxruntime`).
    Cpu,
    /// CUDA and TensorRT (`onnxruntime-gpu`); needs the CUDA 12/13 and cuDNN libraries.
    Gpu,
    /// DirectML (`onnxruntime-directml`), Windows only.
    Directml,
    /// OpenVINO (`onnxruntime-openvino`).
    Openvino,
}

impl Flavor {
    /// Every flavour.
    pub const ALL: [Flavor; 4] = [Flavor::Cpu, Flavor::Gpu, Flavor::Directml, Flavor::Openvino];

    /// The flavour's name, as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Cpu => "cpu",
            Flavor::Gpu => "gpu",
            Flavor::Directml => "directml",
            Flavor::Openvino => "openvino",
        }
    }

    /// Parses a flavour name.
    pub fn parse(name: &str) -> Option<Flavor> {
        Flavor::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// The platform tag of this build (`linux-x86_64`, `windows-x86_64`, ...).
pub fn platform() -> String {
    format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH)
}

const fn pin(
    package: &'static str,
    version: &'static str,
    file: &'static str,
    sha256: &'static str,
) -> PinnedWheel {
    PinnedWheel {
        package,
        version,
        file,
        sha256,
    }
}

/// Every pinned build: (flavour, os, arch, wheel).
const PINS: &[(Flavor, &str, &str, PinnedWheel)] = &[
    (
        Flavor::Cpu,
        "linux",
        "x86_64",
        pin(
            "onnxruntime",
            "1.31.1",
            "onnxruntime-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl",
            "1f3dea47f2f0e5117c2404cea7d21fd253ae7836a3bf167a501cdfbb2600d536",
        ),
    ),
    (
        Flavor::Cpu,
        "linux",
        "aarch64",
        pin(
            "onnxruntime",
            "1.31.1",
            "onnxruntime-1.31.1-cp312-cp312-manylinux_2_28_aarch64.whl",
            "0b9a492176886992e0e875f06bc0367e333f5fff11711a2d642e18b02f3009cc",
        ),
    ),
    (
        Flavor::Cpu,
        "windows",
        "x86_64",
        pin(
            "onnxruntime",
            "1.31.1",
            "onnxruntime-1.31.1-cp312-cp312-win_amd64.whl",
            "ae8a9a351efda685cc59a66226cdefaa37a126c1d66872ca23a2de9425326130",
        ),
    ),
    (
        Flavor::Cpu,
        "macos",
        "aarch64",
        pin(
            "onnxruntime",
            "1.31.1",
            "onnxruntime-1.31.1-cp312-cp312-macosx_14_0_arm64.whl",
            "96dd2564b10ea7153ad9c207e7cd8e5917cb3ba521e0e0a62ac03486fdc8d56c",
        ),
    ),
    (
        Flavor::Gpu,
        "linux",
        "x86_64",
        pin(
            "onnxruntime-gpu",
            "1.31.1",
            "onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl",
            "05d548956197b9d01f59b625de740e0d6be3593f874e241a12dc0362650ecdf7",
        ),
    ),
    (
        Flavor::Gpu,
        "windows",
        "x86_64",
        pin(
            "onnxruntime-gpu",
            "1.31.1",
            "onnxruntime_gpu-1.31.1-cp312-cp312-win_amd64.whl",
            "2bb1e9373baba88f6415257f5b6a589d23e23c16004f7d89adf4344eada5749e",
        ),
    ),
    (
        Flavor::Directml,
        "windows",
        "x86_64",
        pin(
            "onnxruntime-directml",
            "1.24.4",
            "onnxruntime_directml-1.24.4-cp312-cp312-win_amd64.whl",
            "f2ecb68b7b7b259d2ef3112ae760149f9b5a1e7c0fbb73d539da6250a648a614",
        ),
    ),
    (
        Flavor::Openvino,
        "linux",
        "x86_64",
        pin(
            "onnxruntime-openvino",
            "1.24.1",
            "onnxruntime_openvino-1.24.1-cp312-cp312-manylinux_2_28_x86_64.whl",
            "d617fac2f59a6ab5ea59a788c3e1592240a129642519aaeaa774761dfe35150e",
        ),
    ),
    (
        Flavor::Openvino,
        "windows",
        "x86_64",
        pin(
            "onnxruntime-openvino",
            "1.24.1",
            "onnxruntime_openvino-1.24.1-cp312-cp312-win_amd64.whl",
            "f186335a9c9b255633275290da7521d3d4d14c7773fee3127bfa040234d3fa5a",
        ),
    ),
];

/// The pinned wheel of `flavor` for this platform, if one is published.
pub fn wheel_for(flavor: Flavor) -> Option<&'static PinnedWheel> {
    wheel_for_platform(flavor, std::env::consts::OS, std::env::consts::ARCH)
}

/// The pinned wheel of `flavor` for a given OS and architecture.
pub fn wheel_for_platform(flavor: Flavor, os: &str, arch: &str) -> Option<&'static PinnedWheel> {
    PINS.iter()
        .find(|(f, o, a, _)| *f == flavor && *o == os && *a == arch)
        .map(|(_, _, _, w)| w)
}

/// True for the wheel entries that are runtime libraries (not the Python extension module).
pub fn is_runtime_library(entry: &str) -> bool {
    let Some(name) = entry.strip_prefix("onnxruntime/capi/") else {
        return false;
    };
    if name.contains('/') || name.starts_with("onnxruntime_pybind11_state") {
        return false;
    }
    name.ends_with(".dll") || name.ends_with(".dylib") || name.contains(".so")
}

/// The file name a wheel entry that is a runtime library ([`is_runtime_library`]) is unpacked
/// under (the wheel's folders dropped); `None` for every other entry.
pub fn runtime_library_name(entry: &str) -> Option<String> {
    is_runtime_library(entry).then(|| entry.rsplit('/').next().unwrap_or(entry).to_owned())
}

/// The main library's file name inside an unpacked wheel of `version`.
pub fn library_file_name(version: &str) -> String {
    match std::env::consts::OS {
        "windows" => "onnxruntime.dll".to_owned(),
        "macos" => format!("libonnxruntime.{version}.dylib"),
        _ => format!("libonnxruntime.so.{version}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flavor_has_a_windows_or_linux_build() {
        for flavor in Flavor::ALL {
            let any = ["linux", "windows"]
                .iter()
                .any(|os| wheel_for_platform(flavor, os, "x86_64").is_some());
            assert!(any, "{flavor:?}");
        }
        assert!(wheel_for_platform(Flavor::Directml, "linux", "x86_64").is_none());
    }

    #[test]
    fn only_runtime_libraries_are_selected() {
        assert!(is_runtime_library(
            "onnxruntime/capi/libonnxruntime.so.1.31.1"
        ));
        assert!(is_runtime_library(
            "onnxruntime/capi/onnxruntime_providers_cuda.dll"
        ));
        assert!(!is_runtime_library(
            "onnxruntime/capi/onnxruntime_pybind11_state.cpython-312-x86_64-linux-gnu.so"
        ));
        assert!(!is_runtime_library("onnxruntime/capi/_pybind_state.py"));
        assert!(!is_runtime_library("onnxruntime/tools/x.so"));
    }
}
