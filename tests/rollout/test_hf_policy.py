"""The hf backend: one prefill per distinct context, same samples as without sharing."""

import torch

from spreadrl.rollout.hf_policy import HFPolicy
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
