"""Speed levers of the update, each behind its own setting.

Each lever is a small function of its own, applied once where the model or the
optimizer is built, and each keeps the numbers the plain path gives (the tests
compare them within float tolerance):

- :func:`checkpoint_every`: selective activation checkpointing by layer
  (``model.checkpoint_every``: with ``model.gradient_checkpointing``, every k-th
  decoder layer recomputes in backward and the others keep their activations,
  trading memory for the recompute's share of the FLOPs; ``spreadrl plan`` says
  whether the memory allows it);
- :func:`compile_decoder_layers`: ``torch.compile`` of each decoder layer
  (``model.compile_layers``), as torchtitan compiles its blocks: the layers share
  one graph, the model's Python glue stays eager;
- :func:`use_fused_head`: the fused output layer + log-prob
  (``model.fused_logprob_head``, :mod:`spreadrl.train.fused_head`), beside the
  chunked, checkpointed path :mod:`spreadrl.train.logprobs` runs by default;
- fused AdamW (``optim.fused_adamw``): one kernel for every parameter's step
  (:func:`spreadrl.train.optimizer.build_optimizer`).

- :func:`use_packed_sequences`: packed micro-batches (``model.packed_sequences``,
  :mod:`spreadrl.train.batching`): no padding inside a micro-batch, the rows
  separated by position resets (a varlen flash kernel where one is installed,
  a block-diagonal mask otherwise).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from torch import nn

from spreadrl.train.config import ModelConfig

log = logging.getLogger(__name__)

FUSED_HEAD_FLAG = "_spreadrl_fused_logprob_head"
PACKED_FLAG = "_spreadrl_packed_sequences"


def apply_model_levers(
    model: nn.Module, layers: Sequence[nn.Module], model_cfg: ModelConfig
) -> None:
    """The model-side levers ``model_cfg`` turns on (after activation checkpointing, before
    FSDP2 shards the model, as torchtitan orders them). ``layers``: the model's decoder
    layers (:func:`spreadrl.train.distributed.decoder_layers`), found once by the caller."""
    if model_cfg.gradient_checkpointing and model_cfg.checkpoint_every > 1:
        checkpoint_every(layers, model_cfg.checkpoint_every)
    if model_cfg.fused_logprob_head:
        use_fused_head(model)
    if model_cfg.packed_sequences:
        use_packed_sequences(model)
    if model_cfg.compile_layers:
        compile_decoder_layers(layers)


def checkpoint_every(layers: Sequence[nn.Module], every: int) -> list[int]:
    """Keep activation checkpointing on every ``every``-th decoder layer only (0, k, 2k, ...).

    transformers' decoder layers (``GradientCheckpointingLayer``) recompute in backward
    when their ``gradient_checkpointing`` flag is on; this switches it off on the others.
    Returns the indices that still recompute."""
    if every < 1:
        raise ValueError(f"checkpoint_every must be at least 1, got {every}")
    kept = []
    for i, layer in enumerate(layers):
        on = i % every == 0
        if hasattr(layer, "gradient_checkpointing"):
            layer.gradient_checkpointing = on and bool(layer.gradient_checkpointing)
        if getattr(layer, "gradient_checkpointing", False):
            kept.append(i)
    return kept


def compile_decoder_layers(layers: Sequence[nn.Module], backend: str = "inductor") -> int:
    """``torch.compile`` each decoder layer in place (``nn.Module.compile``); returns how many.

    Parameters are graph inputs (torch's default since 2.5), so the layers share one
    compiled graph; the first forward pays the compilation."""
    for layer in layers:
        layer.compile(backend=backend, dynamic=None)
    return len(layers)


def use_fused_head(model: nn.Module) -> bool:
    """Mark ``model`` for the fused output layer + log-prob; False (the chunked path stays)
    when its head is not a plain linear layer without bias (a LoRA-wrapped head)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    plain = type(head) is nn.Linear and head.bias is None
    if not plain:
        log.warning(
            "model.fused_logprob_head: the output layer is %s; chunked path kept",
            type(head).__name__,
        )
        return False
    setattr(model, FUSED_HEAD_FLAG, True)
    return True


def use_packed_sequences(model: nn.Module) -> None:
    """Mark ``model``: its log-prob passes pack each micro-batch (:mod:`spreadrl.train.batching`)."""
    setattr(model, PACKED_FLAG, True)


def packed_on(model: nn.Module) -> bool:
    """Whether :func:`use_packed_sequences` marked ``model`` (or the model it wraps)."""
    inner = getattr(model, "module", model)
    return bool(getattr(model, PACKED_FLAG, False) or getattr(inner, PACKED_FLAG, False))


def fused_head_on(model: nn.Module) -> bool:
    """Whether :func:`use_fused_head` marked ``model`` (or the model it wraps)."""
    inner = getattr(model, "module", model)
    return bool(getattr(model, FUSED_HEAD_FLAG, False) or getattr(inner, FUSED_HEAD_FLAG, False))
