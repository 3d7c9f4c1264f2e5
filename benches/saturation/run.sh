#!/usr/bin/env bash
# Which weights ONNX Runtime's CPU u8 x s8 kernels add in one saturating 16-bit lane, and, for a
# QDQ model, which of its nodes' fused kernels differ from its Q/DQ arithmetic. Run on demand:
# bash benches/saturation/run.sh [--model q.onnx --data calib.npz]
set -euo pipefail
cd "$(dirname "$0")/../.."
source benches/venv.sh
"$VENV/bin/python" benches/saturation/kernels.py "$@"
