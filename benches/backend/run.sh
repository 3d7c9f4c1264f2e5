#!/usr/bin/env bash
# ONNX's backend-test models (149, from the pinned onnx wheel) through `qdq-studio quantize`:
# how many quantize, and every refusal's reason. Run on demand:
#   bash benches/backend/run.sh [--verbose]
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --quiet
python3 benches/backend/bench.py --binary target/release/qdq-studio "$@"
