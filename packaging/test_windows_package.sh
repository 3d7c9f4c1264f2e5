#!/usr/bin/env bash
# Smoke-tests the Windows zip on Linux, under Wine and Xvfb, as a user would use it: unpacks it
# into an empty folder, runs `--version`, `inspect`, `quantize` and `compare` on the bundled
# sample (the output SQNR must match the Linux build's to 0.01 dB, and no path may be shown
# in Windows' verbatim `\\?\` form), then starts the studio and takes a screenshot
# (target/packages/windows-studio.png). Run after packaging/windows.sh.
#
# Wine 8 lacks bcryptprimitives.dll, whose ProcessPrng Rust's standard library imports (every
# Windows 10 and later has it): a shim forwarding to advapi32's RtlGenRandom is built here
# into the throw-away Wine prefix. It is never part of the package.
set -euo pipefail
cd "$(dirname "$0")/.."

install_debs() {
    if [ "$(id -u)" = 0 ]; then apt-get install -y -q "$@"; else sudo apt-get install -y -q "$@"; fi
}
command -v wine >/dev/null || install_debs wine64 wine
command -v Xvfb >/dev/null || install_debs xvfb
command -v xdotool >/dev/null || install_debs xdotool
command -v import >/dev/null || install_debs imagemagick
command -v unzip >/dev/null || install_debs unzip
command -v x86_64-w64-mingw32-gcc >/dev/null || install_debs mingw-w64

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
name="qdq-studio-$version-windows-x86_64"
zip="$PWD/target/packages/$name.zip"
[ -f "$zip" ] || { echo "no $zip: run packaging/windows.sh first" >&2; exit 1; }

work=$(mktemp -d)
xvfb_pid=""
cleanup() {
    [ -n "$xvfb_pid" ] && kill "$xvfb_pid" 2>/dev/null || true
    wineserver -k 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
export WINEPREFIX="$work/prefix" WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="

mkdir "$work/unpacked"
unzip -q "$zip" -d "$work/unpacked"
app="$work/unpacked/$name"
ls "$app"

echo "== Wine prefix and the bcryptprimitives shim (test only)"
cat > "$work/shim.c" <<'C'
#include <windows.h>
BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length) {
    while (length > 0) {
        ULONG chunk = length > 0x10000000 ? 0x10000000 : (ULONG)length;
        if (!SystemFunction036(data, chunk)) return FALSE;
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}
C
x86_64-w64-mingw32-gcc -shared -O2 -o "$work/bcryptprimitives.dll" "$work/shim.c" -ladvapi32
wineboot -i >/dev/null 2>&1 || true
cp "$work/bcryptprimitives.dll" "$WINEPREFIX/drive_c/windows/system32/"
# No cache shared with the host (the runtime must be found beside the exe), named as Windows
# names folders.
mkdir "$work/cache"
wine_cache=$(winepath -w "$work/cache")

win() { winepath -w "$1"; }
exe="$app/qdq-studio.exe"
run() { QDQ_STUDIO_CACHE_DIR="$wine_cache" wine "$exe" "$@" 2>"$work/stderr" | tr -d '\r'; }

echo "== --version"
run --version | tee "$work/version.txt"
grep -q "beside the executable" "$work/version.txt"
# ONNX Runtime's device discovery asks DXGI for the GPUs; Wine without a GPU driver has none,
# and says so on stderr. Windows always has DXGI, so users never see this line.
sed 's/^/stderr: /' "$work/stderr"

echo "== inspect"
run inspect "$(win assets/sample/ppocr_cls.onnx)" | tee "$work/inspect.txt" | head -5
grep -q "Conv" "$work/inspect.txt"

echo "== quantize"
run quantize --onnx_path "$(win assets/sample/ppocr_cls.onnx)" \
    --calibration_data_path "$(win assets/sample/calib.npz)" \
    -o "$(win "$work/q.onnx")" | tee "$work/quantize.txt"
[ -f "$work/q.onnx" ]

echo "== compare"
run compare --float "$(win assets/sample/ppocr_cls.onnx)" --quant "$(win "$work/q.onnx")" \
    --data "$(win assets/sample/eval.npz)" --latency_runs 2 | tee "$work/compare.txt"
run compare --float "$(win assets/sample/ppocr_cls.onnx)" --quant "$(win "$work/q.onnx")" \
    --data "$(win assets/sample/eval.npz)" --latency_runs 0 --json >"$work/windows.json"

echo "== the same on the Linux build"
cargo build --release --locked -q
target/release/qdq-studio quantize --onnx_path assets/sample/ppocr_cls.onnx \
    --calibration_data_path assets/sample/calib.npz -o "$work/linux.onnx" >/dev/null
target/release/qdq-studio compare --float assets/sample/ppocr_cls.onnx --quant "$work/linux.onnx" \
    --data assets/sample/eval.npz --latency_runs 0 --json >"$work/linux.json"
python3 - "$work/windows.json" "$work/linux.json" <<'PY'
import json, sys
windows, linux = (json.load(open(p))["outputs"][0]["sqnr_db"] for p in sys.argv[1:])
print(f"output SQNR: Windows build {windows:.2f} dB, Linux build {linux:.2f} dB")
assert abs(windows - linux) < 0.01, "the Windows build quantizes differently"
PY
if grep -h '\\\\?\\' "$work"/*.txt; then
    echo "a path is shown in the verbatim \\\\?\\ form" >&2
    exit 1
fi

echo "== the studio under Xvfb"
display=":$((90 + RANDOM % 100))"
Xvfb "$display" -screen 0 1440x900x24 >/dev/null 2>&1 &
xvfb_pid=$!
sleep 2
QDQ_STUDIO_CACHE_DIR="$wine_cache" DISPLAY="$display" wine "$exe" >/dev/null 2>&1 &
studio_pid=$!
for _ in $(seq 1 60); do
    if DISPLAY="$display" xdotool search --name "qdq-studio" >/dev/null 2>&1; then break; fi
    sleep 1
done
DISPLAY="$display" xdotool search --name "qdq-studio" >/dev/null
sleep 8
shot="$PWD/target/packages/windows-studio.png"
DISPLAY="$display" import -window root "$shot"
echo "studio screenshot: $shot"
kill "$studio_pid" 2>/dev/null || true
wait "$studio_pid" 2>/dev/null || true
echo "Windows package smoke test passed"
