#!/usr/bin/env bash
# Large-model benchmark: a 1.1B-parameter Llama-shaped decoder (4.4 GB of external float32
# weights) through inspect, calibrate, int8 and int4 quantize and compare, side by side with
# onnxruntime's quantize_static and MatMulNBitsQuantizer, with wall time and peak RSS; then
# the studio (headless) through open, calibrate and quantize & compare on the same model.
# Needs about 20 GB of disk and 16 GB of memory. Run on demand: bash benches/large_model/run.sh
# (--layers 2 for a quick look).
set -euo pipefail
cd "$(dirname "$0")/../.."
source benches/venv.sh
layers=22
args=("$@")
for i in "${!args[@]}"; do
    if [[ "${args[$i]}" == "--layers" ]]; then layers="${args[$((i + 1))]}"; fi
done
status=0
"$VENV/bin/python" benches/large_model/bench.py --binary target/release/qdq-studio "$@" || status=$?
echo
cargo bench --bench studio -- --large "target/bench-data/llama-${layers}l" || status=$?
exit $status
