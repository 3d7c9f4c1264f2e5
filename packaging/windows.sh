#!/usr/bin/env bash
# Builds the Windows packages on Linux (x86_64 Debian or Ubuntu):
#   target/packages/qdq-studio-<version>-windows-x86_64.zip   portable: the exe, the ONNX Runtime DLLs beside it
#   target/packages/qdq-studio-<version>-windows-x86_64.msi   from packaging/windows/main.wxs, built with wixl
# The exe is cross-built with mingw-w64 (x86_64-pc-windows-gnu); the DLLs come from the pinned
# official onnxruntime win_amd64 wheel, downloaded and sha256-checked by the app's own installer
# (`qdq-studio runtime unpack`). What is missing (mingw-w64, msitools, zip, the target's
# rust-std) is installed first. On a Windows host, packaging/windows.ps1 is the recipe (MSVC,
# cargo-wix, WiX 3). Then: packaging/test_windows_package.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

install_debs() {
    if [ "$(id -u)" = 0 ]; then apt-get install -y -q "$@"; else sudo apt-get install -y -q "$@"; fi
}
command -v x86_64-w64-mingw32-gcc >/dev/null || install_debs mingw-w64
command -v wixl >/dev/null || install_debs wixl msitools
command -v zip >/dev/null || install_debs zip
rustup target list --installed | grep -qx x86_64-pc-windows-gnu ||
    rustup target add x86_64-pc-windows-gnu

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
name="qdq-studio-$version-windows-x86_64"
stage=target/packaging-windows
rm -rf "$stage"
mkdir -p "$stage" target/packages

cargo build --release --locked --target x86_64-pc-windows-gnu
exe=target/x86_64-pc-windows-gnu/release/qdq-studio.exe

# The DLLs, fetched as the app installs its runtime (the Linux build runs the installer).
cargo build --release --locked
target/release/qdq-studio runtime unpack --flavor cpu --platform windows-x86_64 \
    --to "$stage/runtime"

# Portable zip: the exe with the DLLs beside it (where the app looks first).
mkdir "$stage/$name"
cp "$exe" "$stage"/runtime/*.dll README.md assets/icon/qdq-studio.ico "$stage/$name/"
rm -f "target/packages/$name.zip"
(cd "$stage" && zip -q -r -X "../packages/$name.zip" "$name")

# MSI: the WiX 3 recipe the Windows host builds with cargo-wix, here with msitools' wixl,
# from a copy without what wixl lacks (packaging/wixl_recipe.py). wixl takes relative paths.
python3 packaging/wixl_recipe.py packaging/windows/main.wxs "$stage/main.wxs"
wixl --arch x64 \
    -D Version="$version" \
    -D CargoTargetBinDir="$(dirname "$exe")" \
    -D RuntimeDir="$stage/runtime" \
    -D DirectmlDir= \
    -o "target/packages/$name.msi" "$stage/main.wxs"

ls -l "target/packages/$name.zip" "target/packages/$name.msi"
