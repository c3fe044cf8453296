"""One resumable seeded shuffle: the order SFT reads its data in and GRPO draws its prompts.

Each epoch walks the items in a permutation seeded by ``seed + epoch``; the
epoch, the position in it and the permutation itself are the checkpointed
state, so a resumed run draws exactly the items the uninterrupted run would
have drawn. Only the permutation differs between the two recipes, and it stays
as each recipe has always made it, so existing runs and checkpoints keep their
order: GRPO shuffles with Python's ``random`` (:func:`python_permutation`),
SFT with ``torch.randperm`` (:func:`torch_permutation`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import torch

T = TypeVar("T")

Permutation = Callable[[int, int], list[int]]
"""``(size, seed) -> order``: a permutation of ``range(size)`` fixed by ``seed``."""


def python_permutation(size: int, seed: int) -> list[int]:
    """``random.Random(seed).shuffle`` of ``range(size)`` (GRPO's prompt order)."""
    order = list(range(size))
    random.Random(seed).shuffle(order)
    return order


def torch_permutation(size: int, seed: int) -> list[int]:
    """``torch.randperm`` with a generator seeded by ``seed`` (SFT's data order)."""
    return torch.randperm(size, generator=torch.Generator().manual_seed(seed)).tolist()


class EpochShuffle(Generic[T]):
    """Draws ``items`` in a seeded shuffled order, epoch after epoch; resumable.

    ``next(n)`` crosses epoch boundaries on its own (a batch may end one epoch
    and start the next). ``state()`` is a JSON-able dict ``{"epoch", "position",
    "order"}``; ``load`` also takes a state without ``order`` (SFT checkpoints
    written before this module) and rebuilds it from the seed and epoch.
    """

    def __init__(
        self, items: Sequence[T], seed: int, permutation: Permutation = python_permutation
    ) -> None:
        if not items:
            raise ValueError("EpochShuffle needs at least one item to draw")
        self.items, self.seed, self.permutation = items, seed, permutation
        self.epoch, self.position = 0, 0
        self.order = permutation(len(items), seed)

    def next(self, count: int) -> list[T]:
        """The next ``count`` items, starting a new epoch's permutation when one runs out."""
        out: list[T] = []
        while len(out) < count:
            if self.position >= len(self.order):
                self.epoch += 1
                self.position = 0
                self.order = self.permutation(len(self.items), self.seed + self.epoch)
            out.append(self.items[self.order[self.position]])
            self.position += 1
        return out

    def state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "order": list(self.order)}

    def load(self, state: dict[str, Any]) -> None:
        """Continue from ``state()``; the order is rebuilt when the state does not carry one."""
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        order = state.get("order")
        if order:
            self.order = [int(i) for i in order]
        else:  # an SFT checkpoint, or GRPO's saved before its first draw
            self.order = self.permutation(len(self.items), self.seed + self.epoch)


def prompt_order(
    prompts: Sequence[tuple[str, int]], *, seed: int, state: dict[str, Any] | None
) -> EpochShuffle[tuple[str, int]]:
    """A GRPO run's ``prompts`` (task id, case: :meth:`TaskSet.episode_keys
    <spreadrl.data.task.TaskSet.episode_keys>`) in a seeded order, epoch after epoch; at the
    position a checkpoint's sampler ``state`` recorded when resuming."""
    sampler = EpochShuffle(prompts, seed=seed)
    if state is not None:
        sampler.load(state)
    return sampler
