"""The optimizer section's builders: AdamW over what trains, and the LR schedule (laid out
in optimizer steps: :func:`updates_per_step` of them per GRPO step).

Both recipes build them after the model (and, under torchrun, after FSDP2 has
sharded it: AdamW must hold the sharded parameters), then restore their state
from the checkpoint being resumed (:func:`spreadrl.train.checkpoint.load_trainer_state`).
"""

from __future__ import annotations

import logging
import math

import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR, LRScheduler

from spreadrl.errors import SpreadrlError
from spreadrl.rollout.config import RolloutConfig
from spreadrl.train.config import GRPOOptimConfig, OptimConfig

log = logging.getLogger(__name__)


def minibatches(batch: int, optim: GRPOOptimConfig) -> int:
    """Optimizer steps one epoch over ``batch`` sequences takes (``optim.mini_batch_size``)."""
    size = optim.mini_batch_size or batch
    return max(1, -(-batch // size))


def updates_per_step(rollout: RolloutConfig, optim: GRPOOptimConfig) -> int:
    """Optimizer steps of a full GRPO step: epochs x mini-batches (the LR schedule's unit).

    With one, the policy that sampled is the one being updated, so the update takes
    its old log-probs from its own forward; with more, they are computed first."""
    return optim.ppo_epochs * minibatches(rollout.prompts_per_step * rollout.group_size, optim)


def build_optimizer(model: nn.Module, optim_cfg: OptimConfig) -> Optimizer:
    """AdamW over the trainable parameters (LoRA: the adapters only)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise SpreadrlError("the model has no trainable parameters")
    return torch.optim.AdamW(
        params,
        lr=optim_cfg.lr,
        weight_decay=optim_cfg.weight_decay,
        betas=(optim_cfg.betas[0], optim_cfg.betas[1]),
        **fused_adamw_kwargs(optim_cfg.fused_adamw, params),  # optim.fused_adamw
    )


def build_scheduler(optimizer: Optimizer, optim_cfg: OptimConfig, total_steps: int) -> LRScheduler:
    """Linear warmup, then constant, linear or cosine decay to zero."""
    warmup = max(0, int(optim_cfg.warmup_steps))
    kind = optim_cfg.schedule

    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if kind == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        if kind == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, factor)


def fused_adamw_kwargs(fused: bool, params: list[torch.Tensor]) -> dict[str, object]:
    """AdamW's keyword for its fused kernel: ``fused=True`` where every parameter's device
    has one (CUDA, and the CPU since torch 2.4), else nothing (the default foreach path)."""
    if not fused:
        return {}
    devices = {p.device.type for p in params}
    supported = {"cuda", "cpu", "xpu", "mps"}
    if not devices <= supported:
        log.warning("optim.fused_adamw: no fused AdamW on %s; the default kernel runs", devices)
        return {}
    return {"fused": True}
