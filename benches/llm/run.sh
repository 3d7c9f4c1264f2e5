#!/usr/bin/env bash
# LLM INT8 benchmark: a trained decoder's perplexity change, qdq-studio beside NVIDIA ModelOpt 0.47
# and onnxruntime's quantize_static (see bench.py). Run on demand: bash benches/llm/run.sh
# The first run makes target/llm-venv (torch and ModelOpt, about 6 GB) and trains the model
# (about 7 minutes on two cores); later runs reuse both.
set -euo pipefail
cd "$(dirname "$0")/../.."
source benches/venv.sh
PEER=target/llm-venv
if ! "$PEER/bin/python" -c "import modelopt.onnx.quantization, torch" 2>/dev/null; then
  python3 -m venv "$PEER"
  "$PEER/bin/pip" install --quiet "nvidia-modelopt[onnx]==0.47.0"
  # ModelOpt pins onnxruntime-gpu 1.24, whose CPU EP it calibrates on.
  "$PEER/bin/pip" install --quiet --force-reinstall --no-deps "onnxruntime-gpu==1.24.4"
fi
"$PEER/bin/python" benches/llm/train.py target/bench-data/llm
"$VENV/bin/python" benches/llm/bench.py --binary target/release/qdq-studio --modelopt-python "$PEER/bin/python" "$@"
