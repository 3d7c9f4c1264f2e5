"""Int4 benchmark on the Llama-shaped decoder of benches/large_model (random N(0, 0.02)
weights, float32, external data), qdq-studio and onnxruntime 1.31.1 side by side.

Steps, each a separate process under /usr/bin/time (wall time, peak RSS):
- ours: `quantize --quantize_mode int4` with the default awq_full, awq_lite (calibrating on
  16 x 128 tokens), awq_clip, and rtn_dq; awq_lite again with `--int4_output matmulnbits`;
- onnxruntime: MatMulNBitsQuantizer (block 128, symmetric) with its default RTN, and HQQ
  where PyTorch is installed (onnxruntime's HQQ imports it).
Then every output's logits SQNR against the float model on 4 held-out sequences of 128
tokens, and the CPU latency of the float model and of our MatMulNBits form (one sequence).

Targets (the int4 issue): awq_lite on the 22-layer model <= 5 min with peak RSS <= 1.2 x
weights + 1 GiB.

Run on demand: bash benches/int4/run.sh [--layers N].
"""
import importlib.util
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benches"))
from targets import Targets  # noqa: E402

spec = importlib.util.spec_from_file_location("large_model", ROOT / "benches/large_model/bench.py")
large = importlib.util.module_from_spec(spec)
spec.loader.exec_module(large)

TARGETS = Targets()
CALIB, EVAL, SEQ = 16, 4, 128


def logits(model, ids, out):
    """Runs `model` on `ids` in a separate process (memory) and saves its logits."""
    large.measure(f"run {pathlib.Path(model).parent.name}", large.python(f"""
        import numpy as np, onnxruntime as ort
        s = ort.InferenceSession({str(model)!r}, providers=["CPUExecutionProvider"])
        ids = np.load({str(ids)!r})["input_ids"]
        np.save({str(out)!r}, np.concatenate([s.run(None, {{"input_ids": ids[i:i + 1]}})[0] for i in range(len(ids))]))
    """))
    return np.load(out)


def sqnr(reference, value):
    return 10 * np.log10((reference.astype(np.float64) ** 2).sum() / ((reference - value).astype(np.float64) ** 2).sum())


def latency(model, ids, runs=5):
    """Median CPU latency (ms) of `model` on `ids` (one row)."""
    import onnxruntime as ort
    s = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    feed = {"input_ids": ids}
    s.run(None, feed)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        s.run(None, feed)
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3


