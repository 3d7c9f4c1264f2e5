# Builds the Windows packages from a clean checkout, on Windows (x86_64, MSVC toolchain):
#   target\packages\qdq-studio-<version>-windows-x86_64.zip   (portable: exe + DLLs)
#   target\wix\qdq-studio-<version>-x86_64.msi                 (cargo-wix, WiX 3)
# The ONNX Runtime DLLs come from the app's own pinned, sha256-checked installer. With
# -Directml, the DirectML build is fetched too and offered as an optional MSI feature.
# Needs: Rust (x86_64-pc-windows-msvc), cargo-wix (`cargo install cargo-wix`), WiX Toolset 3.
param([switch]$Directml)
$ErrorActionPreference = "Stop"
Set-Location (Join-Path $PSScriptRoot "..")
$version = (cargo metadata --no-deps --format-version 1 | ConvertFrom-Json).packages[0].version
$stage = "target\packaging"
Remove-Item -Recurse -Force $stage -ErrorAction SilentlyContinue
New-Item -ItemType Directory -Force "$stage\runtime", "target\packages" | Out-Null

cargo build --release --locked
$exe = "target\release\qdq-studio.exe"

$env:QDQ_STUDIO_CACHE_DIR = (Resolve-Path $stage).Path + "\cache"
& $exe runtime install --flavor cpu
Copy-Item (Get-ChildItem "$stage\cache\runtime\cpu-*\*.dll").FullName "$stage\runtime\"
$dmlDir = ""
if ($Directml) {
    & $exe runtime install --flavor directml
    New-Item -ItemType Directory -Force "$stage\directml" | Out-Null
    Copy-Item (Get-ChildItem "$stage\cache\runtime\directml-*\*.dll").FullName "$stage\directml\"
    $dmlDir = (Resolve-Path "$stage\directml").Path
}

# Portable zip: the exe with the DLLs beside it (where the app looks first).
$name = "qdq-studio-$version-windows-x86_64"
$root = "$stage\$name"
New-Item -ItemType Directory -Force $root | Out-Null
Copy-Item $exe, "$stage\runtime\*.dll", "README.md", "assets\icon\qdq-studio.ico" $root
if ($Directml) { Copy-Item -Recurse "$stage\directml" "$root\directml" }
Compress-Archive -Force -Path $root -DestinationPath "target\packages\$name.zip"

# MSI.
cargo wix packaging\windows\main.wxs --no-build --nocapture `
    -C "-dRuntimeDir=$((Resolve-Path "$stage\runtime").Path)" `
    -C "-dDirectmlDir=$dmlDir"
Get-ChildItem target\packages, target\wix
