//! ONNX Runtime provisioning: loading, the EP catalogue, clear errors for bad libraries,
//! failed downloads and unavailable providers.

use crate::common;

use qdq_studio::runtime::wheel::{self, PinnedWheel};
use qdq_studio::runtime::{
    EpSpec, EpState, FetchOptions, RuntimeError, SessionOptions, check_library, default_cache_dir,
};

use common::{RAPIDOCR, cli, runtime};

#[test]
fn the_cpu_runtime_loads_and_lists_its_providers() {
    let rt = runtime();
    assert!(rt.info().version.starts_with("1."), "{:?}", rt.info());
    assert_eq!(check_library(&rt.info().path).unwrap(), rt.info().version);
    let eps = rt.probe_eps();
    let cpu = eps.iter().find(|s| s.ep == EpSpec::Cpu).unwrap();
    assert_eq!(cpu.state, EpState::Ready);
    // Every known provider is listed with a state; ones missing from the library say which
    // flavour has them.
    assert_eq!(eps.len(), EpSpec::known().len());
    for status in &eps {
        if let EpState::NotInLibrary(hint) = &status.state {
            assert!(!hint.is_empty());
        }
    }
}

/// Whatever flavour is installed (CPU, or GPU with CUDA), some known provider is missing from
/// it; asking for that one names it, what the library has, and which flavour has it.
#[test]
fn asking_for_a_provider_the_library_lacks_is_a_clear_error() {
    let rt = runtime();
    let lacking = EpSpec::known()
        .into_iter()
        .find(|ep| !rt.has_ep(ep))
        .expect("no library has every provider (DirectML and OpenVINO never ship together)");
    let model = qdq_studio::sample::SAMPLE_MODEL;
    let err = rt
        .session_from_bytes(
            model,
            std::slice::from_ref(&lacking),
            SessionOptions::default(),
        )
        .unwrap_err();
    let RuntimeError::EpNotInLibrary { ep, hint, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!(ep, &lacking.to_string(), "{err}");
    assert!(!hint.is_empty(), "{err}");
    let text = err.to_string();
    assert!(
        text.contains(ep.as_str()) && text.contains(hint.as_str()),
        "{text}"
    );
}

#[test]
fn the_cli_reports_the_runtime() {
    let value = common::run_json(cli().args(["runtime", "--json"]));
    assert!(
        value["runtime"]["version"]
            .as_str()
            .unwrap()
            .starts_with("1.")
    );
    let eps = value["execution_providers"].as_array().unwrap();
    assert!(
        eps.iter()
            .any(|e| e["ep"] == "cpu" && e["state"]["state"] == "ready"),
        "{eps:?}"
    );
}

#[test]
fn a_file_that_is_not_a_library_is_refused_by_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("libonnxruntime.so");
    std::fs::write(&fake, "not a library").unwrap();
    let out = cli()
        .args(["runtime"])
        .env("ORT_DYLIB_PATH", &fake)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("is not a loadable library"), "{stderr}");
}

#[test]
fn a_library_that_is_not_onnx_runtime_is_refused() {
    // A real shared library without OrtGetApiBase: the test binary's own C library, found
    // through the platform's loader wherever it lives.
    let libc = libc_path();
    assert!(matches!(
        check_library(&libc),
        Err(RuntimeError::MissingApi { .. })
    ));
}

/// The C library this process runs with, read from the loader's map (Linux), or the
/// platform's fixed system library elsewhere.
fn libc_path() -> std::path::PathBuf {
    #[cfg(target_os = "linux")]
    {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let path = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("/libc.so") || p.contains("/libc-"))
            .expect("the process maps a C library");
        std::path::PathBuf::from(path)
    }
    #[cfg(target_os = "macos")]
    {
        std::path::PathBuf::from("/usr/lib/libSystem.B.dylib")
    }
    #[cfg(windows)]
    {
        std::path::PathBuf::from(r"C:\Windows\System32\kernel32.dll")
    }
}

/// onnxruntime 1.22.0, older than the API this build needs (a Linux x86_64 wheel).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
const OLD_ORT: PinnedWheel = PinnedWheel {
    package: "onnxruntime",
    version: "1.22.0",
    file: "onnxruntime-1.22.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
    sha256: "6964a975731afc19dc3418fad8d4e08c48920144ff590149429a5ebe0d15fb3c",
};

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn an_old_onnx_runtime_is_a_bad_version() {
    let target = qdq_studio::runtime::default_cache_dir()
        .unwrap()
        .join("test-runtimes")
        .join("1.22.0");
    let select = |entry: &str| {
        qdq_studio::runtime::pins::is_runtime_library(entry)
            .then(|| entry.rsplit('/').next().unwrap().to_owned())
    };
    let library = std::path::Path::new("libonnxruntime.so.1.22.0");
    wheel::ensure_unpacked(
        &OLD_ORT,
        &target,
        library,
        &select,
        &FetchOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    let path = target.join(library);
    let err = check_library(&path).unwrap_err();
    assert!(matches!(err, RuntimeError::BadVersion { .. }), "{err}");
    assert!(
        err.to_string().contains("1.22.0") && err.to_string().contains("1.24"),
        "{err}"
    );
    let out = cli()
        .args(["runtime"])
        .env("ORT_DYLIB_PATH", &path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("1.22.0"));
}

#[test]
fn a_download_with_a_wrong_digest_is_discarded() {
    let dir = tempfile::tempdir().unwrap();
    let tampered = PinnedWheel {
        sha256: "0000000000000000000000000000000000000000000000000000000000000000",
        ..RAPIDOCR
    };
    let err =
        wheel::download(&tampered, dir.path(), &FetchOptions::default(), &mut |_| {}).unwrap_err();
    assert!(matches!(err, RuntimeError::HashMismatch { .. }), "{err}");
    assert!(
        !dir.path().join(RAPIDOCR.file).exists(),
        "untrusted wheel left behind"
    );
}

#[test]
fn a_download_without_network_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let offline = FetchOptions {
        index_url: Some("http://127.0.0.1:9/simple".to_owned()),
        no_retries: true,
        ..FetchOptions::default()
    };
    let err = wheel::download(&RAPIDOCR, dir.path(), &offline, &mut |_| {}).unwrap_err();
    assert!(matches!(err, RuntimeError::Download { .. }), "{err}");
    assert!(
        err.to_string().contains("rapidocr-onnxruntime==1.4.4"),
        "{err}"
    );
}

