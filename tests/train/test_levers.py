"""The update's speed levers: each changes what it should and keeps the plain path's numbers."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from spreadrl.config import load_config
from spreadrl.errors import ConfigError
from spreadrl.models.compat import enable_activation_checkpointing
from spreadrl.train.batching import Sample, collate
from spreadrl.train.config import GRPOConfig, ModelConfig
from spreadrl.train.distributed import decoder_layers
from spreadrl.train.levers import (
    ModelLevers,
    apply_model_levers,
    checkpoint_every,
    compile_decoder_layers,
    use_fused_head,
)
from spreadrl.train.logprobs import LogprobSettings, selective_logprobs, sequence_logprobs


def _model(layers: int = 4, vocab: int = 300, seed: int = 0) -> Qwen3ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen3Config(
        hidden_size=64, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, intermediate_size=128, vocab_size=vocab, tie_word_embeddings=True,
        layer_types=["full_attention"] * layers, max_position_embeddings=256,
    )  # fmt: skip
    model = Qwen3ForCausalLM(config)
    model.train()
    return model


def _batch(vocab: int = 300) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    rows = [torch.randint(0, vocab, (n,), generator=g).tolist() for n in (24, 17, 30)]
    return collate([Sample(r, [0] * 5 + [1] * (len(r) - 5)) for r in rows], pad_id=0)


def _loss_and_grads(
    model, *, entropy: bool = False, **settings
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    batch = _batch(model.config.vocab_size)
    logp, ent = sequence_logprobs(model, batch, LogprobSettings(**settings), entropy=entropy)
    mask = batch["loss_mask"]
    loss = -(logp * mask).sum() / mask.sum()
    if ent is not None:
        loss = loss - 0.1 * (ent * mask).sum() / mask.sum()
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], tol: float = 1e-5) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.allclose(a[name], b[name], atol=tol, rtol=1e-4), name


def _count_mlp_forwards(monkeypatch) -> list[int]:
    """Calls of the decoder layers' MLP (module hooks do not run in a recompute)."""
    import transformers.models.qwen3.modeling_qwen3 as qwen3

    calls = [0]
    original = qwen3.Qwen3MLP.forward

    def counted(self, x):
        calls[0] += 1
        return original(self, x)

    monkeypatch.setattr(qwen3.Qwen3MLP, "forward", counted)
    return calls


def test_selective_checkpointing_recomputes_only_every_kth_layer_with_equal_gradients(
    monkeypatch,
):
    calls = _count_mlp_forwards(monkeypatch)
    full = _model()
    enable_activation_checkpointing(full)
    loss_full, grads_full = _loss_and_grads(full)
    assert calls[0] == 8  # 4 layers forward, 4 recomputed in backward
    calls[0] = 0
    some = _model()
    enable_activation_checkpointing(some)
    assert checkpoint_every(decoder_layers(some), 2) == [0, 2]
    loss_some, grads_some = _loss_and_grads(some)
    assert calls[0] == 6  # 4 forward, layers 0 and 2 recomputed
    assert torch.allclose(loss_full, loss_some)
    _close(grads_full, grads_some)
    with pytest.raises(ConfigError, match="checkpoint_every"):
        load_config(GRPOConfig, None, ["model.checkpoint_every=0"])


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p", "entropy"),
    [(1.0, 0, 1.0, False), (0.7, 20, 0.9, True), (0.6, 0, 0.95, False)],
)
def test_the_fused_head_gives_the_chunked_paths_log_probs_and_gradients(
    temperature, top_k, top_p, entropy
):
    torch.manual_seed(3)
    head = torch.nn.Linear(32, 500, bias=False)
    hidden = torch.randn(45, 32, requires_grad=True)
    targets = torch.randint(0, 500, (45,))
    upstream = torch.randn(45)
    results = []
    for fused in (False, True):
        head.zero_grad(set_to_none=True)
        hidden.grad = None
        logp, ent = selective_logprobs(
            head, hidden, targets, temperature=temperature, top_k=top_k, top_p=top_p,
            with_entropy=entropy, chunk_tokens=16, fused=fused,
        )  # fmt: skip
        loss = (logp * upstream).sum() + (ent.sum() * 0.3 if ent is not None else 0.0)
        loss.backward()
        results.append((logp.detach(), ent, hidden.grad.clone(), head.weight.grad.clone()))
    (lp0, e0, h0, w0), (lp1, e1, h1, w1) = results
    assert torch.allclose(lp0, lp1, atol=1e-5)
    if entropy:
        assert torch.allclose(e0.detach(), e1.detach(), atol=1e-5)
    assert torch.allclose(h0, h1, atol=1e-5)
    assert torch.allclose(w0, w1, atol=1e-5)


