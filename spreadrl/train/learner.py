"""The trained side of a GRPO step: update the weights on the step's samples.

The parts (the policy sharded over ranks, AdamW, the LR schedule, how tokens are
scored, the loss settings) are built by the recipe
(:func:`spreadrl.train.grpo.train_grpo`), where a reader sees them; the
:class:`Learner` holds them and does one thing per step: :meth:`Learner.update`
(the PPO-style update and the schedule), after the no-grad passes of
:class:`spreadrl.train.scoring.Scorer`. It never sees where the samples came from.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from spreadrl.train.batching import Sample
from spreadrl.train.config import GRPOOptimConfig, LossConfig
from spreadrl.train.distributed import DistInfo
from spreadrl.train.memory import PeakMemory
from spreadrl.train.scoring import LogprobSettings
from spreadrl.train.update import policy_update


@dataclass
class Learner:
    """What a GRPO run trains and how one step updates it.

    ``loss`` is the section as the update applies it, decided once at build time
    (asynchronous GRPO turns TIS on: its behaviour weights are TIS's weights)."""

    model: nn.Module
    optimizer: Optimizer
    scheduler: LRScheduler
    logprob_settings: LogprobSettings
    loss: LossConfig
    optim: GRPOOptimConfig
    info: DistInfo
    seed: int
    per_step: int  # optimizer steps per GRPO step (the LR schedule's unit)
    pad_id: int
    memory: PeakMemory  # peak of the log-prob passes + update (the scorer reads the rollout's)

    def update(self, step: int, samples: list[Sample]) -> dict[str, float]:
        """The update of step ``step`` on ``samples``; its metrics (loss terms, grad norm,
        time, peak memory). The LR schedule ends at ``step x per_step`` updates."""
        t0 = time.perf_counter()
        metrics = policy_update(
            self.model,
            self.optimizer,
            samples,
            self.loss,
            self.optim,
            self.logprob_settings,
            pad_id=self.pad_id,
            scheduler=self.scheduler,
            seed=self.seed + step,
            world_size=self.info.world_size,
        )
        # the schedule is laid out for steps x epochs x mini-batches updates, but dynamic
        # sampling can train fewer mini-batches (or none): move it to where the step count
        # says, so the decay neither lags nor misses its end (the same on every rank)
        with warnings.catch_warnings():  # "lr_scheduler.step() before optimizer.step()"
            warnings.simplefilter("ignore", UserWarning)
            while self.scheduler.last_epoch < step * self.per_step:
                self.scheduler.step()
        metrics["update_s"] = time.perf_counter() - t0
        metrics.update(self.memory.figures("train"))
        return metrics
