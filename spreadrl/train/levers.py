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
  (``model.fused_logprob_head``, :class:`spreadrl.train.logprobs.FusedHeadLogprob`),
  beside the chunked, checkpointed path :mod:`spreadrl.train.logprobs` runs by default;
- fused AdamW (``optim.fused_adamw``): one kernel for every parameter's step
  (:func:`spreadrl.train.optimizer.build_optimizer`).

- packed micro-batches (``model.packed_sequences``, :mod:`spreadrl.train.batching`): no
  padding inside a micro-batch, the rows separated by position resets (a varlen flash
  kernel where one is installed, a block-diagonal mask otherwise).

:func:`apply_model_levers` returns what took effect (:class:`ModelLevers`): the log-prob
passes read it once, at build time (:class:`spreadrl.train.logprobs.LogprobSettings`),
instead of asking the model at every call.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

from spreadrl.train.config import ModelConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelLevers:
    """What the model-side levers changed in how a built model runs its training passes.

    ``fused_head``: the fused output layer took (a plain linear head); ``packed``: packed
    micro-batches; ``checkpointed``: activation checkpointing is on, so the model cannot
    run a shared prefix's KV cache (a checkpointed layer drops the cache it is given)."""

    fused_head: bool = False
    packed: bool = False
    checkpointed: bool = False


def apply_model_levers(
    model: nn.Module, layers: Sequence[nn.Module], model_cfg: ModelConfig
) -> ModelLevers:
    """The model-side levers ``model_cfg`` turns on (after activation checkpointing, before
    FSDP2 shards the model, as torchtitan orders them); what took effect. ``layers``: the
    model's decoder layers (:func:`spreadrl.train.distributed.decoder_layers`)."""
    if model_cfg.gradient_checkpointing and model_cfg.checkpoint_every > 1:
        checkpoint_every(layers, model_cfg.checkpoint_every)
    fused = model_cfg.fused_logprob_head and use_fused_head(model)
    if model_cfg.compile_layers:
        compile_decoder_layers(layers)
    return ModelLevers(
        fused_head=fused,
        packed=model_cfg.packed_sequences,
        checkpointed=model_cfg.gradient_checkpointing,
    )


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
    """Whether ``model``'s output layer can run fused: a plain linear layer without bias.
    False (a warning; the chunked path stays) for anything else, a LoRA-wrapped head say."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if type(head) is nn.Linear and head.bias is None:
        return True
    log.warning(
        "model.fused_logprob_head: the output layer is %s; chunked path kept",
        type(head).__name__,
    )
    return False
