#!/usr/bin/env bash
# Large-model benchmark: a 1.1B-parameter Llama-shaped decoder (4.4 GB of external float32
# weights) through inspect, calibrate, int8 and int4 quantize and compare, side by side with
# onnxruntime's quantize_static and MatMulNBitsQuantizer, with wall time and peak RSS.
# Needs about 20 GB of disk and 16 GB of memory. Run on demand: bash benches/large_model/run.sh
# (--layers 2 for a quick look).
set -euo pipefail
cd "$(dirname "$0")/../.."
source benches/venv.sh
"$VENV/bin/python" benches/large_model/bench.py --binary target/release/qdq-studio "$@"
