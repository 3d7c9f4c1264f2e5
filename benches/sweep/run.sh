#!/usr/bin/env bash
# Technique sweep: every quantize configuration on models the accuracy bench does not hold —
# hand-built ones with realistic structure (benches/sweep/models.py: MobileNetV2-style with
# ReLU6, pre-LN ViT, Conv1d/grouped/batched-MatMul, a Gemm chain, float16 and opset-9 twins)
# and ONNX's "light" zoo models (opset 9, shipped in the onnx wheel; structure only, their
# weights are constants, so only success counts there). Prints output SQNR (dB) per model and
# configuration (n/a where quantize explains there is nothing to quantize), ERR with the error
# line where quantize or compare fails. ~2 min on 2 cores.
# Run on demand: bash benches/sweep/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source benches/venv.sh
BIN=target/release/qdq-studio
DATA=target/bench-data/sweep
"$VENV/bin/python" benches/sweep/models.py "$DATA"
CONFIGS=(
  "default:"
  "per-tensor:--per_tensor"
  "+cle:--per_tensor --cle"
  "+bias:--per_tensor --bias_correction"
  "+gptq:--per_tensor --gptq"
  "+cle+bias+gptq:--per_tensor --cle --bias_correction --gptq"
  "+mse:--per_tensor --weight_range mse"
  "pt-all:--per_tensor --cle --bias_correction --gptq --layerwise_range --weight_range mse"
  "per-channel:--per_channel"
  "pc-all:--per_channel --cle --bias_correction --gptq --layerwise_range --weight_range mse"
  "pc+smoothquant:--per_channel --smoothquant"
  "int4:--quantize_mode int4"
  "int4+gptq:--quantize_mode int4 --calibration_method rtn_dq --gptq"
)
sqnr() {
  "$BIN" compare --float "$1" --quant "$2" --data "$3" --latency_runs 0 --json 2>/dev/null |
    "$VENV/bin/python" -c "import json,sys; print('%.2f' % json.load(sys.stdin)['outputs'][0]['sqnr_db'])"
}
printf "%-12s" model
for c in "${CONFIGS[@]}"; do printf " %14s" "${c%%:*}"; done
echo
errors=()
for m in mobilenet mobilenet16 mobilenet9 vit vit16 odd dense; do
  printf "%-12s" "$m"
  for c in "${CONFIGS[@]}"; do
    name=${c%%:*}; read -r -a flags <<< "${c#*:}"
    out="$DATA/$m.q.onnx"
    if log=$("$BIN" quantize --onnx_path "$DATA/$m.onnx" --calibration_data_path "$DATA/$m.calib.npz" \
        --batch_size 8 -o "$out" "${flags[@]}" 2>&1) && value=$(sqnr "$DATA/$m.onnx" "$out" "$DATA/$m.eval.npz"); then
      printf " %14s" "$value"
    elif grep -q '^error: nothing to quantize' <<< "$log"; then
      printf " %14s" n/a   # a refusal that explains itself (int4 on a CNN: no MatMul weight)
    else
      printf " %14s" ERR
      errors+=("$m $name: $(grep -m1 '^error' <<< "$log" || echo 'compare failed')")
    fi
  done
  echo
done
LIGHT=$("$VENV/bin/python" -c "import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), 'backend/test/data/light'))")
for f in "$LIGHT"/*.onnx; do
  n=$(basename "$f" .onnx)
  if ! log=$("$BIN" quantize --onnx_path "$f" -o "$DATA/$n.q.onnx" --per_tensor --cle --bias_correction \
      --gptq --layerwise_range --weight_range mse 2>&1); then
    errors+=("$n (all techniques): $(grep -m1 '^error' <<< "$log")")
  fi
done
echo "ONNX zoo light models, all techniques: $(ls "$LIGHT"/*.onnx | wc -l) model(s), ${#errors[@]} failure(s) in all"
for e in "${errors[@]+"${errors[@]}"}"; do echo "  $e"; done
[ ${#errors[@]} -eq 0 ]
