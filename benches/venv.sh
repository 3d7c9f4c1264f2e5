# Sourced by the benchmark scripts: a venv with onnxruntime 1.31.1 (the reference quantizer;
# onnx-ir for its MatMulNBitsQuantizer; Pillow renders the accuracy bench's text) and the release binary. Sets VENV.
VENV=target/bench-venv
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import onnxruntime, onnx, onnx_ir, numpy, PIL" 2>/dev/null; then
  "$VENV/bin/pip" install --quiet "onnxruntime==1.31.1" "onnx==1.23.2" "onnx-ir==1.1.0" "pillow==11.3.0" numpy
fi
cargo build --release --quiet
