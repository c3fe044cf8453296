"""Builders shared by the SFT and GRPO recipes: model (+LoRA), optimizer, schedule, seeds."""

from __future__ import annotations

import contextlib
import math
import os
import random
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import numpy as np
import torch
from rich.console import Console
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR, LRScheduler
from transformers import PreTrainedTokenizerBase

from spreadrl.config import config_to_dict, dump_config
from spreadrl.errors import RunStopped, SpreadrlError
from spreadrl.models.compat import enable_activation_checkpointing, peft_wrapping
from spreadrl.models.init import load_model_and_tokenizer
from spreadrl.train.checkpoint import (
    TrainerState,
    checkpoint_folder,
    latest_checkpoint,
    load_trainer_state,
    save_checkpoint,
    save_model,
)
from spreadrl.train.config import (
    CheckpointConfig,
    GRPOConfig,
    LossConfig,
    ModelConfig,
    OptimConfig,
    SFTConfig,
)
from spreadrl.train.distributed import DistInfo, all_reduce, cleanup, init_distributed
from spreadrl.train.precision import Precision, resolve_precision
from spreadrl.train.timeouts import collective_timeout_s
from spreadrl.train.tracking import MetricsLog, build_metrics_log

RecipeConfig = GRPOConfig | SFTConfig
"""A training recipe's whole config: what a run folder records and resumes."""


