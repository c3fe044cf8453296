"""The frozen reference policy of the KL term, as one typed object.

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

import torch

from spreadrl.train.config import LossConfig
from spreadrl.train.distributed import gathered_params


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
