"""Accuracy benchmark: qdq-studio's accuracy techniques next to onnxruntime's best.

Every model is pre-processed once by `qdq-studio preprocess` (opset raised to 13 for
onnxruntime's per-channel output); onnxruntime 1.31.1's quantize_static then quantizes it in
six configurations (MinMax, Entropy, Percentile x per-tensor, per-channel weights) and
qdq-studio in its own (per-tensor and per-channel, with cross-layer equalization, bias
correction, GPTQ rounding, together), all with uint8 activations and int8 weights on the same calibration data.
Each QDQ model runs on held-out data; the figure is the SQNR (dB) of its outputs against the
float model's (for a classifier ending in Softmax, of its logits), and for the classifier the
share of samples whose class agrees.

Targets (issue #21): per-tensor weights with equalization, bias correction and GPTQ within
1 dB of per-channel;
qdq-studio's best at least as good as onnxruntime's best.
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
import onnx
import onnxruntime as ort
from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORK = ROOT / "target" / "bench-data" / "accuracy"
sys.path.insert(0, str(ROOT / "benches"))
from targets import Targets  # noqa: E402


def _quantize_bench():
    """The quantize benchmark's module (its PP-OCR download), loaded under its own name."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("quantize_bench", ROOT / "benches" / "quantize" / "bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


QUANTIZE_BENCH = _quantize_bench()
fetch, Reader, sqnr = QUANTIZE_BENCH.fetch, QUANTIZE_BENCH.Reader, QUANTIZE_BENCH.sqnr

TARGETS = Targets()

OURS = {
    "per-tensor": ["--per_tensor"],
    "per-tensor + cle": ["--per_tensor", "--cle"],
    "per-tensor + bias corr.": ["--per_tensor", "--bias_correction"],
    "per-tensor + gptq": ["--per_tensor", "--gptq"],
    "per-tensor + cle + bias corr.": ["--per_tensor", "--cle", "--bias_correction"],
    "per-tensor + cle + bias corr. + gptq": ["--per_tensor", "--cle", "--bias_correction", "--gptq"],
    "per-channel": ["--per_channel"],
    "per-channel + gptq": ["--per_channel", "--gptq"],
    "per-channel + cle + bias corr. + gptq": ["--per_channel", "--cle", "--bias_correction", "--gptq"],
    "per-tensor + layer-wise ranges": ["--per_tensor", "--layerwise_range"],
    "per-channel + layer-wise ranges": ["--per_channel", "--layerwise_range"],
    "per-tensor, all four": ["--per_tensor", "--cle", "--bias_correction", "--gptq", "--layerwise_range"],
    "per-channel + bias corr. + gptq + layer-wise": ["--per_channel", "--bias_correction", "--gptq",
                                                     "--layerwise_range"],
    "percentile per-channel + bias corr. + gptq": ["--per_channel", "--bias_correction", "--gptq",
                                                   "--calibration_method", "percentile"],
}


def logits_model(path):
    """`path`, or for a classifier ending in Softmax a copy whose first output is the Softmax's
    float input (in a QDQ model, the tensor its QuantizeLinear reads): the logits carry every
    upstream error, where the probabilities' own 8-bit step (1/255, the same for every
    configuration) and saturation would dominate the figure."""
    model = onnx.load(str(path))
    producers = {o: n for n in model.graph.node for o in n.output}

    def float_source(tensor, passing=("DequantizeLinear", "QuantizeLinear")):
        node = producers.get(tensor)
        while node is not None and node.op_type in passing:
            tensor = node.input[0]
            node = producers.get(tensor)
        return tensor, node

    # Through Q/DQ and the reshapes a classifier's head may end with.
    shaping = ("DequantizeLinear", "QuantizeLinear", "Reshape", "Identity", "Flatten", "Squeeze", "Unsqueeze")
    _, last = float_source(model.graph.output[0].name, shaping)
    if last is None or last.op_type != "Softmax":
        return path
    logits, _ = float_source(last.input[0])
    model.graph.output.insert(0, onnx.helper.make_tensor_value_info(logits, onnx.TensorProto.FLOAT, None))
    tapped = path.with_suffix(".logits.onnx")
    onnx.save(model, str(tapped))
    return tapped


