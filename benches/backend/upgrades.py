"""Models older than opset 7 among ONNX's backend-test models, as qdq-studio upgrades them.

Each such model (from the `pytorch-converted` and `pytorch-operator` sets unpacked by
bench.py) is written out by `qdq-studio preprocess` (which loads it, upgrading it to opset 7
in memory, and saves it), run in ONNX Runtime on its `test_data_set_0` inputs, and compared
with the outputs ONNX recorded there. Needs onnx, onnxruntime and numpy (benches/venv.sh).
"""
import argparse
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from targets import Targets  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORK = ROOT / "target" / "bench-data" / "onnx-backend"


def opset(model):
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def tensors(folder, prefix):
    return [numpy_helper.to_array(onnx.load_tensor(str(f)))
            for f in sorted(folder.glob(f"{prefix}_*.pb"))]


def worst_difference(path, data):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {i.name: x for i, x in zip(session.get_inputs(), tensors(data, "input"))}
    worst = 0.0
    for got, want in zip(session.run(None, feed), tensors(data, "output")):
        if not np.array_equal(np.isnan(got), np.isnan(want)):
            return float("inf")
        if got.size:
            worst = max(worst, float(np.nanmax(np.abs(got.astype(np.float64) - want))))
    return worst


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    ort.set_default_logger_severity(3)
    checked, wrong = 0, []
    with tempfile.TemporaryDirectory() as tmp:
        for model in sorted(WORK.glob("*/*/model.onnx")):
            version = opset(onnx.load(str(model), load_external_data=False))
            data = model.parent / "test_data_set_0"
            if version is None or version >= 7 or not data.is_dir():
                continue
            out = pathlib.Path(tmp) / f"{model.parent.name}.onnx"
            done = subprocess.run([args.binary, "preprocess", "--onnx_path", str(model),
                                   "-o", str(out)], capture_output=True, text=True)
            checked += 1
            if done.returncode != 0:
                wrong.append((model.parent.name, done.stderr.strip()[-200:]))
                continue
            try:
                worst = worst_difference(out, data)
            except Exception as e:  # an upgraded model ONNX Runtime refuses is a failure
                wrong.append((model.parent.name, str(e)[:200]))
                continue
            if worst > 1e-3:
                wrong.append((model.parent.name, f"outputs differ by {worst:.3g}"))
            if args.verbose:
                print(f"{model.parent.name:45} opset {version} -> 7, max |difference| {worst:.2e}")
    print(f"\n{checked} models older than opset 7 upgraded and run on their test data")
    for name, why in wrong:
        print(f"WRONG {name}: {why}")
    targets = Targets()
    targets.check("old-opset models checked", checked, ">=", 100, "{:.0f}")
    targets.check("upgraded models giving other outputs", len(wrong), "<=", 0, "{:.0f}")
    sys.exit(targets.summary())


if __name__ == "__main__":
    main()
