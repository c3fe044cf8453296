#!/bin/bash
# The GPU check of issue 36, for a session that is lent a device (one H100 or H200).
#
# Here, first:   tools/gpu_wheels.sh          (the wheels the device image lacks -> .whl/)
# Then, with the device tool, two calls (each under its 10-minute limit), carry [".whl"]:
#   run: tools/gpu_check.sh quick             (<= 7 min: build + one GRPO leg, --quick)
#   run: tools/gpu_check.sh levers rollout    (<= 9 min: each lever before/after, hf rollout)
#   run: tools/gpu_check.sh allocator         (optional, ~4 min: the quick leg again with the
#        default allocator, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False, so the two
#        reserved/device peaks show what expandable segments change)
# Each part appends its results to $OUT as soon as it ends (results.jsonl: one JSON object
# per part; check.log: the console), so a call cut off still returns what finished, and
# leaves at most 4 files in $OUT (the device tool returns 8).
# SMOKE=1 runs the same plumbing on a CPU at toy sizes (its figures mean nothing).
set -uo pipefail
SMOKE=${SMOKE:-0}
PY=${PYTHON:-python3}  # the device image: python3 holds torch
OUT=${OUT:-/tmp/gpu-check-out}
mkdir -p "$OUT"
LOG="$OUT/check.log"
RESULTS="$OUT/results.jsonl"
WORK=$(mktemp -d /tmp/gpu-check-XXXX)
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >>"$LOG" 2>&1 || echo "wheel install failed" >>"$LOG"
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
SPREADRL="$PY -m spreadrl"

append() {  # append JSON file $2 to results.jsonl as {"part": $1, "result": ...}
  $PY - "$1" "$2" "$RESULTS" <<'PY'
import json, sys
part, path, out = sys.argv[1:]
try:
    result = json.load(open(path))
except Exception as exc:  # the part failed before writing its JSON
    result = {"error": f"no result: {exc}"}
with open(out, "a") as f:
    f.write(json.dumps({"part": part, "result": result}) + "\n")
PY
}

part() {  # run one part with a time limit, its console into check.log
  local name=$1 limit=$2; shift 2
  echo "=== $name $(date -u +%H:%M:%S) (limit ${limit}s): $*" | tee -a "$LOG"
  timeout "$limit" "$@" >>"$LOG" 2>&1
  echo "=== $name ended rc=$? $(date -u +%H:%M:%S)" | tee -a "$LOG"
}

quick() {
  { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
    $PY -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
  } >>"$LOG" 2>&1
  local size=(--quick)
  [ "$SMOKE" = 1 ] && size=(--smoke --no-torchrun)
  part bench-gpu-quick 420 $SPREADRL bench gpu "${size[@]}" --out "$WORK/quick"
  $PY - "$WORK/quick" "$WORK/quick.json" <<'PY'
import json, pathlib, sys
root = pathlib.Path(sys.argv[1]); out = {}
for f in sorted(root.glob("*.json")):
    out[f.name] = json.loads(f.read_text())
for f in sorted(root.glob("*.steps.jsonl")):
    out[f.name] = [json.loads(line) for line in f.read_text().splitlines()]
pathlib.Path(sys.argv[2]).write_text(json.dumps(out))
PY
  append bench-gpu-quick "$WORK/quick.json"
}

allocator() {  # the quick leg with the default allocator (the user's setting wins over ours)
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False part bench-gpu-quick-default-allocator 420 \
    $SPREADRL bench gpu --quick --out "$WORK/quick-default"
  append bench-gpu-quick-default-allocator "$WORK/quick-default/hf-one-process.json"
}

levers() {  # each lever beside the baseline, one update step of the 4b shape, bf16 compute
  local mem seq=2048 size=(--device cuda --preset 4b-shape --vocab-size 151936 --sequences 4)
  if [ "$SMOKE" = 1 ]; then
    size=(--device cpu --preset tiny --sequences 2) seq=64
  else
    mem=$($PY -c "import torch; print(int(torch.cuda.get_device_properties(0).total_memory / 2**30))")
    [ "$mem" -lt 100 ] && seq=1024  # an H100: fp32 master + AdamW of 4B leave ~8 GiB
  fi
  part bench-levers 360 $SPREADRL bench levers "${size[@]}" --seq-len $seq --prompt-len 16 --steps 3 \
    --lever selective-ac --lever fused-head --lever fused-adamw --lever compile \
    --profile "$WORK/prof" --out "$WORK/levers.json"
  append bench-levers "$WORK/levers.json"
  [ -f "$WORK/prof/update-baseline.txt" ] && cp "$WORK/prof/update-baseline.txt" "$OUT/profile-top-ops.txt"
}

rollout() {  # spreadrl's hf rollout (default, static cache + CUDA graphs) beside generate
  local size=(--device cuda --model-preset 4b-shape --vocab-size 151936 --prompt-tokens 1024 --max-new-tokens 128)
  [ "$SMOKE" = 1 ] && size=(--device cpu --model-preset tiny --prompt-tokens 16 --max-new-tokens 4)
  part rollout-vs-generate 240 $SPREADRL bench rollout --against generate "${size[@]}" \
    --batch 16 --group 4 --repeats 2 --variant default --variant static --out "$WORK/rollout.json"
  append rollout-vs-generate "$WORK/rollout.json"
}

for what in "${@:-quick}"; do
  case $what in
    quick|levers|rollout|allocator) $what ;;
    *) echo "unknown part $what: quick | levers | rollout | allocator" | tee -a "$LOG"; exit 2 ;;
  esac
done
echo "results in $OUT: $(ls "$OUT" | tr '\n' ' ')" | tee -a "$LOG"
