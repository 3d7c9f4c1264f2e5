#!/usr/bin/env bash
# Transformer INT8 benchmark: a trained sentence transformer (paraphrase-MiniLM-L3-v2, from its
# pinned PyPI wheel) quantized by qdq-studio (default, --no_saturation_guard, --no_auto_precision) and by
# onnxruntime's quantize_static on the same token data; mean sentence-embedding cosine to the
# float model and latency, side by side. Run on demand: bash benches/transformer/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source benches/venv.sh
"$VENV/bin/python" benches/transformer/bench.py --binary target/release/qdq-studio "$@"
