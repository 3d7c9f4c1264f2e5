"""Large-model benchmark: a 1.1B-parameter Llama-shaped decoder with external data, through
qdq-studio and onnxruntime 1.31.1 side by side in one run.

The model (built once into target/bench-data/llama-1.1b, cached): 22 layers, hidden 2048,
32 query and 4 key/value heads (grouped-query attention: K and V expanded to 32 heads), a
SwiGLU MLP of 5632, vocabulary 32000, RMSNorm written out in standard ops, random weights
(N(0, 0.02)), float32, every weight in one external data file at 64 KiB-aligned offsets
(4.4 GB), as Optimum and ONNX Runtime GenAI export them. No rotary embedding and no causal
mask: they add no weights and nothing the quantizer treats differently.

Steps and what they are measured against:
- inspect: `qdq-studio inspect` against `onnx.load(load_external_data=False)` plus an op count;
- calibrate, then int8 quantize from the statistics: against `quantize_static` (QDQ,
  per-channel, MinMax, use_external_data_format=True), which calibrates inside;
- int4 quantize: `--quantize_mode int4` (block 128, symmetric) against `MatMulNBitsQuantizer`
  (block 128, symmetric);
- compare: the int8 model against the float one on the calibration data (no counterpart).
Each step is a separate process; wall time and peak RSS come from /usr/bin/time.

Targets: inspect < 3 s; every step's peak RSS <= 1.2 x weight bytes + 1 GB; int4 quantize
no slower than onnxruntime's.

Run on demand: bash benches/large_model/run.sh [--layers N] (fewer layers for a quick look).
"""
import argparse
import pathlib
import subprocess
import sys
import textwrap
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benches"))
from targets import Targets  # noqa: E402

TARGETS = Targets()
HIDDEN, HEADS, KV_HEADS, FFN, VOCAB = 2048, 32, 4, 5632, 32000
HEAD = HIDDEN // HEADS
ALIGN = 1 << 16
SAMPLES, SEQ = 8, 32


class ExternalWriter:
    """Streams weights into one data file and returns initializers that reference it."""

    def __init__(self, folder, name):
        self.name = name
        self.file = open(folder / name, "wb")
        self.offset = 0
        self.bytes = 0
        self.rng = np.random.default_rng(0)

    def tensor(self, name, array):
        pad = (-self.offset) % ALIGN
        self.file.write(b"\0" * pad)
        self.offset += pad
        data = np.ascontiguousarray(array).tobytes()
        self.file.write(data)
        tensor = TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(array.dtype), dims=array.shape)
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", self.name), ("offset", str(self.offset)), ("length", str(len(data)))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        self.offset += len(data)
        self.bytes += len(data)
        return tensor

    def random(self, name, shape):
        return self.tensor(name, self.rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02))


