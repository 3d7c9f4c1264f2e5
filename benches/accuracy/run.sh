#!/usr/bin/env bash
# Accuracy benchmark: qdq-studio's techniques beyond onnxruntime (cross-layer equalization,
# bias correction, GPTQ rounding, layer-wise ranges) alone and together, next to onnxruntime
# 1.31.1's best quantize_static configuration (MinMax/Entropy/Percentile x per-tensor/per-channel),
# on the bundled sample, PP-OCR rec and det and MiniLM; SQNR and the task metric on held-out
# data (~20 min on 2 cores). Run on demand: bash benches/accuracy/run.sh [--models sample,minilm]
set -euo pipefail
cd "$(dirname "$0")/../.."
source benches/venv.sh
"$VENV/bin/python" benches/accuracy/bench.py --binary target/release/qdq-studio "$@"
