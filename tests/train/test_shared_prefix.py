"""A group's shared prompt run once: the same log-probs and gradients as the full rows.

The prefix path (spreadrl.train.batching cuts one prefix row per group,
spreadrl.train.logprobs runs it once and the continuations against its KV cache)
must equal the plain path within float32 rounding, for the update, the no-grad
old/reference passes and SFT, whatever the sampling settings, with LoRA, with
groups split over micro-batches and with multi-turn samples.
"""

import pytest
import torch

from spreadrl.train.batching import (
    Sample,
    collate,
    common_untrained_prefix,
    pack_by_tokens,
    shared_prefix_lengths,
)
from spreadrl.train.levers import ModelLevers
from spreadrl.train.logprobs import LogprobSettings, sequence_logprobs
from spreadrl.train.trained_model import policy_update
from tests.train.test_logprobs import tiny_qwen3 as _model
from tests.train.update_args import score, update_args

ATOL = 1e-5
MIN = 4  # the tests' prompts are short; the default (32) is for real tool prompts


def _groups(n_groups=3, size=4, seed=0, multi_turn=True):
    """GRPO-like samples: per group one prompt (lengths differ), G continuations, the
    multi-turn ones with a tool response (mask 0) between two assistant turns; plus
    one sample of a group of its own."""
    g = torch.Generator().manual_seed(seed)

    def rand(n):
        return torch.randint(3, 90, (n,), generator=g).tolist()

    out = []
    for group in range(n_groups):
        prompt = rand(9 + 3 * group)
        for k in range(size):
            first = rand(3 + (k + group) % 4)
            ids, mask = prompt + first, [0] * len(prompt) + [1] * len(first)
            if multi_turn and k % 2:
                tool, second = rand(4), rand(2 + k)
                ids, mask = ids + tool + second, mask + [0] * 4 + [1] * len(second)
            lp = (-torch.rand(len(ids) - 1, generator=g)).tolist()
            out.append(
                Sample(
                    ids,
                    mask,
                    advantage=float(torch.randn(1, generator=g)),
                    rollout_logprobs=lp,
                    old_logprobs=[x - 0.05 for x in lp],
                    ref_logprobs=[x + 0.1 for x in lp],
                    group=group,
                )
            )
    lone = rand(14)
    out.append(Sample(lone, [0] * 10 + [1] * 4, advantage=0.7, group=99))
    for s in out[-1:]:
        s.rollout_logprobs = [-0.5] * 13
        s.old_logprobs = [-0.6] * 13
        s.ref_logprobs = [-0.4] * 13
    return out


def _full(logp, batch, samples):
    """[B, T-1] of a collated (maybe cut) batch -> per sample, all target positions."""
    offsets = batch["offsets"].tolist() if "offsets" in batch else [0] * len(samples)
    return [
        torch.cat([logp.new_zeros(o), logp[r, : len(s.ids) - 1 - o]])
        for r, (s, o) in enumerate(zip(samples, offsets, strict=True))
    ]


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(
    "temperature,top_k,top_p,entropy",
    [(1.0, 0, 1.0, False), (0.7, 0, 1.0, True), (0.8, 5, 1.0, True), (0.9, 7, 0.85, True)],
)
def test_values_and_gradients_equal_the_full_rows(temperature, top_k, top_p, entropy):
    model = _model()
    samples = _groups()
    settings = LogprobSettings(temperature=temperature, top_k=top_k, top_p=top_p)
    results = {}
    for shared in (False, True):
        model.zero_grad(set_to_none=True)
        batch = collate(samples, pad_id=0, shared_prefix_min=MIN if shared else 0)
        assert ("prefix_ids" in batch) == shared
        logp, ent = sequence_logprobs(model, batch, settings, entropy=entropy, chunk_tokens=5)
        logps = _full(logp, batch, samples)
        ents = _full(ent, batch, samples) if entropy else None
        # a loss with a distinct weight per (sample, target position)
        loss = sum((lp * torch.cos(torch.arange(len(lp)) + i)).sum() for i, lp in enumerate(logps))
        if entropy:
            loss = loss + 0.3 * sum(e.sum() for e in ents)
        loss.backward()
        results[shared] = (logps, ents, _grads(model))
    (lp0, e0, g0), (lp1, e1, g1) = results[False], results[True]
    for a, b in zip(lp0, lp1, strict=True):
        torch.testing.assert_close(b, a, atol=ATOL, rtol=0)
    if entropy:
        for a, b in zip(e0, e1, strict=True):
            torch.testing.assert_close(b, a, atol=ATOL, rtol=0)
    assert g0.keys() == g1.keys()
    for name, grad in g0.items():
        torch.testing.assert_close(g1[name], grad, atol=ATOL, rtol=0, msg=name)


