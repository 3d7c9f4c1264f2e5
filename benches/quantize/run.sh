#!/usr/bin/env bash
# Side-by-side quantization benchmark: output SQNR of qdq-studio's QDQ models against
# onnxruntime's quantize_static (same pre-processed model, data, settings) on PP-OCR det and
# rec and a transformer-like encoder, and the time to re-quantize a 20M-parameter model from
# cached statistics. Run on demand: bash benches/quantize/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source benches/venv.sh
"$VENV/bin/python" benches/quantize/bench.py --binary target/release/qdq-studio "$@"
