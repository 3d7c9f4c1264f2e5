"""Default-path benchmark (issue #67): what a plain `quantize` costs beside onnxruntime 1.31.1's
`quantize_static`, what calibration costs beside the float pass it cannot avoid, and how both
grow with the graph.

1. PP-OCR v4 rec (converted to opset 13 once, so that onnxruntime's per-channel output is valid;
   both tools read that file) on the accuracy bench's 32 rendered text lines. Three paired runs,
   in turn: `qdq-studio quantize` with default flags, and a fresh Python process running
   `quantize_static` (QDQ, MinMax, uint8 activations, int8 per-channel weights: its default
   with per-channel on). Each is timed whole (wall, and user + system CPU), as a user runs it.
   Target: ours <= 0.5x onnxruntime's wall time (medians).
2. The float pass: an ONNX Runtime session (CPU EP, no graph optimizations, as calibration
   runs) created in this process and run on the 32 lines at batch 1. Beside it
   `qdq-studio calibrate` with every statistic (extremes and 2048-bin histograms of every
   tensor): the calibration's own time as it reports it (session, model runs, statistics).
   Target: <= 2x the float pass.
3. Graph size, no data, default flags: a MatMul then a chain of 100,000 Relus, and a MatMul
   then a fan of Relus into one Sum (`--fan_width`, 20,000 as the issue asks); the MatMul
   gives the Relus something to quantize (see `graph_model`). Beside each, the floor ONNX Runtime itself
   sets, measured in this process: creating a session whose outputs are every tensor
   (calibration must observe them) and running it once per random sample (16), and loading
   the QDQ model at ONNX Runtime's default optimizations (the check every saved model gets).
   Targets: chain <= 20 s, fan <= 10 s, and each within 1.5x the floor plus 2 s.

Run on demand: bash benches/default_path/run.sh [--skip_graphs] [--fan_width N]
"""
import argparse
import pathlib
import re
import resource
import statistics
import subprocess
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper, version_converter

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benches"))
from targets import Targets  # noqa: E402

WORK = ROOT / "target" / "bench-data" / "default_path"
TARGETS = Targets()
RANDOM_SAMPLES = 16  # what `quantize` draws without data

ORT_QUANTIZE = """
import sys
import numpy as np
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static

class Reader(CalibrationDataReader):
    def __init__(self, arrays):
        self.it = iter([{"x": arrays[i : i + 1]} for i in range(len(arrays))])
    def get_next(self):
        return next(self.it, None)

quantize_static(sys.argv[1], sys.argv[2], Reader(np.load(sys.argv[3])["x"]), quant_format=QuantFormat.QDQ,
                activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True,
                calibrate_method=CalibrationMethod.MinMax)
"""


