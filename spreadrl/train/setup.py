"""Builders shared by the SFT and GRPO recipes: model (+LoRA), optimizer, schedule, seeds."""

from __future__ import annotations

import contextlib
import math
import random
import signal
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spreadrl.errors import SpreadrlError


def set_seed(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def resolve_device(name: str) -> str:
    """ "auto" picks cuda when present; asking for cuda without a GPU is a clear error."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SpreadrlError(f"device={name!r} but no CUDA GPU is visible; use device=cpu")
    return name


def build_model(model_cfg: Any, device: str, *, path: str | None = None) -> tuple[Any, Any]:
    """Load the policy (and tokenizer) from ``path`` or the config, add LoRA if configured."""
    from spreadrl.models.init import load_model_and_tokenizer

    dtype = getattr(model_cfg, "dtype", "auto")
    if dtype == "auto":
        dtype = "bfloat16" if device.startswith("cuda") else "float32"
    model, tokenizer = load_model_and_tokenizer(
        path or model_cfg.name_or_path, dtype=dtype, device=device
    )
    lora = getattr(model_cfg, "lora", None)
    if path is not None and (Path(path) / "adapter_config.json").exists():
        pass  # a LoRA checkpoint was loaded with its adapter already
    elif lora is not None and lora.enabled:
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
    if getattr(model_cfg, "gradient_checkpointing", False):
        enable_activation_checkpointing(model)
        if hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()
    return model, tokenizer


@contextlib.contextmanager
def peft_wrapping() -> Iterator[None]:
    """Wrap a model with peft without its transformers-5 deprecation warning.

    peft 0.21.2 (the newest release) reads ``model.is_gradient_checkpointing`` in
    ``PeftModel.__init__``, a name transformers 5 deprecated with a FutureWarning.
    The call is peft's, so no argument of ours avoids it: this ignores that one
    message, only while peft builds the wrapper. Drop it once peft reads
    ``is_activation_checkpointing``.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning
        )
        yield


def enable_activation_checkpointing(model: Any) -> None:
    """Turn on activation (gradient) checkpointing under the name this transformers uses.

    transformers 5 renamed ``gradient_checkpointing_enable`` to
    ``activation_checkpointing_enable`` and made the old name warn (FutureWarning,
    removal in v6); the project still supports transformers 4.56, which has only
    the old name. A PEFT model forwards both names to its base model.
    """
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is None:  # transformers < 5
        enable = model.gradient_checkpointing_enable
    enable()


def build_optimizer(model: Any, optim_cfg: Any) -> Any:
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise SpreadrlError("the model has no trainable parameters")
    return torch.optim.AdamW(
        params,
        lr=optim_cfg.lr,
        weight_decay=optim_cfg.weight_decay,
        betas=tuple(optim_cfg.betas),
    )


def build_scheduler(optimizer: Any, optim_cfg: Any, total_steps: int) -> Any:
    """Linear warmup, then constant, linear or cosine decay to zero."""
    import torch

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

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class DeferredInterrupt:
    """Holds Ctrl-C (SIGINT) between ``hold()`` and ``release()``, then raises it.

    The recipes hold it over each step's weight update, metrics line and
    checkpoint: an interrupt that lands there lets the step finish, so the
    checkpoint written on Ctrl-C is always a whole step (weights, optimizer and
    data position agreeing), never weights halfway through a step's mini-batches
    labelled as the step before. Outside the main thread (where Python cannot
    handle signals) it does nothing.
    """

    def __init__(self) -> None:
        self.caught = False
        self.held = False
        self.previous: Any = None

    def hold(self) -> None:
        if self.held or threading.current_thread() is not threading.main_thread():
            return
        self.previous = signal.signal(signal.SIGINT, self._catch)
        self.held = True

    def _catch(self, signum: int, frame: Any) -> None:
        self.caught = True

    def release(self, *, raise_pending: bool = True) -> None:
        """Give Ctrl-C back; raise KeyboardInterrupt now if one came while held."""
        if self.held:
            signal.signal(signal.SIGINT, self.previous or signal.default_int_handler)
            self.held = False
        if self.caught and raise_pending:
            self.caught = False
            raise KeyboardInterrupt


class Run:
    """What the SFT and GRPO recipes set up alike: the run folder, the process group,
    the resume point, and checkpoints (every N steps, and on Ctrl-C)."""

    def __init__(self, cfg: Any, console: Any, *, seed_per_rank: bool = False) -> None:
        from spreadrl.config import config_to_dict, dump_config
        from spreadrl.train.checkpoint import latest_checkpoint
        from spreadrl.train.distributed import init_distributed
        from spreadrl.train.tracking import build_metrics_log

        self.cfg = cfg
        self.console = console
        self.info = init_distributed(resolve_device(cfg.device))
        self.out = Path(cfg.output_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        if self.info.is_main:
            (self.out / "config.yaml").write_text(dump_config(cfg))
        set_seed(cfg.seed + (self.info.rank if seed_per_rank else 0))
        self.ckpt_root = (
            Path(cfg.checkpoint.dir) if cfg.checkpoint.dir else self.out / "checkpoints"
        )
        self.resume_from = latest_checkpoint(self.ckpt_root)
        self.metrics = build_metrics_log(
            cfg.logging, self.out, config_to_dict(cfg), main=self.info.is_main
        )

    def build_model(self) -> tuple[Any, Any]:
        """The policy, from the newest checkpoint when resuming."""
        path = str(self.resume_from) if self.resume_from else None
        return build_model(self.cfg.model, self.info.device, path=path)

    def resume(self, model: Any, optimizer: Any, scheduler: Any) -> dict[str, Any] | None:
        """Restore optimizer, scheduler and RNG; return the saved extra state, or None."""
        from spreadrl.train.checkpoint import load_trainer_state

        if self.resume_from is None:
            return None
        state = load_trainer_state(self.resume_from, model, optimizer, scheduler, self.info)
        self.console.print(f"resumed from {self.resume_from} at step {state['step']}")
        return state

    def save(
        self,
        step: int,
        model: Any,
        tokenizer: Any,
        optimizer: Any,
        scheduler: Any,
        extra: dict[str, Any],
    ) -> None:
        from spreadrl.train.checkpoint import save_checkpoint

        save_checkpoint(
            self.ckpt_root,
            step,
            model,
            tokenizer,
            optimizer,
            scheduler,
            extra,
            keep=self.cfg.checkpoint.keep,
            info=self.info,
        )

    def maybe_save(self, step: int, *args: Any) -> None:
        every = self.cfg.checkpoint.every_steps
        if every and step % every == 0:
            self.save(step, *args)

    def save_interrupted(self, step: int, *args: Any) -> None:
        self.console.print("[yellow]interrupted: saving a checkpoint[/]")
        self.save(step, *args)

    def finish(self, model: Any, tokenizer: Any) -> Path:
        """Write the final model (full weights, gathered from FSDP shards) to OUTPUT_DIR/final."""
        from spreadrl.train.checkpoint import save_model

        self.metrics.close()
        return save_model(model, tokenizer, self.out / "final", self.info)