def test_the_cut_batch_runs_each_prompt_once():
    samples = _groups()
    cached = shared_prefix_lengths(samples, MIN)
    batch = collate(samples, pad_id=0, shared_prefix_min=MIN)
    prompts = [9, 12, 15]  # per group; the last shared token stays in every row
    assert cached == [p - 1 for p in prompts for _ in range(4)] + [0]
    assert batch["prefix_ids"].shape == (3, max(prompts) - 1)
    assert batch["prefix_index"].tolist() == [0] * 4 + [1] * 4 + [2] * 4 + [0]
    assert batch["offsets"].tolist() == cached
    plain = collate(samples, pad_id=0)
    run = batch["prefix_ids"].numel() + batch["input_ids"].numel()
    assert run < plain["input_ids"].numel()  # fewer positions through the model
    # the cut rows keep the per-target values of their own positions
    row, o = 5, cached[5]
    assert batch["old_logprobs"][row, : len(samples[5].ids) - 1 - o].tolist() == pytest.approx(
        samples[5].old_logprobs[o:]
    )
    assert batch["loss_mask"][row].sum() == sum(samples[5].mask[1:])


def test_prefix_rules():
    a = Sample([5, 6, 7, 8], [0, 1, 1, 1])
    b = Sample([5, 6, 7, 9, 9], [0, 0, 1, 1, 1])
    assert common_untrained_prefix([a, b]) == 1  # a's first trained token is at 1
    assert common_untrained_prefix([a]) == 0
    c = Sample([1, 2], [0, 1])
    assert common_untrained_prefix([Sample([1, 2, 3], [0, 0, 1]), c]) == 1  # keeps a suffix
    long = [Sample(list(range(10)) + [k], [0] * 10 + [1], group=g) for g in (0, 1) for k in (1, 2)]
    assert shared_prefix_lengths(long, 9) == [9] * 4
    assert shared_prefix_lengths(long, 10) == [0] * 4  # below the minimum: left whole
    assert shared_prefix_lengths(long, 0) == [0] * 4  # off
    assert shared_prefix_lengths(long[:1] + long[2:3], 4) == [0, 0]  # one sample per group


def test_packing_keeps_groups_together_and_counts_the_prompt_once():
    samples = _groups(n_groups=4, size=4, multi_turn=False)
    cached = shared_prefix_lengths(samples, MIN)
    tails = [len(s.ids) - c for s, c in zip(samples, cached, strict=True)]
    budget = 70  # a group costs one prompt (<= 17) + 4 tails (<= 9): fits; two do not
    micro = pack_by_tokens(samples, budget, shared_prefix_min=MIN)
    assert sorted(i for m in micro for i in m) == list(range(len(samples)))
    for m in micro:
        groups = {samples[i].group for i in m if cached[i]}
        cost = len(groups) * max(cached[i] for i in m) + len(m) * max(tails[i] for i in m)
        assert cost <= budget or len(m) == 1
    for group in range(4):
        holders = [k for k, m in enumerate(micro) if any(samples[i].group == group for i in m)]
        assert len(holders) == 1, (group, micro)
    # a budget below one group's cost splits it; its pieces still share their prompt
    small = pack_by_tokens(samples, 30, shared_prefix_min=MIN)
    assert sorted(i for m in small for i in m) == list(range(len(samples)))
    pieces = [m for m in small if len({samples[i].group for i in m}) == 1 and len(m) >= 2]
    assert pieces and all(
        "prefix_ids" in collate([samples[i] for i in m], 0, shared_prefix_min=MIN) for m in pieces
    )
    # without sharing the old packing: padded width x rows
    for m in pack_by_tokens(samples, budget):
        assert max(len(samples[i].ids) for i in m) * len(m) <= budget


