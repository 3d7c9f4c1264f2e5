"""Calibration benchmark: onnxruntime 1.31.1's calibrators vs `qdq-studio calibrate`.

For each model (PP-OCR det, a real CNN from the rapidocr-onnxruntime wheel; and a small
transformer-like encoder built here) it writes a calibration .npz, then measures, each in its
own process under /usr/bin/time (wall seconds, peak RSS):
  - a plain float inference pass over the data with onnxruntime (the floor),
  - onnxruntime's MinMax, Entropy and Percentile calibration (create_calibrator + collect_data
    + compute_data, exactly what quantize_static does),
  - qdq-studio's MinMax-only run (--no_histograms), its default run (every method's statistics
    in one pass), and its onnxruntime-parity run (two passes).
Then it prints the ratios the targets are stated in.
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import zipfile

import numpy as np
import onnx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from targets import Targets  # noqa: E402
from onnx import TensorProto, helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORK = ROOT / "target" / "bench-data"

RAPIDOCR = "rapidocr-onnxruntime==1.4.4"
RAPIDOCR_SHA256 = "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf"


def fetch_det() -> pathlib.Path:
    target = WORK / "ppocr_det.onnx"
    if target.exists():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", tmp, RAPIDOCR], check=True)
        wheel = next(pathlib.Path(tmp).glob("*.whl"))
        import hashlib

        assert hashlib.sha256(wheel.read_bytes()).hexdigest() == RAPIDOCR_SHA256, "wheel digest mismatch"
        with zipfile.ZipFile(wheel) as z:
            target.write_bytes(z.read("rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"))
    return target


def make_transformer(path: pathlib.Path, layers=4, seq=128, dim=256, heads=4):
    """A BERT-like encoder: per layer, self-attention (Q/K/V/O MatMuls, Softmax) and an MLP,
    each followed by a residual Add and LayerNormalization."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []

    def weight(name, shape, scale=0.05):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(name, values, dtype=np.int64):
        inits.append(numpy_helper.from_array(np.array(values, dtype=dtype), name))
        return name

    head = dim // heads
    x = "x"
    const("split_shape", [0, 0, heads, head])
    const("merge_shape", [0, 0, dim])
    inits.append(numpy_helper.from_array(np.array(1.0 / np.sqrt(head), dtype=np.float32), "scale"))
    for l in range(layers):
        p = f"l{l}_"
        for n in ("q", "k", "v"):
            nodes.append(helper.make_node("MatMul", [x, weight(p + n + "_w", [dim, dim])], [p + n + "_mm"], name=p + n + "_proj"))
            nodes.append(helper.make_node("Reshape", [p + n + "_mm", "split_shape"], [p + n + "_r"], name=p + n + "_split"))
            perm = [0, 2, 3, 1] if n == "k" else [0, 2, 1, 3]
            nodes.append(helper.make_node("Transpose", [p + n + "_r"], [p + n + "_t"], perm=perm, name=p + n + "_t"))
        nodes.append(helper.make_node("MatMul", [p + "q_t", p + "k_t"], [p + "scores"], name=p + "qk"))
        nodes.append(helper.make_node("Mul", [p + "scores", "scale"], [p + "scaled"], name=p + "scale"))
        nodes.append(helper.make_node("Softmax", [p + "scaled"], [p + "probs"], axis=-1, name=p + "softmax"))
        nodes.append(helper.make_node("MatMul", [p + "probs", p + "v_t"], [p + "ctx"], name=p + "av"))
        nodes.append(helper.make_node("Transpose", [p + "ctx"], [p + "ctx_t"], perm=[0, 2, 1, 3], name=p + "ctx_t"))
        nodes.append(helper.make_node("Reshape", [p + "ctx_t", "merge_shape"], [p + "ctx_m"], name=p + "merge"))
        nodes.append(helper.make_node("MatMul", [p + "ctx_m", weight(p + "o_w", [dim, dim])], [p + "o"], name=p + "out_proj"))
        nodes.append(helper.make_node("Add", [x, p + "o"], [p + "res1"], name=p + "res1"))
        nodes.append(helper.make_node("LayerNormalization", [p + "res1", weight(p + "ln1_g", [dim], 0) , weight(p + "ln1_b", [dim], 0)], [p + "ln1"], axis=-1, name=p + "ln1"))
        inits[-2] = numpy_helper.from_array(np.ones(dim, np.float32), p + "ln1_g")
        nodes.append(helper.make_node("MatMul", [p + "ln1", weight(p + "fc1_w", [dim, 4 * dim])], [p + "fc1"], name=p + "fc1"))
        nodes.append(helper.make_node("Add", [p + "fc1", weight(p + "fc1_b", [4 * dim], 0.01)], [p + "fc1b"], name=p + "fc1_bias"))
        nodes.append(helper.make_node("Relu", [p + "fc1b"], [p + "act"], name=p + "act"))
        nodes.append(helper.make_node("MatMul", [p + "act", weight(p + "fc2_w", [4 * dim, dim])], [p + "fc2"], name=p + "fc2"))
        nodes.append(helper.make_node("Add", [p + "ln1", p + "fc2"], [p + "res2"], name=p + "res2"))
        nodes.append(helper.make_node("LayerNormalization", [p + "res2", weight(p + "ln2_g", [dim], 0), weight(p + "ln2_b", [dim], 0)], [p + "ln2"], axis=-1, name=p + "ln2"))
        inits[-2] = numpy_helper.from_array(np.ones(dim, np.float32), p + "ln2_g")
        x = p + "ln2"
    graph = helper.make_graph(
        nodes,
        "encoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", seq, dim])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", seq, dim])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def measure(command, label):
    out = subprocess.run(["/usr/bin/time", "-f", "TIME %e %M"] + command, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{label} failed:\n{out.stdout}\n{out.stderr}")
    line = [l for l in out.stderr.splitlines() if l.startswith("TIME ")][-1]
    seconds, kb = line.split()[1:]
    return float(seconds), int(kb) / 1024.0


ORT_SCRIPT = r"""
import sys, tempfile, pathlib, numpy as np
from onnxruntime.quantization.calibrate import CalibrationDataReader, CalibrationMethod, create_calibrator
model, data, method, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
x = np.load(data)
name = list(x.keys())[0]
arr = x[name]
class R(CalibrationDataReader):
    def __init__(self): self.it = iter([{name: arr[i:i+batch]} for i in range(0, len(arr), batch)])
    def get_next(self): return next(self.it, None)
with tempfile.TemporaryDirectory() as t:
    c = create_calibrator(model, augmented_model_path=str(pathlib.Path(t) / "a.onnx"),
                          calibrate_method=getattr(CalibrationMethod, method))
    c.collect_data(R())
    c.compute_data()
"""

PLAIN_SCRIPT = r"""
import sys, numpy as np, onnxruntime as ort
model, data, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
x = np.load(data); name = list(x.keys())[0]; arr = x[name]
o = ort.SessionOptions(); o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
s = ort.InferenceSession(model, o, providers=["CPUExecutionProvider"])
for i in range(0, len(arr), batch): s.run(None, {name: arr[i:i+batch]})
"""


def bench(label, model, data, batch, binary, targets):
    py = sys.executable
    rows = {}
    rows["float pass (onnxruntime)"] = measure([py, "-c", PLAIN_SCRIPT, str(model), str(data), str(batch)], "plain")
    for method in ("MinMax", "Entropy", "Percentile"):
        rows[f"onnxruntime {method}"] = measure([py, "-c", ORT_SCRIPT, str(model), str(data), method, str(batch)], method)
    stats = WORK / f"{label}.stats.json"
    base = [str(binary), "calibrate", "--onnx_path", str(model), "--calibration_data_path", str(data), "--batch_size", str(batch), "-o", str(stats)]
    rows["qdq-studio MinMax only"] = measure(base + ["--no_histograms"], "ours minmax")
    rows["qdq-studio all methods"] = measure(base, "ours")
    rows["qdq-studio ORT parity"] = measure(base + ["--ort_parity"], "ours parity")
    print(f"\n## {label}: {model.name}, {len(np.load(data)[list(np.load(data).keys())[0]])} samples, batch {batch}, CPU")
    print(f"{'run':32} {'seconds':>9} {'peak MB':>9}")
    for name, (s, mb) in rows.items():
        print(f"{name:32} {s:9.2f} {mb:9.0f}")
    ours_all, ours_mm = rows["qdq-studio all methods"], rows["qdq-studio MinMax only"]
    plain = rows["float pass (onnxruntime)"]
    print("ratios:")
    for method in ("Entropy", "Percentile"):
        ort_t = rows[f"onnxruntime {method}"][0]
        targets.check(f"{label}: time qdq-studio (all methods) / onnxruntime {method}", ours_all[0] / ort_t, "<=", 0.333)
        print(f"  time  qdq-studio parity        / onnxruntime {method:10} = {rows['qdq-studio ORT parity'][0] / ort_t:.3f}")
    print(f"  time  qdq-studio MinMax / onnxruntime MinMax               = {ours_mm[0] / rows['onnxruntime MinMax'][0]:.3f}")
    targets.check(f"{label}: memory qdq-studio histograms / qdq-studio MinMax", ours_all[1] / ours_mm[1], "<=", 1.5)
    for method in ("Entropy", "Percentile"):
        print(f"  memory onnxruntime {method:10} / qdq-studio all methods     = {rows[f'onnxruntime {method}'][1] / ours_all[1]:.2f}")
    targets.check(f"{label}: overhead of qdq-studio all methods over a float pass", ours_all[0] / plain[0] - 1, "<=", 0.30, "{:+.1%}")
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    n = 16 if args.quick else 64
    targets = Targets()

    det = fetch_det()
    det_data = WORK / f"det_{n}.npz"
    if not det_data.exists():
        # Document-like images: light background, dark strokes, in PP-OCR det's normalisation.
        imgs = np.full((n, 3, 320, 320), 0.9, np.float32)
        for i in range(n):
            for _ in range(40):
                y, x0 = rng.integers(0, 300), rng.integers(0, 200)
                imgs[i, :, y : y + 6, x0 : x0 + rng.integers(20, 120)] = rng.uniform(0.0, 0.3)
        imgs += rng.normal(0, 0.02, imgs.shape).astype(np.float32)
        np.savez(det_data, x=((imgs - 0.5) / 0.5).astype(np.float32))
    bench("cnn", det, det_data, 4, args.binary, targets)

    enc = WORK / "encoder.onnx"
    if not enc.exists():
        make_transformer(enc)
    enc_data = WORK / f"encoder_{n}.npz"
    if not enc_data.exists():
        np.savez(enc_data, x=rng.standard_normal((n * 2, 128, 256)).astype(np.float32))
    bench("transformer", enc, enc_data, 8, args.binary, targets)
    sys.exit(targets.summary())


if __name__ == "__main__":
    main()
