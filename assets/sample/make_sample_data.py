"""Makes the bundled sample's calibration and evaluation sets.

The sample model is PP-OCR's text-direction classifier: it reads a text-line crop and says
whether the text is upright (class 0) or upside down (class 1). This script renders short
lines of text with Pillow's bundled font, in varied sizes, weights of ink and backgrounds,
half of them rotated by 180 degrees, and preprocesses them the way RapidOCR does (resize to
height 48 keeping the aspect ratio, width at most 192, pad right with zeros, scale to
[-1, 1], NCHW float32).

Outputs (ModelOpt's convention: a dict keyed by the model's input name, samples on axis 0):
  calib.npz       {"x": [32, 3, 48, 192]}
  eval.npz        {"x": [16, 3, 48, 192], "labels": [16] int64}
  eval_labels.npy [16] int64, 0 = upright, 1 = rotated 180 degrees (the same labels alone)

Run: python assets/sample/make_sample_data.py   (needs numpy and pillow; deterministic)
"""
import pathlib
import random

import numpy as np
from PIL import Image, ImageDraw, ImageFont

WORDS = (
    "quantize calibrate tensor model layer scale zero point range histogram entropy percentile "
    "invoice total amount date receipt order number customer address street city station "
    "2024 2025 17.50 42 0.125 ONNX QDQ INT8 FP8 CPU GPU text line sample hello world"
).split()
HEIGHT, WIDTH = 48, 192


def render(rng: random.Random) -> Image.Image:
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))
    size = rng.randint(22, 34)
    font = ImageFont.load_default(size=size)
    left, top, right, bottom = font.getbbox(text)
    pad = rng.randint(2, 8)
    background = tuple(rng.randint(170, 255) for _ in range(3))
    ink = tuple(rng.randint(0, 90) for _ in range(3))
    image = Image.new("RGB", (right - left + 2 * pad, bottom - top + 2 * pad), background)
    ImageDraw.Draw(image).text((pad - left, pad - top), text, font=font, fill=ink)
    return image


def preprocess(image: Image.Image) -> np.ndarray:
    ratio = image.width / image.height
    width = min(WIDTH, max(1, int(round(HEIGHT * ratio))))
    resized = np.asarray(image.resize((width, HEIGHT), Image.BILINEAR), dtype=np.float32)
    chw = (resized.transpose(2, 0, 1) / 255.0 - 0.5) / 0.5
    out = np.zeros((3, HEIGHT, WIDTH), dtype=np.float32)
    out[:, :, :width] = chw
    return out


def make(rng: random.Random, count: int):
    images, labels = [], []
    for i in range(count):
        image = render(rng)
        label = i % 2
        if label:
            image = image.rotate(180)
        images.append(preprocess(image))
        labels.append(label)
    return np.stack(images), np.array(labels, dtype=np.int64)


def main():
    here = pathlib.Path(__file__).parent
    rng = random.Random(20261121)
    calib, _ = make(rng, 32)
    evaluation, labels = make(rng, 16)
    np.savez_compressed(here / "calib.npz", x=calib)
    np.savez_compressed(here / "eval.npz", x=evaluation, labels=labels)
    np.save(here / "eval_labels.npy", labels)
    print("calib", calib.shape, "eval", evaluation.shape)


if __name__ == "__main__":
    main()