def test_the_fused_head_runs_in_a_models_update_when_the_settings_ask(monkeypatch):
    from spreadrl.train import logprobs

    calls = []
    original = logprobs.FusedHeadLogprob.backward

    def counted(ctx, grad):
        calls.append(1)
        return original(ctx, grad)

    monkeypatch.setattr(logprobs.FusedHeadLogprob, "backward", staticmethod(counted))
    plain = _model()
    loss0, grads0 = _loss_and_grads(plain, temperature=0.8, top_p=0.9, entropy=True)
    assert not calls
    fused = _model()
    assert use_fused_head(fused)
    loss1, grads1 = _loss_and_grads(
        fused, fused_head=True, temperature=0.8, top_p=0.9, entropy=True
    )
    assert calls  # the hand-written backward ran
    assert torch.allclose(loss0, loss1, atol=1e-6)
    _close(grads0, grads1)


def test_fused_adamw_is_asked_for_and_steps_as_the_default_does():
    from spreadrl.train.optimizer import build_optimizer

    cfg = load_config(GRPOConfig, None, ["optim.fused_adamw=true", "optim.lr=1e-3"])
    plain_cfg = load_config(GRPOConfig, None, ["optim.lr=1e-3"])
    models, optimizers = [_model(2), _model(2)], []
    for model, optim_cfg in zip(models, (plain_cfg.optim, cfg.optim), strict=True):
        optimizers.append(build_optimizer(model, optim_cfg))
    assert optimizers[1].defaults["fused"] and not optimizers[0].defaults.get("fused")
    for _ in range(3):
        for model, optimizer in zip(models, optimizers, strict=True):
            _loss_and_grads(model)
            optimizer.step()
    for p, q in zip(models[0].parameters(), models[1].parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6)


def test_compiled_decoder_layers_give_the_eager_numbers():
    eager, compiled = _model(2), _model(2)
    assert compile_decoder_layers(decoder_layers(compiled), backend="aot_eager") == 2
    assert all(layer._compiled_call_impl is not None for layer in compiled.model.layers)
    loss0, grads0 = _loss_and_grads(eager)
    loss1, grads1 = _loss_and_grads(compiled)
    assert torch.allclose(loss0, loss1, atol=1e-6)
    _close(grads0, grads1)


def test_the_settings_apply_the_levers_to_a_built_model(monkeypatch):
    import spreadrl.train.levers as levers

    compiled = []
    monkeypatch.setattr(levers, "compile_decoder_layers", lambda m: compiled.append(m) or 0)
    model = _model()
    enable_activation_checkpointing(model)
    cfg = ModelConfig(
        gradient_checkpointing=True, checkpoint_every=3, fused_logprob_head=True,
        compile_layers=True,
    )  # fmt: skip
    layers = decoder_layers(model)
    took = apply_model_levers(model, layers, cfg)
    assert [layer.gradient_checkpointing for layer in model.model.layers] == [1, 0, 0, 1]
    assert took == ModelLevers(fused_head=True, packed=False, checkpointed=True)
    assert compiled == [layers]
    # a head that is no plain linear layer keeps the chunked path, and says so
    biased = _model()
    biased.set_output_embeddings(torch.nn.Linear(64, 300, bias=True))
    plain_cfg = ModelConfig(fused_logprob_head=True, packed_sequences=True)
    took = apply_model_levers(biased, decoder_layers(biased), plain_cfg)
    assert took == ModelLevers(fused_head=False, packed=True, checkpointed=False)


def test_packed_micro_batches_give_the_padded_log_probs_and_gradients():
    from spreadrl.train.batching import pack

    batch = _batch()
    ids, positions, trained = pack(batch["input_ids"], batch["attention_mask"], batch["loss_mask"])
    assert ids.shape == (1, 24 + 17 + 30)  # the real tokens only: no padding
    assert positions[0, 24].item() == 0 and positions[0, 24 + 17].item() == 0  # resets
    assert int(trained.sum()) == int(batch["loss_mask"].sum())
    padded = _model()
    loss0, grads0 = _loss_and_grads(padded, temperature=0.7, top_k=20, entropy=True)
    packed = _model()
    seen = []
    packed.register_forward_pre_hook(
        lambda _m, args, kw: seen.append(kw["input_ids"].shape), with_kwargs=True
    )
    loss1, grads1 = _loss_and_grads(packed, packed=True, temperature=0.7, top_k=20, entropy=True)
    assert seen == [(1, 71)]
    assert torch.allclose(loss0, loss1, atol=1e-5)
    _close(grads0, grads1, tol=1e-5)
