"""hf rollout log-probs equal the trainer's recomputation on the same tokens (float32)."""

import pytest
import torch

from spreadrl.rollout.engines.hf import HFPolicy
from spreadrl.rollout.types import SamplingParams
from spreadrl.train.batching import Sample, collate
from spreadrl.train.logprobs import LogprobSettings, sequence_logprobs

# float32 on CPU: generation (KV cache, left padding, a batch of 4) and the trainer's
# right-padded full-sequence forward differ by rounding only; 1e-4 on log-probs leaves
# room for that and is far below the effect of top-k/top-p (the last test).
ATOL = 1e-4


def _rollout(model, tok, params):
    """Contexts (two identical: a shared prefill), the turns sampled, and their samples."""
    texts = ["Sum column A.", "Write 42 in B2 and stop.", "Sum column A.", "Average of C1:C9?"]
    contexts = [tok.encode(t, add_special_tokens=False) for t in texts]
    turns = HFPolicy(model, tok).act(contexts, params)
    samples = [
        Sample(list(c) + t.token_ids, [0] * len(c) + [1] * len(t.token_ids))
        for c, t in zip(contexts, turns, strict=True)
    ]
    return contexts, turns, collate(samples, pad_id=0)


def _recomputed(model, batch, contexts, turns, temperature, top_k, top_p):
    with torch.no_grad():
        settings = LogprobSettings(temperature=temperature, top_k=top_k, top_p=top_p)
        logp, _ = sequence_logprobs(model, batch, settings)
    return [
        logp[row, len(c) - 1 : len(c) - 1 + len(t.token_ids)]
        for row, (c, t) in enumerate(zip(contexts, turns, strict=True))
    ]


@pytest.mark.parametrize(
    "temperature,top_k,top_p",
    [(1.0, 0, 1.0), (0.7, 0, 1.0), (0.8, 20, 1.0), (0.9, 0, 0.8), (0.6, 20, 0.95)],
)
def test_hf_rollout_logprobs_equal_the_trainers(tiny_model, temperature, top_k, top_p):
    model, tok = tiny_model
    params = SamplingParams(temperature, top_p, top_k, max_new_tokens=16, seed=3)
    contexts, turns, batch = _rollout(model, tok, params)
    for turn, again in zip(
        turns, _recomputed(model, batch, contexts, turns, temperature, top_k, top_p), strict=True
    ):
        reported = torch.tensor(turn.logprobs)
        assert len(reported) == len(turn.token_ids) > 0
        assert torch.allclose(reported, again, atol=ATOL), (reported - again).abs().max()


def test_reported_logprobs_are_after_top_k_and_top_p(tiny_model):
    # renormalised over the kept tokens, a sampled token's log-prob is at least its
    # log-prob under the temperature alone, and clearly above it on average
    model, tok = tiny_model
    params = SamplingParams(0.8, 0.8, 10, max_new_tokens=16, seed=3)
    contexts, turns, batch = _rollout(model, tok, params)
    plain = torch.cat(_recomputed(model, batch, contexts, turns, 0.8, 0, 1.0))
    reported = torch.cat([torch.tensor(t.logprobs) for t in turns])
    assert (reported >= plain - ATOL).all()
    assert (reported - plain).mean() > 0.05
