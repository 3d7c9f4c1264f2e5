#!/usr/bin/env bash
# Runs every fuzz target for a bounded time and prints its executions and findings.
#   fuzz/run.sh [SECONDS_PER_TARGET]   (default 300; FUZZ_TARGETS="npz quantize" for some)
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`). Seeds: fuzz/seeds/
# (the bad-input corpus and small real models; the bundled PP-OCR classifier is added for the
# loader). Working corpora go to fuzz/corpus/ and crashes to fuzz/artifacts/ (both ignored by
# git); a crash found is fixed and its input kept as a regression test under tests/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-300}"
# The quantize target opens sessions: point it at the runtime the app installed.
if [ -z "${ORT_DYLIB_PATH:-}" ]; then
    ORT_DYLIB_PATH="$(ls "${QDQ_STUDIO_CACHE_DIR:-$HOME/.cache/qdq-studio}"/runtime/cpu-*/libonnxruntime.so* 2>/dev/null | head -1)"
    export ORT_DYLIB_PATH
fi
cargo +nightly fuzz build -O
for target in ${FUZZ_TARGETS:-model_load npz recipe quantize}; do
    mkdir -p "fuzz/corpus/$target"
    seeds=()
    [ -d "fuzz/seeds/$target" ] && seeds+=("fuzz/seeds/$target")
    [ "$target" = model_load ] && cp -n assets/sample/ppocr_cls.onnx "fuzz/corpus/$target/" 2>/dev/null || true
    [ "$target" = npz ] && cp -n assets/sample/eval_labels.npy "fuzz/corpus/$target/" 2>/dev/null || true
    # The quantizer's input is a structure: let libFuzzer use long inputs (many ops) at once.
    extra=()
    [ "$target" = quantize ] && extra=(-len_control=0 -max_len=1024)
    log="fuzz/artifacts/$target.log"
    mkdir -p fuzz/artifacts
    echo "== $target ($seconds s)"
    # -rss_limit_mb: a target that needs more than 2 GB on any input is a finding too.
    cargo +nightly fuzz run -O "$target" "fuzz/corpus/$target" "${seeds[@]}" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=1048576 -timeout=20 \
        -print_final_stats=1 "${extra[@]}" >"$log" 2>&1 || echo "   !! $target stopped with a finding: see $log"
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb|SUMMARY|panicked" "$log" | sed 's/^/   /' || true
done
