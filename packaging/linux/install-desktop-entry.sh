#!/usr/bin/env bash
# For the portable tarball: adds qdq-studio to this user's application menu (no root needed).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
apps="${XDG_DATA_HOME:-$HOME/.local/share}/applications"
icons="${XDG_DATA_HOME:-$HOME/.local/share}/icons/hicolor/256x256/apps"
mkdir -p "$apps" "$icons"
cp "$here/qdq-studio.png" "$icons/"
sed "s|^Exec=qdq-studio|Exec=$here/qdq-studio|" "$here/qdq-studio.desktop" > "$apps/qdq-studio.desktop"
echo "added $apps/qdq-studio.desktop"
