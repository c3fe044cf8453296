"""The step's stop rules count over all ranks, in one collective (two gloo processes).

Each rank sees its own share of the step's episodes. The crashed fraction and the
kept groups must be judged on the step's totals, alike on every rank: a rank that
judged its own share would stop while the other trains on (a hung collective).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.spawn import join_group, leave_process_group, rank_results, spawn_ranks


def _trajectory(key: str, crashed: bool):
    from spreadrl.rollout.types import EndReason, Trajectory

    traj = Trajectory(task_id=key, case=0, sample=0, messages=[])
    if crashed:
        traj.stop_reason = EndReason.ERROR
        traj.error = "ValueError: a tool raised"
    return traj


def _worker(rank: int, world: int, port: int, out: str) -> None:
    join_group(rank, world, port)
    from spreadrl.errors import RunHalted
    from spreadrl.train.checks import StepChecks
    from spreadrl.train.config import DynamicSamplingConfig
    from spreadrl.train.distributed import all_reduce_sums, init_distributed

    init_distributed("cpu", timeout_s=60)
    sums = all_reduce_sums([rank + 1, 10 * rank, 0.5])
    # rank 0: 2 of its 4 episodes crashed (50% of its share), rank 1: none; the step's
    # fraction is 2 of 8 = 25%, under the 30% limit: neither rank stops
    trajs = [_trajectory(f"r{rank}e{i}", crashed=rank == 0 and i < 2) for i in range(4)]
    keep = torch.tensor([False, False]) if rank == 0 else torch.tensor([True, False])
    checks = StepChecks(DynamicSamplingConfig(max_crashed_fraction=0.3, max_untrained_steps=1))
    outcome = "trained"
    try:
        checks.check(1, trajs, keep)  # rank 0 kept no group, rank 1 one: the step trained
    except RunHalted as stop:
        outcome = str(stop)
    Path(out, f"rank{rank}.json").write_text(
        json.dumps({"sums": sums, "outcome": outcome, "untrained": checks.untrained})
    )
    leave_process_group()


@pytest.mark.slow
def test_two_ranks_judge_the_step_on_its_totals(tmp_path):
    spawn_ranks(_worker, str(tmp_path))
    results = rank_results(tmp_path)
    for result in results:
        assert result["sums"] == [3.0, 10.0, 1.0]  # each number summed over the ranks
        assert result["outcome"] == "trained"  # rank 0 alone would stop at 50% > 30%
        assert result["untrained"] == 0  # rank 0 alone kept nothing: the step kept one