def build(folder: pathlib.Path, layers: int) -> pathlib.Path:
    """Writes model.onnx and model.onnx_data into `folder` (skipped when already there)."""
    path = folder / "model.onnx"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    w = ExternalWriter(folder, "model.onnx_data")
    nodes, inits = [], []

    def const(name, values, dtype=np.int64):
        inits.append(numpy_helper.from_array(np.array(values, dtype=dtype), name))
        return name

    def node(op, inputs, output, **attrs):
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def weight(name, shape):
        inits.append(w.random(name, shape))
        return name

    def rms_norm(x, p):
        inits.append(w.tensor(p + "_g", np.ones(HIDDEN, np.float32)))
        sq = node("Mul", [x, x], p + "_sq")
        mean = node("ReduceMean", [sq], p + "_mean", axes=[-1], keepdims=1)
        root = node("Sqrt", [node("Add", [mean, "eps"], p + "_eps")], p + "_root")
        return node("Mul", [node("Div", [x, root], p + "_div"), p + "_g"], p + "_out")

    def heads(x, n, p, perm):
        split = node("Reshape", [x, f"split_{n}"], p + "_split")
        return node("Transpose", [split], p + "_t", perm=perm)

    def repeat_kv(x, p, merge):
        wide = node("Expand", [node("Unsqueeze", [x, "axis2"], p + "_u"), "kv_repeat"], p + "_x")
        return node("Reshape", [wide, merge], p + "_rep")

    const("split_32", [0, 0, HEADS, HEAD])
    const("split_4", [0, 0, KV_HEADS, HEAD])
    const("merge", [0, 0, HIDDEN])
    const("axis2", [2])
    const("kv_repeat", [1, 1, HEADS // KV_HEADS, 1, 1])
    const("k_heads", [0, HEADS, HEAD, -1])
    const("v_heads", [0, HEADS, -1, HEAD])
    const("eps", 1e-5, np.float32)
    const("scale", 1.0 / np.sqrt(HEAD), np.float32)
    x = node("Gather", [weight("embed", [VOCAB, HIDDEN]), "input_ids"], "embed_out")
    for layer in range(layers):
        p = f"l{layer}_"
        h = rms_norm(x, p + "attn_norm")
        q = heads(node("MatMul", [h, weight(p + "q_w", [HIDDEN, HIDDEN])], p + "q"), 32, p + "q", [0, 2, 1, 3])
        k = heads(node("MatMul", [h, weight(p + "k_w", [HIDDEN, KV_HEADS * HEAD])], p + "k"), 4, p + "k", [0, 2, 3, 1])
        v = heads(node("MatMul", [h, weight(p + "v_w", [HIDDEN, KV_HEADS * HEAD])], p + "v"), 4, p + "v", [0, 2, 1, 3])
        k, v = repeat_kv(k, p + "k", "k_heads"), repeat_kv(v, p + "v", "v_heads")
        scores = node("Mul", [node("MatMul", [q, k], p + "qk"), "scale"], p + "scaled")
        probs = node("Softmax", [scores], p + "probs", axis=-1)
        ctx = node("Transpose", [node("MatMul", [probs, v], p + "ctx")], p + "ctx_t", perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, "merge"], p + "ctx_m")
        x = node("Add", [x, node("MatMul", [ctx, weight(p + "o_w", [HIDDEN, HIDDEN])], p + "o")], p + "res1")
        h = rms_norm(x, p + "mlp_norm")
        gate = node("MatMul", [h, weight(p + "gate_w", [HIDDEN, FFN])], p + "gate")
        act = node("Mul", [gate, node("Sigmoid", [gate], p + "sig")], p + "silu")
        up = node("MatMul", [h, weight(p + "up_w", [HIDDEN, FFN])], p + "up")
        down = node("MatMul", [node("Mul", [act, up], p + "swiglu"), weight(p + "down_w", [FFN, HIDDEN])], p + "down")
        x = node("Add", [x, down], p + "res2")
    logits = node("MatMul", [rms_norm(x, "final_norm"), weight("lm_head", [HIDDEN, VOCAB])], "logits")
    w.file.close()
    graph = helper.make_graph(
        nodes,
        "llama",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info(logits, TensorProto.FLOAT, ["batch", "seq", VOCAB])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    staged = folder / "model.onnx.partial"
    staged.write_bytes(model.SerializeToString())
    onnx.checker.check_model(str(staged))
    staged.rename(path)
    return path


WARM = []


def warm():
    """Reads the weights once so every step starts with them in the page cache (the step
    before may have pushed them out)."""
    for path in WARM:
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass


def measure(label, command):
    """Runs `command` under /usr/bin/time, weights warm: (wall seconds, peak RSS in bytes)."""
    warm()
    started = time.perf_counter()
    out = subprocess.run(["/usr/bin/time", "-f", "RSS %M"] + command, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if out.returncode != 0:
        sys.exit(f"{label} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
    kib = [l for l in out.stderr.splitlines() if l.startswith("RSS ")][-1].split()[1]
    print(f"  {label}: {seconds:.2f} s, peak RSS {int(kib) / 2**20:.2f} GiB", flush=True)
    return seconds, int(kib) * 1024


def python(code):
    return [sys.executable, "-c", textwrap.dedent(code)]


def setup():
    """Parses --binary and --layers, builds (or reuses) the model and marks its weights to
    keep warm: (args, folder, model path, weight bytes)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=str(ROOT / "target/release/qdq-studio"))
    parser.add_argument("--layers", type=int, default=22)
    args = parser.parse_args()
    folder = ROOT / "target" / "bench-data" / f"llama-{args.layers}l"
    model = build(folder, args.layers)
    weight_bytes = (folder / "model.onnx_data").stat().st_size
    WARM.append(folder / "model.onnx_data")
    return args, folder, model, weight_bytes


def main():
    args, folder, model, weight_bytes = setup()
    params = weight_bytes // 4
    data = folder / "calib.npz"
    rng = np.random.default_rng(1)
    np.savez(data, input_ids=rng.integers(0, VOCAB, (SAMPLES, SEQ), dtype=np.int64))
    out = folder / "out"
    for sub in ("ours_int8", "ours_int4", "ort_int8", "ort_int4"):
        (out / sub).mkdir(parents=True, exist_ok=True)
        for f in (out / sub).iterdir():
            f.unlink()
    stats = out / "stats.json"
    bin_ = args.binary
    print(f"model: {args.layers} layers, {params / 1e9:.2f}B parameters, {weight_bytes / 2**30:.2f} GiB of float32 weights; "
          f"{SAMPLES} samples of {SEQ} tokens, batch 1", flush=True)

    ours, theirs = {}, {}
    ours["inspect"] = measure("inspect", [bin_, "inspect", str(model)])
    theirs["inspect"] = measure("onnx.load", python(f"""
        import collections, onnx
        m = onnx.load({str(model)!r}, load_external_data=False)
        print(collections.Counter(n.op_type for n in m.graph.node))
    """))
    ours["calibrate"] = measure("calibrate", [bin_, "calibrate", "--onnx_path", str(model), "--calibration_data_path", str(data),
                                               "--batch_size", "1", "-o", str(stats)])
    ours["int8 quantize"] = measure("quantize int8", [bin_, "quantize", "--onnx_path", str(model), "--calibration_cache_path", str(stats),
                                                       "--use_external_data_format", "-o", str(out / "ours_int8" / "model.onnx")])
    theirs["int8 quantize"] = measure("quantize_static", python(f"""
        import numpy as np
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static
        ids = np.load({str(data)!r})["input_ids"]
        class Reader(CalibrationDataReader):
            def __init__(self):
                self.it = iter([{{"input_ids": ids[i:i + 1]}} for i in range(len(ids))])
            def get_next(self):
                return next(self.it, None)
        quantize_static({str(model)!r}, {str(out / "ort_int8" / "model.onnx")!r}, Reader(), quant_format=QuantFormat.QDQ,
                        per_channel=True, use_external_data_format=True)
    """))
    # Round to nearest, block 128, symmetric: MatMulNBitsQuantizer's algorithm (the default AWQ
    # search is timed in benches/int4).
    ours["int4 quantize"] = measure("quantize int4", [bin_, "quantize", "--onnx_path", str(model), "--quantize_mode", "int4",
                                                       "--calibration_method", "rtn_dq",
                                                       "--use_external_data_format", "-o", str(out / "ours_int4" / "model.onnx")])
    theirs["int4 quantize"] = measure("MatMulNBitsQuantizer", python(f"""
        import onnx
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
        q = MatMulNBitsQuantizer(onnx.load({str(model)!r}), block_size=128, is_symmetric=True)
        q.process()
        q.model.save_model_to_file({str(out / "ort_int4" / "model.onnx")!r}, use_external_data_format=True)
    """))
    ours["compare"] = measure("compare", [bin_, "compare", "--float", str(model), "--quant", str(out / "ours_int8" / "model.onnx"),
                                           "--data", str(data)])

    limit = 1.2 * weight_bytes + 2**30
    print(f"\n{'step':<16}{'ours s':>9}{'ours GiB':>10}{'ort s':>9}{'ort GiB':>9}{'time ratio':>12}")
    for step in ("inspect", "calibrate", "int8 quantize", "int4 quantize", "compare"):
        s, rss = ours[step]
        t = theirs.get(step)
        if step == "int8 quantize":
            # quantize_static calibrates too: set it against calibrate + quantize.
            s_total = s + ours["calibrate"][0]
            ratio = f"{t[0] / s_total:.2f}x*" if t else "-"
        else:
            ratio = f"{t[0] / s:.2f}x" if t else "-"
        ort_s = f"{t[0]:9.2f}" if t else f"{'-':>9}"
        ort_rss = f"{t[1] / 2**30:9.2f}" if t else f"{'-':>9}"
        print(f"{step:<16}{s:9.2f}{rss / 2**30:10.2f}{ort_s}{ort_rss}{ratio:>12}")
    print("(* onnxruntime's quantize_static calibrates inside: its time over our calibrate + quantize)")

    TARGETS.check("inspect (s)", ours["inspect"][0], "<=", 3.0, "{:.2f}")
    for step, (_, rss) in ours.items():
        TARGETS.check(f"{step}: peak RSS (GiB), 1.2 x weights + 1 GiB", rss / 2**30, "<=", limit / 2**30, "{:.2f}")
    TARGETS.check("int4 quantize time over MatMulNBitsQuantizer's", ours["int4 quantize"][0] / theirs["int4 quantize"][0],
                  "<=", 1.0, "{:.2f}")
    sys.exit(TARGETS.summary())


if __name__ == "__main__":
    main()
