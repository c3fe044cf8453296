"""Hand-computed checks of the RL loss pieces."""

import math

import pytest
import torch

from spreadrl.train.losses import kl_penalty, masked_mean, policy_loss, tis_weights


def _loss(ratio, adv, **kw):
    logp = torch.log(torch.tensor([[ratio]]))
    return policy_loss(logp, torch.zeros(1, 1), torch.tensor([[adv]]), torch.ones(1, 1), **kw)[
        0
    ].item()


def test_clip_higher_bounds_positive_advantage_at_one_plus_high():
    # A > 0, r = 1.5: unclipped -1.5, clipped at 1.28 -> -1.28; max -> -1.28
    assert _loss(1.5, 1.0, clip_low=0.2, clip_high=0.28) == pytest.approx(-1.28)
    # within the band the ratio is used as is
    assert _loss(1.1, 1.0, clip_low=0.2, clip_high=0.28) == pytest.approx(-1.1)


def test_negative_advantage_clipped_low_and_dual_clip():
    # A < 0, r = 0.5: -A r = 0.5, -A clip(0.5, 0.8) = 0.8; max -> 0.8 (no gain from pushing lower)
    assert _loss(0.5, -1.0, clip_low=0.2, clip_high=0.28) == pytest.approx(0.8)
    # A < 0, r = 5: max(5, 1.28) = 5; dual clip c = 3 bounds it at -A c = 3
    assert _loss(5.0, -1.0) == pytest.approx(5.0)
    assert _loss(5.0, -1.0, dual_clip_c=3.0) == pytest.approx(3.0)


def test_clipping_only_bites_in_the_direction_the_advantage_pushes():
    # A > 0, r = 0.5 (below 1 - 0.2): max(-0.5, -0.8) = -0.5, the ratio is kept
    assert _loss(0.5, 1.0, clip_low=0.2, clip_high=0.28) == pytest.approx(-0.5)
    # A < 0, r = 1.5 (above 1 + 0.28): max(1.5, 1.28) = 1.5, the ratio is kept
    assert _loss(1.5, -1.0, clip_low=0.2, clip_high=0.28) == pytest.approx(1.5)
    # the advantage scales the loss: A = 2, r = 1.5 -> -2 * 1.28
    assert _loss(1.5, 2.0, clip_low=0.2, clip_high=0.28) == pytest.approx(-2.56)
    # dual clip leaves positive advantages alone
    assert _loss(5.0, 1.0, dual_clip_c=3.0, clip_high=0.28) == pytest.approx(-1.28)


def test_clip_fractions_and_ratio_metrics():
    ratio = torch.tensor([[1.5, 0.5, 1.0, 0.5]])
    adv = torch.tensor([[1.0, -1.0, 1.0, 1.0]])
    mask = torch.ones(1, 4)
    _, m = policy_loss(torch.log(ratio), torch.zeros(1, 4), adv, mask, clip_high=0.28)
    # token 0 is clipped high (A > 0, r > 1.28); token 1 low (A < 0, r < 0.8); token 3 is not
    assert m["clip_frac_high"] == pytest.approx(0.25) and m["clip_frac_low"] == pytest.approx(0.25)
    assert m["ratio_mean"] == pytest.approx((1.5 + 0.5 + 1.0 + 0.5) / 4)
    d = torch.log(ratio)
    assert m["approx_kl"] == pytest.approx(float((0.5 * d**2).mean()), rel=1e-6)


def test_tis_weights_scale_each_token():
    zeros = torch.zeros(1, 2)
    adv = torch.tensor([[1.0, 1.0]])
    w = torch.tensor([[2.0, 0.5]])
    loss, _ = policy_loss(zeros, zeros, adv, torch.ones(1, 2), tis_weights=w)
    assert loss.item() == pytest.approx(-(2.0 + 0.5) / 2)