class _Recorder:
    """An optimizer that keeps each step's gradients and leaves the weights alone."""

    def __init__(self, model):
        self.model, self.steps = model, []

    def zero_grad(self, set_to_none=True):
        self.model.zero_grad(set_to_none=set_to_none)

    def step(self):
        self.steps.append(_grads(self.model))


def _update(model, samples, **kw):
    settings = update_args(**{"grad_clip": 1e9, **kw})
    opt = _Recorder(model)
    metrics = policy_update(model, opt, samples, *settings, pad_id=0)
    return metrics, opt.steps


@pytest.mark.parametrize(
    "options",
    [
        dict(),  # one micro-batch, token-mean
        dict(micro_batch_tokens=60, aggregation="seq-mean-token-mean"),  # groups split
        dict(tis=True, tis_cap=1.5, kl_coef=0.1, entropy_coef=0.01, dual_clip_c=3.0),
        dict(temperature=0.8, top_k=6, top_p=0.9, mini_batch_size=6, micro_batch_tokens=90),
    ],
    ids=["plain", "split-groups", "tis-kl-entropy", "top-k-top-p-minibatches"],
)
def test_policy_update_equals_the_plain_path(options):
    model = _model(seed=1)
    samples = _groups(seed=2)
    m0, g0 = _update(model, samples, shared_prefix_min=0, **options)
    m1, g1 = _update(model, samples, shared_prefix_min=MIN, **options)
    assert len(g0) == len(g1) >= 1
    for step0, step1 in zip(g0, g1, strict=True):
        for name, grad in step0.items():
            torch.testing.assert_close(step1[name], grad, atol=ATOL, rtol=0, msg=name)
    # metrics are means over micro-batches, which the packing may cut differently
    keys = m0 if "micro_batch_tokens" not in options else ["grad_norm"]
    for key in keys:
        assert m1[key] == pytest.approx(m0[key], abs=1e-5), key


def test_old_and_reference_passes_equal_the_plain_path():
    model = _model(seed=3)
    samples = _groups(seed=4)
    kw = dict(micro_batch_tokens=60, temperature=0.7, top_k=5, top_p=0.95)
    plain = score(model, samples, shared_prefix_min=0, **kw)
    shared = score(model, samples, shared_prefix_min=MIN, **kw)
    for s, a, b in zip(samples, plain, shared, strict=True):
        assert len(a) == len(b) == len(s.ids) - 1
        assert b == pytest.approx(a, abs=ATOL)
        assert any(b)


def test_lora_gradients_equal_the_plain_path():
    from peft import LoraConfig, get_peft_model

    from spreadrl.models.compat import peft_wrapping

    with peft_wrapping():
        model = get_peft_model(
            _model(seed=5),
            LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "up_proj"]),
        )
    for name, p in model.named_parameters():  # B starts at zero; move it so A gets gradients
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.1)
    samples = _groups(seed=6)
    m0, g0 = _update(model, samples, shared_prefix_min=0, entropy_coef=0.01)
    m1, g1 = _update(model, samples, shared_prefix_min=MIN, entropy_coef=0.01)
    assert g0[0] and all("lora_" in n for n in g0[0])
    for name, grad in g0[0].items():
        assert grad.abs().sum() > 0, name
        torch.testing.assert_close(g1[0][name], grad, atol=ATOL, rtol=0, msg=name)


