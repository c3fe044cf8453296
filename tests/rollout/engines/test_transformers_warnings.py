"""The model calls spreadrl makes print no deprecation from transformers (issue 21).

transformers 5.24 renamed the KV cache argument and output field ``past_key_values``
to ``cache`` and warns on the old name at every ``generate`` and forward call (a
FutureWarning, and a logged warning when the output field is read): dozens of lines
in the demo's console. spreadrl passes and reads the name the installed version uses
(``spreadrl.rollout.kv_cache.cache_name``). Covered: sampling with the preallocated
cache, the shared prefill (plain and cascade caches), and the trainer's shared-prefix
log-prob pass, each under ``warnings`` turned to errors and with transformers' own
once-only logger reset.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator

import pytest

from spreadrl.rollout.engines.hf import HFPolicy
from spreadrl.rollout.types import SamplingParams


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _silent_transformers() -> Iterator[None]:
    """Every Python warning raises; transformers' logged warnings are collected and must be none."""
    warning_once = getattr(logging.Logger, "warning_once", None)
    if warning_once is not None and hasattr(warning_once, "cache_clear"):
        warning_once.cache_clear()  # a warning some earlier test logged would be muted here
    handler = _Records()
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            yield
    finally:
        logger.removeHandler(handler)
    assert not handler.messages, handler.messages


@pytest.mark.parametrize("cascade", [True, False])
def test_generate_warns_nothing(tiny_model, cascade):
    model, tok = tiny_model
    policy = HFPolicy(model, tok, cascade_attention=cascade)
    short, long = tok.encode("Put 42 in A1."), tok.encode("Sum column B into C1, then stop.")
    params = SamplingParams(temperature=1.0, top_k=50, top_p=0.9, max_new_tokens=6, seed=0)
    with _silent_transformers():
        # a repeated context: the shared prefill; all distinct: generate's own prefill
        shared = policy.act([short, short, long], params, seeds=[1, 2, 3])
        distinct = policy.act([short, long], params)
    assert all(turn.token_ids for turn in [*shared, *distinct])


def test_prefix_logprob_pass_warns_nothing(tiny_model):
    from spreadrl.train.batching import Sample, collate
    from spreadrl.train.logprobs import sequence_logprobs

    model, _ = tiny_model
    prompt = list(range(5, 17))
    samples = [
        Sample(ids=prompt + [20 + k, 30 + k], mask=[0] * len(prompt) + [1, 1], group=0)
        for k in range(3)
    ]
    batch = collate(samples, 0, shared_prefix_min=4)
    assert "prefix_ids" in batch  # the path that runs the prompt once and passes its cache
    with _silent_transformers():
        logp, _ = sequence_logprobs(model, batch)
    assert logp.shape[0] == 3
