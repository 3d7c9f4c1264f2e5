#!/usr/bin/env bash
# onnxruntime-genai folders in and out (see bench.py). Run on demand: bash benches/genai/run.sh
# Needs target/llm-venv (torch, made by benches/llm/run.sh); makes target/genai-venv with
# onnxruntime-genai 0.18, onnxruntime 1.31.1 and transformers, which reads torch from the
# llm venv (PyPI's torch for Linux brings CUDA libraries: one copy is enough).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --quiet
LLM=target/llm-venv
if ! "$LLM/bin/python" -c "import torch" 2>/dev/null; then
  echo "target/llm-venv with torch is missing: run bash benches/llm/run.sh first" >&2
  exit 1
fi
VENV=target/genai-venv
if ! "$VENV/bin/python" -c "import onnxruntime_genai, transformers, torch, optimum.exporters.onnx" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet "onnxruntime==1.31.1" "onnxruntime-genai==0.18.0" "transformers==4.57.6" \
    "onnx==1.23.2" "onnx-ir==1.1.0" "optimum-onnx==0.1.0" numpy
  SITE=$("$VENV/bin/python" -c "import site; print(site.getsitepackages()[0])")
  echo "$PWD/$LLM/lib/python3.11/site-packages" > "$SITE/zz_llm_venv.pth"
fi
mkdir -p target/bench-data/genai
"$VENV/bin/python" benches/genai/bench.py --binary target/release/qdq-studio --work target/bench-data/genai "$@"
