"""Held-out evaluation inside the GRPO loop, every ``eval.every_steps`` steps.

As nanochat's RL script does, the policy is scored on tasks it does not train
on while it trains, so a run shows whether the training reward carries over.
Episodes are sampled at the training temperature (pass@1 as the demo measures
it) through the same policy, environment pool and budgets as the rollouts; the
figures go to ``metrics.jsonl`` as ``eval/*``. Kept small on purpose
(``eval.max_cases``): a full evaluation is ``spreadrl eval``'s job.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from torch import nn
from transformers import PreTrainedTokenizerBase

from spreadrl.data.task import TaskSet
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.colocate import ColocatedRollouts
from spreadrl.rollout.policy import Policy
from spreadrl.rollout.runner import EnvPoolLike, EpisodeJob, run_episodes
from spreadrl.train.config import GRPOConfig
from spreadrl.train.distributed import DistInfo, all_reduce, rank_slice
from spreadrl.train.precision import compute_dtype
from spreadrl.train.rollout_backend import generating
from spreadrl.train.rollouts import rollout_run


def eval_due(cfg: GRPOConfig, step: int) -> bool:
    """Whether the held-out eval runs after ``step`` (every N steps, and after the last)."""
    every = cfg.eval.every_steps
    return every > 0 and (step % every == 0 or step == cfg.steps)


def held_out_jobs(tasks: TaskSet, cfg: GRPOConfig) -> list[EpisodeJob]:
    """The first ``eval.max_cases`` cases of the held-out set, ``eval.samples`` each."""
    episodes = tasks.episodes()
    if cfg.eval.max_cases:
        episodes = episodes[: cfg.eval.max_cases]
    return [
        EpisodeJob(task, case, sample)
        for task, case in episodes
        for sample in range(cfg.eval.samples)
    ]


def held_out_eval(
    policy: Policy,
    pool: EnvPoolLike,
    tokenizer: PreTrainedTokenizerBase,
    tasks: TaskSet,
    cfg: GRPOConfig,
    step: int,
    *,
    model: nn.Module,
    colocated: ColocatedRollouts | None = None,
    info: DistInfo | None = None,
) -> dict[str, float]:
    """Run the held-out episodes with the current weights; return ``eval/*`` metrics.

    Under data parallelism each rank runs its share and the sums are reduced, so
    every rank returns the same figures."""
    info = info or DistInfo()
    start = time.perf_counter()
    jobs = rank_slice(held_out_jobs(tasks, cfg), info)
    run = rollout_run(cfg, cfg.seed * 7919 + step)
    compute = compute_dtype(cfg.model.dtype, info.device)
    with generating(model, colocated, compute):  # the engine gets the update's weights
        batch = run_episodes(policy, pool, jobs, cfg.rollout, EpisodeChat.of(tokenizer), run=run)
    trajs = batch.trajectories
    sums = [
        float(len(trajs)),
        float(sum(t.passed for t in trajs)),
        float(sum(t.env_reward for t in trajs)),
        float(sum(t.generated_tokens for t in trajs)),
        float(sum(t.turns for t in trajs)),
    ]
    if info.enabled:
        sums = [all_reduce(value) for value in sums]
    n = max(sums[0], 1.0)
    return {
        "eval/episodes": sums[0],
        "eval/pass@1": sums[1] / n,
        "eval/env_reward": sums[2] / n,
        "eval/generated_tokens": sums[3] / n,
        "eval/turns": sums[4] / n,
        "eval_s": time.perf_counter() - start,
    }


@dataclass(frozen=True)
class HeldOut:
    """A run's held-out set and what its eval runs with (None: no held-out eval)."""

    tasks: TaskSet | None
    pool: EnvPoolLike
    tokenizer: PreTrainedTokenizerBase
    cfg: GRPOConfig
    model: nn.Module
    info: DistInfo

    def run_if_due(
        self, step: int, policy: Policy, colocated: ColocatedRollouts | None
    ) -> dict[str, float]:
        """:func:`held_out_eval` with ``policy`` after ``step`` when one is due, else nothing."""
        if self.tasks is None or not eval_due(self.cfg, step):
            return {}
        return held_out_eval(
            policy,
            self.pool,
            self.tokenizer,
            self.tasks,
            self.cfg,
            step,
            model=self.model,
            colocated=colocated,
            info=self.info,
        )
