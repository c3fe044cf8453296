"""Held-out evaluation inside the GRPO loop, every ``eval.every_steps`` steps.

As nanochat's RL script does, the policy is scored on tasks it does not train
on while it trains, so a run shows whether the training reward carries over.
Episodes are sampled at ``eval.temperature`` (the training temperature when
unset; pass@1 as the demo measures it) through the same policy, environment pool and budgets as the rollouts; the
figures go to ``metrics.jsonl`` as ``eval/*``. Kept small on purpose
(``eval.max_cases``): a full evaluation is ``spreadrl eval``'s job.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from torch import nn

from spreadrl.data.sources import resolve_tasks
from spreadrl.data.task import TaskSet
from spreadrl.eval.config import EvalConfig, eval_rollout
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engine import RolloutEngine
from spreadrl.rollout.runner import EnvPoolLike, EpisodeJob, run_episodes
from spreadrl.rollout.types import RunValues
from spreadrl.train.distributed import DistInfo, all_reduce, rank_slice
from spreadrl.train.rollout_backend import generating


def eval_due(evaluation: EvalConfig, step: int, last: int) -> bool:
    """Whether the held-out eval runs after ``step`` (every N steps, and after ``last``)."""
    every = evaluation.every_steps
    return every > 0 and (step % every == 0 or step == last)


def held_out_tasks(evaluation: EvalConfig, *, given: TaskSet | None) -> TaskSet | None:
    """The held-out set: ``given``, else ``eval.tasks`` when an eval is due at all."""
    if evaluation.every_steps and given is None:
        return resolve_tasks(evaluation.tasks)
    return given


def held_out_jobs(tasks: TaskSet, evaluation: EvalConfig) -> list[EpisodeJob]:
    """The first ``eval.max_cases`` cases of the held-out set, ``eval.samples`` each."""
    episodes = tasks.episodes()
    if evaluation.max_cases:
        episodes = episodes[: evaluation.max_cases]
    return [
        EpisodeJob(task, case, sample)
        for task, case in episodes
        for sample in range(evaluation.samples)
    ]


@dataclass(frozen=True)
class HeldOut:
    """A run's held-out set and what its eval runs with (``tasks`` None: no held-out eval).

    Episodes run through the rollouts' pool, chat format, ``rollout`` budgets and
    prompt budget (``max_prompt_tokens``), with the trainer's ``model`` in its
    ``compute_dtype`` when it samples itself; ``steps`` is the run's last step,
    after which an eval always runs."""

    tasks: TaskSet | None
    pool: EnvPoolLike
    chat: EpisodeChat
    evaluation: EvalConfig
    rollout: RolloutConfig
    steps: int
    seed: int
    max_prompt_tokens: int
    compute_dtype: str
    model: nn.Module
    info: DistInfo

    def run_if_due(self, step: int, engine: RolloutEngine) -> dict[str, float]:
        """:meth:`run` with ``engine`` after ``step`` when one is due, else nothing."""
        if self.tasks is None or not eval_due(self.evaluation, step, self.steps):
            return {}
        return self.run(self.tasks, step, engine)

    def run(self, tasks: TaskSet, step: int, engine: RolloutEngine) -> dict[str, float]:
        """Run the held-out episodes with the current weights; return ``eval/*`` metrics.

        Under data parallelism each rank runs its share and the sums are reduced, so
        every rank returns the same figures."""
        start = time.perf_counter()
        jobs = rank_slice(held_out_jobs(tasks, self.evaluation), self.info)
        run = RunValues(seed=self.seed * 7919 + step, max_prompt_tokens=self.max_prompt_tokens)
        # the engine gets the update's weights
        with generating(self.model, engine, self.compute_dtype):
            sampling = eval_rollout(self.evaluation, self.rollout)
            batch = run_episodes(engine.policy, self.pool, jobs, sampling, self.chat, run=run)
        trajs = batch.trajectories
        sums = [
            float(len(trajs)),
            float(sum(t.passed for t in trajs)),
            float(sum(t.env_reward for t in trajs)),
            float(sum(t.generated_tokens for t in trajs)),
            float(sum(t.turns for t in trajs)),
        ]
        if self.info.enabled:
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
