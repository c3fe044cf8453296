"""The update's figures are averaged over the ranks that trained (two gloo processes).

Each rank computes its own loss figures from its share of the step; rank 0 logs the
step, so every figure ``policy_loss`` emits must be reduced, or the log shows rank 0's
share alone. The check runs the real ``policy_loss`` on each rank with TIS on, so a
figure added to the loss later and not reduced fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.spawn import join_group, leave_process_group, rank_results, spawn_ranks

# rank r's behaviour log-probs: the TIS weights exp(old - behaviour) differ by rank
BEHAVIOUR_SHIFT = {0: 0.1, 1: 0.5}


def _loss_metrics(rank: int) -> dict[str, float]:
    """GRPO's whole loss with every option that adds a figure: TIS, KL, entropy."""
    from spreadrl.train.config import LossConfig
    from spreadrl.train.losses import grpo_token_loss

    logp = torch.tensor([[-1.0, -1.2, -0.8]]) - 0.1 * rank
    old = torch.tensor([[-1.0, -1.1, -0.9]])
    _, metrics = grpo_token_loss(
        logp,
        old,
        torch.tensor([[1.0]]),
        torch.ones(1, 3),
        LossConfig(tis=True, tis_cap=10.0, kl_coef=0.1, entropy_coef=0.01),
        rollout_logp=old - BEHAVIOUR_SHIFT[rank],
        ref_logp=old,
        entropy=torch.tensor([[0.5, 0.6, 0.7]]) + rank,
    )
    return metrics


def _worker(rank: int, world: int, port: int, out: str) -> None:
    join_group(rank, world, port)
    from spreadrl.train.distributed import init_distributed
    from spreadrl.train.step_metrics import reduce_over_ranks

    init_distributed("cpu", timeout_s=60)
    own = _loss_metrics(rank)
    reduced = reduce_over_ranks(own, trajectories=4)
    Path(out, f"rank{rank}.json").write_text(json.dumps({"own": own, "reduced": reduced}))
    leave_process_group()


@pytest.mark.slow
def test_every_loss_figure_is_the_mean_over_the_ranks(tmp_path):
    spawn_ranks(_worker, str(tmp_path))
    results = rank_results(tmp_path)
    own = [r["own"] for r in results]
    assert "tis_weight_mean" in own[0]
    assert own[0]["tis_weight_mean"] != pytest.approx(own[1]["tis_weight_mean"])
    for key in own[0]:  # every figure the loss emits, on both ranks alike
        mean = (own[0][key] + own[1][key]) / 2
        for result in results:
            assert result["reduced"][key] == pytest.approx(mean, rel=1e-6), key