def outputs(model, name, arr):
    s = ort.InferenceSession(str(logits_model(pathlib.Path(model))), providers=["CPUExecutionProvider"])
    return np.concatenate([s.run(None, {name: arr[i : i + 4]})[0] for i in range(0, len(arr), 4)])


def measure(label, model, calib, evaluation, binary, classes=False, batch=4):
    pre, name, calib_path = QUANTIZE_BENCH.prepare(label, model, calib, binary, WORK)
    ref = outputs(pre, name, evaluation)

    def score(path):
        out = outputs(path, name, evaluation)
        agree = f"   class agrees {100 * np.mean(out.argmax(-1) == ref.argmax(-1)):5.1f} %" if classes else ""
        return sqnr(ref.reshape(-1), out.reshape(-1)), agree

    print(f"{label}:")
    theirs = {}
    for method in ["MinMax", "Entropy", "Percentile"]:
        for per_channel in [False, True]:
            key = f"onnxruntime {method} {'per-channel' if per_channel else 'per-tensor'}"
            path = WORK / f"{label}.ort.{method}.{int(per_channel)}.onnx"
            start = time.time()
            with contextlib.redirect_stdout(io.StringIO()):
                quantize_static(str(pre), str(path), Reader(name, calib, batch), quant_format=QuantFormat.QDQ,
                                activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                                per_channel=per_channel, calibrate_method=getattr(CalibrationMethod, method))
            theirs[key], agree = score(path)
            print(f"  {key:58} {theirs[key]:7.2f} dB{agree}   ({time.time() - start:.0f} s)")
    ours = {}
    for key, flags in OURS.items():
        path = WORK / f"{label}.ours.{key.replace(' ', '').replace('+', '_')}.onnx"
        start = time.time()
        subprocess.run([binary, "quantize", "--onnx_path", str(pre), "--calibration_data_path", str(calib_path),
                        "--batch_size", str(batch), "-o", str(path), *flags], check=True, capture_output=True)
        ours[key], agree = score(path)
        print(f"  qdq-studio {key:47} {ours[key]:7.2f} dB{agree}   ({time.time() - start:.0f} s)")
    TARGETS.check(f"{label}: per-tensor + cle + bias corr. + gptq - per-channel (dB)",
                  ours["per-tensor + cle + bias corr. + gptq"] - ours["per-channel"], ">=", -1.0, "{:+.2f}")
    TARGETS.check(f"{label}: qdq-studio best - onnxruntime best (dB)",
                  max(ours.values()) - max(theirs.values()), ">=", 0.0, "{:+.2f}")


def documents(rng, n, h, w):
    """Synthetic text-line images (dark strokes on paper), normalized as PP-OCR expects."""
    imgs = np.full((n, 3, h, w), 0.9, np.float32)
    for i in range(n):
        for _ in range(max(4, h * w // 3000)):
            y, x0 = rng.integers(0, h - 6), rng.integers(0, max(1, w - 60))
            imgs[i, :, y : y + 5, x0 : x0 + rng.integers(10, 60)] = rng.uniform(0.0, 0.3)
    return ((imgs + rng.normal(0, 0.02, imgs.shape).astype(np.float32) - 0.5) / 0.5).astype(np.float32)


def main():
    logging.getLogger().setLevel(logging.ERROR)
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--models", default="sample,ppocr_rec,ppocr_det")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    models = args.models.split(",")
    if "sample" in models:
        calib = np.load(ROOT / "assets" / "sample" / "calib.npz")
        evaluation = np.load(ROOT / "assets" / "sample" / "eval.npz")
        measure("sample", ROOT / "assets" / "sample" / "ppocr_cls.onnx", calib[calib.files[0]],
                evaluation[evaluation.files[0]], args.binary, classes=True)
    # Drawn in one order whatever is measured, so a model gets the same data alone or not.
    rec_data = documents(rng, 16, 48, 320), documents(rng, 8, 48, 320)
    det_data = documents(rng, 16, 256, 256), documents(rng, 8, 256, 256)
    if "ppocr_rec" in models:
        measure("ppocr_rec", fetch("ch_PP-OCRv4_rec_infer.onnx"), *rec_data, args.binary)
    if "ppocr_det" in models:
        measure("ppocr_det", fetch("ch_PP-OCRv4_det_infer.onnx"), *det_data, args.binary)
    sys.exit(TARGETS.summary())


if __name__ == "__main__":
    main()
