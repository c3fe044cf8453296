"""The KL penalty and the entropy bonus act on the gradient, in the right direction.

The tests that select on ``kl`` check the reported metric; these check the step. With
every advantage 0 the policy-gradient term contributes exactly nothing, so whatever
moves the weights is the regularizer under test: a step with the KL penalty must bring
the policy's log-probs closer to the reference's, and a step with a positive entropy
bonus must raise the policy's entropy. Deleting the KL term from the loss
(``train/trained_model.py``), or flipping the bonus's sign, fails them; with the coefficient
0 the same step leaves the weights exactly as they were (the control).
"""

from __future__ import annotations

import pytest
import torch

from spreadrl.train.batching import Sample, collate
from spreadrl.train.logprobs import sequence_logprobs
from spreadrl.train.losses import kl_penalty, masked_mean
from spreadrl.train.trained_model import policy_update
from tests.train.test_logprobs import tiny_qwen3
from tests.train.update_args import score, update_args

LR = 0.5


def _samples(ref_model=None):
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(4):
        ids = torch.randint(3, 90, (10 + 2 * i,), generator=g).tolist()
        out.append(Sample(ids=ids, mask=[0] * 4 + [1] * (len(ids) - 4), advantage=0.0))
    if ref_model is not None:
        ref = score(ref_model, out, micro_batch_tokens=10_000)
        for sample, lp in zip(out, ref, strict=True):
            sample.ref_logprobs = lp
    return out


def _step(model, samples, **settings):
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    kw = dict(micro_batch_tokens=10_000, grad_clip=1e9, **settings)
    return policy_update(model, opt, samples, *update_args(**kw), pad_id=0)


def _kl(model, samples):
    batch = collate(samples, 0)
    with torch.no_grad():
        logp, _ = sequence_logprobs(model, batch)
        kl = kl_penalty(logp, batch["ref_logprobs"], kind="k3")
        return float(masked_mean(kl, batch["loss_mask"]))


def _entropy(model, samples):
    batch = collate(samples, 0)
    with torch.no_grad():
        _, ent = sequence_logprobs(model, batch, entropy=True)
        return float(masked_mean(ent, batch["loss_mask"]))


def test_the_kl_penalty_pulls_the_policy_toward_the_reference():
    # k3 (the default): per token exp(d) - d - 1, d = ref - logp, smallest at logp = ref,
    # so its gradient moves each trained token's log-prob toward the reference's
    samples = _samples(ref_model=tiny_qwen3(seed=1))
    model = tiny_qwen3(seed=0)
    before = _kl(model, samples)
    assert before > 1e-3  # two different random models: something to pull
    _step(model, samples, kl_coef=1.0, kl_estimator="k3")
    after = _kl(model, samples)
    assert after < 0.9 * before, (before, after)


def test_without_the_kl_coefficient_nothing_moves():
    samples = _samples(ref_model=tiny_qwen3(seed=1))
    model = tiny_qwen3(seed=0)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    _step(model, samples, kl_coef=0.0)
    assert all(torch.equal(v, start[k]) for k, v in model.state_dict().items())


def test_a_positive_entropy_bonus_raises_the_entropy():
    samples = _samples()
    model = tiny_qwen3(seed=0)
    before = _entropy(model, samples)
    coef = 5.0
    metrics = _step(model, samples, entropy_coef=coef)
    after = _entropy(model, samples)
    # the only gradient is -coef * grad(H), so SGD raises H by lr * |grad H|^2 to first
    # order (grad_norm = coef * |grad H|): asked for half of that, far above rounding
    rise = LR * (metrics["grad_norm"] / coef) ** 2
    assert rise > 1e-4
    assert after - before > 0.5 * rise, (before, after, rise)
    assert metrics["entropy"] == pytest.approx(before, rel=1e-5)  # the metric is the pre-step one
