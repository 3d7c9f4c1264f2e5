"""onnxruntime-genai model folders in, runnable folders out: a tiny random Llama made here with
transformers (and a byte-level BPE tokenizer trained here on the standard library's text),
exported by onnxruntime-genai 0.18's own model builder (fp32, CPU: GroupQueryAttention,
SkipSimplifiedLayerNormalization, rotary embeddings, past keys/values), then quantized by
qdq-studio from the folder, one output folder per variant:
- int4 with no data (random token data, the seeds' default),
- int4 awq_lite and rtn_dq, and int8, calibrated on text (--calibration_text, tokenized
  with the folder's own tokenizer.json).
Each output folder must load and generate tokens in onnxruntime-genai as written: no file
copied by hand. Target: every folder generates.

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
    return targets.summary()


if __name__ == "__main__":
    sys.exit(main())
