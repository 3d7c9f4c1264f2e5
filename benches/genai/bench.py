"""onnxruntime-genai model folders in, runnable folders out: a tiny random Llama made here with
transformers (and a byte-level BPE tokenizer trained here on the standard library's text),
exported by onnxruntime-genai 0.18's own model builder (fp32, CPU: GroupQueryAttention,
SkipSimplifiedLayerNormalization, rotary embeddings, past keys/values), then quantized by
qdq-studio from the folder, one output folder per variant:
- int4 with no data (random token data, the seeds' default),
- int4 awq_lite and rtn_dq, and int8, calibrated on text (--calibration_text, tokenized
  with the folder's own tokenizer.json).
Each output folder must load and generate tokens in onnxruntime-genai as written: no file
copied by hand. Target: every folder generates. Then the same checkpoint exported by Optimum
(with past keys/values), quantized from its folder: each output decodes with its KV cache in
ONNX Runtime and has the tokenizer beside it.

Usage: python bench.py --binary target/release/qdq-studio --work DIR
"""
import argparse
import pathlib
import subprocess
import sys
import sysconfig
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benches"))
from targets import Targets  # noqa: E402

VOCAB = 512


def text():
    """Training and calibration text: the standard library's first Python sources."""
    files = sorted(pathlib.Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:40]
    return "\n".join(f.read_text(errors="replace") for f in files)


def checkpoint(folder, corpus):
    """A Hugging Face checkpoint: a 2-layer random Llama and a tokenizer trained on `corpus`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus.splitlines(), trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>").save_pretrained(folder)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         bos_token_id=0, eos_token_id=1)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)


def generates(folder):
    """Tokens onnxruntime-genai generates from the folder as it is (greedy, 24 at most)."""
    import onnxruntime_genai as og

    model = og.Model(str(folder))
    tokenizer = og.Tokenizer(model)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=32, do_sample=False)
    generator = og.Generator(model, params)
    prompt = tokenizer.encode("def main(")
    generator.append_tokens(prompt)
    while not generator.is_done():
        generator.generate_next_token()
    return len(generator.get_sequence(0)) - len(prompt)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--work", required=True)
    args = p.parse_args()
    work = pathlib.Path(args.work)
    hf, base = work / "hf", work / "genai-fp32"
    corpus = text()
    if not (base / "genai_config.json").exists():
        checkpoint(hf, corpus)
        subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o", str(base),
                        "-p", "fp32", "-e", "cpu", "-c", str(work / "cache")], check=True, capture_output=True)
    calib = work / "calib.txt"
    calib.write_text(corpus)
    variants = {
        "int4, no data": ["--quantize_mode", "int4"],
        "int4 awq_lite, text": ["--quantize_mode", "int4", "--calibration_method", "awq_lite"],
        "int4 rtn_dq": ["--quantize_mode", "int4", "--calibration_method", "rtn_dq"],
        "int8, text": [],
    }
    targets = Targets()
    print(f"fp32 builder folder: {generates(base)} tokens generated")
    for i, (name, extra) in enumerate(variants.items()):
        out = work / f"out{i}" / "model.onnx"
        data = [] if "no data" in name or "rtn_dq" in name else ["--calibration_text", str(calib), "--seq_len", "128",
                                                                 "--text_samples", "16"]
        t = time.perf_counter()
        done = subprocess.run([args.binary, "quantize", "--onnx_path", str(base), *extra, *data, "-o", str(out)],
                              capture_output=True, text=True)
        seconds = time.perf_counter() - t
        if done.returncode:
            print(f"  {name}: quantize failed: {done.stderr.strip().splitlines()[-1]}")
            targets.check(f"{name}: generates in onnxruntime-genai", 0, ">=", 1, "{}")
            continue
        try:
            tokens = generates(out.parent)
        except Exception as e:  # noqa: BLE001 (the bench reports any failure as a miss)
            print(f"  {name}: onnxruntime-genai failed: {e}")
            tokens = 0
        print(f"  {name:22} quantized in {seconds:5.1f} s; {tokens} tokens generated; "
              f"folder: {', '.join(sorted(f.name for f in out.parent.iterdir()))}")
        said = [line for line in done.stderr.splitlines() + done.stdout.splitlines()
                if line.startswith(("quantized ", "awq_", "note: ", "calibrat"))]
        for line in said:
            print(f"    {line[:160]}")
        targets.check(f"{name}: tokens generated in onnxruntime-genai", tokens, ">=", 1, "{}")
    optimum_folders(args, work, hf, calib, targets)
    return targets.summary()


def decode(folder, steps=8):
    """Greedy tokens an Optimum-style decoder (input_ids, attention_mask, position_ids,
    past_key_values.N.key/value in; logits, present.N.* out) gives in ONNX Runtime, its
    past fed back each step: the KV-cache path a generation loop runs."""
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    inputs = {i.name: i for i in session.get_inputs()}
    past = {name: np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
            for name, i in inputs.items() if name.startswith("past_key_values")}
    ids, tokens, seen = np.array([[0, 5, 9, 13]], np.int64), [], 0
    for _ in range(steps):
        feed = {"input_ids": ids, "attention_mask": np.ones((1, seen + ids.shape[1]), np.int64),
                "position_ids": np.arange(seen, seen + ids.shape[1], dtype=np.int64)[None], **past}
        out = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
        if not np.isfinite(out["logits"]).all():
            return 0
        seen += ids.shape[1]
        ids = out["logits"][:, -1:].argmax(-1).astype(np.int64)
        tokens.append(int(ids[0, 0]))
        past = {name: out[name.replace("past_key_values", "present")] for name in past}
    return len(tokens)


def optimum_folders(args, work, hf, calib, targets):
    """The same checkpoint exported by Optimum (`optimum-cli export onnx --task
    text-generation-with-past`, its tokenizer beside it), quantized from the folder: int4 with
    no data and int8 on text. Each output folder holds the configuration and tokenizer and
    decodes with its KV cache in ONNX Runtime."""
    base = work / "optimum"
    if not (base / "model.onnx").exists():
        subprocess.run([str(pathlib.Path(sys.executable).parent / "optimum-cli"), "export", "onnx", "--model",
                        str(hf), "--task", "text-generation-with-past", str(base)], check=True, capture_output=True)
    for name in ["tokenizer.json", "tokenizer_config.json"]:
        if not (base / name).exists():
            (base / name).write_bytes((hf / name).read_bytes())
    print(f"Optimum folder: {decode(base)} tokens decoded with the KV cache")
    for i, (name, extra) in enumerate({
        "Optimum int4, no data": ["--quantize_mode", "int4"],
        "Optimum int8, text": ["--calibration_text", str(calib), "--seq_len", "128", "--text_samples", "16"],
    }.items()):
        out = work / f"optimum_out{i}" / "model.onnx"
        done = subprocess.run([args.binary, "quantize", "--onnx_path", str(base), *extra, "-o", str(out)],
                              capture_output=True, text=True)
        tokens = 0 if done.returncode else decode(out.parent)
        files = sorted(f.name for f in out.parent.iterdir()) if out.parent.exists() else []
        print(f"  {name:22} {tokens} tokens decoded; folder: {', '.join(files)}")
        if done.returncode:
            print(f"    quantize failed: {done.stderr.strip().splitlines()[-1]}")
        targets.check(f"{name}: tokens decoded in ONNX Runtime", tokens, ">=", 1, "{}")
        targets.check(f"{name}: tokenizer beside the output", int("tokenizer.json" in files), ">=", 1, "{}")


if __name__ == "__main__":
    sys.exit(main())
