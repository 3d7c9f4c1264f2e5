#!/usr/bin/env bash
# Takes the README's screenshots of the studio on the bundled sample: the graph (Calibration
# tab), Histograms after calibrating, Results after quantize & compare, Sensitivity after a
# scan; at 1024×700 and 1600×1000, dark and light. Needs Xvfb, xdotool and ImageMagick
# (apt-get install xvfb xdotool imagemagick) and a release build (cargo build --release).
# Run from the repository root: bash assets/screenshots/make.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
binary=target/release/qdq-studio
out=assets/screenshots
display=:93
state=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$state"' EXIT

# Menu positions in pixels (egui's menu bar at scale 1, the same at every window size).
quantize_menu=(68 11); scan_item=(95 78)
view_menu=(155 11); light_item=(178 189); dark_item=(178 210)

click() { xdotool mousemove "$1" "$2" click 1; sleep 0.6; }
shot() { import -window root "$state/shot.png"; convert "$state/shot.png" -colors 256 "PNG8:$out/$1.png"; }

for size in 1024x700 1600x1000; do
  for theme in dark light; do
    Xvfb "$display" -screen 0 "${size}x24" >/dev/null 2>&1 &
    xvfb=$!
    sleep 1
    # A fresh settings folder: no remembered panel widths or theme.
    rm -rf "$state/data"
    DISPLAY=$display XDG_DATA_HOME="$state/data" "$binary" >"$state/log" 2>&1 &
    studio=$!
    sleep 4
    export DISPLAY=$display
    window=$(xdotool search --name qdq-studio | head -1)
    # The whole screen (there is no window manager to maximise it).
    xdotool windowmove "$window" 0 0 windowsize "$window" "${size%x*}" "${size#*x}"
    sleep 1
    xdotool windowfocus "$window" 2>/dev/null || true
    click "${view_menu[@]}"
    if [ "$theme" = light ]; then click "${light_item[@]}"; else click "${dark_item[@]}"; fi
    name="${size}-${theme}"
    shot "$name-graph"
    click 350 200  # empty graph view: keys go to the studio, nothing selected
    xdotool key ctrl+r; sleep 15; shot "$name-histograms"
    xdotool key F5; sleep 18; shot "$name-results"
    click "${quantize_menu[@]}"; click "${scan_item[@]}"; sleep 80; shot "$name-sensitivity"
    kill "$studio" "$xvfb"; wait "$studio" "$xvfb" 2>/dev/null || true
  done
done
ls -l "$out"