def test_token_mean_vs_seq_mean_token_mean_on_unequal_lengths():
    per_token_adv = torch.tensor([[1.0, 1.0, 1.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    zeros = torch.zeros(2, 3)
    tok, _ = policy_loss(zeros, zeros, per_token_adv, mask, aggregation="token-mean")
    seq, _ = policy_loss(zeros, zeros, per_token_adv, mask, aggregation="seq-mean-token-mean")
    assert tok.item() == pytest.approx(-(1 + 1 + 1 + 4) / 4)
    assert seq.item() == pytest.approx(-((3 / 3) + 4) / 2)


def test_masked_tokens_do_not_affect_loss_or_gradient():
    logp = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    loss, _ = policy_loss(logp, logp.detach(), torch.ones(1, 3), mask)
    loss.backward()
    assert logp.grad[0, 1].item() == 0.0
    assert logp.grad[0, 0].item() != 0.0
    assert masked_mean(torch.zeros(1, 2), torch.zeros(1, 2)).item() == 0.0  # empty mask: 0, not NaN


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean"])
def test_masked_positions_can_hold_anything(aggregation):
    # tool-response tokens (mask 0) may carry garbage log-probs and advantages
    mask = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -0.7, -1.0]])
    old = torch.tensor([[-1.1, -2.0, -0.4], [-3.0, -0.9, -1.0]])
    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    noisy = torch.where(mask.bool(), logp, torch.tensor(50.0))
    noisy_adv = torch.where(mask.bool(), adv, torch.tensor(-9.0))
    a, _ = policy_loss(logp, old, adv, mask, aggregation=aggregation)
    b, _ = policy_loss(noisy, old, noisy_adv, mask, aggregation=aggregation)
    assert a.item() == pytest.approx(b.item())
    x = logp.clone().requires_grad_(True)
    policy_loss(x, old, adv, mask, aggregation=aggregation)[0].backward()
    assert (x.grad[mask == 0] == 0).all() and (x.grad[mask == 1] != 0).all()


def test_k3_kl_values():
    logp = torch.tensor([-1.0, -1.0])
    ref = torch.tensor([-1.0, -1.0 + math.log(2.0)])
    k3 = kl_penalty(logp, ref, kind="k3")
    # d = ref - logp: 0 -> 0; log 2 -> 2 - log2 - 1
    assert k3.tolist() == pytest.approx([0.0, 1.0 - math.log(2.0)])
    assert kl_penalty(logp, ref, kind="k1").tolist() == pytest.approx([0.0, -math.log(2.0)])
    big = kl_penalty(torch.tensor([-50.0]), torch.tensor([0.0]), clamp=10.0)
    assert big.item() == pytest.approx(math.exp(10) - 11)


def test_tis_weights_are_truncated_and_detached():
    old = torch.tensor([0.0, 0.0], requires_grad=True)
    rollout = torch.tensor([0.0, -5.0])
    w = tis_weights(old, rollout, cap=2.0)
    assert w.tolist() == pytest.approx([1.0, 2.0])
    assert not w.requires_grad


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_one_step_moves_sequence_logprob_in_the_advantage_direction(sign):
    # a tiny policy: token embedding -> Linear over an 11-token vocab
    torch.manual_seed(0)
    vocab, dim = 11, 8
    emb = torch.nn.Embedding(vocab, dim)
    head = torch.nn.Linear(dim, vocab)
    params = list(emb.parameters()) + list(head.parameters())
    ids = torch.tensor([[1, 4, 7, 2, 9]])
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0]])  # the third target is a tool-response token

    def token_logprobs(logits, labels):
        return torch.log_softmax(logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)

    def trained_logp():
        logp = token_logprobs(head(emb(ids[:, :-1])), ids[:, 1:])
        return (logp * mask).sum()

    before = trained_logp().item()
    opt = torch.optim.SGD(params, lr=0.1)
    logp = token_logprobs(head(emb(ids[:, :-1])), ids[:, 1:])
    loss, _ = policy_loss(logp, logp.detach(), torch.full((1, 4), sign), mask)
    loss.backward()
    opt.step()
    after = trained_logp().item()
    assert (after - before) * sign > 0
