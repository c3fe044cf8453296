"""The model presets of `spreadrl model init` and the tokenizer choices, as plain data.

Kept apart from :mod:`spreadrl.models.init` (which imports torch and
transformers) so the command line checks ``--preset`` and ``--tokenizer`` in a
moment, before those libraries load.
"""

from __future__ import annotations

from typing import Any

TOKENIZER_CHOICES = ("trained", "qwen3")
"""``--tokenizer``: one trained on the task texts, or Qwen3's own."""

# Qwen3Config keyword arguments; vocab_size and the special token ids come from the tokenizer.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {
        "hidden_size": 192,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 48,
        "intermediate_size": 512,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "dtype": "float32",
    },
    "small": {
        "hidden_size": 512,
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 64,
        "intermediate_size": 1536,
        "max_position_embeddings": 8192,
        "tie_word_embeddings": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 100000.0},
        "dtype": "float32",
    },
    "4b-shape": {
        "hidden_size": 2560,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 9728,
        "max_position_embeddings": 40960,
        "tie_word_embeddings": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        "rms_norm_eps": 1e-6,
        "dtype": "bfloat16",
    },
}