/// The GPU build on a machine without CUDA: run by hand (`cargo test -- --ignored`) since it
/// downloads ~300 MB. The CUDA provider must be listed as unable to run, naming the missing
/// library.
#[test]
#[ignore = "downloads the 300 MB GPU runtime"]
fn the_gpu_runtime_without_cuda_names_the_missing_library() {
    let cache = tempfile::tempdir().unwrap();
    let out = cli()
        .args(["runtime", "install", "--flavor", "gpu"])
        .env("QDQ_STUDIO_CACHE_DIR", cache.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli()
        .args(["runtime", "--json", "--no-download"])
        .env("QDQ_STUDIO_CACHE_DIR", cache.path())
        .output()
        .unwrap();
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let eps = value["execution_providers"].as_array().unwrap();
    let cuda = eps.iter().find(|e| e["ep"] == "cuda:0").unwrap();
    assert_eq!(cuda["state"]["state"], "unavailable");
    assert!(
        cuda["state"]["reason"]
            .as_str()
            .unwrap()
            .contains("missing lib"),
        "{cuda}"
    );
}

#[test]
fn unpacking_a_runtime_for_another_platform_names_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().join("dlls");
    for (platform, expected) in [
        ("windows", "bad --platform 'windows': expected OS-ARCH"),
        ("plan9-x86_64", "plan9-x86_64"),
    ] {
        let (ok, text) = common::run_text(
            cli()
                .args(["runtime", "unpack", "--platform", platform, "--to"])
                .arg(&to),
        );
        assert!(!ok, "{text}");
        assert!(text.contains(expected), "{text}");
        assert_eq!(text.lines().count(), 1, "{text}");
    }
    assert!(!to.exists(), "nothing is written");
}

/// The OpenVINO provider end to end, on the runtime the project fetches itself (`runtime
/// install --flavor openvino`, 84 MB once, kept in a cache folder of its own so the other
/// tests' CPU runtime stays active): calibrate and quantize on it (its target is the EP's),
/// then compare on it (outputs and per tensor), with the kernel report naming the compiled
/// subgraph.
#[test]
fn the_sample_calibrates_quantizes_and_compares_on_openvino() {
    let cache = default_cache_dir()
        .unwrap()
        .join("test-runtimes")
        .join("openvino");
    let run = |args: &[&str]| {
        let mut cmd = cli();
        cmd.args(args)
            .env("QDQ_STUDIO_CACHE_DIR", &cache)
            .env_remove("ORT_DYLIB_PATH");
        common::run_ok(&mut cmd)
    };
    run(&["runtime", "install", "--flavor", "openvino"]);
    let dir = tempfile::tempdir().unwrap();
    let quant = dir.path().join("sample.qdq.onnx");
    let (model, calib, eval) = (
        common::asset("ppocr_cls.onnx"),
        common::asset("calib.npz"),
        common::asset("eval.npz"),
    );
    let said = run(&[
        "quantize",
        "--onnx_path",
        model.to_str().unwrap(),
        "--calibration_data_path",
        calib.to_str().unwrap(),
        "--calibration_eps",
        "openvino",
        "-o",
        quant.to_str().unwrap(),
    ]);
    assert!(said.contains("target: openvino - "), "{said}");
    let said = run(&[
        "compare",
        "--float",
        model.to_str().unwrap(),
        "--quant",
        quant.to_str().unwrap(),
        "--data",
        eval.to_str().unwrap(),
        "--latency_runs",
        "3",
        "--per_tensor",
    ]);
    // Per tensor too: the observing models do not list the graph input as an output, which
    // OpenVINO refuses ("Duplicate definition of name").
    assert!(said.contains("worst activations"), "{said}");
    assert!(
        said.contains("measured on OpenVINOExecutionProvider"),
        "{said}"
    );
    assert!(said.contains("compiled OpenVINO subgraph(s)"), "{said}");
    assert!(!said.contains("0 integer kernel(s), 0 of"), "{said}");
    let sqnr: f64 = said
        .lines()
        .find(|l| l.contains("class scores"))
        .and_then(|l| l.split('┆').nth(2))
        .and_then(|c| c.trim().parse().ok())
        .unwrap_or_else(|| panic!("no SQNR in {said}"));
    assert!(sqnr > 30.0, "{said}");
}
