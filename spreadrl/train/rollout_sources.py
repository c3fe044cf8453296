"""Where a GRPO run's rollouts come from: :func:`open_rollouts` builds the source once.

The synchronous source (:class:`SyncRollouts`) samples each step in the loop
with the current weights while the trainer waits; the asynchronous one
(:class:`spreadrl.train.async_steps.AsyncSteps`, ``rollout.max_staleness`` > 0)
samples the next steps in a producer thread during the update. Both own the
same things (the prompt order, the rollout engine, the environments, the
held-out set), so the recipe's loop is one loop for both.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import ClassVar

from rich.console import Console
from torch import nn
from torch.optim import Optimizer

from spreadrl.data.sources import resolve_tasks
from spreadrl.data.task import TaskSet
from spreadrl.env.factory import make_env_pool
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.colocate import ColocatedRollouts
from spreadrl.rollout.hf_policy import HFPolicy
from spreadrl.rollout.policy import Policy
from spreadrl.rollout.runner import EnvPoolLike
from spreadrl.rollout.types import Trajectory
from spreadrl.train.async_steps import AsyncSteps
from spreadrl.train.batching import Sample
from spreadrl.train.config import GRPOConfig
from spreadrl.train.distributed import release_for_generation
from spreadrl.train.held_out import HeldOut
from spreadrl.train.learner import Learner
from spreadrl.train.memory import PeakMemory
from spreadrl.train.rollout_backend import build_rollout_policy, generating
from spreadrl.train.rollouts import Collector, StepRollouts, StepSource
from spreadrl.train.sampler import EpochShuffle


def open_rollouts(
    cfg: GRPOConfig,
    learner: Learner,
    console: Console,
    *,
    pool: EnvPoolLike | None = None,
    tasks: TaskSet | None = None,
    eval_tasks: TaskSet | None = None,
) -> StepSource:
    """The run's rollout source: the tasks in a resumable order, the rollout engine, the
    environments, the held-out set; sampled in the loop, or ahead of it when
    ``rollout.max_staleness`` > 0.

    ``pool``, ``tasks``, ``eval_tasks``: see :func:`spreadrl.train.grpo.train_grpo`.
    A pool built here is the source's, closed by its ``close()``."""
    info, model, tokenizer = learner.info, learner.model, learner.tokenizer
    tasks = tasks if tasks is not None else resolve_tasks(cfg.data.train_tasks)
    if cfg.eval.every_steps and eval_tasks is None:
        eval_tasks = resolve_tasks(cfg.eval.tasks)
    prompts = [(t.id, case) for t, case in tasks.episodes()]
    sampler = EpochShuffle(prompts, seed=cfg.seed)
    if learner.resumed:
        sampler.load(learner.resumed["extra"]["sampler"])
    policy, colocated = build_rollout_policy(
        cfg.rollout,
        cfg.model,
        model,
        tokenizer,
        info,
        console,
        max_prompt_tokens=cfg.data.max_prompt_tokens,
        seed=cfg.seed,
    )
    resources = ExitStack()
    if pool is None:
        pool = resources.enter_context(make_env_pool(cfg.env, workers=cfg.rollout.concurrency))
    try:  # a pool built here is closed again if what follows fails
        chat = EpisodeChat.of(tokenizer)  # the format read off the chat template once
        compute = learner.scoring.compute_dtype
        held_out = HeldOut(
            eval_tasks,
            pool,
            chat,
            cfg.eval,
            cfg.rollout,
            steps=cfg.steps,
            seed=cfg.seed,
            max_prompt_tokens=cfg.data.max_prompt_tokens,
            compute_dtype=compute,
            model=model,
            info=info,
        )
        collect = Collector(
            pool,
            chat,
            tasks,
            sampler,
            cfg.rollout,
            cfg.sampling,
            cfg.reward,
            max_prompt_tokens=cfg.data.max_prompt_tokens,
            seed=cfg.seed,
            info=info,
        )
        if not cfg.rollout.max_staleness:
            source: StepSource = SyncRollouts(
                collect,
                sampler,
                policy,
                colocated,
                held_out,
                model,
                learner.optimizer,
                learner.memory,
                info.device,
                compute,
                resources,
            )
            return source
        # rollouts of the next steps overlap the update; the engine, if any, is the
        # producer's alone: the held-out eval samples with the trainer's model (hf)
        engine = policy if colocated is not None else None
        batch = cfg.rollout.group_size * cfg.rollout.prompts_per_step
        eval_policy = policy if engine is None else HFPolicy(model, tokenizer, max_batch_size=batch)
        return AsyncSteps.start(
            cfg,
            model,
            tokenizer,
            engine,
            collect,
            sampler.state,
            held_out,
            eval_policy,
            resources,
            start=learner.start,
            compute=compute,
        )
    except BaseException:
        resources.close()
        raise


@dataclass
class SyncRollouts:
    """The rollout source of the synchronous loop (a :class:`~spreadrl.train.rollouts.StepSource`):
    each step samples with the current weights, the trainer waiting.

    Before a rollout phase the update's memory is handed back (gradients freed,
    shards only, the allocator's cache emptied), then the engine wakes
    (:func:`generating`)."""

    collect: Callable[[Policy, int], StepRollouts]
    sampler: EpochShuffle[tuple[str, int]]
    policy: Policy
    colocated: ColocatedRollouts | None
    evaluation: HeldOut
    model: nn.Module
    optimizer: Optimizer
    memory: PeakMemory
    device: str
    compute: str
    resources: ExitStack
    asynchronous: ClassVar[bool] = False

    def next(self, step: int) -> tuple[StepRollouts, dict[str, object]]:
        release_for_generation(self.model, self.optimizer, self.device)
        self.memory.reset()
        with generating(self.model, self.colocated, self.compute):
            rollouts = self.collect(self.policy, step)
        return rollouts, self.sampler.state()

    def bookkeeping(
        self, step: int, trajs: list[Trajectory], samples: list[Sample]
    ) -> dict[str, float]:
        return {}  # every sample is on-policy: nothing to record

    def updated(self, step: int, model: nn.Module, start: float) -> dict[str, float]:
        return {}  # the next step samples with the updated weights in any case

    def held_out(self, step: int) -> dict[str, float]:
        return self.evaluation.run_if_due(step, self.policy, self.colocated)

    def stop(self) -> None:
        pass  # nothing runs ahead

    def close(self) -> None:
        self.resources.close()