def main():
    args, folder, model, weight_bytes = large.setup()
    rng = np.random.default_rng(4)
    calib, held_out = folder / "int4_calib.npz", folder / "int4_eval.npz"
    np.savez(calib, input_ids=rng.integers(0, large.VOCAB, (CALIB, SEQ), dtype=np.int64))
    np.savez(held_out, input_ids=rng.integers(0, large.VOCAB, (EVAL, SEQ), dtype=np.int64))
    out = folder / "int4"
    print(f"model: {args.layers} layers, {weight_bytes / 4e9:.2f}B parameters ({weight_bytes / 2**30:.2f} GiB float32); "
          f"calibration {CALIB} x {SEQ} tokens, evaluation {EVAL} x {SEQ}", flush=True)

    runs = {}
    # The DQ form unless named (the CPU target's default is MatMulNBits): the rows stay comparable.
    dq = ["--int4_output", "dq"]
    ours = [("awq_full", ["--calibration_data_path", str(calib), *dq]),
            ("awq_lite", ["--calibration_method", "awq_lite", "--calibration_data_path", str(calib), *dq]),
            ("awq_clip", ["--calibration_method", "awq_clip", "--calibration_data_path", str(calib), *dq]),
            ("rtn_dq", ["--calibration_method", "rtn_dq", *dq]),
            ("awq_lite nbits", ["--calibration_method", "awq_lite", "--calibration_data_path", str(calib),
                                "--int4_output", "matmulnbits"])]
    for name, flags in ours:
        target = out / name.replace(" ", "_") / "model.onnx"
        target.parent.mkdir(parents=True, exist_ok=True)
        for f in target.parent.iterdir():
            f.unlink()
        runs[f"ours {name}"] = (target, large.measure(f"ours {name}", [args.binary, "quantize", "--onnx_path", str(model),
                                                                       "--quantize_mode", "int4", *flags,
                                                                       "--use_external_data_format", "-o", str(target)]))
    algorithms = [("RTN", "None")]
    if importlib.util.find_spec("torch"):
        algorithms.append(("HQQ", "HQQWeightOnlyQuantConfig(block_size=128, bits=4)"))
    else:
        print("  ort HQQ: skipped (onnxruntime's HQQ needs PyTorch, which the bench venv does not install)")
    for name, config in algorithms:
        target = out / f"ort_{name.lower()}" / "model.onnx"
        target.parent.mkdir(parents=True, exist_ok=True)
        for f in target.parent.iterdir():
            f.unlink()
        runs[f"ort {name}"] = (target, large.measure(f"ort {name}", large.python(f"""
            import onnx
            from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer, HQQWeightOnlyQuantConfig
            q = MatMulNBitsQuantizer(onnx.load({str(model)!r}), block_size=128, is_symmetric=True, algo_config={config})
            q.process()
            q.model.save_model_to_file({str(target)!r}, use_external_data_format=True)
        """)))

    reference = logits(model, held_out, out / "float_logits.npy")
    print(f"\n{'method':<18}{'time s':>9}{'peak GiB':>10}{'logits SQNR dB':>16}{'time / ORT RTN':>16}")
    ort_rtn = runs["ort RTN"][1][0]
    results = {}
    for name, (path, (seconds, rss)) in runs.items():
        db = sqnr(reference, logits(path, held_out, out / f"{name.replace(' ', '_')}.npy"))
        results[name] = (seconds, rss, db)
    for name, (seconds, rss, db) in results.items():
        print(f"{name:<18}{seconds:9.2f}{rss / 2**30:10.2f}{db:16.2f}{seconds / ort_rtn:16.2f}")
    ids = np.load(held_out)["input_ids"]
    # A prompt of 128 tokens (compute-bound) and one token (a decoding step: weight-bound).
    speedups = {}
    for label, feed in ((f"1 x {SEQ} tokens", ids[:1]), ("1 token", ids[:1, :1])):
        float_ms = latency(model, feed)
        nbits_ms = latency(runs["ours awq_lite nbits"][0], feed)
        speedups[label] = float_ms / nbits_ms
        print(f"CPU latency, {label}: float {float_ms:.1f} ms, MatMulNBits (accuracy level 4) {nbits_ms:.1f} ms "
              f"(speed-up {float_ms / nbits_ms:.2f}x)")

    limit = 1.2 * weight_bytes + 2**30
    seconds, rss, db = results["ours awq_lite"]
    if args.layers == 22:
        TARGETS.check("awq_lite time (s), 1.1B model", seconds, "<=", 300.0, "{:.1f}")
    TARGETS.check("awq_lite peak RSS (GiB), 1.2 x weights + 1 GiB", rss / 2**30, "<=", limit / 2**30, "{:.2f}")
    # The default (awq_full: both searches in turn) against the same bound.
    seconds, rss, _ = results["ours awq_full"]
    if args.layers == 22:
        TARGETS.check("awq_full (the default) time (s), 1.1B model", seconds, "<=", 300.0, "{:.1f}")
    TARGETS.check("awq_full peak RSS (GiB), 1.2 x weights + 1 GiB", rss / 2**30, "<=", limit / 2**30, "{:.2f}")
    for method in ("awq_full", "awq_lite", "awq_clip"):
        TARGETS.check(f"{method} logits SQNR over onnxruntime RTN's (dB)",
                      results[f"ours {method}"][2] - results["ort RTN"][2], ">=", 0.0, "{:.2f}")
    for label, speedup in speedups.items():
        TARGETS.check(f"MatMulNBits speed-up over float on CPU, {label}", speedup, ">=", 1.0, "{:.2f}")
    sys.exit(TARGETS.summary())


if __name__ == "__main__":
    main()
