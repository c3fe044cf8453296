"""Shims over the transformers and peft versions the project supports.

Each one calls a library under the name the installed version uses, or keeps a
library's own deprecation warning out of the user's output, and says which
version needs it, so it can go once that version is no longer supported.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

from torch import nn


@contextlib.contextmanager
def peft_wrapping() -> Iterator[None]:
    """Wrap a model with peft without its transformers-5 deprecation warning.

    peft 0.21.2 (the newest release) reads ``model.is_gradient_checkpointing`` in
    ``PeftModel.__init__``, a name transformers 5 deprecated with a FutureWarning.
    The call is peft's, so no argument of ours avoids it: this ignores that one
    message, only while peft builds the wrapper. Drop it once peft reads
    ``is_activation_checkpointing``.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning
        )
        yield


def enable_activation_checkpointing(model: nn.Module) -> None:
    """Turn on activation (gradient) checkpointing under the name this transformers uses.

    transformers renamed ``gradient_checkpointing_enable`` to
    ``activation_checkpointing_enable`` and made the old name warn (FutureWarning,
    removal in v6); the oldest version the project supports (5.16.1, vLLM's pin)
    has only the old name. A PEFT model forwards both names to its base model.
    """
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is None:  # transformers before the rename (5.16.1 has only the old name)
        enable = model.gradient_checkpointing_enable
    enable()
