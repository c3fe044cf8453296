"""Two gloo ranks of `spreadrl grpo` with dynamic sampling: the ranks keep unequal numbers
of groups and run unequal numbers of rollout rounds, and the run still finishes.

Seen before the fix with these exact settings (seed 2): `sampling.mode=drop` hung at
step 1, where one rank kept no group and skipped the reference pass while the other
gathered the sharded reference (a collective); `sampling.mode=refill` hung at step 3,
where one rank ran an extra refill round inside transformers' generate, which under
FSDP syncs every token across ranks by default. The update itself (a rank padding with
filler micro-batches) is checked against one process in test_distributed_unequal.py.

Each rank runs the recipe (`train_grpo`) in a process forked with torchrun's environment
(tests/spawn.py), so a hang fails the test at the spawn's deadline; `torchrun` itself
launching `spreadrl grpo` is test_grpo_options_torchrun.py's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.spawn import join_group, leave_process_group, rank_results, spawn_ranks
from tests.train.test_grpo_options_cli import _overrides


def _metrics(out):
    return [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]


def _grpo_rank(rank, world, port, overrides, folder):
    join_group(rank, world, port)
    from spreadrl.config import load_config
    from spreadrl.train import setup
    from spreadrl.train.config import GRPOConfig
    from spreadrl.train.grpo import train_grpo

    joined = []  # the group the recipe itself joined (the run ends by leaving it)
    init = setup.init_distributed
    setup.init_distributed = lambda *a, **kw: joined.append(init(*a, **kw)) or joined[-1]
    train_grpo(load_config(GRPOConfig, None, overrides))
    info = joined[0]
    Path(folder, f"rank{rank}.json").write_text(json.dumps([info.rank, info.world_size]))
    leave_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("mode,steps", [("drop", 1), ("refill", 3)])
def test_two_ranks_with_dynamic_sampling_finish(tiny_model_dir, tmp_path, mode, steps):
    out = tmp_path / mode
    base = [
        o
        for o in _overrides(tiny_model_dir, out, steps)
        if not o.startswith(("rollout.prompts_per_step=", "sampling.mode="))
    ]
    overrides = [
        *base,
        "rollout.prompts_per_step=4",
        f"sampling.mode={mode}",
        "optim.mini_batch_size=8",
        "seed=2",
    ]
    spawn_ranks(_grpo_rank, overrides, str(tmp_path), timeout_s=300)  # a hang fails here
    assert rank_results(tmp_path) == [[0, 2], [1, 2]]
    metrics = _metrics(out)
    assert [m["step"] for m in metrics] == list(range(1, steps + 1))
    if mode == "drop":
        # one group of four kept over two ranks: one rank trained on nothing this step
        assert (metrics[0]["groups"], metrics[0]["groups_kept"]) == (4.0, 1.0)
        assert metrics[0]["grad_norm"] > 0
    else:
        assert all(m["trained_sequences"] > 0 for m in metrics)
        assert max(m["refill_rounds"] for m in metrics) > 0
