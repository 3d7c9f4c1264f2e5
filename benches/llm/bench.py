"""LLM benchmark: perplexity change of a trained decoder, qdq-studio beside NVIDIA ModelOpt
0.47 (`--quantize_mode int8 --calibration_method max`, CPU EP) and onnxruntime 1.31.1's
quantize_static default, on the same model, calibration data and scorer; then INT4
weight-only, every method of ours beside ModelOpt's awq_clip and rtn_dq.

The model is the byte-level Llama-shaped decoder train.py makes (RMSNorm, rotary embeddings in
the graph, causal softmax attention, SwiGLU) from the standard library's sources. Calibration:
32 windows of 128 bytes from the training files; the score: perplexity (exp of the mean
next-byte cross-entropy) over 256 held-out windows from files never trained on, each model run in
ONNX Runtime 1.31.1's CPU EP. Targets: our default's perplexity change <= ModelOpt's, and
--target tensorrt's too (the placement TensorRT runs).

ModelOpt needs torch and its own onnxruntime (1.24): it lives in target/llm-venv, which
run.sh makes; the scoring runs here, in the benchmark venv.
"""
import argparse
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORK = ROOT / "target" / "bench-data" / "llm"
sys.path.insert(0, str(ROOT / "benches"))
sys.path.insert(0, str(ROOT / "benches" / "llm"))
from corpus import corpus, windows  # noqa: E402
from targets import Targets  # noqa: E402

HELD_OUT = 256


class Reader(CalibrationDataReader):
    def __init__(self, ids):
        self.it = iter([{"input_ids": ids[i : i + 1]} for i in range(len(ids))])

    def get_next(self):
        return next(self.it, None)


def perplexity(model, ids):
    s = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    logits = np.concatenate([s.run(["logits"], {"input_ids": ids[i : i + 8]})[0] for i in range(0, len(ids), 8)])
    logits = logits[:, :-1].astype(np.float64)
    logits -= logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(logp, ids[:, 1:, None], -1).mean()
    return float(np.exp(nll))


def quantize_counts(path):
    ops = [n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node]
    return ops.count("QuantizeLinear")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--modelopt-python", required=True)
    args = p.parse_args()
    targets = Targets()
    model = WORK / "decoder.onnx"
    train_bytes, held_bytes = corpus()
    calib, held = windows(train_bytes, 32, 2), windows(held_bytes, HELD_OUT, 3)
    variants = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        np.savez(tmp / "calib.npz", input_ids=calib)
        for name, extra in [
            ("qdq-studio default (target cpu)", []),
            ("qdq-studio --target tensorrt", ["--target", "tensorrt"]),
            ("qdq-studio --target openvino", ["--target", "openvino"]),
        ]:
            out = tmp / f"ours{len(variants)}.onnx"
            t = time.perf_counter()
            subprocess.run([args.binary, "quantize", "--onnx_path", str(model), "--calibration_data_path",
                            str(tmp / "calib.npz"), *extra, "-o", str(out)], check=True, capture_output=True)
            variants[name] = (out, time.perf_counter() - t)
        out = tmp / "modelopt.onnx"
        t = time.perf_counter()
        subprocess.run([args.modelopt_python, "-m", "modelopt.onnx.quantization", "--onnx_path", str(model),
                        "--quantize_mode", "int8", "--calibration_method", "max", "--calibration_data_path",
                        str(tmp / "calib.npz"), "--calibration_eps", "cpu", "--output_path", str(out)],
                       check=True, capture_output=True)
        variants["ModelOpt 0.47 int8 max"] = (out, time.perf_counter() - t)
        out = tmp / "ort.onnx"
        t = time.perf_counter()
        quantize_static(str(model), str(out), Reader(calib), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        variants["onnxruntime quantize_static default"] = (out, time.perf_counter() - t)

        base = perplexity(model, held)
        print(f"trained byte decoder, {HELD_OUT} held-out windows of 128 bytes: float perplexity {base:.4f}")
        print(f"  {'variant':40} {'perplexity':>10} {'change':>9} {'Q nodes':>8} {'quantize':>9}")
        change = {}
        for name, (path, seconds) in variants.items():
            ppl = perplexity(path, held)
            change[name] = ppl - base
            print(f"  {name:40} {ppl:10.4f} {change[name]:+9.4f} {quantize_counts(path):8d} {seconds:8.1f}s")
        peer = change["ModelOpt 0.47 int8 max"]
        targets.check("our default: perplexity change minus ModelOpt's", change["qdq-studio default (target cpu)"] - peer,
                      "<=", 0.0, "{:+.4f}")
        targets.check("--target tensorrt: perplexity change minus ModelOpt's",
                      change["qdq-studio --target tensorrt"] - peer, "<=", 0.0, "{:+.4f}")
        int4(args, model, tmp / "calib.npz", held, base, targets)
    return targets.summary()


def int4(args, model, calib, held, base, targets):
    """INT4 weight-only (block 128) on the same model and data: every method of ours beside
    ModelOpt 0.47's awq_clip and rtn_dq. Targets (the LLM-folder issue): every int4 method's
    perplexity change <= our rtn_dq's, and the default's (awq_full) <= ModelOpt's awq_clip."""
    ours = {
        "ours default (awq_full)": [],
        "ours awq_lite": ["--calibration_method", "awq_lite"],
        "ours awq_clip": ["--calibration_method", "awq_clip"],
        "ours gptq": ["--gptq", "--calibration_method", "rtn_dq"],
        "ours rtn_dq": ["--calibration_method", "rtn_dq"],
    }
    change = {}
    print(f"  int4 weight-only, block 128: {'variant':29} {'perplexity':>10} {'change':>9} {'quantize':>9}")
    out_dir = pathlib.Path(calib).parent
    for name, extra in ours.items():
        out = out_dir / f"int4_{len(change)}.onnx"
        t = time.perf_counter()
        subprocess.run([args.binary, "quantize", "--onnx_path", str(model), "--quantize_mode", "int4",
                        "--calibration_data_path", str(calib), *extra, "-o", str(out)],
                       check=True, capture_output=True)
        change[name] = (perplexity(out, held) - base, time.perf_counter() - t)
    for method in ["awq_clip", "rtn_dq"]:
        out = out_dir / f"modelopt_{method}.onnx"
        t = time.perf_counter()
        subprocess.run([args.modelopt_python, "-m", "modelopt.onnx.quantization", "--onnx_path", str(model),
                        "--quantize_mode", "int4", "--calibration_method", method, "--calibration_data_path",
                        str(calib), "--calibration_eps", "cpu", "--output_path", str(out)],
                       check=True, capture_output=True)
        change[f"ModelOpt 0.47 {method}"] = (perplexity(out, held) - base, time.perf_counter() - t)
    for name, (delta, seconds) in change.items():
        print(f"  {'':28} {name:29} {base + delta:10.4f} {delta:+9.4f} {seconds:8.1f}s")
    rtn = change["ours rtn_dq"][0]
    for name in ours:
        targets.check(f"int4 {name}: perplexity change minus our rtn_dq's", change[name][0] - rtn,
                      "<=", 0.0, "{:+.4f}")
    targets.check("int4 default: perplexity change minus ModelOpt awq_clip's",
                  change["ours default (awq_full)"][0] - change["ModelOpt 0.47 awq_clip"][0], "<=", 0.0, "{:+.4f}")


if __name__ == "__main__":
    sys.exit(main())
