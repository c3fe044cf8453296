"""Token sequences to padded micro-batches, packed by a token budget.

A training sample is a token sequence with a loss mask over its positions and
optional per-token or per-sequence values (old log-probs, advantages). Samples
are sorted by length and grouped so that each micro-batch holds at most
``max_tokens`` tokens after padding (dynamic batch size): long multi-turn
episodes go a few at a time, short ones many at a time, and padding waste
stays small.

Shared prefixes. The G rollouts of a GRPO group (``Sample.group``; every SFT
conversation counts as one group) start with the same prompt: hundreds of
tokens of tool schemas and task, none of them trained. With
``shared_prefix_min`` set, :func:`collate` cuts the tokens a group's samples
share (before the first trained token) into one prefix row per group and
leaves each sample only its continuation; the log-prob pass
(:func:`spreadrl.train.logprobs.sequence_logprobs`) runs the prefix rows once
and the continuations against their KV cache. :func:`pack_by_tokens` then keeps
a group together in one micro-batch where it fits and counts its prefix once.

Packed micro-batches: every row's real tokens back to back in one row, no padding.

A collated micro-batch (:func:`spreadrl.train.batching.collate`) right-pads its
rows to the longest, and the forward computes over the padding too. Packed
(``model.packed_sequences``), the rows' real tokens run as one sequence whose
``position_ids`` restart at 0 at each row's start and no attention mask is
given: transformers then builds a block-diagonal causal mask from the position
resets (sdpa and eager; a varlen flash kernel, where installed, takes the
sequence boundaries instead and computes no masked block at all). Each token
sees exactly the tokens it saw in its own padded row, at the same positions,
so the log-probs are the padded path's (the tests compare them); the trained
positions come out in the same order, so the caller scatters them back into
the padded [B, T-1] layout unchanged. A batch with shared-prefix rows is not
packed (it has its own layout).
"""

from __future__ import annotations

import os.path
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from spreadrl.train.distributed import is_fsdp

# Below this many shared tokens a group's prefix is not worth a second forward call.
MIN_SHARED_PREFIX = 32


@dataclass
class Sample:
    """One sequence to train on. ``mask[i]`` = 1 when token i is trained (predicted)."""

    ids: list[int]
    mask: list[int]
    advantage: float = 0.0
    old_logprobs: list[float] | None = None
    ref_logprobs: list[float] | None = None
    rollout_logprobs: list[float] | None = None
    group: int = 0
    # asynchronous GRPO: the oldest policy version among the sampled tokens (None: synchronous)
    version: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.mask):
            raise ValueError(f"ids ({len(self.ids)}) and mask ({len(self.mask)}) differ in length")

    @property
    def trained_tokens(self) -> int:
        return int(sum(self.mask))


def common_untrained_prefix(samples: Sequence[Sample]) -> int:
    """Tokens every sample starts with, up to the first trained token (and one short of
    the shortest sample, so each keeps a token after it); 0 for fewer than 2 samples."""
    if len(samples) < 2:
        return 0
    common = len(os.path.commonprefix([s.ids for s in samples]))
    first_trained = min((s.mask.index(1) if 1 in s.mask else len(s.ids)) for s in samples)
    return max(0, min(common, first_trained, min(len(s.ids) for s in samples) - 1))


