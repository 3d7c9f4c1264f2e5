#!/usr/bin/env bash
# Side-by-side calibration benchmark: onnxruntime's Python calibrators (as quantize_static runs
# them) against `qdq-studio calibrate`, same model, data, batching and EP (CPU), in one run.
# Prints time and peak RSS of each and the ratios. Run on demand:
#   bash benches/calibration/run.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/../.."
source benches/venv.sh
"$VENV/bin/python" benches/calibration/bench.py --binary target/release/qdq-studio "$@"
