"""Cascade attention: the shared prompt attended once per group, merged exactly with each
row's own tokens, against transformers' sdpa on the joined keys and values."""

from types import SimpleNamespace

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from spreadrl.rollout import cascade
from spreadrl.rollout.engines.hf import HFPolicy
from spreadrl.rollout.types import SamplingParams

PROMPT = "Sum column A and write the total in B1."
OTHER = "Hello there."


def _layer(groups, kv, prefix, dim, group_of_row, gen):
    keys = torch.randn(groups, kv, prefix, dim, generator=gen)
    values = torch.randn(groups, kv, prefix, dim, generator=gen)
    rows = torch.tensor(group_of_row)
    return cascade.CascadeLayer(keys, values, rows, capacity=2)


def _full_mask(layer, prefix_pad, suffix_masked):
    """transformers' 4D bool mask [batch, 1, 1, P + S]: each group's left padding in the
    prefix, and some masked suffix positions per row."""
    rows = layer.group_of_row.tolist()
    mask = torch.ones(len(rows), 1, 1, layer.get_seq_length(), dtype=torch.bool)
    for row, group in enumerate(rows):
        mask[row, ..., : prefix_pad[group]] = False
    for row, position in suffix_masked:
        mask[row, ..., layer.prefix_len + position] = False
    return mask


def test_cascade_attention_matches_sdpa_on_the_joined_cache():
    gen = torch.Generator().manual_seed(0)
    kv, rep, dim, prefix = 2, 3, 16, 9
    group_of_row = [0, 0, 1, 2, 1, 0, 2, 3]  # uneven groups, interleaved, one of one row
    layer = _layer(4, kv, prefix, dim, group_of_row, gen)
    batch = len(group_of_row)
    module = SimpleNamespace(layer_idx=0, num_key_value_groups=rep, is_causal=True)
    cache = SimpleNamespace(layers=[layer])
    # group 3's prefix is all padding (a one-token context): only its suffix counts
    prefix_pad = [0, 4, 2, prefix]
    token = cascade._ACTIVE.set(cache)
    try:
        for step in range(5):  # past the suffix's capacity of 2: the buffer grows
            new_k = torch.randn(batch, kv, 1, dim, generator=gen)
            keys, values = layer.update(new_k, torch.randn(batch, kv, 1, dim, generator=gen))
            query = torch.randn(batch, kv * rep, 1, dim, generator=gen)
            joined = layer.joined()
            masked = [(1, 0), (6, 1)] if step >= 2 else []
            for mask in (_full_mask(layer, prefix_pad, masked), None):
                out, _ = cascade.cascade_attention_forward(
                    module, query, keys, values, mask, scaling=0.3
                )
                ref, _ = sdpa_attention_forward(module, query, *joined, mask, scaling=0.3)
                assert out.shape == ref.shape == (batch, 1, kv * rep, dim)
                assert out.is_contiguous()
                assert not out.isnan().any()
                assert torch.allclose(out, ref, atol=1e-5), (out - ref).abs().max()
        # a longer query on the cascade layer: sdpa over the joined cache (the slow fallback)
        query = torch.randn(batch, kv * rep, 2, dim, generator=gen)
        out, _ = cascade.cascade_attention_forward(module, query, keys, values, None, scaling=0.3)
        ref, _ = sdpa_attention_forward(module, query, *layer.joined(), None, scaling=0.3)
        assert torch.allclose(out, ref, atol=1e-6)
    finally:
        cascade._ACTIVE.reset(token)
    # no active cascade state: plain sdpa on what it is given
    query = torch.randn(batch, kv * rep, 1, dim, generator=gen)
    out, _ = cascade.cascade_attention_forward(module, query, keys, values, None, scaling=0.3)
    ref, _ = sdpa_attention_forward(module, query, keys, values, None, scaling=0.3)
    assert torch.equal(out, ref)


def _grouped_contexts(tok):
    """Three groups with different left padding: 3 x PROMPT (12 tokens), 2 x OTHER (7), 2 x a short one (2),
    interleaved, plus one distinct context (a group of one)."""
    prompt = tok.encode(PROMPT, add_special_tokens=False)
    other = tok.encode(OTHER, add_special_tokens=False)
    short = tok.encode("Hi.", add_special_tokens=False)
    lone = tok.encode("Copy A1 to B2 please.", add_special_tokens=False)
    assert len({len(prompt), len(other), len(short)}) == 3
    return [prompt, other, short, prompt, other, short, prompt, lone]


def _count_cascade_calls(monkeypatch):
    calls = []
    real = cascade._cascade_decode

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(cascade, "_cascade_decode", counted)
    return calls


