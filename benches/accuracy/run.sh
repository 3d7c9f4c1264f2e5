#!/usr/bin/env bash
# Accuracy benchmark: qdq-studio's techniques beyond onnxruntime (cross-layer equalization,
# bias correction, GPTQ rounding) alone and together, next to onnxruntime 1.31.1's best quantize_static
# configuration (MinMax/Entropy/Percentile x per-tensor/per-channel), on the bundled sample and
# PP-OCR det and rec; output SQNR on held-out data. Run on demand: bash benches/accuracy/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source benches/venv.sh
"$VENV/bin/python" benches/accuracy/bench.py --binary target/release/qdq-studio "$@"
