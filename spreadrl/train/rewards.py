"""Reward terms of GRPO-TCR, each a pure function, composed by ``shape_reward``.

- outcome: 1.0 iff every answer cell matches (the checker's verdict), else 0.0; for
  an environment that grades (a foreign OpenEnv server's own reward, say 0.1 a
  character), that reward as the environment sent it;
- tool-call reward (TCR, DemyAgent / GRPO-TCR): a correct answer gets
  ``correct`` (1.0); a wrong one gets ``wrong + per_call * calls`` (-1 + 0.1
  per tool call) but never more than ``cap`` (-0.6), so trying tools pays a
  little even when the answer is wrong, which keeps exploration alive;
- overlong shaping (DAPO): a response longer than ``max_length - buffer``
  loses ``(length - (max_length - buffer)) / buffer * factor``; length counts
  tool-response tokens too. Past ``max_length`` the penalty keeps growing
  linearly (the rollout budget normally stops episodes there).

Group-relative advantages (GRPO) and the dynamic-sampling mask.

GRPO needs no value network: each prompt is rolled out G times and a rollout's
advantage is its reward measured against the others of its group,

    A_i = (R_i - mean(R_group)) / (std(R_group) + eps),

with std the unbiased (n - 1) standard deviation, as ``torch.std`` and verl's
GRPO compute it. Every token of a rollout gets that rollout's advantage.

A step's rollouts travel as one :class:`StepRollouts`: the episodes, their advantages,
the kept groups and the reward terms (the episode side makes it, the step source
hands it to the loop, the step's metrics read it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from spreadrl.rollout.types import Trajectory
from spreadrl.train.config import RewardConfig


def outcome_reward(passed: bool) -> float:
    """1.0 if the checker passed the answer, else 0.0."""
    return 1.0 if passed else 0.0


def tool_call_reward(
    passed: bool,
    num_tool_calls: int,
    *,
    correct: float = 1.0,
    wrong: float = -1.0,
    per_call: float = 0.1,
    cap: float = -0.6,
) -> float:
    """``correct`` if passed, else min(wrong + per_call * num_tool_calls, cap)."""
    if num_tool_calls < 0:
        raise ValueError(f"num_tool_calls must be >= 0, got {num_tool_calls}")
    if passed:
        return correct
    return min(wrong + per_call * num_tool_calls, cap)


def overlong_penalty(length: int, max_length: int, buffer: int, factor: float = 1.0) -> float:
    """0 up to max_length - buffer, then -(length - (max_length - buffer)) / buffer * factor.

    Reaches -factor at ``max_length`` and keeps falling linearly past it (no
    clamp), so a response that overran the budget still ranks below one that
    stopped at it. A buffer of 0 turns the term off.
    """
    if buffer <= 0:
        return 0.0
    start = max_length - buffer
    if length <= start:
        return 0.0
    return -(length - start) / buffer * factor


def shape_reward(
    cfg: RewardConfig,
    passed: bool,
    num_tool_calls: int,
    response_length: int,
    *,
    max_length: int | None = None,
    env_reward: float | None = None,
) -> tuple[float, dict[str, float]]:
    """The configured reward of one episode and its breakdown by term.

    The outcome term is ``env_reward`` when given (the environment's own reward: the
    checker's 1.0 or 0.0 for spreadrl's environments, whatever a foreign OpenEnv
    server grades), else ``outcome_reward(passed)``.

    ``cfg`` is a RewardConfig. With ``cfg.tool_call_reward`` on, TCR replaces
    the binary outcome (it already gives ``tcr_correct`` for a correct answer,
    so adding both would count the outcome twice); otherwise the outcome reward
    is used. The overlong term is added on top when enabled; its length limit
    is ``cfg.overlong_max_length`` or, when that is 0, ``max_length`` (the
    recipe passes rollout.max_response_tokens). ``response_length`` counts every
    token after the prompt, tool responses included.
    """
    terms: dict[str, float] = {}
    if cfg.tool_call_reward:
        terms["tcr"] = tool_call_reward(
            passed,
            num_tool_calls,
            correct=cfg.tcr_correct,
            wrong=cfg.tcr_wrong,
            per_call=cfg.tcr_per_call,
            cap=cfg.tcr_cap,
        )
    elif cfg.outcome:
        terms["outcome"] = outcome_reward(passed) if env_reward is None else env_reward
    if cfg.overlong:
        limit = cfg.overlong_limit(max_length or 0)
        if not limit:
            raise ValueError("overlong shaping needs reward.overlong_max_length or max_length")
        terms["overlong"] = overlong_penalty(
            response_length, limit, cfg.overlong_buffer, cfg.overlong_factor
        )
    return sum(terms.values()), terms


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


class StepRollouts(NamedTuple):
    """One step's episodes, their advantages [groups, G], the kept groups, the reward
    terms, and the rollout's metrics (phase times, refill rounds)."""

    trajectories: list[Trajectory]
    advantages: torch.Tensor
    keep: torch.Tensor  # bool [groups]
    reward_terms: list[dict[str, float]]  # each episode's reward by term
    metrics: dict[str, float]
