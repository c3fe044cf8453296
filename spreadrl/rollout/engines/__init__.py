"""The rollout engines, one module each, and their registry by name.

:mod:`spreadrl.rollout.engine` says what an engine is and finds one by name
(:func:`~spreadrl.rollout.engine.engine_class`); :data:`ENGINES` is the one line a
new engine adds beside its own module. An entry holds the engine's import path and
what callers ask before anything is loaded (whether GRPO can train with it, whether
``spreadrl serve`` runs it, whether it samples ``--model`` and loads its weights), so a refused flag never
imports torch, vLLM or an HTTP client. A test may register an engine class instead
of an entry: its class attributes of the same names answer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """A registered engine: ``module:Class`` and what it can do (in this order)."""

    path: str
    trains: bool = False  # GRPO samples with it (it takes the trainer's weights)
    serves: bool = False  # spreadrl serve runs it (token-level)
    needs_model: bool = False  # it samples --model (eval defaults it to the recipe's)
    loads_weights: bool = False  # it loads --model's weights itself (a folder or a Hub id)


ENGINES: dict[str, Entry | type] = {
    "hf": Entry("spreadrl.rollout.engines.hf:HFEngine", True, True, True, True),
    "vllm": Entry("spreadrl.rollout.engines.vllm_engine:VLLMEngine", True, True, True, True),
    "openai": Entry("spreadrl.rollout.engines.openai:OpenAIEngine", needs_model=True),
    "oracle": Entry("spreadrl.rollout.engines.scripted:OracleEngine"),
    "noop": Entry("spreadrl.rollout.engines.scripted:NoopEngine"),
}


def engines_that(ability: str) -> list[str]:
    """The registered engines that say yes to ``ability`` (an :class:`Entry` field),
    read off the registry without importing any engine."""
    return [name for name, entry in ENGINES.items() if getattr(entry, ability, False)]
