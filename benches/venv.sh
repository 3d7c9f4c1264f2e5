# Sourced by the benchmark scripts: a venv with onnxruntime 1.31.1 (the reference quantizer)
# and the release binary. Sets VENV.
VENV=target/bench-venv
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet "onnxruntime==1.31.1" "onnx==1.23.2" numpy
fi
cargo build --release --quiet
