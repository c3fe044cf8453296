"""Group advantages on hand-computed cases, in both the [G, n] and the flat form."""

import math

import pytest
import torch

from spreadrl.train.rewards import group_advantages, nonconstant_groups


def test_group_advantages_normalise_within_groups():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    a = group_advantages(r)
    # mean 0.5; unbiased std = sqrt(4 * 0.25 / 3) = sqrt(1/3)
    scale = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    assert a[0].tolist() == pytest.approx([scale, -scale, -scale, scale])
    assert a[1].tolist() == [0.0] * 4  # a constant group carries no signal
    assert nonconstant_groups(r).tolist() == [True, False]


def test_group_advantages_on_tcr_rewards():
    # a TCR group: one correct (1.0), wrong answers with 0, 2 and 5 tool calls
    r = torch.tensor([[1.0, -1.0, -0.8, -0.6]])
    mean = (1.0 - 1.0 - 0.8 - 0.6) / 4  # -0.35
    std = math.sqrt(((1.35) ** 2 + 0.65**2 + 0.45**2 + 0.25**2) / 3)
    expected = [(x - mean) / (std + 1e-6) for x in r[0].tolist()]
    assert group_advantages(r)[0].tolist() == pytest.approx(expected, rel=1e-5)
    assert group_advantages(r, normalize_std=False)[0].tolist() == pytest.approx(
        [1.35, -0.65, -0.45, -0.25], rel=1e-5
    )


def test_flat_rewards_with_group_ids_match_the_grid_form():
    grid = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
    flat = torch.tensor([0.0, 1.0, 1.0, 0.0, 1.0, 0.0])
    ids = torch.tensor([7, 3, 7, 3, 3, 7])  # interleaved, non-contiguous ids
    a = group_advantages(flat, group_ids=ids)
    g = group_advantages(grid)
    # group 3 holds rewards (1, 0, 1) at positions 1, 3, 4; group 7 holds (0, 1, 0)
    assert a[[1, 3, 4]].tolist() == pytest.approx(g[1, [1, 0, 2]].tolist(), rel=1e-6)
    assert a[[0, 2, 5]].tolist() == pytest.approx(g[0, [1, 0, 2]].tolist(), rel=1e-6)


def test_flat_groups_of_unequal_size_and_singletons():
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 5.0])
    ids = [0, 0, 1, 1, 1, 2]
    a = group_advantages(rewards, group_ids=ids)
    # group 0: mean 0.5, std sqrt(0.5); group 1: mean 1/3, std sqrt(1/3); group 2: one rollout
    s0, s1 = math.sqrt(0.5) + 1e-6, math.sqrt(1 / 3) + 1e-6
    expected = [0.5 / s0, -0.5 / s0, (2 / 3) / s1, -(1 / 3) / s1, -(1 / 3) / s1, 0.0]
    assert a.tolist() == pytest.approx(expected, rel=1e-5)


def test_bad_shapes_are_rejected():
    with pytest.raises(ValueError, match="num_groups, group_size"):
        group_advantages(torch.zeros(4))
    with pytest.raises(ValueError, match="must both be"):
        group_advantages(torch.zeros(4), group_ids=torch.zeros(3))
