"""The one log-prob path of every training pass: trained positions only, in chunks of tokens.

Old log-probs, reference log-probs, the policy update and the SFT loss all
call :func:`sequence_logprobs`. It runs the model body once, sends only the
hidden states of the positions that are trained (the loss mask: response
tokens in GRPO, assistant tokens in SFT) through the output layer, and does
the log-softmax over the vocabulary a chunk of tokens at a time. With grad,
each chunk runs under ``torch.utils.checkpoint``: its logits are recomputed
in backward instead of being kept. So no [tokens x vocabulary] float32 tensor
is ever held whole; the extra memory grows with the chunk, not with the
sequence (a 151,936-token vocabulary and 30k-token responses would otherwise
need tens of GB).

The distribution is the *sampling* distribution of
:mod:`spreadrl.rollout.sampling` (logits / temperature, then top-k, then top-p,
renormalised over the kept tokens), the one the hf rollout reports log-probs
under. The token whose
log-prob is asked for always counts as kept, so a token that was sampled but
falls just outside the recomputed top-k (numerics, or a policy that moved
during PPO epochs) gets a finite log-prob instead of -inf. Entropy (of the
same distribution, with grad) is computed in the same chunks, only when asked
for.

Shared prefixes: a micro-batch collated with ``shared_prefix_min``
(:mod:`spreadrl.train.batching`) carries one prefix row per group of samples
that share their prompt; the prefix runs through the model once, with grad,
and the samples' continuations run against its KV cache (see
:func:`sequence_logprobs`). The update, the old/reference passes and SFT all
get it from here.

Not handled: models that post-process logits after the output layer (logit
soft-capping); their log-probs would be those of the raw logits.

How a pass runs is decided once, at build time, in :class:`LogprobSettings`: the
sampling distribution, the compute dtype, prefix sharing, and what the model's levers
changed (fused head, packed rows) and whether FSDP2 shards it; no call asks the model.
:func:`compute_logprobs` scores samples without keeping activations (the proximal and
reference passes of :meth:`spreadrl.train.trained_model.TrainedSide.logprob_passes`),
over micro-batches collated once per step for both passes.

The fused output layer (``model.fused_logprob_head``, :class:`FusedHeadLogprob`): the
default path never holds the [tokens x vocabulary] logits whole, but autograd records a
chunk's half-dozen [chunk x vocabulary] operations (the float copy, the temperature, the
top-k/top-p cut, log-sum-exp, gather, entropy) and walks them back. The fused one does
the same matrix multiplies (the head forward, its recompute in backward, the two
gradient products) and writes the backward by hand: the gradient of ``log p(target)``
over the kept tokens K of the sampling distribution is ``onehot(target) - p`` (p is 0
outside K, and K, chosen by top-k/top-p, is held fixed as autograd holds it), and that of
the entropy ``H`` is ``-p * (log p + H)``. So a chunk's backward holds two [chunk x
vocabulary] float32 tensors instead of autograd's saved set, and launches a few kernels
instead of autograd's chain. Same values within float rounding (the tests compare them,
top-k/top-p and entropy included).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.kv_cache import cache_name, output_cache
from spreadrl.rollout.sampling import process_logits
from spreadrl.train.batching import MIN_SHARED_PREFIX, MicroBatch, Sample, pack
from spreadrl.train.distributed import is_fsdp
from spreadrl.train.levers import ModelLevers

# CPU: float32 logits per chunk, 2**24 values (64 MiB); at a 151,936 vocabulary that is
# 110 tokens, at the tiny preset's few thousand it is a whole micro-batch. Small on
# purpose: CPU memory is shared with everything else and a chunk costs no launch.
CHUNK_LOGITS = 2**24
# CUDA: every chunk re-reads the whole output layer (0.78 GB in bf16 for Qwen3-4B), so
# chunks are as large as a share of the free memory allows. Bytes per logit a chunk can
# hold at once, forward and checkpointed backward: the head's bf16 output (2), its
# float32 copy (4), the temperature-scaled copy (4), log-softmax and its gradient (8);
# top-p adds the sort (values 4 + int64 indices 8), the cumulative softmax (8), the
# mask and the scatter (5); both rounded up.
BYTES_PER_LOGIT = 24
BYTES_PER_LOGIT_CUT = 56
CUDA_FREE_SHARE = 0.25  # of the free memory at the moment, for one chunk
MAX_CHUNK_TOKENS = 8192


@dataclass(frozen=True)
class LogprobSettings:
    """How a training pass scores tokens, decided once at build time.

    Log-probs are those of the rollout's sampling distribution (temperature, top-k,
    top-p; greedy rollouts, temperature 0, are scored under the plain softmax), in the
    run's compute dtype, with a group's shared prompt run once per micro-batch when
    ``shared_prefix_min`` > 0. ``fused_head`` and ``packed`` are the model's levers that
    took (:class:`spreadrl.train.levers.ModelLevers`); ``sharded``: FSDP2 shards the model,
    so its mixed-precision policy, not autocast, sets the compute dtype. The defaults are
    the plain distribution in float32, for callers that score outside a recipe.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    compute_dtype: str = "float32"  # bfloat16: bf16 forward/backward over fp32 master weights
    shared_prefix_min: int = 0  # a group's prompt run once when at least this long; 0 = off
    fused_head: bool = False
    packed: bool = False
    sharded: bool = False

    def __post_init__(self) -> None:
        if self.sharded and self.shared_prefix_min > 0:  # see spreadrl.train.batching
            raise ValueError("a shared prefix cannot run under FSDP2 (its ranks would hang)")

    @classmethod
    def for_model(
        cls,
        levers: ModelLevers,
        *,
        compute_dtype: str,
        sharded: bool,
        shared_prefix: bool,
        rollout: RolloutConfig | None = None,
    ) -> LogprobSettings:
        """The settings of a recipe's model: ``rollout``'s sampling distribution (None: the
        plain one, SFT's); a shared prefix only where the model can run one (not under FSDP2
        nor activation checkpointing, see :mod:`spreadrl.train.batching`)."""
        sampled = rollout is not None and rollout.temperature > 0
        prefix_ok = shared_prefix and not (sharded or levers.checkpointed)
        return cls(
            temperature=rollout.temperature if sampled else 1.0,
            top_k=rollout.top_k if sampled else 0,
            top_p=rollout.top_p if sampled else 1.0,
            compute_dtype=compute_dtype,
            shared_prefix_min=MIN_SHARED_PREFIX if prefix_ok else 0,
            fused_head=levers.fused_head,
            packed=levers.packed,
            sharded=sharded,
        )

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager[object]:
        """Where the passes' forwards run: see :func:`compute_context`."""
        return _autocast(self.compute_dtype, self.sharded, device)


