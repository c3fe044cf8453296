"""`torchrun --nproc-per-node 2` (gloo, CPU) of `spreadrl grpo` with dynamic sampling:
the ranks keep unequal numbers of groups and run unequal numbers of rollout rounds,
and the run still finishes.

Seen before the fix with these exact settings (seed 2): `sampling.mode=drop` hung at
step 1, where one rank kept no group and skipped the reference pass while the other
gathered the sharded reference (a collective); `sampling.mode=refill` hung at step 3,
where one rank ran an extra refill round inside transformers' generate, which under
FSDP syncs every token across ranks by default. The update itself (a rank padding with
filler micro-batches) is checked against one process in test_distributed_unequal.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.train.test_grpo_options_cli import REPO, _env, _overrides, torchrun_command


def _metrics(out):
    return [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("mode,steps", [("drop", 1), ("refill", 3)])
def test_torchrun_dynamic_sampling_finishes(tiny_model_dir, tmp_path, mode, steps):
    out = tmp_path / mode
    base = [
        o
        for o in _overrides(tiny_model_dir, out, steps)
        if not o.startswith(("rollout.prompts_per_step=", "sampling.mode="))
    ]
    cmd = torchrun_command(
        "grpo",
        *base,
        "rollout.prompts_per_step=4",
        f"sampling.mode={mode}",
        "optim.mini_batch_size=8",
        "seed=2",
    )
    try:
        done = subprocess.run(
            cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired as exc:  # a hang: the ranks wait on each other
        pytest.fail(f"torchrun {mode} did not finish in 300 s: {str(exc.stderr)[-2000:]}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    metrics = _metrics(out)
    assert [m["step"] for m in metrics] == list(range(1, steps + 1))
    if mode == "drop":
        # one group of four kept over two ranks: one rank trained on nothing this step
        assert (metrics[0]["groups"], metrics[0]["groups_kept"]) == (4.0, 1.0)
        assert metrics[0]["grad_norm"] > 0
    else:
        assert all(m["trained_sequences"] > 0 for m in metrics)
        assert max(m["refill_rounds"] for m in metrics) > 0
