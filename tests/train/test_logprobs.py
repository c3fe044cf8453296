"""The chunked selective log-prob path against a naive full-logits reference (values and grads)."""

import pytest
import torch

from spreadrl.rollout.sampling import process_logits
from spreadrl.train.batching import Sample, collate
from spreadrl.train.logprobs import LogprobSettings, chunk_tokens_for, sequence_logprobs


def tiny_qwen3(vocab: int = 97, seed: int = 0):
    """A 2-layer float32 Qwen3 (GQA 4/2 heads, tied embeddings), seeded."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=vocab,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=64,
        tie_word_embeddings=True,
    )
    return Qwen3ForCausalLM(cfg).float()


@pytest.fixture(scope="module")
def model():
    return tiny_qwen3()


BATCH = collate(
    [
        Sample([1, 5, 7, 9, 11, 3, 40], [0, 0, 1, 1, 0, 1, 1]),  # a tool token (mask 0) inside
        Sample([2, 4, 6], [0, 1, 1]),
        Sample([8, 8, 8, 8], [0, 0, 0, 0]),  # nothing trained
    ],
    pad_id=0,
)


def _naive(model, batch, temperature, top_k, top_p):
    """Full logits, processed, with the target kept; log-probs and entropy [B, T-1]."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    logits = logits[:, :-1].float()
    raw = logits / temperature
    processed = process_logits(logits, temperature, top_k, top_p)
    targets = batch["input_ids"][:, 1:].unsqueeze(-1)
    processed = processed.scatter(-1, targets, raw.gather(-1, targets))
    logp_all = torch.log_softmax(processed, -1)
    logp = logp_all.gather(-1, targets).squeeze(-1)
    finite = logp_all.masked_fill(~torch.isfinite(logp_all), 0.0)
    entropy = -(logp_all.exp() * finite).sum(-1)
    return logp, entropy


def _grads(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("top_k,top_p", [(0, 1.0), (5, 1.0), (0, 0.8), (7, 0.9)])
def test_values_and_gradients_equal_the_full_logits_reference(model, top_k, top_p):
    mask = BATCH["loss_mask"]
    # chunks of 2 tokens: several chunks per micro-batch, one crossing a row boundary
    settings = LogprobSettings(temperature=0.7, top_k=top_k, top_p=top_p)
    logp, ent = sequence_logprobs(model, BATCH, settings, entropy=True, chunk_tokens=2)
    ref_logp, ref_ent = _naive(model, BATCH, 0.7, top_k, top_p)
    assert torch.allclose(logp, ref_logp * mask, atol=1e-5)
    assert torch.allclose(ent, ref_ent * mask, atol=1e-5)
    assert (logp[mask == 0] == 0).all()  # untrained positions are not computed
    weight = torch.randn(mask.shape, generator=torch.Generator().manual_seed(1))
    mine = _grads(model, (logp * weight * mask).sum() + 0.3 * (ent * mask).sum())
    theirs = _grads(model, (ref_logp * weight * mask).sum() + 0.3 * (ref_ent * mask).sum())
    for a, b in zip(mine, theirs, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_entropy_is_skipped_unless_asked_and_carries_grad_when_asked(model):
    logp, ent = sequence_logprobs(model, BATCH)
    assert ent is None
    _, ent = sequence_logprobs(model, BATCH, entropy=True)
    assert ent.requires_grad
    grads = _grads(model, (ent * BATCH["loss_mask"]).sum())
    assert any(g.abs().sum() > 0 for g in grads)


def test_no_grad_pass_equals_grad_pass_and_keeps_no_graph(model):
    with_grad, _ = sequence_logprobs(model, BATCH, LogprobSettings(temperature=0.6, top_k=10))
    with torch.no_grad():
        without, _ = sequence_logprobs(model, BATCH, LogprobSettings(temperature=0.6, top_k=10))
    assert not without.requires_grad
    assert torch.allclose(with_grad.detach(), without, atol=1e-6)


def test_sampled_token_outside_the_top_k_stays_finite(model):
    logits = model(input_ids=BATCH["input_ids"][:1]).logits[0, 0]
    worst = int(logits.argmin())  # certainly outside a top-3
    batch = collate([Sample([1, worst], [0, 1])], pad_id=0)
    logp, _ = sequence_logprobs(model, batch, LogprobSettings(top_k=3))
    assert torch.isfinite(logp).all() and logp[0, 0] < 0


def test_the_output_layer_is_restored_after_the_pass(model):
    head = model.get_output_embeddings()
    sequence_logprobs(model, BATCH)
    assert model.get_output_embeddings() is head
    assert model(input_ids=BATCH["input_ids"]).logits.shape[-1] == 97


def test_chunk_size_follows_the_vocabulary():
    assert chunk_tokens_for(151_936) < 200  # a large vocabulary: a small chunk
    assert chunk_tokens_for(151_936, top_p=0.9) < chunk_tokens_for(151_936)
    assert chunk_tokens_for(512) > 10_000
