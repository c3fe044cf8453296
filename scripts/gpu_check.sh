#!/usr/bin/env bash
# The GPU check: spreadrl's GPU bench, then each training lever, then the rollout, on one
# NVIDIA GPU (sized for an H100 80 GB or larger), written for a maintainer with a GPU.
#
#   scripts/gpu_check.sh [--out DIR] [PART ...]
#
# Needs a checkout with spreadrl and its dependencies installed (`make install`, or
# `pip install -e ".[dev]"` in an environment with a CUDA build of torch) and nvidia-smi.
# It runs the checkout's spreadrl with .venv/bin/python when there is one, else with
# $PYTHON (default python3). `make install` brings every package the check uses, so there
# is no wheel-download step.
#
# PARTs run in the order given (default: quick levers rollout):
#   quick      `spreadrl bench gpu --quick`: build the random 4b-shape, one GRPO leg
#   levers     each lever (selective-ac, fused-head, fused-adamw, compile) beside the
#              baseline: one update step of the 4b-shape, bf16 compute, the baseline's
#              profile (under 100 GiB of GPU memory the sequences are 1,024 tokens, not 2,048)
#   rollout    spreadrl's hf rollout (default, and static cache + CUDA graphs) beside
#              transformers' generate on the 4b-shape
#   allocator  the quick leg again with PyTorch's default allocator
#              (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False): its reserved and
#              device peaks beside quick's show what expandable segments change
#
# Results go to DIR: --out, else $GPU_CHECK_OUT, else runs/gpu-check. results.jsonl gets
# one JSON object per part ({"part": ..., "result": ...}) as soon as the part ends, so an
# interrupted run keeps what finished; check.log has the console; profile-top-ops.txt the
# baseline update's top operators; parts/ each part's own files. Each part has a time
# limit, sized for one H100 (quick and allocator 7 min, levers 6, rollout 4): a part past
# it is stopped, recorded with rc=124 in check.log and an error row, and the next one runs.
# SMOKE=1 runs the same plumbing on a CPU at toy sizes (its figures mean nothing).
set -uo pipefail

DEST=${GPU_CHECK_OUT:-}
PARTS=()
while [ $# -gt 0 ]; do
  case $1 in
    --out) DEST=${2:?--out needs a folder}; shift 2 ;;
    --out=*) DEST=${1#--out=}; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    quick|levers|rollout|allocator) PARTS+=("$1"); shift ;;
    *) echo "unknown part $1: quick | levers | rollout | allocator (or --out DIR)" >&2; exit 2 ;;
  esac
done
[ ${#PARTS[@]} -eq 0 ] && PARTS=(quick levers rollout)
if [ -n "$DEST" ]; then  # a folder given is taken from where the script was started
  mkdir -p "$DEST" && DEST=$(cd "$DEST" && pwd)
fi
cd "$(dirname "$0")/.."  # the checkout's spreadrl, recipes and .venv
DEST=${DEST:-$PWD/runs/gpu-check}

SMOKE=${SMOKE:-0}
if [ -x .venv/bin/python ]; then PY=${PYTHON:-.venv/bin/python}; else PY=${PYTHON:-python3}; fi
mkdir -p "$DEST/parts"
LOG="$DEST/check.log"
RESULTS="$DEST/results.jsonl"
WORK="$DEST/parts"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
SPREADRL="$PY -m spreadrl"

append() {  # append JSON file $2 to results.jsonl as {"part": $1, "result": ...}
  "$PY" - "$1" "$2" "$RESULTS" <<'PY'
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
    "$PY" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
  } >>"$LOG" 2>&1
  local size=(--quick)
  [ "$SMOKE" = 1 ] && size=(--smoke --no-torchrun)
  part bench-gpu-quick 420 $SPREADRL bench gpu "${size[@]}" --out "$WORK/quick"
  "$PY" - "$WORK/quick" "$WORK/quick.json" <<'PY'
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
    mem=$("$PY" -c "import torch; print(int(torch.cuda.get_device_properties(0).total_memory / 2**30))")
    [ "$mem" -lt 100 ] && seq=1024  # an H100: fp32 master + AdamW of 4B leave ~8 GiB
  fi
  part bench-levers 360 $SPREADRL bench levers "${size[@]}" --seq-len $seq --prompt-len 16 --steps 3 \
    --lever selective-ac --lever fused-head --lever fused-adamw --lever compile \
    --profile "$WORK/prof" --out "$WORK/levers.json"
  append bench-levers "$WORK/levers.json"
  [ -f "$WORK/prof/update-baseline.txt" ] && cp "$WORK/prof/update-baseline.txt" "$DEST/profile-top-ops.txt"
}

rollout() {  # spreadrl's hf rollout (default, static cache + CUDA graphs) beside generate
  local size=(--device cuda --model-preset 4b-shape --vocab-size 151936 --prompt-tokens 1024 --max-new-tokens 128)
  [ "$SMOKE" = 1 ] && size=(--device cpu --model-preset tiny --prompt-tokens 16 --max-new-tokens 4)
  part rollout-vs-generate 240 $SPREADRL bench rollout --against generate "${size[@]}" \
    --batch 16 --group 4 --repeats 2 --variant default --variant static --out "$WORK/rollout.json"
  append rollout-vs-generate "$WORK/rollout.json"
}

for what in "${PARTS[@]}"; do $what; done
echo "results in $DEST: $(ls "$DEST" | tr '\n' ' ')" | tee -a "$LOG"