def load_accuracy():
    import importlib.util
    spec = importlib.util.spec_from_file_location("accuracy_bench", ROOT / "benches/accuracy/bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(cmd):
    """Runs `cmd`; its wall and CPU (user + system) seconds, and its stderr and stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stderr + done.stdout


def reported_calibration(text):
    """The calibration line's seconds: total, model runs, statistics."""
    m = re.search(r"in \d+ batches \(([\d.]+) s: model ([\d.]+) s, statistics ([\d.]+) s", text)
    return tuple(float(g) for g in m.groups()) if m else None


def reported_stages(text):
    """The quantize timings line: quantize, check in ONNX Runtime, save (ms)."""
    m = re.search(r"timings: quantize (\d+) ms, check in ONNX Runtime (\d+) ms, save (\d+) ms", text)
    return tuple(float(g) / 1e3 for g in m.groups()) if m else None


def rec_quantize(binary, model, calib):
    print("\n== PP-OCR rec, 32 text lines: quantize with default flags, 3 paired runs")
    ours, theirs = [], []
    for run in range(3):
        w, c, text = timed([binary, "quantize", "--onnx_path", model, "--calibration_data_path", calib,
                            "-o", WORK / "rec.ours.onnx"])
        ours.append(w)
        calib_line = reported_calibration(text)
        print(f"  run {run + 1}: qdq-studio   {w:6.2f} s wall {c:6.2f} s CPU"
              + (f"  (calibration {calib_line[0]:.2f} s: model {calib_line[1]:.2f} s, statistics {calib_line[2]:.2f} s)"
                 if calib_line else ""))
        w, c, _ = timed([sys.executable, "-c", ORT_QUANTIZE, model, WORK / "rec.ort.onnx", calib])
        theirs.append(w)
        print(f"  run {run + 1}: onnxruntime {w:6.2f} s wall {c:6.2f} s CPU")
    ratio = statistics.median(ours) / statistics.median(theirs)
    TARGETS.check("rec: quantize wall time (x onnxruntime quantize_static)", ratio, "<=", 0.5, "{:.2f}")


def rec_calibrate(binary, model, calib, lines):
    print("\n== PP-OCR rec, 32 text lines: calibration with every statistic beside the float pass")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    passes = []
    for _ in range(3):
        started = time.perf_counter()
        session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        for i in range(len(lines)):
            session.run(None, {"x": lines[i : i + 1]})
        passes.append(time.perf_counter() - started)
    float_pass = statistics.median(passes)
    print(f"  float pass (session and 32 runs, batch 1): {float_pass:.2f} s (median of 3)")
    seconds = []
    for _ in range(3):
        _, _, text = timed([binary, "calibrate", "--onnx_path", model, "--calibration_data_path", calib,
                            "-o", WORK / "rec.stats"])
        total, runs, stats = reported_calibration(text)
        seconds.append(total)
        print(f"  qdq-studio calibrate: {total:.2f} s (model {runs:.2f} s, statistics {stats:.2f} s)")
    TARGETS.check("rec: calibrate, every statistic (x the float pass)", statistics.median(seconds) / float_pass,
                  "<=", 2.0, "{:.2f}")


def graph_model(kind, n, path):
    """A MatMul on a [1, 8] input, then a chain of `n` Relus or a fan of `n` Relus into one Sum.

    The MatMul gives the Relus a quantized input: onnxruntime quantizes a Relu only then (a
    Relu reading a float tensor stays float), and so does qdq-studio's `ort` placement; a
    chain of Relus alone has nothing to quantize. In the chain every Relu but the last folds
    into the MatMul's output range; in the fan each Relu output gets its Q/DQ pair.
    """
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul")]
    if kind == "chain":
        prev = "h"
        for i in range(n):
            out = "y" if i == n - 1 else f"t{i}"
            nodes.append(helper.make_node("Relu", [prev], [out], name=f"r{i}"))
            prev = out
    else:
        branches = [f"t{i}" for i in range(n)]
        nodes += [helper.make_node("Relu", ["h"], [t], name=f"r{i}") for i, t in enumerate(branches)]
        nodes.append(helper.make_node("Sum", branches, ["y"], name="sum"))
    io = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 8])  # noqa: E731
    weight = numpy_helper.from_array(np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32), "w")
    graph = helper.make_graph(nodes, kind, [io("x")], [io("y")], initializer=[weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


def ort_floor(path, qdq_path):
    """What ONNX Runtime alone takes: a session observing every tensor, its runs, and loading
    the QDQ model at its default optimizations."""
    model = onnx.load(path)
    known = {o.name for o in model.graph.output} | {i.name for i in model.graph.input}
    for node in model.graph.node:
        for name in node.output:
            if name not in known:
                model.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    observing = WORK / "observing.onnx"
    onnx.save(model, observing)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    started = time.perf_counter()
    session = ort.InferenceSession(str(observing), options, providers=["CPUExecutionProvider"])
    created = time.perf_counter() - started
    x = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)
    started = time.perf_counter()
    for _ in range(RANDOM_SAMPLES):
        session.run(None, {"x": x})
    runs = time.perf_counter() - started
    del session
    started = time.perf_counter()
    ort.InferenceSession(str(qdq_path), providers=["CPUExecutionProvider"])
    check = time.perf_counter() - started
    return created, runs, check


def graph_case(binary, kind, n, limit):
    print(f"\n== {kind} of {n} nodes, no data, default flags")
    path = WORK / f"{kind}{n}.onnx"
    qdq = WORK / f"{kind}{n}.qdq.onnx"
    graph_model(kind, n, path)
    wall, cpu, text = timed([binary, "quantize", "--onnx_path", path, "-o", qdq])
    calib_line = reported_calibration(text)
    stages = reported_stages(text)
    print(f"  qdq-studio: {wall:.2f} s wall, {cpu:.2f} s CPU; calibration {calib_line[0]:.2f} s (model runs "
          f"{calib_line[1]:.2f} s, statistics {calib_line[2]:.2f} s); quantize {stages[0]:.2f} s, "
          f"check in ONNX Runtime {stages[1]:.2f} s, save {stages[2]:.2f} s")
    created, runs, check = ort_floor(path, qdq)
    floor = created + runs + check
    print(f"  ONNX Runtime alone: observing session {created:.2f} s, {RANDOM_SAMPLES} runs {runs:.2f} s, "
          f"loading the QDQ model {check:.2f} s: floor {floor:.2f} s")
    TARGETS.check(f"{kind} {n}: quantize wall time (s)", wall, "<=", limit, "{:.2f}")
    TARGETS.check(f"{kind} {n}: wall time (s) within 1.5x ONNX Runtime's floor + 2 s", wall, "<=",
                  1.5 * floor + 2.0, "{:.2f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--skip_graphs", action="store_true")
    parser.add_argument("--fan_width", type=int, default=20000)
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    accuracy = load_accuracy()
    rng = np.random.default_rng(0)
    lines, _, _ = accuracy.text_lines(rng, 32)
    calib = WORK / "rec.calib.npz"
    np.savez(calib, x=lines)
    rec = WORK / "rec.opset13.onnx"
    onnx.save(version_converter.convert_version(onnx.load(accuracy.fetch("ch_PP-OCRv4_rec_infer.onnx")), 13), rec)
    print(f"onnxruntime {ort.__version__}; machine: {len(__import__('os').sched_getaffinity(0))} cores")
    rec_quantize(args.binary, rec, calib)
    rec_calibrate(args.binary, rec, calib, lines)
    if not args.skip_graphs:
        graph_case(args.binary, "chain", 100_000, 20.0)
        graph_case(args.binary, "fan", args.fan_width, 10.0)
    sys.exit(TARGETS.summary())


if __name__ == "__main__":
    main()
