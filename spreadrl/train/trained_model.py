"""The model a recipe trains: loaded (from the newest checkpoint when resuming), LoRA
adapters added if configured, activation checkpointing and the speed levers applied,
before FSDP2 shards it; for GRPO also the starting model its KL reference is made from.

The frozen reference policy of the KL term, as one typed object.

Two shapes, one interface: a frozen deep copy of the starting model, or, when
the policy trains LoRA adapters, the policy itself with its adapters disabled
(the base weights never change, so no second copy is needed). The loop asks
:meth:`Reference.active` for the module to score with and never checks which.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from spreadrl.models.compat import enable_activation_checkpointing, peft_wrapping
from spreadrl.models.init import load_model_and_tokenizer
from spreadrl.train.config import LossConfig, ModelConfig
from spreadrl.train.distributed import decoder_layers, gathered_params
from spreadrl.train.levers import apply_model_levers
from spreadrl.train.precision import Precision


def build_model(
    model_cfg: ModelConfig, precision: Precision, device: str, *, path: str | Path | None = None
) -> tuple[nn.Module, PreTrainedTokenizerBase]:
    """Load the policy (and tokenizer) from ``path`` or the config, add LoRA if configured.

    ``precision``: the run's (:func:`spreadrl.train.precision.resolve_precision`):
    trained weights load in float32 whatever ``model.dtype`` says (it names the
    compute dtype); a LoRA base never trains and loads in the compute dtype, and
    peft keeps adapters in float32.
    """
    lora = model_cfg.lora
    model, tokenizer = load_model_and_tokenizer(
        str(path) if path else model_cfg.name_or_path, dtype=precision.load, device=device
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
    # selective checkpointing, fused head, compile
    apply_model_levers(model, decoder_layers(model), model_cfg)
    return model, tokenizer


def build_policy(
    model_cfg: ModelConfig,
    loss: LossConfig,
    precision: Precision,
    device: str,
    *,
    resume_from: Path | None,
) -> tuple[nn.Module, PreTrainedTokenizerBase, nn.Module]:
    """The GRPO policy (from ``resume_from``, the newest checkpoint, when resuming), its
    tokenizer, and the model its KL reference is made from: the starting weights, also
    on resume.

    A checkpoint holds the policy as trained, so when resuming a full
    fine-tune with a KL term the starting model (``model.name_or_path``) is
    loaded again; a resumed run would otherwise measure KL against its own last
    weights. A LoRA policy is its own source: its base, adapters disabled,
    never trains.
    """
    model, tokenizer = build_model(model_cfg, precision, device, path=resume_from)
    if loss.kl_coef <= 0 or resume_from is None or hasattr(model, "disable_adapter"):
        return model, tokenizer, model
    start, _ = build_model(model_cfg, precision, device)
    return model, tokenizer, start


@dataclass
class Reference:
    """The KL reference: ``model`` is a frozen copy, or the policy when ``adapter_disabled``."""

    model: torch.nn.Module
    adapter_disabled: bool = False

    @property
    def separate(self) -> bool:
        """Whether the reference holds weights of its own (to shard, to free)."""
        return not self.adapter_disabled

    @contextmanager
    def active(self) -> Iterator[torch.nn.Module]:
        """The module to compute reference log-probs with (parameters gathered)."""
        with gathered_params(self.model):
            if self.adapter_disabled:
                with _adapters_off(self.model):
                    yield self.model
            else:
                yield self.model


def _adapters_off(model: torch.nn.Module) -> AbstractContextManager[object]:
    """peft's ``disable_adapter()``: the model computes its base weights' function."""
    from peft import PeftModel  # peft is imported by the LoRA setup that built ``model``

    if not isinstance(model, PeftModel):
        raise TypeError(f"a reference with adapters disabled needs a peft model, not {model!r}")
    return model.disable_adapter()


def build_reference(
    model: torch.nn.Module, loss: LossConfig, *, dtype: str = "float32"
) -> Reference | None:
    """The reference of ``loss.kl_coef`` (None when the KL term is off).

    ``dtype``: the run's compute dtype. A frozen copy never trains, so it is kept in
    that dtype (bf16: half the memory of the policy's float32 master weights)."""
    if loss.kl_coef <= 0:
        return None
    if hasattr(model, "disable_adapter"):  # a peft model: its base is the reference
        return Reference(model, adapter_disabled=True)
    ref = copy.deepcopy(model)
    if dtype != "float32":
        ref.to(getattr(torch, dtype))
    ref.eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return Reference(ref)
