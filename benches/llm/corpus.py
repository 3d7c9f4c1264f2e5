"""The LLM benchmark's text: the standard library's Python sources as bytes (numpy only, so the
benchmark venv and the training venv read the same windows)."""
import pathlib
import sysconfig

import numpy as np

SEQUENCE = 128


def corpus():
    """Training and held-out bytes: every 10th file of the standard library is held out."""
    files = sorted(pathlib.Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    train = b"".join(f.read_bytes() for i, f in enumerate(files) if i % 10)
    held = b"".join(f.read_bytes() for i, f in enumerate(files) if i % 10 == 0)
    return np.frombuffer(train, np.uint8), np.frombuffer(held, np.uint8)


def windows(data, count, seed):
    """`count` windows of SEQUENCE bytes at random places (fixed seed), as int64 token ids."""
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(data) - SEQUENCE, count)
    return np.stack([data[s : s + SEQUENCE] for s in starts]).astype(np.int64)
