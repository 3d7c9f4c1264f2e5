#!/usr/bin/env bash
# Default-path benchmark (issue #67): a plain `quantize` beside onnxruntime's quantize_static
# on PP-OCR rec, calibration beside the float pass, and graphs of 100,000 nodes (see bench.py).
# Run on demand: bash benches/default_path/run.sh [--skip_graphs] [--fan_width N]
set -euo pipefail
cd "$(dirname "$0")/../.."
source benches/venv.sh
"$VENV/bin/python" benches/default_path/bench.py --binary target/release/qdq-studio "$@"
