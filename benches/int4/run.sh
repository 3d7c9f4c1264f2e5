#!/usr/bin/env bash
# Int4 benchmark: AWQ-lite, AWQ-clip and RTN of qdq-studio against onnxruntime's
# MatMulNBitsQuantizer (RTN, HQQ) on the Llama-shaped decoder of the large-model benchmark,
# calibrated on 16 x 128 tokens: wall time, peak RSS, logits SQNR against float, and the
# MatMulNBits form's CPU latency against float. Needs about 20 GB of disk for the 22-layer
# (1.1B) model. Run on demand: bash benches/int4/run.sh (--layers 2 for a quick look).
set -euo pipefail
cd "$(dirname "$0")/../.."
source benches/venv.sh
"$VENV/bin/python" benches/int4/bench.py --binary target/release/qdq-studio "$@"
