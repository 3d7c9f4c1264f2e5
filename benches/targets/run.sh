#!/usr/bin/env bash
# Deployment targets benchmark: the default INT8 model (target cpu) beside onnxruntime's own
# quantize_static default, --target cpu-avx2, MiniLM's cosine and CPU latency (see bench.py).
# Run on demand: bash benches/targets/run.sh [--models sample,ppocr_rec,ppocr_det,minilm,doc_orientation]
set -euo pipefail
cd "$(dirname "$0")/../.."
source benches/venv.sh
"$VENV/bin/python" benches/targets/bench.py --binary target/release/qdq-studio "$@"
