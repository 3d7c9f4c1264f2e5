"""A trained decoder language model for the LLM benchmark, made here from text that ships with
Python, so that the benchmark measures quantization on real trained weights without a download.

The model is a small Llama-shaped decoder over bytes: RMSNorm, rotary position embeddings
computed in the graph (Cos/Sin, rotate-half by Slice/Neg/Concat), causal softmax attention,
SwiGLU MLP, untied output head. It is trained on the standard library's Python sources
(byte level, fixed seed) and exported to ONNX (opset 17, TorchScript exporter: plain ONNX ops,
as an LLM exported for ONNX Runtime has them). The export is cached under
target/bench-data/llm, keyed by the hash of this file and corpus.py: change the model or the training and it is
made again.

Usage: python train.py OUT_DIR  (writes decoder.onnx)
"""
import hashlib
import math
import pathlib
import sys

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from corpus import SEQUENCE, corpus, windows  # noqa: E402

WIDTH, HEADS, LAYERS, HIDDEN = 128, 4, 4, 344
STEPS, BATCH, SEED = 1500, 32, 0


class RmsNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = RmsNorm(WIDTH), RmsNorm(WIDTH)
        self.q = nn.Linear(WIDTH, WIDTH, bias=False)
        self.k = nn.Linear(WIDTH, WIDTH, bias=False)
        self.v = nn.Linear(WIDTH, WIDTH, bias=False)
        self.o = nn.Linear(WIDTH, WIDTH, bias=False)
        self.gate = nn.Linear(WIDTH, HIDDEN, bias=False)
        self.up = nn.Linear(WIDTH, HIDDEN, bias=False)
        self.down = nn.Linear(HIDDEN, WIDTH, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        h = self.norm1(x)
        split = lambda y: y.view(b, t, HEADS, WIDTH // HEADS).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        scores = q @ k.transpose(-1, -2) / math.sqrt(WIDTH // HEADS) + mask
        attention = torch.softmax(scores, dim=-1) @ v
        x = x + self.o(attention.transpose(1, 2).reshape(b, t, WIDTH))
        h = self.norm2(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(256, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = RmsNorm(WIDTH)
        self.head = nn.Linear(WIDTH, 256, bias=False)
        dim = WIDTH // HEADS
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, dim, 2).float() / dim))

    def forward(self, ids):
        t = ids.shape[1]
        positions = torch.arange(t, dtype=torch.float32)
        freqs = positions[:, None] * self.inv_freq[None, :]
        angles = torch.cat([freqs, freqs], dim=-1)
        cos, sin = torch.cos(angles), torch.sin(angles)
        mask = torch.triu(torch.full((t, t), -1e4), diagonal=1)
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, cos, sin, mask)
        return self.head(self.norm(x))


def train(model, data):
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, 3e-3, total_steps=STEPS, pct_start=0.1)
    for step in range(STEPS):
        starts = rng.integers(0, len(data) - SEQUENCE - 1, BATCH)
        chunk = torch.from_numpy(np.stack([data[s : s + SEQUENCE + 1] for s in starts]).astype(np.int64))
        logits = model(chunk[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, 256), chunk[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
        if step % 250 == 0 or step == STEPS - 1:
            print(f"  step {step:5d}  loss {loss.item():.3f}", flush=True)


def main():
    out = pathlib.Path(sys.argv[1])
    here = pathlib.Path(__file__).parent
    key = hashlib.sha256(b"".join((here / f).read_bytes() for f in ("train.py", "corpus.py"))).hexdigest()[:16]
    stamp = out / "trained.key"
    if stamp.exists() and stamp.read_text() == key:
        return
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    model = Decoder()
    train_bytes, held_bytes = corpus()
    print(f"training a {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M-parameter byte decoder "
          f"on {len(train_bytes) / 1e6:.1f} MB of the standard library ({STEPS} steps)")
    train(model, train_bytes)
    model.eval()
    example = torch.from_numpy(windows(held_bytes, 1, 1))
    torch.onnx.export(model, (example,), str(out / "decoder.onnx"), input_names=["input_ids"],
                      output_names=["logits"], dynamic_axes={"input_ids": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=17, dynamo=False)
    stamp.write_text(key)


if __name__ == "__main__":
    main()
