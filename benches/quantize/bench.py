"""Quantization benchmark: qdq-studio vs onnxruntime 1.31.1's quantize_static.

Both quantize the same model (pre-processed by `qdq-studio preprocess`, converted to opset 13
so that onnxruntime's per-channel output is valid) with uint8 activations, int8 per-channel
weights and MinMax ranges on the same calibration data; both outputs are then run on held-out
data and compared with the float model (SQNR of the outputs, in dB). Target: ours >= theirs -
0.1 dB. It also times re-quantizing a 20M-parameter model from cached statistics (target < 1 s
for the quantize step).
"""
import argparse
import pathlib
import re
import subprocess
import sys
import tempfile
import time
import zipfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper, version_converter
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORK = ROOT / "target" / "bench-data"
sys.path.insert(0, str(ROOT / "benches" / "calibration"))
from bench import make_transformer  # noqa: E402
sys.path.insert(0, str(ROOT / "benches"))
from targets import Targets  # noqa: E402

TARGETS = Targets()

RAPIDOCR = "rapidocr-onnxruntime==1.4.4"


def fetch(name):
    target = WORK / name
    if not target.exists():
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", tmp, RAPIDOCR], check=True)
            wheel = next(pathlib.Path(tmp).glob("*.whl"))
            with zipfile.ZipFile(wheel) as z:
                target.write_bytes(z.read(f"rapidocr_onnxruntime/models/{name}"))
    return target


class Reader(CalibrationDataReader):
    def __init__(self, name, arr, batch):
        self.it = iter([{name: arr[i : i + batch]} for i in range(0, len(arr), batch)])

    def get_next(self):
        return next(self.it, None)


def outputs(model, name, arr):
    s = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return np.concatenate([s.run(None, {name: arr[i : i + 4]})[0].reshape(-1) for i in range(0, len(arr), 4)])


def sqnr(ref, q):
    return 20 * np.log10(max(np.linalg.norm(ref), 1e-12) / max(np.linalg.norm(ref - q), 1e-12))


def prepare(label, model, calib, binary, work=WORK):
    """The model pre-processed by qdq-studio (opset raised to 13 for onnxruntime's per-channel
    output), its first input's name, and the calibration data saved for qdq-studio (`calib` is
    the first input's array, or a dict of arrays by input name)."""
    pre = work / f"{label}.pre.onnx"
    subprocess.run([binary, "preprocess", "--onnx_path", str(model), "-o", str(pre)], check=True, capture_output=True)
    m = onnx.load(pre)
    if m.opset_import[0].version < 13:
        onnx.save(version_converter.convert_version(m, 13), pre)
    name = onnx.load(pre).graph.input[0].name
    calib_path = work / f"{label}.calib.npz"
    np.savez(calib_path, **(calib if isinstance(calib, dict) else {name: calib}))
    return pre, name, calib_path


def compare(label, model, calib, evaluation, binary, batch=4):
    pre, name, calib_path = prepare(label, model, calib, binary)
    theirs = WORK / f"{label}.ort.qdq.onnx"
    start = time.time()
    quantize_static(str(pre), str(theirs), Reader(name, calib, batch), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True)
    ort_seconds = time.time() - start
    ours = WORK / f"{label}.ours.qdq.onnx"
    start = time.time()
    subprocess.run([binary, "quantize", "--onnx_path", str(pre), "--calibration_data_path", str(calib_path),
                    "--batch_size", str(batch), "--per_channel", "--no_preprocess", "-o", str(ours)], check=True, capture_output=True)
    our_seconds = time.time() - start
    ref = outputs(pre, name, evaluation)
    a, b = sqnr(ref, outputs(ours, name, evaluation)), sqnr(ref, outputs(theirs, name, evaluation))
    print(f"{label:12} SQNR qdq-studio {a:7.2f} dB   onnxruntime {b:7.2f} dB"
          f"   time {our_seconds:.1f} s vs {ort_seconds:.1f} s")
    TARGETS.check(f"{label}: SQNR qdq-studio - onnxruntime (dB)", a - b, ">=", -0.10, "{:+.2f}")


def big_model(path):
    """~20.5M parameters: eight 1600x1600 MatMuls with biases and Relus."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(8):
        inits.append(numpy_helper.from_array((rng.standard_normal((1600, 1600)) * 0.02).astype(np.float32), f"w{i}"))
        inits.append(numpy_helper.from_array(np.zeros(1600, np.float32), f"b{i}"))
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"add{i}"),
                  helper.make_node("Relu", [f"a{i}"], [f"r{i}"], name=f"relu{i}")]
        x = f"r{i}"
    g = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1600])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["n", 1600])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)

    def docs(n, h, w):
        imgs = np.full((n, 3, h, w), 0.9, np.float32)
        for i in range(n):
            for _ in range(max(4, h * w // 3000)):
                y, x0 = rng.integers(0, h - 6), rng.integers(0, max(1, w - 60))
                imgs[i, :, y : y + 5, x0 : x0 + rng.integers(10, 60)] = rng.uniform(0.0, 0.3)
        return ((imgs + rng.normal(0, 0.02, imgs.shape).astype(np.float32) - 0.5) / 0.5).astype(np.float32)

    compare("ppocr_det", fetch("ch_PP-OCRv4_det_infer.onnx"), docs(16, 256, 256), docs(8, 256, 256), args.binary)
    compare("ppocr_rec", fetch("ch_PP-OCRv4_rec_infer.onnx"), docs(16, 48, 320), docs(8, 48, 320), args.binary)
    enc = WORK / "encoder.onnx"
    if not enc.exists():
        make_transformer(enc)
    compare("transformer", enc, rng.standard_normal((32, 128, 256)).astype(np.float32),
            rng.standard_normal((8, 128, 256)).astype(np.float32), args.binary, batch=8)

    big = WORK / "big20m.onnx"
    if not big.exists():
        big_model(big)
    data = WORK / "big20m.npz"
    np.savez(data, x=rng.standard_normal((16, 1600)).astype(np.float32))
    stats = WORK / "big20m.stats.json"
    subprocess.run([args.binary, "calibrate", "--onnx_path", str(big), "--calibration_data_path", str(data), "--batch_size", "8", "-o", str(stats)],
                   check=True, capture_output=True)
    for run in range(2):
        start = time.time()
        out = subprocess.run([args.binary, "quantize", "--onnx_path", str(big), "--calibration_cache_path", str(stats), "-o", str(WORK / "big20m.qdq.onnx")],
                             check=True, capture_output=True, text=True).stdout
        total = time.time() - start
        timings = re.search(r"timings: (.*)", out).group(1)
        print(f"re-quantize 20.5M parameters from cached statistics (run {run + 1}): {timings}; whole command {total:.2f} s")
        quantize_ms = float(re.search(r"quantize (\d+) ms", timings).group(1))
        TARGETS.check(f"re-quantize 20.5M parameters, run {run + 1}: quantize step (ms)", quantize_ms, "<=", 1000, "{:.0f}")
    sys.exit(TARGETS.summary())


if __name__ == "__main__":
    main()
