#!/usr/bin/env bash
# Installs the .deb with dpkg into an empty folder root and starts the installed studio under
# Xvfb with no network (a fresh network namespace), an empty home and an empty cache: it must
# find the bundled ONNX Runtime and show the studio on the bundled sample model.
# Run after packaging/linux.sh. Needs root (dpkg --root, unshare -n), Xvfb, xdotool, ImageMagick.
set -euo pipefail
cd "$(dirname "$0")/.."
deb="$(ls target/packages/qdq-studio_*_amd64.deb | head -1)"
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
root="$work/root"
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/triggers"
touch "$root/var/lib/dpkg/status"
echo "== dpkg -i into $root"
# The root is empty: the system libraries the package depends on are the host's.
dpkg --root="$root" --force-depends --force-script-chrootless --log=/dev/null -i "$deb"
bin="$root/usr/bin/qdq-studio"
test -x "$bin"
ls "$root/usr/lib/qdq-studio/" "$root/usr/share/applications/qdq-studio.desktop" \
    "$root/usr/share/icons/hicolor/256x256/apps/qdq-studio.png"

home="$work/home"
mkdir -p "$home"
isolated() {
    env -i PATH=/usr/bin:/bin HOME="$home" XDG_CACHE_HOME="$home/.cache" \
        XDG_CONFIG_HOME="$home/.config" XDG_DATA_HOME="$home/.local/share" \
        DISPLAY="${DISPLAY:-}" QDQ_STUDIO_LOG=info unshare -n "$@"
}

echo "== the CLI finds the bundled runtime, offline"
isolated "$bin" --version
isolated "$bin" runtime --no-download | tee "$work/runtime.txt"
grep -q "beside the executable" "$work/runtime.txt"

echo "== the studio starts on the sample, offline"
display=:97
Xvfb "$display" -screen 0 1440x900x24 >/dev/null 2>&1 &
sleep 2
DISPLAY="$display" isolated "$bin" >"$work/studio.log" 2>&1 &
studio=$!
for _ in $(seq 1 60); do
    if DISPLAY="$display" xdotool search --name "qdq-studio" >/dev/null 2>&1; then break; fi
    sleep 1
done
sleep 6
DISPLAY="$display" xdotool search --name "qdq-studio" >/dev/null
kill -0 "$studio"
shot="target/packages/installed-studio.png"
DISPLAY="$display" import -window root "$shot"
echo "studio running from the package; screenshot: $shot"
kill "$studio"
cat "$work/studio.log" | tail -5
