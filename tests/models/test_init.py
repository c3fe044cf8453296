"""Qwen3 presets, random initialisation and the shared loader."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, Qwen3ForCausalLM

from spreadrl.errors import ConfigError, SpreadrlError
from spreadrl.models.init import (
    PRESETS,
    count_parameters,
    init_model,
    load_model_and_tokenizer,
    make_config,
)
from spreadrl.models.tokenizer import default_corpus, train_tokenizer


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(default_corpus(size=100), vocab_size=384)


@pytest.fixture(scope="module")
def tiny_dir(tok, tmp_path_factory):
    return init_model("tiny", tok, tmp_path_factory.mktemp("tiny"), seed=3)


def test_tiny_and_small_sizes(tok):
    tiny = make_config("tiny", tok)
    assert (tiny.hidden_size, tiny.num_hidden_layers, tiny.head_dim) == (192, 4, 48)
    assert 1.5e6 < count_parameters(tiny) < 2.5e6
    assert 20e6 < count_parameters(make_config("small", tok)) < 30e6


def test_4b_shape_has_qwen3_4b_dimensions_without_weights(tok):
    config = make_config("4b-shape", tok)
    assert config.hidden_size == 2560 and config.num_hidden_layers == 36
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (32, 8, 128)
    assert config.intermediate_size == 9728 and config.tie_word_embeddings
    assert config.rope_parameters["rope_theta"] == 1e6
    # Qwen3-4B: ~4.02B with its 151,936-token vocabulary, i.e. ~3.63B without the embedding
    body = count_parameters(config) - len(tok) * 2560
    assert 3.5e9 < body < 3.7e9


def test_config_is_sized_to_the_tokenizer_with_qwen_token_ids(tok):
    config = make_config("tiny", tok, {"num_hidden_layers": 2})
    assert config.vocab_size == len(tok)
    assert config.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    assert config.pad_token_id == tok.pad_token_id
    assert config.num_hidden_layers == 2 and len(config.layer_types) == 2


def test_unknown_preset_and_bad_override(tok, tmp_path):
    with pytest.raises(ConfigError, match="huge"):
        init_model("huge", tok, tmp_path)
    with pytest.raises(ConfigError, match="tiny"):
        make_config("tiny", tok, {"head_dim": None})
    with pytest.raises(ConfigError, match="hidden_sise"):
        make_config("tiny", tok, {"hidden_sise": 64})


def test_init_writes_a_loadable_hf_checkpoint(tok, tiny_dir):
    files = {p.name for p in tiny_dir.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= files
    assert json.loads((tiny_dir / "config.json").read_text())["architectures"] == [
        "Qwen3ForCausalLM"
    ]
    gen = json.loads((tiny_dir / "generation_config.json").read_text())
    assert gen["eos_token_id"][0] == tok.convert_tokens_to_ids("<|im_end|>")
    assert gen["pad_token_id"] == tok.pad_token_id
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert isinstance(model, Qwen3ForCausalLM)
    ids = torch.tensor([tok.encode("Write the sum", add_special_tokens=False)])
    logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], len(tok))
    assert torch.isfinite(logits).all()


def test_init_is_deterministic_per_seed(tok, tiny_dir, tmp_path):
    same = load_file(init_model("tiny", tok, tmp_path / "a", seed=3) / "model.safetensors")
    other = load_file(init_model("tiny", tok, tmp_path / "b", seed=4) / "model.safetensors")
    ref = load_file(tiny_dir / "model.safetensors")
    key = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(same[key], ref[key])
    assert not torch.equal(other[key], ref[key])


def test_loader_returns_model_and_tokenizer(tok, tiny_dir):
    model, loaded = load_model_and_tokenizer(str(tiny_dir))
    assert not model.training
    assert loaded.encode("A1:B2") == tok.encode("A1:B2")
    assert loaded.chat_template == tok.chat_template
    half, _ = load_model_and_tokenizer(str(tiny_dir), dtype="bfloat16")
    assert half.dtype == torch.bfloat16
    with pytest.raises(ConfigError, match="dtype"):
        load_model_and_tokenizer(str(tiny_dir), dtype="float7")


def test_loader_errors_name_the_path(tmp_path):
    with pytest.raises(SpreadrlError, match="model directory not found"):
        load_model_and_tokenizer(str(tmp_path / "missing"))
    with pytest.raises(SpreadrlError, match="no config.json"):
        load_model_and_tokenizer(str(tmp_path))
    with pytest.raises(SpreadrlError, match="spreadrl-nobody/no-such-model"):
        load_model_and_tokenizer("spreadrl-nobody/no-such-model")


def test_presets_are_plain_config_dicts():
    assert set(PRESETS) == {"tiny", "small", "4b-shape"}
    for preset in PRESETS.values():
        assert preset["hidden_size"] % preset["num_attention_heads"] == 0 or preset["head_dim"]


def test_4b_shape_preset_saves_bfloat16_and_restores_default_dtype(tok, tmp_path):
    small_dims = {
        "num_hidden_layers": 1,
        "hidden_size": 64,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "intermediate_size": 64,
    }
    out = init_model("4b-shape", tok, tmp_path, overrides=small_dims)
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    model, _ = load_model_and_tokenizer(str(out))
    assert model.dtype == torch.bfloat16
    assert torch.get_default_dtype() == torch.float32


def test_a_meta_built_model_is_materialised_and_initialised_on_its_device(tok, monkeypatch):
    """The 4b-shape's path (meta device, then storage and initialisation where it runs),
    taken here by the tiny shape on the CPU."""
    import spreadrl.models.init as init

    built_on: list[torch.device] = []
    real = init.Qwen3ForCausalLM

    class Spy(real):  # records where construction allocates
        def __init__(self, config):
            built_on.append(torch.empty(0).device)
            super().__init__(config)

    monkeypatch.setattr(init, "Qwen3ForCausalLM", Spy)
    config = make_config("tiny", tok)
    model = init.build_random_model(config, torch.float32, seed=5, device="cpu")
    assert built_on == [torch.device("meta")]
    tensors = [*model.parameters(), *model.buffers()]
    assert all(t.device == torch.device("cpu") for t in tensors)
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied again
    eager = init.build_random_model(config, torch.float32, seed=5)  # constructed on the CPU
    assert built_on[-1] == torch.device("cpu")
    assert torch.equal(model.model.rotary_emb.inv_freq, eager.model.rotary_emb.inv_freq)
    for (name, p), (_, q) in zip(model.named_parameters(), eager.named_parameters(), strict=True):
        if name.endswith("norm.weight"):
            assert torch.equal(p, torch.ones_like(p)), name
        else:  # the same distribution, other draws: normal(0, 0.02)
            assert abs(p.std().item() - 0.02) < 0.002 and abs(p.mean().item()) < 0.002, name
            assert not torch.equal(p, q), name
    again = init.build_random_model(config, torch.float32, seed=5, device="cpu")
    assert all(
        torch.equal(p, q) for p, q in zip(model.parameters(), again.parameters(), strict=True)
    )
    ids = torch.tensor([tok.encode("Write the sum", add_special_tokens=False)])
    assert torch.allclose(model(ids).logits, again(ids).logits)


def test_init_model_builds_through_the_meta_device_where_asked(tok, tmp_path):
    path = init_model("tiny", tok, tmp_path / "meta", seed=1, device="cpu")
    model, _ = load_model_and_tokenizer(str(path))
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    ids = torch.tensor([tok.encode("Write the sum", add_special_tokens=False)])
    assert torch.isfinite(model(ids).logits).all()