def shared_prefix_lengths(samples: Sequence[Sample], min_tokens: int) -> list[int]:
    """Per sample, how many of its first tokens go into its group's prefix row (0: none).

    A group (same ``Sample.group``, at least 2 samples among ``samples``) whose
    common untrained prefix is C tokens puts the first C - 1 in the prefix row:
    the sample keeps the last shared token, whose hidden state predicts its
    first own token, so every trained position is computed in the sample's own
    row. Groups sharing fewer than ``min_tokens`` such tokens (or
    ``min_tokens`` <= 0) are left whole.
    """
    out = [0] * len(samples)
    if min_tokens <= 0:
        return out
    groups: dict[int, list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault(s.group, []).append(i)
    for members in groups.values():
        cached = common_untrained_prefix([samples[i] for i in members]) - 1
        if len(members) >= 2 and cached >= max(1, min_tokens):
            for i in members:
                out[i] = cached
    return out


def _cost(
    lengths: Sequence[int], cached: Sequence[int], groups: Sequence[int], idx: list[int]
) -> int:
    """Padded tokens a micro-batch of ``idx`` runs: its prefix rows, then its continuations."""
    prefix_groups = {groups[i] for i in idx if cached[i]}
    prefix = len(prefix_groups) * max((cached[i] for i in idx), default=0)
    return prefix + len(idx) * max(lengths[i] - cached[i] for i in idx)


def pack_by_tokens(
    samples: Sequence[Sample], max_tokens: int, *, shared_prefix_min: int = 0
) -> list[list[int]]:
    """Indices of ``samples`` grouped into micro-batches of at most ``max_tokens`` padded tokens.

    A sample longer than the budget gets a micro-batch of its own (never cut).
    With ``shared_prefix_min`` (see :func:`shared_prefix_lengths`) a group whose
    samples share a prefix is packed as one unit where it fits, its prefix
    counted once; a group too large for the budget is split, and the pieces
    still share their prefix when they hold two samples or more.
    """
    lengths = [len(s.ids) for s in samples]
    cached = shared_prefix_lengths(samples, shared_prefix_min)
    groups = [s.group for s in samples]
    units: dict[Any, list[int]] = {}
    for i in sorted(range(len(samples)), key=lambda i: lengths[i]):
        units.setdefault(("group", groups[i]) if cached[i] else ("alone", i), []).append(i)
    ordered = sorted(units.values(), key=lambda u: (max(lengths[i] for i in u), u[0]))
    batches: list[list[int]] = []
    current: list[int] = []
    for unit in ordered:
        if current and _cost(lengths, cached, groups, current + unit) <= max_tokens:
            current += unit
            continue
        if current:
            batches.append(current)
            current = []
        if _cost(lengths, cached, groups, unit) <= max_tokens:
            current = list(unit)
            continue
        for i in unit:  # a unit over the budget on its own: split it
            if current and _cost(lengths, cached, groups, current + [i]) > max_tokens:
                batches.append(current)
                current = []
            current.append(i)
    if current:
        batches.append(current)
    return batches


def collate(
    samples: Sequence[Sample],
    pad_id: int,
    *,
    shared_prefix_min: int = 0,
) -> dict[str, torch.Tensor]:
    """Right-padded tensors for a micro-batch.

    Returns input_ids/attention_mask [B, T] and, aligned with the *targets*
    ids[:, 1:] ([B, T-1]): loss_mask, advantages (broadcast per token), and
    old/ref/rollout log-probs where the samples carry them (given per target
    position, i.e. ``old_logprobs[i]`` is the log-prob of ``ids[i + 1]``).

    With ``shared_prefix_min`` each group's shared prefix
    (:func:`shared_prefix_lengths`, computed over this micro-batch) becomes one
    row of ``prefix_ids``/``prefix_attention`` [P, K], and row r of every
    tensor above starts ``offsets[r]`` tokens into its sample (0 for samples
    sharing nothing); ``prefix_index`` [B] names each row's prefix row.
    """
    cached = shared_prefix_lengths(samples, shared_prefix_min)
    width = max(len(s.ids) - o for s, o in zip(samples, cached, strict=True))
    batch = len(samples)
    input_ids = torch.full((batch, width), pad_id, dtype=torch.long)
    attention = torch.zeros((batch, width), dtype=torch.long)
    loss_mask = torch.zeros((batch, width - 1), dtype=torch.float32)
    advantages = torch.zeros((batch, width - 1), dtype=torch.float32)
    out: dict[str, torch.Tensor] = {}
    for row, (s, o) in enumerate(zip(samples, cached, strict=True)):
        n = len(s.ids) - o
        input_ids[row, :n] = torch.tensor(s.ids[o:], dtype=torch.long)
        attention[row, :n] = 1
        loss_mask[row, : n - 1] = torch.tensor(s.mask[o + 1 :], dtype=torch.float32)
        advantages[row, : n - 1] = s.advantage
    for name in ("old_logprobs", "ref_logprobs", "rollout_logprobs"):
        values = [getattr(s, name) for s in samples]
        if all(v is not None for v in values):
            tensor = torch.zeros((batch, width - 1), dtype=torch.float32)
            for row, (v, o) in enumerate(zip(values, cached, strict=True)):
                part = v[o:]
                tensor[row, : len(part)] = torch.tensor(part, dtype=torch.float32)
            out[name] = tensor
    out.update(
        input_ids=input_ids, attention_mask=attention, loss_mask=loss_mask, advantages=advantages
    )
    if any(cached):
        out.update(_prefix_rows(samples, cached, pad_id))
    return out


def _prefix_rows(
    samples: Sequence[Sample], cached: list[int], pad_id: int
) -> dict[str, torch.Tensor]:
    rows: dict[int, int] = {}  # group -> prefix row
    heads: list[list[int]] = []
    index = []
    for s, o in zip(samples, cached, strict=True):
        if o and s.group not in rows:
            rows[s.group] = len(heads)
            heads.append(s.ids[:o])
        index.append(rows[s.group] if o else 0)
    width = max(len(h) for h in heads)
    prefix_ids = torch.full((len(heads), width), pad_id, dtype=torch.long)
    prefix_attention = torch.zeros((len(heads), width), dtype=torch.long)
    for row, h in enumerate(heads):
        prefix_ids[row, : len(h)] = torch.tensor(h, dtype=torch.long)
        prefix_attention[row, : len(h)] = 1
    return {
        "prefix_ids": prefix_ids,
        "prefix_attention": prefix_attention,
        "prefix_index": torch.tensor(index, dtype=torch.long),
        "offsets": torch.tensor(cached, dtype=torch.long),
    }


def prefix_sharing(model: nn.Module, min_tokens: int) -> int:
    """The ``shared_prefix_min`` to collate with for ``model``: ``min_tokens``, or 0 (off)
    under activation checkpointing and under FSDP.

    Decide before :func:`collate`, which cuts the rows.
    Activation checkpointing: a checkpointed decoder layer drops the KV cache it
    is given (transformers sets ``past_key_values=None`` there: recomputing the
    layer in backward would append to the cache a second time), so the
    continuations could not see their prefix. FSDP2: the prefix pass is a second
    forward of every layer before one backward; FSDP2's backward hooks (prefetch
    by forward order, one reduce-scatter per forward) then issue their
    collectives in an order that differs between ranks, and a two-rank run hung.
    Both take the plain path, one full row per sample (the same values).
    """
    if is_fsdp(model):
        return 0
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # transformers 5, 4
        on = getattr(model, name, None)  # a peft wrapper forwards it to its base model
        if on is not None:
            return 0 if on else min_tokens
    return min_tokens


def pack(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, loss_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids [1, N], position_ids [1, N], trained positions [1, N-1] as bool) of a right-padded
    batch (ids/attention [B, T], loss mask [B, T-1]); N is the count of real tokens."""
    ids, positions, trained = [], [], []
    for row in range(input_ids.shape[0]):
        n = int(attention_mask[row].sum())
        ids.append(input_ids[row, :n])
        positions.append(torch.arange(n, device=input_ids.device))
        mask = loss_mask[row, : max(n - 1, 0)] > 0
        # the row's last token would predict the next row's first: never trained
        trained.append(torch.cat([mask, mask.new_zeros(1 if n else 0)]))
    packed_trained = torch.cat(trained)[:-1] if trained else torch.zeros(0, dtype=torch.bool)
    return (
        torch.cat(ids).unsqueeze(0),
        torch.cat(positions).unsqueeze(0),
        packed_trained.unsqueeze(0),
    )
