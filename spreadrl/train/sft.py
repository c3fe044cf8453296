"""The SFT cold-start recipe: next-token loss on the agent's own tokens only.

One optimizer step consumes ``batch_size`` conversations, split into
micro-batches by a token budget (gradient accumulation); the loss is the mean
over every trained token of the step, so the split does not change it. The
data order is a seeded permutation per epoch and the position in it is
checkpointed, so a resumed run continues with exactly the next batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler
from transformers import PreTrainedTokenizerBase

from spreadrl.config import config_record
from spreadrl.reporting import LogReporter, Reporter
from spreadrl.train.batching import Sample, micro_batches
from spreadrl.train.checkpoint import resume_trainer_state
from spreadrl.train.config import SFTConfig
from spreadrl.train.distributed import all_reduce, rank_slice, shard_model
from spreadrl.train.logprobs import LogprobSettings, sequence_logprobs
from spreadrl.train.optimizer import build_optimizer, build_scheduler
from spreadrl.train.sampler import EpochShuffle, torch_permutation
from spreadrl.train.setup import Checkpointed, Run
from spreadrl.train.sft_data import load_sft_dataset
from spreadrl.train.signals import StopSignals
from spreadrl.train.trained_model import build_model


def sft_loss_step(
    model: nn.Module,
    samples: list[Sample],
    *,
    pad_id: int,
    micro_batch_tokens: int,
    world_size: int = 1,
    settings: LogprobSettings = LogprobSettings(),
) -> dict[str, float]:
    """Accumulate gradients of the token-mean NLL over ``samples``; return loss and token count.

    Under FSDP each rank passes its share; normalising by the global token
    count (times the world size, since FSDP averages gradients) gives the
    single-process gradient, and ranks pad to the same number of micro-batches.
    ``settings``: how the model scores (:class:`~spreadrl.train.logprobs.LogprobSettings`,
    the plain distribution): its compute dtype over the float32 master weights, its
    levers, and ``shared_prefix_min``, which runs the prefix a micro-batch's
    conversations share (the system prompt, untrained) once per micro-batch, through the
    trainer's one log-prob path (:func:`spreadrl.train.logprobs.sequence_logprobs`); the
    same loss and gradients up to float rounding.
    """
    ((total, plan),) = micro_batches(
        [samples],
        micro_batch_tokens,
        token_mean=True,
        prefix_min=settings.shared_prefix_min,
        pad_id=pad_id,
        world_size=world_size,
    )
    loss_sum = 0.0
    for micro in plan:
        # a rank with fewer micro-batches runs a filler with nothing trained: its loss is a
        # graph-connected zero (see logprobs._selective_head), so FSDP's backward
        # collectives run on every rank and the filler adds nothing
        batch = micro.batch
        logp, _ = sequence_logprobs(model, batch, settings)
        mask = batch["loss_mask"].to(logp.device) * (1.0 if micro.real else 0.0)
        nll = -(logp * mask).sum() / max(total, 1) * world_size
        nll.backward()
        loss_sum += float(nll.detach()) / world_size
    return {"loss": all_reduce(loss_sum), "tokens": float(total)}


def sft_update(
    model: nn.Module,
    optimizer: Optimizer,
    scheduler: LRScheduler,
    batch: list[Sample],
    cfg: SFTConfig,
    *,
    pad_id: int,
    world_size: int,
    settings: LogprobSettings,
) -> dict[str, float]:
    """One optimizer step on ``batch`` (this rank's share): the gradient of
    :func:`sft_loss_step`, clipped to ``optim.grad_clip``, AdamW, the schedule; its metrics."""
    optimizer.zero_grad(set_to_none=True)
    stats = sft_loss_step(
        model,
        batch,
        pad_id=pad_id,
        micro_batch_tokens=cfg.micro_batch_tokens,
        world_size=world_size,
        settings=settings,
    )
    params = [p for p in model.parameters() if p.requires_grad]
    norm = torch.nn.utils.clip_grad_norm_(params, cfg.optim.grad_clip)
    grad_norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
    optimizer.step()
    scheduler.step()
    return {**stats, "grad_norm": grad_norm, "lr": scheduler.get_last_lr()[0]}


def train_sft(
    cfg: SFTConfig,
    *,
    reporter: Reporter | None = None,
    on_step: Callable[[int, nn.Module, PreTrainedTokenizerBase], bool] | None = None,
    shared_prefix: bool | None = None,
) -> Path:
    """Run SFT per ``cfg`` (a spreadrl.train.config.SFTConfig); return the final model folder.

    ``on_step(step, model, tokenizer)`` runs after every optimizer step, on the
    model in memory; returning True ends training there and that step's model
    is the final one. It lets a caller validate as it goes and stop at a target
    (the demo does) without reloading the model or restarting the run per
    check. It must answer alike on every rank. ``shared_prefix``: run the prefix a
    micro-batch's conversations share (the system prompt) once per micro-batch, see
    :func:`sft_loss_step`; None = ``cfg.shared_prefix``.

    Raises:
        RunStopped: SIGINT or SIGTERM (on any rank) stopped the run after a whole
            step, saved as a checkpoint that the same command resumes from
            (see :class:`spreadrl.train.signals.StopSignals`).
    """
    reporter = reporter or LogReporter()
    if shared_prefix is None:
        shared_prefix = cfg.shared_prefix
    run = Run.start(cfg, config_record(cfg), reporter)  # the config as data, once
    info = run.info
    model, tokenizer, levers = build_model(
        cfg.model, run.precision, info.device, path=run.resume_from
    )
    compute_dtype = run.precision.compute_dtype
    shard_model(model, info, compute_dtype=compute_dtype, cpu_offload=cfg.model.cpu_offload)
    settings = LogprobSettings.for_model(
        levers, compute_dtype=compute_dtype, sharded=info.enabled, shared_prefix=shared_prefix
    )
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    # the README's rows were once 5k tokens for a 4k model: the context bounds max_length
    context = getattr(model.config, "max_position_embeddings", None)
    data = load_sft_dataset(Path(cfg.data.path), tokenizer, cfg.max_length, context)
    if data.dropped_line:
        reporter.line(data.dropped_line, level="warning")
    steps = cfg.total_steps(len(data.samples))
    optimizer = build_optimizer(model, cfg.optim)
    scheduler = build_scheduler(optimizer, cfg.optim, steps)
    state = resume_trainer_state(run.resume_from, model, optimizer, scheduler, info)
    if run.already_done(state, steps):  # a finished run rerun: nothing to train
        return run.finish(model, tokenizer, keep_existing=True)
    start = state["step"] if state else 0
    # SIGINT / SIGTERM: every rank stops after the same step, then saves it
    signals = StopSignals(info.rank if info.enabled else None)
    order = EpochShuffle(data.samples, cfg.seed, permutation=torch_permutation)
    if state:
        order.load(state["extra"]["order"])
    parts = Checkpointed(model, tokenizer, optimizer, scheduler)
    update_args = {"pad_id": pad_id, "world_size": info.world_size, "settings": settings}
    model.train()
    signals.install()
    every = max(1, cfg.logging.every_steps)
    try:
        for step in range(start + 1, steps + 1):
            t0 = time.perf_counter()
            batch = rank_slice(order.next(cfg.batch_size), info)
            metrics = sft_update(model, optimizer, scheduler, batch, cfg, **update_args)
            elapsed = time.perf_counter() - t0
            metrics["epoch"] = order.epoch
            metrics["step_s"] = elapsed
            metrics["tokens_per_s"] = sum(len(s.ids) for s in batch) / max(elapsed, 1e-9)
            if info.is_main:  # the step's row in metrics.jsonl, and its line every few steps
                run.metrics.log(step, metrics)
                if step == 1 or step % every == 0 or step == steps:
                    run.reporter.line(
                        f"sft step {step:>5}/{steps}  loss {metrics['loss']:.4f}  "
                        f"gnorm {metrics['grad_norm']:.3f}  lr {metrics['lr']:.2e}  "
                        f"{metrics['tokens_per_s']:.0f} tok/s"
                    )
            extra: dict[str, object] = {"order": order.state()}
            saved = run.maybe_save(step, parts, extra)
            if step < steps and (signal_name := signals.requested(info)):
                raise run.stop(signal_name, step, steps, saved, parts, extra)
            if on_step is not None:
                stop = on_step(step, model, tokenizer)
                model.train()  # the hook may have switched to eval mode to sample
                if stop:
                    break
        run.end(step, steps, saved, parts, extra)  # a rerun resumes from, or is done at, it
        final = run.finish(model, tokenizer)
    finally:
        signals.restore()
    return final