def resolve_device(name: str) -> str:
    """ "auto" picks cuda when present; asking for cuda without a GPU is a clear error."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SpreadrlError(f"device={name!r} but no CUDA GPU is visible; use device=cpu")
    return name


def build_model(
    model_cfg: ModelConfig, precision: Precision, device: str, *, path: str | None = None
) -> tuple[nn.Module, PreTrainedTokenizerBase]:
    """Load the policy (and tokenizer) from ``path`` or the config, add LoRA if configured.

    ``precision``: the run's (:func:`spreadrl.train.precision.resolve_precision`):
    trained weights load in float32 whatever ``model.dtype`` says (it names the
    compute dtype); a LoRA base never trains and loads in the compute dtype, and
    peft keeps adapters in float32.
    """
    lora = model_cfg.lora
    model, tokenizer = load_model_and_tokenizer(
        path or model_cfg.name_or_path, dtype=precision.load, device=device
    )
    if path is not None and (Path(path) / "adapter_config.json").exists():
        pass  # a LoRA checkpoint was loaded with its adapter already
    elif lora.enabled:
        from peft import LoraConfig, get_peft_model

        targets = list(lora.target_modules) or ["q_proj", "k_proj", "v_proj", "o_proj"]
        with peft_wrapping():
            model = get_peft_model(
                model,
                LoraConfig(
                    r=lora.r,
                    lora_alpha=lora.alpha,
                    lora_dropout=lora.dropout,
                    target_modules=targets,
                    task_type="CAUSAL_LM",
                ),
            )
    if model_cfg.gradient_checkpointing:
        enable_activation_checkpointing(model)
        if hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()
    return model, tokenizer


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


class StopSignals:
    """SIGINT (Ctrl-C) and SIGTERM (a scheduler's preemption) stop a run after a whole step.

    A signal only sets a flag. At each step boundary every rank calls
    :meth:`requested`, which under torchrun is one ``all_reduce`` (max) of the
    signal number, so all ranks learn together that some rank was signalled and
    stop after the same step; they then save the same checkpoint together
    (:func:`spreadrl.train.checkpoint.save_checkpoint` is collective under FSDP2:
    the full model state dict is gathered to rank 0, the optimizer state is
    saved sharded by every rank with ``torch.distributed.checkpoint``, and each
    rank writes its RNG state). Ranks that reacted on their own, at different
    points, would deadlock in a collective or write a torn checkpoint. A signal
    never interrupts a step: rollouts, update, metrics and checkpoint of the
    step under way finish, so the checkpoint is always a whole step.

    What torchrun does (read in torch 2.13's ``torch.distributed.elastic`` and
    ``torch.distributed.run``): the launcher handles SIGTERM, SIGINT, SIGHUP and
    SIGQUIT (``--signals-to-handle``). On one it sends that same signal to each
    local worker's process group (``os.killpg``; workers start in a session of
    their own, so a terminal's Ctrl-C reaches only torchrun, which forwards it as
    SIGINT), waits ``--shutdown-timeout`` seconds (default 30, or
    ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``), SIGKILLs the workers still alive, and
    then exits non-zero itself (it re-raises the signal as ``SignalException``).
    The step under way and the save must fit in that grace period. If the
    SIGKILL comes first, nothing is torn: a checkpoint is written to a
    temporary folder, renamed when complete, and ``latest`` is switched last, so
    the previous checkpoint stays the one a rerun resumes from.

    Further signals while stopping (Slurm signals every process of the job and
    torchrun forwards its own copy, so a rank often gets two) are reported and
    ignored: they never cut the save short. Only SIGKILL stops at once. Outside
    the main thread, where Python cannot handle signals, this does nothing.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, rank: int | None = None) -> None:
        self.label = f"[rank {rank}] " if rank is not None else ""  # under torchrun
        self.received = 0  # the first signal's number; 0 for none
        self._previous: dict[int, Callable[[int, FrameType | None], object] | int | None] = {}

    def install(self) -> None:
        if self._previous or threading.current_thread() is not threading.main_thread():
            return
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._catch)

    def restore(self) -> None:
        """Give the signals back to the handlers they had before :meth:`install`."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def _catch(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if not self.received:
            self.received = signum
            text = f"{name}: stopping after the step under way, then saving a checkpoint"
        else:
            text = (
                f"{name} again: already stopping; a checkpoint is renamed into place only "
                "once complete, so kill -9 now keeps the previous one"
            )
        # os.write, not print or logging: a handler may run in the middle of a write to
        # the same stream, where a buffered writer raises "reentrant call"; and a closed
        # stderr must not turn the notice into an exception raised inside the step
        with contextlib.suppress(OSError):
            os.write(2, f"{self.label}{text}\n".encode())

    def requested(self, info: DistInfo) -> str | None:
        """At a step boundary, on every rank alike: the signal's name if any rank got one.

        Under torchrun this is a collective (one ``all_reduce``), so every rank
        must call it at the same point of every step.
        """
        received = self.received
        if info.enabled:
            received = int(all_reduce(float(received), op="max"))
        return signal.Signals(received).name if received else None


@dataclass
class Run:
    """What the SFT and GRPO recipes set up alike: the run folder, the process group,
    the resume point, and checkpoints (every N steps, and on SIGINT / SIGTERM).

    Built by :meth:`start`; afterwards it reads only its own sections
    (``checkpoint``), never the whole config again."""

    info: DistInfo
    precision: Precision  # the run's dtypes: weights loaded in, compute in
    out: Path
    console: Console
    checkpoint: CheckpointConfig
    ckpt_root: Path
    resume_from: Path | None
    metrics: MetricsLog

    @classmethod
    def start(cls, cfg: RecipeConfig, console: Console, *, seed_per_rank: bool = False) -> Run:
        """Join the process group, write ``config.yaml``, seed, resolve the run's precision,
        find the resume point.

        The whole config is read here and only here: it is recorded as the run's
        resolved config (and sizes the collective timeout); the rest of the run
        gets sections."""
        device = resolve_device(cfg.device)
        info = init_distributed(device, timeout_s=collective_timeout_s(cfg))
        out = Path(cfg.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        if info.is_main:
            (out / "config.yaml").write_text(dump_config(cfg))
        resolved = config_to_dict(cfg)
        seed = cfg.seed + (info.rank if seed_per_rank else 0)
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)
        root = Path(cfg.checkpoint.dir) if cfg.checkpoint.dir else out / "checkpoints"
        return cls(
            info=info,
            precision=resolve_precision(cfg.model.dtype, device, lora=cfg.model.lora.enabled),
            out=out,
            console=console,
            checkpoint=cfg.checkpoint,
            ckpt_root=root,
            resume_from=latest_checkpoint(root),
            metrics=build_metrics_log(cfg.logging, out, resolved, main=info.is_main),
        )

    def build_model(self, model_cfg: ModelConfig) -> tuple[nn.Module, PreTrainedTokenizerBase]:
        """The policy, from the newest checkpoint when resuming."""
        path = str(self.resume_from) if self.resume_from else None
        return build_model(model_cfg, self.precision, self.info.device, path=path)

    def reference_source(
        self, model: nn.Module, model_cfg: ModelConfig, loss: LossConfig
    ) -> nn.Module:
        """The model a KL reference is made from: the starting weights, also on resume.

        A checkpoint holds the policy as trained, so when resuming a full
        fine-tune the starting model (``model.name_or_path``) is loaded again; a
        resumed run would otherwise measure KL against its own last weights. A
        LoRA policy is its own source: its base, adapters disabled, never trains.
        """
        if loss.kl_coef <= 0 or self.resume_from is None or hasattr(model, "disable_adapter"):
            return model
        start, _ = build_model(model_cfg, self.precision, self.info.device)
        return start

    def resume(
        self, model: nn.Module, optimizer: Optimizer, scheduler: LRScheduler
    ) -> TrainerState | None:
        """Restore optimizer, scheduler and RNG; return the saved extra state, or None."""
        if self.resume_from is None:
            return None
        state = load_trainer_state(self.resume_from, model, optimizer, scheduler, self.info)
        self.console.print(f"resumed from {self.resume_from} at step {state['step']}")
        return state

    def save(self, step: int, parts: Checkpointed, extra: dict[str, object]) -> None:
        save_checkpoint(
            self.ckpt_root,
            step,
            parts.model,
            parts.tokenizer,
            parts.optimizer,
            parts.scheduler,
            extra,
            keep=self.checkpoint.keep,
            info=self.info,
        )

    def maybe_save(self, step: int, parts: Checkpointed, extra: dict[str, object]) -> bool:
        """Save every ``checkpoint.every_steps`` steps; return whether this step was saved."""
        every = self.checkpoint.every_steps
        if every and step % every == 0:
            self.save(step, parts, extra)
            return True
        return False

    def stop(
        self,
        signal_name: str,
        step: int,
        total: int,
        saved: bool,
        parts: Checkpointed,
        extra: dict[str, object],
    ) -> RunStopped:
        """Save ``step`` (unless ``saved`` already) on every rank; the exception to raise.

        Called on every rank after the same step (see :class:`StopSignals`).
        """
        if not saved:
            self.save(step, parts, extra)
        self.metrics.close()
        self.close()
        folder = checkpoint_folder(self.ckpt_root, step)
        ranks = f" on all {self.info.world_size} ranks" if self.info.enabled else ""
        message = f"stopped by {signal_name} after step {step}/{total}{ranks}; checkpoint: {folder}"
        return RunStopped(message, str(folder), step, announce=self.info.is_main)

    def finish(self, model: nn.Module, tokenizer: PreTrainedTokenizerBase) -> Path:
        """Write the final model (full weights, gathered from FSDP shards) to OUTPUT_DIR/final."""
        self.metrics.close()
        final = save_model(model, tokenizer, self.out / "final", self.info)
        self.close()
        return final

    def close(self) -> None:
        """Leave the process group (all ranks together); a no-op in one process."""
        if self.info.enabled:
            cleanup()


@dataclass(frozen=True)
class Checkpointed:
    """What a checkpoint holds of a run besides its step and data position."""

    model: nn.Module
    tokenizer: PreTrainedTokenizerBase
    optimizer: Optimizer
    scheduler: LRScheduler