def chunk_tokens_for(
    vocab_size: int, top_p: float = 1.0, device: torch.device | str | None = None
) -> int:
    """Tokens per log-prob chunk: sized from the free memory on CUDA, small on CPU.

    On CUDA, a quarter of the free memory divided by the bytes one token's
    logits take (:data:`BYTES_PER_LOGIT`, more under top-p),
    capped at :data:`MAX_CHUNK_TOKENS` and never below the CPU size. Elsewhere,
    :data:`CHUNK_LOGITS` float32 values per chunk (a quarter of that with
    top-p, which sorts the vocabulary).
    """
    vocab = max(1, vocab_size)
    small = max(1, (CHUNK_LOGITS // 4 if top_p < 1.0 else CHUNK_LOGITS) // vocab)
    if device is None or getattr(device, "type", str(device).split(":")[0]) != "cuda":
        return small
    free, _total = torch.cuda.mem_get_info(device)
    per_token = vocab * (BYTES_PER_LOGIT_CUT if top_p < 1.0 else BYTES_PER_LOGIT)
    return max(small, min(MAX_CHUNK_TOKENS, int(free * CUDA_FREE_SHARE) // per_token))


def _sampling_scores(
    raw: torch.Tensor, temperature: float, top_k: int, top_p: float, targets: torch.Tensor
) -> torch.Tensor:
    """The output layer's [n, vocab] logits as float32 scores of the sampling distribution
    (temperature, then top-k / top-p, -inf outside), the asked-for token always kept."""
    raw = raw.float()
    if temperature != 1.0:  # x / 1.0 is x: skip a pass over [n, vocab] forward and backward
        raw = raw / temperature
    if not (top_k or top_p < 1.0):
        return raw
    scores = process_logits(raw, 1.0, top_k, top_p)
    index = targets.unsqueeze(-1)
    return scores.scatter(-1, index, raw.gather(-1, index))


def _logits_logprobs(
    raw: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
    with_entropy: bool,
) -> torch.Tensor:
    """[n] log-probs of ``targets`` under the sampling distribution of the [n, vocab]
    logits ``raw`` (and [n] entropies, stacked as [n, 2]): the chunked path's and the
    fused forward's one computation."""
    scores = _sampling_scores(raw, temperature, top_k, top_p, targets)
    logz = torch.logsumexp(scores, dim=-1)
    logp = scores.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logz
    if not with_entropy:
        return logp
    probs = torch.softmax(scores, dim=-1)
    finite = scores.masked_fill(~torch.isfinite(scores), 0.0)  # p = 0 there; avoids 0 * -inf
    entropy = logz - (probs * finite).sum(-1)
    return torch.stack((logp, entropy), dim=-1)


def _chunk_logprobs(
    head: nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
    with_entropy: bool,
) -> torch.Tensor:
    """[n] log-probs of ``targets`` (and [n] entropies, stacked as [n, 2]) for one chunk."""
    return _logits_logprobs(head(hidden), targets, temperature, top_k, top_p, with_entropy)


def selective_logprobs(
    head: nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    with_entropy: bool = False,
    chunk_tokens: int | None = None,
    fused: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs [n] of ``targets`` [n] given ``hidden`` [n, dim] and the output layer ``head``.

    Chunks of ``chunk_tokens`` rows (default: :func:`chunk_tokens_for` the
    head's vocabulary on ``hidden``'s device); with grad each chunk is checkpointed, or,
    ``fused`` (``model.fused_logprob_head``), runs in :class:`FusedHeadLogprob`'s
    hand-written backward. Returns (logp, entropy or None), float32.
    """
    vocab = getattr(head, "out_features", None) or head.weight.shape[0]
    size = chunk_tokens or chunk_tokens_for(vocab, top_p, hidden.device)
    grad = torch.is_grad_enabled() and (
        hidden.requires_grad or any(p.requires_grad for p in head.parameters())
    )
    args = (temperature, top_k, top_p, with_entropy)
    if fused and grad:
        out = FusedHeadLogprob.apply(hidden, head.weight, targets, *args, size)
    else:
        parts = []
        for start in range(0, hidden.shape[0], size):
            h, t = hidden[start : start + size], targets[start : start + size]
            if grad:
                parts.append(checkpoint(_chunk_logprobs, head, h, t, *args, use_reentrant=False))
            else:
                parts.append(_chunk_logprobs(head, h, t, *args))
        empty = hidden.new_zeros((0, 2) if with_entropy else (0,), dtype=torch.float32)
        out = torch.cat(parts) if parts else empty
    if with_entropy:
        return out[:, 0], out[:, 1]
    return out, None


def _selective_head(
    head: nn.Module, positions: torch.Tensor, targets: torch.Tensor, kwargs: dict[str, Any]
) -> nn.Module:
    """A module that stands in for the output layer during one forward and returns log-probs.

    Swapping the head (rather than calling the decoder body and the head
    separately) keeps the whole computation inside the model's own forward,
    so FSDP's hooks gather and free the output layer's weights as usual and a
    LoRA-wrapped head still works.
    """

    class SelectiveHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = head

        def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # [B, T, dim] -> [n] or [n, 2]
            selected = hidden[:, :-1][positions]  # [n, dim]
            logp, entropy = selective_logprobs(self.head, selected, targets, **kwargs)
            out = logp if entropy is None else torch.stack((logp, entropy), dim=-1)
            if selected.shape[0] == 0 and torch.is_grad_enabled():
                # nothing trained (a rank's zero-weight filler micro-batch): an empty
                # result would cut the graph and backward() would fail; under FSDP2 every
                # unit must run its backward on every rank or the reduce-scatters hang.
                # One position through the output layer, times 0, keeps every parameter
                # (output layer included) in the graph with an exactly zero gradient.
                out = out + self.head(hidden[:1, :1]).float().sum() * 0.0
            return out

    return SelectiveHead()


@contextlib.contextmanager
def _head_swapped(model: nn.Module, replacement: nn.Module) -> Iterator[None]:
    original = model.get_output_embeddings()
    model.set_output_embeddings(replacement)
    try:
        yield
    finally:
        model.set_output_embeddings(original)


def compute_context(model: nn.Module, dtype: str) -> contextlib.AbstractContextManager[object]:
    """Where forwards of ``model`` must run for ``dtype`` compute (see :mod:`spreadrl.train.precision`).

    ``torch.autocast`` in one process; nothing under FSDP2, whose mixed-precision
    policy (:func:`spreadrl.train.distributed.shard_model`) already hands the
    forward bf16 parameters, nor for float32. Backward runs outside it, in the
    dtypes the forward chose (as autocast asks). The hf rollouts that sample with the
    trained model run in it; the log-prob passes run in their settings' own
    (:meth:`LogprobSettings.autocast`, decided at build time).
    """
    return _autocast(dtype, is_fsdp(model), next(model.parameters()).device)


def _autocast(
    dtype: str, sharded: bool, device: torch.device
) -> contextlib.AbstractContextManager[object]:
    if dtype == "float32" or sharded:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=getattr(torch, dtype))


def _prefix_inputs(
    model: nn.Module, batch: dict[str, torch.Tensor], device: torch.device
) -> dict[str, object]:
    """Run ``batch``'s prefix rows once; the forward arguments that put each row behind its prefix.

    The prefix rows' KV cache (with grad) is indexed out to the rows
    (``prefix_index``): backward sums each prefix's gradient over the rows that
    read it, which is what running the prefix once per row would give. Each row's
    positions continue from its ``offsets``; the attention mask shows a row only
    the first ``offsets[r]`` cache slots of its own prefix (none when 0).
    """

    class PrefixHead(nn.Module):  # the prefix predicts nothing
        def forward(self, hidden: torch.Tensor) -> torch.Tensor:
            return hidden.new_zeros(())

    prefix_ids = batch["prefix_ids"].to(device)
    with _head_swapped(model, PrefixHead()):
        out = model(
            input_ids=prefix_ids,
            attention_mask=batch["prefix_attention"].to(device),
            use_cache=True,
        )
    cache = output_cache(out)
    index = batch["prefix_index"].to(device)
    if not hasattr(cache, "layers"):  # a cache without per-layer tensors
        cache.batch_select_indices(index)
    for layer in getattr(cache, "layers", []):
        # index_select, not the cache's own ``keys[index]``: on CPU the backward of
        # advanced indexing accumulates across threads in no fixed order, so two
        # identical runs would differ in the last bits
        layer.keys = layer.keys.index_select(0, index)
        layer.values = layer.values.index_select(0, index)
    offsets = batch["offsets"].to(device)
    width = batch["input_ids"].shape[1]
    slots = torch.arange(prefix_ids.shape[1], device=device)
    attention = torch.cat(
        [
            (slots.unsqueeze(0) < offsets.unsqueeze(1)).long(),
            batch["attention_mask"].to(device),
        ],
        dim=1,
    )
    positions = offsets.unsqueeze(1) + torch.arange(width, device=device).unsqueeze(0)
    return {
        "attention_mask": attention,
        cache_name(): cache,
        "position_ids": positions,
        "use_cache": True,
    }


def sequence_logprobs(
    model: nn.Module,
    batch: dict[str, torch.Tensor],
    settings: LogprobSettings = LogprobSettings(),
    *,
    entropy: bool = False,
    chunk_tokens: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-target log-probs [B, T-1] of ``batch``'s own next tokens; entropy [B, T-1] or None.

    ``batch`` is :func:`spreadrl.train.batching.collate`'s output. Only the
    positions where ``batch["loss_mask"]`` is nonzero are computed; the others
    are 0 and must not be used (every loss masks them). ``settings`` give the sampling
    distribution the rollout drew from (the defaults: temperature 1, no top-k/top-p, for
    greedy or SFT), the compute dtype and the model's levers. With ``entropy`` the
    entropy of that distribution is returned too, with grad.

    When the batch carries prefix rows (collated with ``shared_prefix_min``),
    they run through the model first and every row runs against its group's
    KV cache (:func:`_prefix_inputs`): the same values and gradients as the
    full rows, with each shared prompt computed once per micro-batch instead of
    once per sample. The result is aligned with the batch's cut rows, like its
    loss mask.

    The compute dtype is the forward's matmul dtype (``bfloat16``: autocast over
    float32 master weights in one process; under FSDP2 its mixed-precision policy
    does it), see :mod:`spreadrl.train.precision`. Log-probs are float32 always.

    Raises:
        ValueError: the model has no output layer to stand in for.
    """
    if model.get_output_embeddings() is None:
        raise ValueError(f"{type(model).__name__} has no output embeddings (lm_head) to compute on")
    device = next(model.parameters()).device
    input_ids = batch["input_ids"].to(device)
    positions = batch["loss_mask"].to(device) > 0  # [B, T-1]
    targets = input_ids[:, 1:][positions]  # [n]
    kwargs = dict(
        temperature=settings.temperature if settings.temperature > 0 else 1.0,
        top_k=settings.top_k,
        top_p=settings.top_p,
        with_entropy=entropy,
        chunk_tokens=chunk_tokens,
        fused=settings.fused_head,  # model.fused_logprob_head (spreadrl.train.levers)
    )
    forward: dict[str, object] = {
        "attention_mask": batch["attention_mask"].to(device),
        "use_cache": False,
    }
    model_ids, model_positions = input_ids, positions
    if "prefix_ids" not in batch and settings.packed:  # model.packed_sequences
        model_ids, pos_ids, model_positions = pack(input_ids, forward["attention_mask"], positions)
        forward = {"position_ids": pos_ids, "use_cache": False}
    with settings.autocast(device):
        if "prefix_ids" in batch:
            forward = _prefix_inputs(model, batch, device)
        head = _selective_head(model.get_output_embeddings(), model_positions, targets, kwargs)
        with _head_swapped(model, head):
            out = model(input_ids=model_ids, **forward).logits
    shape = positions.shape
    if entropy:
        logp_sel, ent_sel = out[:, 0], out[:, 1]
    else:
        logp_sel, ent_sel = out, None
    logp = torch.zeros(shape, dtype=torch.float32, device=device).masked_scatter(
        positions, logp_sel
    )
    ent = None
    if ent_sel is not None:
        ent = torch.zeros(shape, dtype=torch.float32, device=device).masked_scatter(
            positions, ent_sel
        )
    return logp, ent


def compute_logprobs(
    model: nn.Module,
    samples: Sequence[Sample],
    batches: Sequence[MicroBatch],
    settings: LogprobSettings,
) -> list[list[float]]:
    """Per-target log-probs of each sample under ``model``, without keeping activations.

    ``batches``: the samples' micro-batches (:func:`spreadrl.train.batching.pass_batches`),
    collated once for every pass of the step. Only trained positions (mask 1) are
    computed; the others are 0.
    """
    out: list[list[float]] = [[] for _ in samples]
    with torch.no_grad():
        for micro in batches:
            batch = micro.batch
            logp, _ = sequence_logprobs(model, batch, settings)
            logp = logp.float().cpu()
            offsets = batch["offsets"].tolist() if "offsets" in batch else [0] * len(micro.index)
            for row, (i, cut) in enumerate(zip(micro.index, offsets, strict=True)):
                own = logp[row, : len(samples[i].ids) - 1 - cut].tolist()
                out[i] = [0.0] * cut + own  # the cut prefix holds no trained position
    return out


def _matmul_dtype(saved: torch.dtype | None, tensor: torch.Tensor) -> torch.dtype:
    return saved if saved is not None else tensor.dtype


class FusedHeadLogprob(torch.autograd.Function):
    """``[n]`` (or ``[n, 2]`` with entropy) log-probs of ``targets`` under ``hidden @ weight.T``.

    ``forward`` and ``backward`` keep the signatures of ``torch.autograd.Function``'s
    (``apply``'s arguments arrive as ``*args``) and hand them to typed functions."""

    @staticmethod
    def forward(ctx: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        return _fused_forward(ctx, *args, **kwargs)

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> tuple[torch.Tensor | None, ...]:
        (grad_out,) = grad_outputs
        return _fused_backward(ctx, grad_out)


def _fused_forward(
    ctx: Any,
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
    with_entropy: bool,
    chunk: int,
) -> torch.Tensor:
    """:meth:`FusedHeadLogprob.forward`: the log-probs, chunk by chunk."""
    device = hidden.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
    ctx.save_for_backward(hidden, weight, targets)
    ctx.args = (temperature, top_k, top_p, with_entropy, chunk, dtype)
    out = []
    for start in range(0, hidden.shape[0], chunk):
        h, t = hidden[start : start + chunk], targets[start : start + chunk]
        cd = _matmul_dtype(dtype, h)
        raw = h.to(cd) @ weight.to(cd).t()
        out.append(_logits_logprobs(raw, t, temperature, top_k, top_p, with_entropy))
    if not out:
        return hidden.new_zeros((0, 2) if with_entropy else (0,), dtype=torch.float32)
    return torch.cat(out)


def _fused_backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    """:meth:`FusedHeadLogprob.backward`: the hand-written gradients (module docstring)."""
    hidden, weight, targets = ctx.saved_tensors
    temperature, top_k, top_p, with_entropy, chunk, dtype = ctx.args
    grad_h = torch.empty_like(hidden)
    grad_w = torch.zeros_like(weight, dtype=torch.float32)
    for start in range(0, hidden.shape[0], chunk):
        h, t = hidden[start : start + chunk], targets[start : start + chunk]
        g = grad_out[start : start + chunk].float()
        cd = _matmul_dtype(dtype, h)
        hc, wc = h.to(cd), weight.to(cd)
        scores = _sampling_scores(hc @ wc.t(), temperature, top_k, top_p, t)
        logp_all = torch.log_softmax(scores, dim=-1)
        probs = logp_all.exp()  # 0 outside the kept set
        g_logp = g[:, 0] if with_entropy else g
        d = probs * -g_logp.unsqueeze(-1)
        d.scatter_add_(-1, t.unsqueeze(-1), g_logp.unsqueeze(-1))
        if with_entropy:
            entropy = -(probs * logp_all.masked_fill(probs == 0, 0.0)).sum(-1, keepdim=True)
            d -= g[:, 1:2] * probs * (logp_all.masked_fill(probs == 0, 0.0) + entropy)
        if temperature != 1.0:
            d = d / temperature
        d = d.to(cd)
        grad_h[start : start + chunk] = (d @ wc).to(hidden.dtype)
        grad_w += (d.t() @ hc).float()
    return grad_h, grad_w.to(weight.dtype), None, None, None, None, None, None
