"""The trained side of a GRPO run: the policy, its KL reference, the optimizer, one update.

:meth:`Learner.build` reads the model, loss and optimizer sections once (fp32
master weights with compute in ``model.dtype``, FSDP2 shards under torchrun,
the state of the newest checkpoint when resuming); :meth:`Learner.train` is the
update half of a step: the proximal and reference log-prob passes, then the
PPO-style update over the step's samples.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, replace

from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler
from transformers import PreTrainedTokenizerBase

from spreadrl.rollout.types import Trajectory
from spreadrl.train.batching import Sample
from spreadrl.train.checkpoint import TrainerState, resume_trainer_state
from spreadrl.train.config import GRPOConfig, GRPOOptimConfig, LossConfig
from spreadrl.train.distributed import (
    DistInfo,
    gathered_params,
    release_for_generation,
    shard_model,
)
from spreadrl.train.memory import PeakMemory
from spreadrl.train.optimizer import build_optimizer, build_scheduler
from spreadrl.train.reference import Reference, build_reference
from spreadrl.train.rollouts import StepSource
from spreadrl.train.setup import Checkpointed, Run
from spreadrl.train.update import (
    Scoring,
    compute_logprobs,
    policy_update,
    updates_per_step,
)


@dataclass
class Learner:
    """What a GRPO run trains, and how one step updates it."""

    model: nn.Module
    tokenizer: PreTrainedTokenizerBase
    reference: Reference | None
    optimizer: Optimizer
    scheduler: LRScheduler
    scoring: Scoring
    loss: LossConfig
    optim: GRPOOptimConfig
    info: DistInfo
    seed: int
    per_step: int  # optimizer steps per GRPO step (the LR schedule's unit)
    memory: PeakMemory  # peak of the rollout, and of the log-prob passes + update
    resumed: TrainerState | None  # the checkpoint's state when resuming, else None

    @classmethod
    def build(cls, cfg: GRPOConfig, run: Run) -> Learner:
        """The policy (from the newest checkpoint when resuming), its reference, AdamW and the
        LR schedule; sharded under torchrun; restored when resuming."""
        info, compute = run.info, run.precision.compute
        model, tokenizer, start = run.build_policy(cfg.model, cfg.loss)
        reference = build_reference(start, cfg.loss, dtype=compute)
        offload = cfg.model.cpu_offload
        shard_model(model, info, compute_dtype=compute, cpu_offload=offload)
        if reference is not None and reference.separate:
            shard_model(reference.model, info, compute_dtype=compute, cpu_offload=offload)
        scoring = Scoring.for_run(cfg.rollout, cfg.optim, compute)
        per_step = updates_per_step(cfg.rollout, cfg.optim)
        optimizer = build_optimizer(model, cfg.optim)
        scheduler = build_scheduler(optimizer, cfg.optim, cfg.steps * per_step)
        resumed = resume_trainer_state(run.resume_from, model, optimizer, scheduler, info)
        return cls(
            model=model,
            tokenizer=tokenizer,
            reference=reference,
            optimizer=optimizer,
            scheduler=scheduler,
            scoring=scoring,
            loss=cfg.loss,
            optim=cfg.optim,
            info=info,
            seed=cfg.seed,
            per_step=per_step,
            memory=PeakMemory(info.device),
            resumed=resumed,
        )

    @property
    def start(self) -> int:
        """The last step already trained (0 for a new run)."""
        return self.resumed["step"] if self.resumed else 0

    @property
    def pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return pad if pad is not None else 0

    @property
    def checkpointed(self) -> Checkpointed:
        return Checkpointed(self.model, self.tokenizer, self.optimizer, self.scheduler)

    def train(
        self, step: int, trajs: list[Trajectory], samples: list[Sample], rollouts: StepSource
    ) -> tuple[dict[str, float], dict[str, float]]:
        """Update on ``samples`` (step ``step``); return the update's metrics and the timings.

        The proximal policy's log-probs first (decoupled PPO in asynchronous mode too):
        with one epoch of one mini-batch they are the weights of the single update,
        whose detached log-probs :func:`policy_update` uses, so the pass is skipped.
        Every rank enters both passes, even with no samples (dynamic sampling can keep
        none on one rank): gathering sharded parameters is a collective.
        """
        memory, pad_id = self.memory, self.pad_id
        timings = memory.figures("rollout")  # allocated, reserved and device peaks
        memory.reset()
        t0 = t_train = time.perf_counter()
        with gathered_params(self.model):
            if samples and self.per_step > 1:
                old = compute_logprobs(self.model, samples, self.optim, self.scoring, pad_id=pad_id)
                for sample, lp in zip(samples, old, strict=True):
                    sample.old_logprobs = lp
        if self.reference is not None:
            lps = self.reference.logprobs(samples, self.optim, self.scoring, pad_id=pad_id)
            for sample, lp in zip(samples, lps, strict=True):
                sample.ref_logprobs = lp
        timings["logprobs_s"] = time.perf_counter() - t0
        timings.update(rollouts.bookkeeping(step, trajs, samples))
        # asynchronous: tokens sampled by older weights than the ones updated are weighted
        # by min(pi_prox / pi_behav, cap) whatever loss.tis says (docs/async.md)
        loss = replace(self.loss, tis=True) if rollouts.asynchronous else self.loss
        t0 = time.perf_counter()
        update = policy_update(
            self.model,
            self.optimizer,
            samples,
            loss,
            self.optim,
            self.scoring,
            pad_id=pad_id,
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
        timings["update_s"] = time.perf_counter() - t0
        timings.update(memory.figures("train"))
        timings.update(rollouts.updated(step, self.model, t_train))
        # the held-out eval may wake the engine before the next step does
        release_for_generation(self.model, self.optimizer, self.info.device)
        return update, timings
