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
Prefix sharing is off (one full row per sample, the same values) under activation
checkpointing and under FSDP2, as :class:`spreadrl.train.logprobs.LogprobSettings`
decides at build time: a checkpointed decoder layer drops the KV cache it is given
(transformers sets ``past_key_values=None`` there: recomputing the layer in backward
would append to the cache a second time), so the continuations could not see their
prefix; under FSDP2 the prefix pass is a second forward of every layer before one
backward, whose hooks (prefetch by forward order, one reduce-scatter per forward) then
issue their collectives in an order that differs between ranks (a two-rank run hung).

The plan of a step (:func:`micro_batch_plan`, :func:`micro_batches`; GRPO's update and
SFT's step share it, :func:`pass_batches` the no-grad passes): its micro-batches packed
and collated once, and every rank's counts reduced in two collectives.

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

from spreadrl.train.distributed import all_reduce, all_reduce_values

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


@dataclass(frozen=True)
class MicroBatch:
    """One forward (and backward) of a training pass: its samples, collated once.

    ``index``: the samples' places in the list they were packed from. ``weight`` is
    the micro-batch's share of its optimizer step's trained tokens (or sequences,
    seq-mean-token-mean) over all ranks, times the world size (FSDP averages gradients
    over ranks). A padding micro-batch (``real`` False) holds the 2-token filler,
    weighted 0: it only keeps the ranks' collectives in step."""

    samples: list[Sample]
    batch: dict[str, torch.Tensor]
    index: list[int]
    weight: float = 1.0
    real: bool = True


def pass_batches(
    samples: Sequence[Sample], max_tokens: int, *, shared_prefix_min: int, pad_id: int
) -> list[MicroBatch]:
    """``samples`` as the no-grad passes' micro-batches of at most ``max_tokens`` padded
    tokens, collated once for the step's proximal and reference passes."""
    out = []
    for idx in pack_by_tokens(samples, max_tokens, shared_prefix_min=shared_prefix_min):
        chunk = [samples[i] for i in idx]
        out.append(
            MicroBatch(chunk, collate(chunk, pad_id, shared_prefix_min=shared_prefix_min), idx)
        )
    return out


def _trained(sample: Sample) -> int:
    return int(sum(sample.mask[1:]))


def micro_batch_plan(
    samples: Sequence[Sample],
    *,
    mini_batch_size: int,
    micro_batch_tokens: int,
    token_mean: bool,
    generator: torch.Generator,
    prefix_min: int,
    pad_id: int,
    world_size: int = 1,
) -> list[list[MicroBatch]]:
    """One epoch over ``samples``: its mini-batches (one optimizer step each) in a
    seeded random order, each as its token-budget micro-batches (:func:`micro_batches`).

    ``mini_batch_size`` over all ranks (0: one mini-batch, as large as the largest
    rank's share: ranks may hold unequal ones). Every rank gets the same number of
    mini-batches and, within each, of micro-batches (padding with filler ones), so the
    collectives of the update line up."""
    if mini_batch_size:
        size = max(1, mini_batch_size // world_size)
        n_mini = int(all_reduce(-(-len(samples) // size), op="max"))
    else:  # one mini-batch on every rank, unless no rank holds a sample
        longest = int(all_reduce(len(samples), op="max"))
        size, n_mini = max(1, longest), min(1, longest)
    order = torch.randperm(len(samples), generator=generator).tolist()
    minis = [[samples[i] for i in order[m * size : (m + 1) * size]] for m in range(n_mini)]
    return [
        plan
        for _, plan in micro_batches(
            minis,
            micro_batch_tokens,
            token_mean=token_mean,
            prefix_min=prefix_min,
            pad_id=pad_id,
            world_size=world_size,
        )
    ]


def micro_batches(
    minis: Sequence[Sequence[Sample]],
    micro_batch_tokens: int,
    *,
    token_mean: bool,
    prefix_min: int,
    pad_id: int,
    world_size: int = 1,
) -> list[tuple[float, list[MicroBatch]]]:
    """Optimizer steps' samples (``minis``: this rank's share of each) as token-budget
    micro-batches, collated, each step with its count over all ranks (trained tokens, or
    sequences without ``token_mean``) that its weights divide by: the plan GRPO's update
    and SFT's step share.

    Every rank gets as many micro-batches per step as the rank with the most, padding with
    filler ones (2 tokens, nothing trained, weight 0), so FSDP's collectives line up. All
    the steps' counts are reduced over ranks in two collectives."""
    counts = [sum(_trained(s) for s in mini) if token_mean else len(mini) for mini in minis]
    packs = [
        pack_by_tokens(mini, micro_batch_tokens, shared_prefix_min=prefix_min) if mini else []
        for mini in minis
    ]
    totals = all_reduce_values(counts)
    widths = all_reduce_values([len(p) for p in packs], op="max")
    filler = Sample(ids=[pad_id, pad_id], mask=[0, 0])
    filler_batch = collate([filler], pad_id)  # read-only: one for every filler micro-batch
    steps = []
    for mini, packed, total, width in zip(minis, packs, totals, widths, strict=True):
        plan = []
        for j in range(int(width)):
            if j >= len(packed):  # this rank has fewer: a zero, graph-connected loss
                plan.append(MicroBatch([filler], filler_batch, [], 0.0, real=False))
                continue
            chunk = [mini[i] for i in packed[j]]
            share = sum(_trained(s) for s in chunk) if token_mean else len(chunk)
            batch = collate(chunk, pad_id, shared_prefix_min=prefix_min)
            plan.append(MicroBatch(chunk, batch, packed[j], share / max(total, 1) * world_size))
        steps.append((total, plan))
    return steps
