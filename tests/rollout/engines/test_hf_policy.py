"""The hf backend: one prefill per distinct context, same samples as without sharing."""

import torch

from spreadrl.rollout.engines.hf import HFPolicy
from spreadrl.rollout.types import SamplingParams


def _count_embedded_tokens(model):
    counts = []
    embed = model.get_input_embeddings()
    handle = embed.register_forward_pre_hook(lambda _m, args: counts.append(args[0].numel()))
    return counts, handle


def test_identical_contexts_share_one_prefill_and_sample_the_same(tiny_model):
    model, tok = tiny_model
    prompt = tok.encode("Sum column A and write the total in B1.", add_special_tokens=False)
    other = tok.encode("Average of C1:C9?", add_special_tokens=False)
    contexts = [prompt, prompt, prompt, other]  # a group of 3 rollouts and another prompt
    params = SamplingParams(0.8, 0.95, 20, max_new_tokens=10, seed=7)
    results = {}
    for share in (True, False):
        counts, handle = _count_embedded_tokens(model)
        try:
            turns = HFPolicy(model, tok, share_prefill=share).act(contexts, params)
        finally:
            handle.remove()
        results[share] = (turns, counts[0] + (counts[1] if share else 0))
    shared, unshared = results[True][0], results[False][0]
    width = max(len(prompt), len(other))
    # without sharing the prefill embeds 4 padded rows; with it 2 distinct rows (all
    # but the last token), then generate's own prefill of the last token of each row
    assert results[False][1] == 4 * width
    assert results[True][1] == 2 * (width - 1) + 4
    for a, b in zip(shared, unshared, strict=True):
        assert a.token_ids == b.token_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)


def test_distinct_contexts_skip_the_shared_prefill(tiny_model):
    model, tok = tiny_model
    contexts = [tok.encode(t, add_special_tokens=False) for t in ("One.", "Two words.")]
    policy = HFPolicy(model, tok)
    ids = torch.zeros((2, 3), dtype=torch.long)
    assert policy._shared_prefill(contexts, ids, torch.ones_like(ids)) is None
    turns = policy.act(contexts, SamplingParams(1.0, 1.0, 0, max_new_tokens=4, seed=0))
    assert all(len(t.logprobs) == len(t.token_ids) > 0 for t in turns)


def test_preallocated_cache_samples_what_the_growing_cache_does(tiny_model):
    """Same tokens and bit-identical log-probs with and without the preallocated KV cache,
    with and without the shared prefill, per-row seeds and one shared stream (cascade
    attention off: it sums attention in another order, see test_cascade.py)."""
    from spreadrl.rollout.kv_cache import PreallocatedLayer

    model, tok = tiny_model
    prompt = tok.encode("Sum column A and write the total in B1.", add_special_tokens=False)
    other = tok.encode("Average of C1:C9?", add_special_tokens=False)
    contexts = [prompt, prompt, other, prompt]
    params = SamplingParams(0.9, 0.95, 20, max_new_tokens=12, seed=3)
    assert isinstance(HFPolicy(model, tok)._new_cache(8).layers[0], PreallocatedLayer)
    assert HFPolicy(model, tok, preallocate_cache=False)._new_cache(8) is None
    for share in (True, False):
        for seeds in ([11, 12, 13, 14], None):
            runs = [
                HFPolicy(
                    model, tok, share_prefill=share, preallocate_cache=pre, cascade_attention=False
                ).act(contexts, params, seeds=seeds)
                for pre in (True, False)
            ]
            for a, b in zip(*runs, strict=True):
                assert a.token_ids == b.token_ids
                assert a.logprobs == b.logprobs


def test_preallocated_layer_grows_past_its_capacity_like_cat():
    from spreadrl.rollout.kv_cache import PreallocatedLayer

    layer = PreallocatedLayer(3)
    gen = torch.Generator().manual_seed(0)
    chunks = [torch.randn(2, 2, n, 4, generator=gen) for n in (2, 1, 3, 1)]
    for i, chunk in enumerate(chunks):
        keys, values = layer.update(chunk, -chunk)
        expected = torch.cat(chunks[: i + 1], dim=-2)
        assert torch.equal(keys, expected) and torch.equal(values, -expected)
        assert layer.get_seq_length() == expected.shape[-2]
    layer.reorder_cache(torch.tensor([1, 1]))
    assert torch.equal(layer.keys, torch.cat(chunks, dim=-2)[[1, 1]])
    layer.crop(-2)  # transformers' crop replaces the tensors; the next update adopts them
    keys, _ = layer.update(chunks[1], -chunks[1])
    assert torch.equal(keys, torch.cat([torch.cat(chunks, dim=-2)[[1, 1], :, :5], chunks[1]], -2))


def test_row_sampler_draws_what_torch_multinomial_draws():
    from spreadrl.rollout.engines.hf import _row_sampler

    gen = torch.Generator().manual_seed(5)
    scores = torch.randn(3, 50, generator=gen) * 3
    scores[1, 10:] = float("-inf")
    sampler = _row_sampler([1, 2, 3])
    reference = [torch.Generator().manual_seed(s) for s in (1, 2, 3)]
    probs = torch.softmax(scores, dim=-1)
    for _ in range(20):
        out = sampler(None, scores)
        picks = out.argmax(-1).tolist()
        assert picks == [
            int(torch.multinomial(probs[i], 1, generator=g)) for i, g in enumerate(reference)
        ]
        assert (out == 0).sum().item() == 3


def test_the_static_cache_samples_what_the_default_rollout_does(tiny_model):
    """rollout.hf_static_cache (for GPUs, where generate compiles decoding over it): on the
    CPU, uncompiled, the same tokens and log-probs within float tolerance, through a cache
    of transformers' StaticCache type rounded up to its bucket."""
    from transformers.cache_utils import StaticCache

    from spreadrl.rollout.engines.hf import STATIC_CACHE_BUCKET, static_cache
    from spreadrl.rollout.kv_cache import cache_name

    model, tok = tiny_model
    prompt = tok.encode("Sum column A and write the total in B1.", add_special_tokens=False)
    other = tok.encode("Average of C1:C9?", add_special_tokens=False)
    contexts = [prompt, prompt, other, prompt]
    params = SamplingParams(0.9, 0.95, 20, max_new_tokens=12, seed=3)
    cache = static_cache(model, 40)
    assert isinstance(cache, StaticCache)
    assert cache.layers[0].max_cache_len == STATIC_CACHE_BUCKET
    seen = []
    original = model.generate

    def spy(*args, **kwargs):
        seen.append(type(kwargs.get(cache_name())))
        return original(*args, **kwargs)

    model.generate = spy
    try:
        static = HFPolicy(model, tok, static_cache=True).act(contexts, params, seeds=[1, 2, 3, 4])
    finally:
        del model.generate
    default = HFPolicy(model, tok).act(contexts, params, seeds=[1, 2, 3, 4])
    assert seen == [StaticCache]
    for a, b in zip(static, default, strict=True):
        assert a.token_ids == b.token_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
