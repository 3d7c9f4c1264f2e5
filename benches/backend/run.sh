#!/usr/bin/env bash
# ONNX's backend-test models (149, from the pinned onnx wheel) through `qdq-studio quantize`:
# how many quantize, and every refusal's reason; then the models older than opset 7, as the
# tool upgrades them, run in ONNX Runtime against their recorded outputs. Run on demand:
#   bash benches/backend/run.sh [--verbose]
set -euo pipefail
cd "$(dirname "$0")/../.."
source benches/venv.sh
status=0
python3 benches/backend/bench.py --binary target/release/qdq-studio "$@" || status=$?
"$VENV/bin/python" benches/backend/upgrades.py --binary target/release/qdq-studio "$@" || status=$?
exit $status
