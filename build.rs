//! Compiles the official ONNX schema (`proto/onnx.proto`, proto2) into Rust with prost.
//!
//! protox parses the schema in pure Rust, so no `protoc` binary is needed on any machine.
//! Byte fields are generated as `bytes::Bytes` so that a memory-mapped model decodes without
//! copying its (possibly multi-gigabyte) `raw_data` payloads.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/onnx.proto");
    let descriptors = protox::compile(["onnx.proto"], ["proto"])?;
    let mut config = prost_build::Config::new();
    config.bytes(["."]);
    config.compile_fds(descriptors)?;
    embed_windows_icon()?;
    Ok(())
}

/// The app icon inside the Windows executable (Explorer, the taskbar, the MSI's shortcuts),
/// whichever host builds it.
fn embed_windows_icon() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=assets/icon/qdq-studio.ico");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("windows") {
        let mut resource = winresource::WindowsResource::new();
        resource.set_icon("assets/icon/qdq-studio.ico");
        resource.compile()?;
    }
    Ok(())
}
