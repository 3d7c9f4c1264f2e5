#!/usr/bin/env bash
# Sensitivity scan benchmark: the per-variant method (each variant quantized and opened in a
# session of its own, `sensitivity --exact`) beside the switchable model (one model, gates per
# variant) on the bundled sample and PP-OCR rec, in one run, with ratios and the agreement of
# the figures. Run on demand: bash benches/sensitivity/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source benches/venv.sh
"$VENV/bin/python" benches/sensitivity/bench.py --binary target/release/qdq-studio "$@"
