"""The update's micro-batch plan: every sample once per epoch, weights that add up to one
optimizer step's loss (exact gradient accumulation), one optimizer step per mini-batch."""

from __future__ import annotations

import pytest
import torch

from spreadrl.train.batching import Sample, micro_batch_plan


def _samples():
    # prompts of 3 tokens, responses of 1..6 trained tokens: 6 + k ids, k + 0 trained
    return [Sample(ids=list(range(3 + k)), mask=[0, 0, 0] + [1] * k) for k in range(1, 7)]


@pytest.mark.parametrize("token_mean", [True, False])
def test_the_plan_covers_every_sample_once_with_weights_adding_up(token_mean):
    samples = _samples()
    plan = list(
        micro_batch_plan(
            samples,
            mini_batch_size=4,
            micro_batch_tokens=12,
            token_mean=token_mean,
            generator=torch.Generator().manual_seed(0),
            prefix_min=0,
            pad_id=0,
        )
    )
    assert len(plan) == 2  # 6 samples in mini-batches of 4: two optimizer steps
    seen = [id(s) for mini in plan for micro in mini for s in micro.samples]
    assert sorted(seen) == sorted(id(s) for s in samples)
    for mini in plan:
        assert sum(m.weight for m in mini) == pytest.approx(1.0)
        assert all(sum(len(s.ids) for s in m.samples) <= 12 for m in mini if len(m.samples) > 1)
        members = [s for m in mini for s in m.samples]
        for micro in mini:  # each micro-batch weighs its share of the mini-batch
            own = [sum(s.mask[1:]) for s in micro.samples] if token_mean else micro.samples
            whole = [sum(s.mask[1:]) for s in members] if token_mean else members
            share = sum(own) / sum(whole) if token_mean else len(own) / len(whole)
            assert micro.weight == pytest.approx(share)
