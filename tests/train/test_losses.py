"""Hand-computed checks of the RL loss pieces."""

import math

import pytest
import torch

from spreadrl.train.losses import (
    grpo_token_loss,
    kl_penalty,
    masked_mean,
    policy_loss,
    tis_weights,
)


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


# --- grpo_token_loss: the whole loss, one hand-worked case per term -----------------------
# Each case makes every other term vanish (or fixes it), so the expected number is the
# term's own: a version of the function without that term gives a different number.


def _whole(logp, adv, mask=None, old=None, **sections):
    from spreadrl.train.config import LossConfig

    values = {"clip_low": 0.2, "clip_high": 0.2, **sections.pop("cfg", {})}
    logp = torch.tensor([logp])
    old = torch.zeros_like(logp) if old is None else torch.tensor([old])
    mask = torch.ones_like(logp) if mask is None else torch.tensor([mask])
    tensors = {k: torch.tensor([v]) for k, v in sections.items()}
    return grpo_token_loss(logp, old, torch.tensor([adv]), mask, LossConfig(**values), **tensors)


def test_whole_loss_clipped_policy_term_is_clipped_and_token_mean():
    # token 0: r = 1.5, A = +1 -> max(-1.5, -1.2) = -1.2; token 1: r = 1, A = +1 -> -1;
    # token 2 masked out. Token mean: (-1.2 - 1) / 2 = -1.1 (unclipped would be -1.25)
    loss, m = _whole([math.log(1.5), 0.0, 5.0], [1.0, 1.0, 1.0], mask=[1.0, 1.0, 0.0])
    assert loss.item() == pytest.approx(-1.1)
    assert m["loss"] == pytest.approx(-1.1) and m["clip_frac_high"] == pytest.approx(0.5)


def test_whole_loss_dual_clip_bounds_a_negative_advantage():
    # r = 5, A = -1: the clipped term is max(5, 1.2) = 5; dual clip c = 3 -> min(5, 3) = 3
    loss, _ = _whole([math.log(5.0)], [-1.0], cfg={"dual_clip_c": 3.0})
    assert loss.item() == pytest.approx(3.0)


def test_whole_loss_tis_weights_the_policy_term_when_on():
    # r = 1 (logp = old = 0), A = +1 -> -1; rollout log-prob log(0.5): weight exp(0 - log 0.5)
    # = 2, capped at 1.5 -> -1.5. With tis off the rollout's log-probs change nothing.
    rollout = {"rollout_logp": [math.log(0.5)]}
    on, m = _whole([0.0], [1.0], cfg={"tis": True, "tis_cap": 1.5}, **rollout)
    off, _ = _whole([0.0], [1.0], **rollout)
    assert on.item() == pytest.approx(-1.5) and m["tis_weight_mean"] == pytest.approx(1.5)
    assert off.item() == pytest.approx(-1.0)


def test_whole_loss_adds_the_k3_kl_times_its_coefficient():
    # A = 0: no policy term. logp = log 0.5, ref = 0: d = ref - logp = log 2,
    # k3 = e^d - d - 1 = 2 - log 2 - 1 = 0.30685; x kl_coef 0.5 = 0.15343
    k3 = 1.0 - math.log(2.0)
    loss, m = _whole([math.log(0.5)], [0.0], cfg={"kl_coef": 0.5}, ref_logp=[0.0])
    assert loss.item() == pytest.approx(0.5 * k3) and m["kl"] == pytest.approx(k3)
    # k1 = logp - ref = log 0.5
    k1, _ = _whole(
        [math.log(0.5)], [0.0], cfg={"kl_coef": 0.5, "kl_estimator": "k1"}, ref_logp=[0.0]
    )
    assert k1.item() == pytest.approx(0.5 * math.log(0.5))


def test_whole_loss_subtracts_the_entropy_bonus():
    # A = 0: no policy term; masked mean entropy (2 + 4) / 2 = 3 (token 2 masked), x 0.1
    loss, m = _whole(
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
        mask=[1.0, 1.0, 0.0],
        cfg={"entropy_coef": 0.1},
        entropy=[2.0, 4.0, 100.0],
    )
    assert loss.item() == pytest.approx(-0.3) and m["entropy"] == pytest.approx(3.0)


def test_whole_loss_adds_its_terms():
    # r = 1.5, A = +1 (-1.2), tis weight 1 (rollout = old), kl k3 at logp - ref = log 1.5
    # (d = -log 1.5: e^d - d - 1 = 2/3 + log 1.5 - 1), entropy 2: all three together
    d = -math.log(1.5)
    kl = math.exp(d) - d - 1.0
    loss, _ = _whole(
        [math.log(1.5)],
        [1.0],
        cfg={"tis": True, "kl_coef": 0.5, "entropy_coef": 0.1},
        rollout_logp=[0.0],
        ref_logp=[0.0],
        entropy=[2.0],
    )
    assert loss.item() == pytest.approx(-1.2 + 0.5 * kl - 0.2)


def test_whole_loss_aggregates_as_the_section_says():
    # r = 1 everywhere; sequence 0 has 3 tokens with A = 1, sequence 1 one token with A = 4.
    # token-mean: -(1 + 1 + 1 + 4) / 4 = -1.75; seq-mean-token-mean: -(1 + 4) / 2 = -2.5
    from spreadrl.train.config import LossConfig

    zeros = torch.zeros(2, 3)
    adv = torch.tensor([[1.0, 1.0, 1.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    tok, _ = grpo_token_loss(zeros, zeros, adv, mask, LossConfig(aggregation="token-mean"))
    seq, _ = grpo_token_loss(zeros, zeros, adv, mask, LossConfig(aggregation="seq-mean-token-mean"))
    assert tok.item() == pytest.approx(-1.75) and seq.item() == pytest.approx(-2.5)