def test_gradient_checkpointing_and_fsdp_take_the_plain_path():
    from spreadrl.models.compat import enable_activation_checkpointing

    def prefix_min(levers: ModelLevers, sharded: bool = False) -> int:
        settings = LogprobSettings.for_model(
            levers, compute_dtype="float32", sharded=sharded, shared_prefix=True
        )
        return settings.shared_prefix_min

    # decided once, at build time: off under activation checkpointing and under FSDP2
    assert prefix_min(ModelLevers(checkpointed=True)) == 0
    assert prefix_min(ModelLevers(), sharded=True) == 0
    assert prefix_min(ModelLevers()) > 0
    with pytest.raises(ValueError, match="FSDP2"):  # asked for by hand, refused
        LogprobSettings(shared_prefix_min=MIN, sharded=True)
    model = _model(seed=7)
    enable_activation_checkpointing(model)
    model.train()
    widths = []
    hook = model.register_forward_pre_hook(
        lambda _m, _a, kw: widths.append(kw["input_ids"].shape), with_kwargs=True
    )
    samples = _groups(seed=8)
    try:
        _, g_ckpt = _update(model, samples, shared_prefix_min=prefix_min(ModelLevers(True)))
    finally:
        hook.remove()
    # one forward per micro-batch over the full rows: no prefix pass
    assert widths == [(len(samples), max(len(s.ids) for s in samples))]
    plain = _model(seed=7)
    plain.train()
    _, g_plain = _update(plain, samples, shared_prefix_min=MIN)
    for name, grad in g_plain[0].items():
        torch.testing.assert_close(g_ckpt[0][name], grad, atol=ATOL, rtol=0, msg=name)


@pytest.mark.slow
def test_grpo_with_and_without_sharing_trains_the_same(tiny_model_dir, tmp_path, monkeypatch):
    # optim.shared_prefix end to end: the update, the old (2 mini-batches) and reference
    # (KL on) passes run prefix passes, and a step gives the metrics and weights of
    # optim.shared_prefix=false
    # (both with plain SGD: AdamW would turn the paths' rounding-level differences on
    # near-zero gradients into lr-sized steps, differently on every CPU; equivalence.py)

    import spreadrl.train.batching as batching
    from spreadrl.config import load_config
    from spreadrl.train import trained_model
    from spreadrl.train.config import GRPOConfig
    from spreadrl.train.grpo import train_grpo
    from tests.train.equivalence import (
        SGD_OVERRIDES,
        assert_same_update,
        saved_weights,
        sgd_optimizer,
    )
    from tests.train.test_grpo_options_cli import COMPARED, _metrics, _overrides

    cut = []

    def spy(samples, pad_id, **kw):
        batch = collate(samples, pad_id, **kw)
        cut.append("prefix_ids" in batch)
        return batch

    monkeypatch.setattr(batching, "collate", spy)
    monkeypatch.setattr(trained_model, "build_optimizer", sgd_optimizer)
    runs = {}
    for shared in (True, False):
        out = tmp_path / f"shared-{shared}"
        extra = [f"optim.shared_prefix={str(shared).lower()}", "optim.mini_batch_size=4"]
        # seed 2: rewards differ within a group, so the step moves the weights
        extra.append("seed=2")
        overrides = [*_overrides(tiny_model_dir, out, 1), *extra, *SGD_OVERRIDES]
        cfg = load_config(GRPOConfig, None, overrides)
        cut.clear()
        train_grpo(cfg)
        runs[shared] = (_metrics(out), any(cut))
    (on, cut_on), (off, cut_off) = runs[True], runs[False]
    assert cut_on and not cut_off
    assert [m["step"] for m in on] == [1] and on[0]["grad_norm"] > 0
    # the same rollouts, then two optimizer steps (two mini-batches) whose gradients
    # differ by float rounding (as much as a different micro-batch packing makes them)
    for key in COMPARED:
        assert on[0][key] == pytest.approx(off[0][key], rel=1e-4, abs=1e-6), key
    before = saved_weights(tiny_model_dir)
    assert_same_update(
        saved_weights(tmp_path / "shared-True" / "final"),
        saved_weights(tmp_path / "shared-False" / "final"),
        before,
    )
