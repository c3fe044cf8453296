"""The optimizer section's builders: AdamW over what trains, and the LR schedule.

Both recipes build them after the model (and, under torchrun, after FSDP2 has
sharded it: AdamW must hold the sharded parameters), then restore their state
from the checkpoint being resumed (:func:`spreadrl.train.checkpoint.load_trainer_state`).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR, LRScheduler

from spreadrl.errors import SpreadrlError
from spreadrl.train.config import OptimConfig
from spreadrl.train.levers import fused_adamw_kwargs


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
