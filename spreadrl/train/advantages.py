"""Group-relative advantages (GRPO) and the dynamic-sampling mask.

GRPO needs no value network: each prompt is rolled out G times and a rollout's
advantage is its reward measured against the others of its group,

    A_i = (R_i - mean(R_group)) / (std(R_group) + eps),

with std the unbiased (n - 1) standard deviation, as ``torch.std`` and verl's
GRPO compute it. Every token of a rollout gets that rollout's advantage.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def group_advantages(
    rewards: torch.Tensor,
    eps: float = 1e-6,
    normalize_std: bool = True,
    *,
    group_ids: torch.Tensor | Sequence[int] | None = None,
) -> torch.Tensor:
    """A = (R - mean_group) / (std_group + eps), float32, same shape as ``rewards``.

    ``rewards`` is either [num_groups, group_size], one row per prompt, or flat
    [N] with ``group_ids`` [N] (any integers; groups may differ in size, e.g.
    after some rollouts were dropped). With ``normalize_std=False`` only the
    mean is subtracted (Dr. GRPO). A group whose rewards are all equal gets
    zero advantages: it carries no learning signal. A group of one rollout has
    no baseline and also gets zero (verl instead passes its raw reward through).
    """
    rewards = rewards.float()
    if group_ids is not None:
        return _flat_group_advantages(rewards, group_ids, eps, normalize_std)
    if rewards.dim() != 2:
        raise ValueError(
            "rewards must be [num_groups, group_size] (or flat with group_ids), "
            f"got shape {tuple(rewards.shape)}"
        )
    mean = rewards.mean(dim=1, keepdim=True)
    centered = rewards - mean
    if not normalize_std:
        return centered
    std = rewards.std(dim=1, keepdim=True) if rewards.shape[1] > 1 else torch.ones_like(mean)
    return centered / (std + eps)


def _flat_group_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor | Sequence[int], eps: float, normalize_std: bool
) -> torch.Tensor:
    group_ids = torch.as_tensor(group_ids, device=rewards.device)
    if rewards.dim() != 1 or group_ids.shape != rewards.shape:
        raise ValueError(
            f"flat rewards {tuple(rewards.shape)} and group_ids {tuple(group_ids.shape)} "
            "must both be [N]"
        )
    _, index = torch.unique(group_ids, return_inverse=True)
    num = int(index.max()) + 1 if index.numel() else 0
    count = torch.zeros(num, device=rewards.device).index_add_(0, index, torch.ones_like(rewards))
    mean = torch.zeros(num, device=rewards.device).index_add_(0, index, rewards) / count
    centered = rewards - mean[index]
    if not normalize_std:
        return centered
    sq = torch.zeros(num, device=rewards.device).index_add_(0, index, centered**2)
    std = torch.where(count > 1, (sq / (count - 1).clamp(min=1)).sqrt(), torch.ones_like(sq))
    return centered / (std[index] + eps)


def nonconstant_groups(rewards: torch.Tensor) -> torch.Tensor:
    """Bool [num_groups] for rewards [num_groups, group_size]: True where rewards differ.

    Dynamic sampling (DAPO) drops or refills the groups marked False.
    """
    return (rewards.max(dim=1).values - rewards.min(dim=1).values) > 0