def test_cascade_generation_matches_the_copied_prefix(tiny_model, monkeypatch):
    model, tok = tiny_model
    contexts = _grouped_contexts(tok)
    seeds = list(range(100, 100 + len(contexts)))
    layers = model.config.num_hidden_layers
    for params in (
        SamplingParams(0.0, 1.0, 0, max_new_tokens=10, seed=1),  # greedy
        SamplingParams(0.9, 0.95, 20, max_new_tokens=10, seed=1),
    ):
        calls = _count_cascade_calls(monkeypatch)
        on = HFPolicy(model, tok).act(contexts, params, seeds=seeds)
        assert len(calls) == layers * params.max_new_tokens  # every decode step, every layer
        off = HFPolicy(model, tok, cascade_attention=False).act(contexts, params, seeds=seeds)
        assert len(calls) == layers * params.max_new_tokens  # the plain path never calls it
        # The two paths sum the same attention in a different order (float32 rounding,
        # ~1e-7 on the log-probs): greedy decoding must agree exactly. A sampled token could
        # in principle flip where a row's uniform draw falls within rounding of a boundary
        # between two tokens' cumulative probabilities; that is rare, so all but at most one
        # sampled row must agree, and log-probs must agree wherever the tokens do.
        agree = [a.token_ids == b.token_ids for a, b in zip(on, off, strict=True)]
        if params.greedy:
            assert all(agree)
        else:
            assert sum(agree) >= len(contexts) - 1
        for a, b, same in zip(on, off, agree, strict=True):
            if same:
                assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
    assert model.config._attn_implementation == "sdpa"


def test_distinct_contexts_and_later_turns_take_the_plain_path(tiny_model, monkeypatch):
    model, tok = tiny_model
    prompt = tok.encode(PROMPT, add_special_tokens=False)
    params = SamplingParams(0.9, 1.0, 0, max_new_tokens=6, seed=2)
    calls = _count_cascade_calls(monkeypatch)
    policy = HFPolicy(model, tok)
    first = policy.act([prompt, prompt], params, seeds=[1, 2])
    assert calls  # the first turn of a group shares its prompt
    del calls[:]
    # the second turn: each row's own history (the first turn's tokens, a tool result)
    tool = tok.encode(" result: 42.", add_special_tokens=False)
    second_contexts = [prompt + t.token_ids + tool for t in first]
    assert second_contexts[0] != second_contexts[1]
    second = policy.act(second_contexts, params, seeds=[3, 4])
    plain = HFPolicy(model, tok, cascade_attention=False).act(second_contexts, params, seeds=[3, 4])
    assert not calls  # all contexts distinct: no shared prefill, no cascade
    for a, b in zip(second, plain, strict=True):
        assert a.token_ids == b.token_ids and a.logprobs == b.logprobs


def test_attention_implementation_is_restored_after_generate_and_on_error(tiny_model, monkeypatch):
    model, tok = tiny_model
    prompt = tok.encode(PROMPT, add_special_tokens=False)
    params = SamplingParams(0.0, 1.0, 0, max_new_tokens=3, seed=0)
    seen = []
    handle = model.register_forward_pre_hook(
        lambda *_: seen.append((model.config._attn_implementation, cascade._ACTIVE.get()))
    )
    try:
        HFPolicy(model, tok).act([prompt, prompt], params)
    finally:
        handle.remove()
    # the shared prefill runs on sdpa; generate's forwards on the cascade, with its cache
    assert seen[0] == ("sdpa", None)
    assert {name for name, _ in seen[1:]} == {cascade.ATTN_NAME}
    assert all(state is not None for _, state in seen[1:])
    assert model.config._attn_implementation == "sdpa" and cascade._ACTIVE.get() is None

    def failing(*args, **kwargs):
        assert model.config._attn_implementation == cascade.ATTN_NAME
        raise RuntimeError("generate failed")

    monkeypatch.setattr(model, "generate", failing)
    with pytest.raises(RuntimeError, match="generate failed"):
        HFPolicy(model, tok).act([prompt, prompt], params)
    assert model.config._attn_implementation == "sdpa" and cascade._ACTIVE.get() is None


def test_cascade_layer_refuses_cache_surgery():
    gen = torch.Generator().manual_seed(1)
    layer = _layer(2, 1, 3, 4, [0, 1, 1], gen)
    assert layer.get_seq_length() == 3
    layer.update(torch.randn(3, 1, 1, 4), torch.randn(3, 1, 1, 4))
    assert layer.get_seq_length() == 4 and layer.keys.shape == (3, 1, 1, 4)
    with pytest.raises(NotImplementedError, match="cascade KV cache"):
        layer.reorder_cache(torch.tensor([0, 0, 1]))


def test_overlapping_switches_restore_only_when_the_last_leaves(tiny_model):
    model, _ = tiny_model
    outer, inner = object(), object()
    with cascade.cascade_attention(model, outer):
        with cascade.cascade_attention(model, inner):
            assert cascade._ACTIVE.get() is inner
        assert model.config._attn_implementation == cascade.ATTN_NAME
        assert cascade._ACTIVE.get() is outer
    assert model.config._attn_implementation == "sdpa" and cascade._ACTIVE.get() is None
