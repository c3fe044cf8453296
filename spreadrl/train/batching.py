"""Token sequences to padded micro-batches, packed by a token budget.

A training sample is a token sequence with a loss mask over its positions and
optional per-token or per-sequence values (old log-probs, advantages). Samples
are sorted by length and grouped so that each micro-batch holds at most
``max_tokens`` tokens after padding (dynamic batch size): long multi-turn
episodes go a few at a time, short ones many at a time, and padding waste
stays small.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


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
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.mask):
            raise ValueError(f"ids ({len(self.ids)}) and mask ({len(self.mask)}) differ in length")

    @property
    def trained_tokens(self) -> int:
        return int(sum(self.mask))


def pack_by_tokens(samples: Sequence[Sample], max_tokens: int) -> list[list[int]]:
    """Indices of ``samples`` grouped into micro-batches of at most ``max_tokens`` padded tokens.

    A sample longer than the budget gets a micro-batch of its own (never cut).
    """
    order = sorted(range(len(samples)), key=lambda i: len(samples[i].ids))
    batches: list[list[int]] = []
    current: list[int] = []
    width = 0
    for i in order:
        length = len(samples[i].ids)
        new_width = max(width, length)
        if current and new_width * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, new_width = [], length
        current.append(i)
        width = new_width
    if current:
        batches.append(current)
    return batches


def collate(samples: Sequence[Sample], pad_id: int) -> dict[str, Any]:
    """Right-padded tensors for a micro-batch.

    Returns input_ids/attention_mask [B, T] and, aligned with the *targets*
    ids[:, 1:] ([B, T-1]): loss_mask, advantages (broadcast per token), and
    old/ref/rollout log-probs where the samples carry them (given per target
    position, i.e. ``old_logprobs[i]`` is the log-prob of ``ids[i + 1]``).
    """
    import torch

    width = max(len(s.ids) for s in samples)
    batch = len(samples)
    input_ids = torch.full((batch, width), pad_id, dtype=torch.long)
    attention = torch.zeros((batch, width), dtype=torch.long)
    loss_mask = torch.zeros((batch, width - 1), dtype=torch.float32)
    advantages = torch.zeros((batch, width - 1), dtype=torch.float32)
    out: dict[str, Any] = {}
    for row, s in enumerate(samples):
        n = len(s.ids)
        input_ids[row, :n] = torch.tensor(s.ids, dtype=torch.long)
        attention[row, :n] = 1
        loss_mask[row, : n - 1] = torch.tensor(s.mask[1:], dtype=torch.float32)
        advantages[row, : n - 1] = s.advantage
    for name in ("old_logprobs", "ref_logprobs", "rollout_logprobs"):
        values = [getattr(s, name) for s in samples]
        if all(v is not None for v in values):
            tensor = torch.zeros((batch, width - 1), dtype=torch.float32)
            for row, v in enumerate(values):
                tensor[row, : len(v)] = torch.tensor(v, dtype=torch.float32)
            out[name] = tensor
    out.update(
        input_ids=input_ids, attention_mask=attention, loss_mask=loss_mask, advantages=advantages
    )
    return out
