"""The contract between the GRPO recipe's loop and where its rollouts come from.

:func:`spreadrl.train.grpo.train_steps` asks a :class:`StepSource` for each step's
:class:`StepRollouts` and tells it when the update begins and ends; the synchronous
source (:class:`spreadrl.train.rollout_sources.SyncRollouts`) and the asynchronous
one (:class:`spreadrl.train.async_steps.AsyncSteps`) differ only behind these calls.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import torch
from torch import nn

from spreadrl.rollout.types import Trajectory
from spreadrl.train.batching import Sample


class StepRollouts(NamedTuple):
    """One step's episodes, their advantages [groups, G], the kept groups, the reward
    terms, and the rollout's metrics (phase times, refill rounds)."""

    trajectories: list[Trajectory]
    advantages: torch.Tensor
    keep: torch.Tensor  # bool [groups]
    reward_terms: list[dict[str, float]]  # each episode's reward by term
    metrics: dict[str, float]


class StepSource(Protocol):
    """Where a GRPO step's rollouts come from: sampled in the loop
    (:class:`spreadrl.train.rollout_sources.SyncRollouts`), or by a producer running
    ahead of the trainer (:class:`spreadrl.train.async_steps.AsyncSteps`).

    The recipe's loop is the same for both; what differs lives behind these calls."""

    def next(self, step: int) -> tuple[StepRollouts, dict[str, object]]:
        """Step ``step``'s rollouts, and the prompt sampler's state after its draws."""
        ...

    def bookkeeping(
        self, step: int, trajs: list[Trajectory], samples: list[Sample]
    ) -> dict[str, float]:
        """What the source records of the samples about to be trained, as metrics."""
        ...

    def updated(self, step: int, model: nn.Module, start: float) -> dict[str, float]:
        """The update of ``step`` (begun at ``start``, perf_counter) is done: its metrics."""
        ...

    def held_out(self, step: int) -> dict[str, float]:
        """The held-out eval's ``eval/*`` metrics when one is due after ``step``, else none."""
        ...

    def stop(self) -> None:
        """Stop sampling ahead (idempotent); rollouts in flight are discarded."""
        ...

    def close(self) -> None:
        """Stop, and release what the source owns (the asynchronous producer's thread); the
        environment pool is the recipe's, which closes it."""
        ...
