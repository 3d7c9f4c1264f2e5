#!/usr/bin/env bash
# Builds the Linux packages from a clean checkout:
#   target/packages/qdq-studio_<version>_amd64.deb
#   target/packages/qdq-studio-<version>-linux-x86_64.tar.gz
# Both hold the release binary, the ONNX Runtime CPU library it runs on (fetched once by the
# app's own pinned, sha256-checked installer), the desktop entry and the icon. The library
# sits in lib/ (tarball) or /usr/lib/qdq-studio (deb), where the app looks first, so an
# installed studio needs no network and no Python.
# Needs: cargo-deb (`cargo install cargo-deb`); network once, for the runtime wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
version="$(cargo metadata --no-deps --format-version 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["packages"][0]["version"])')"
out=target/packages
stage=target/packaging
rm -rf "$stage" && mkdir -p "$stage/runtime" "$out"

echo "== release build"
cargo build --release --locked

echo "== ONNX Runtime (CPU) through the app's installer"
QDQ_STUDIO_CACHE_DIR="$stage/cache" target/release/qdq-studio runtime install --flavor cpu
runtime_dir="$(ls -d "$stage"/cache/runtime/cpu-* | head -1)"
cp -L "$runtime_dir"/*.so* "$stage/runtime/"
ls -l "$stage/runtime"

echo "== .deb"
cargo deb --no-build --no-strip --output "$out/qdq-studio_${version}_amd64.deb"

echo "== tarball"
name="qdq-studio-${version}-linux-x86_64"
root="$stage/$name"
mkdir -p "$root/lib"
cp target/release/qdq-studio "$root/"
cp "$stage"/runtime/*.so* "$root/lib/"
cp packaging/linux/qdq-studio.desktop assets/icon/qdq-studio.png README.md "$root/"
cp packaging/linux/install-desktop-entry.sh "$root/"
tar -C "$stage" -czf "$out/$name.tar.gz" "$name"
ls -l "$out"
