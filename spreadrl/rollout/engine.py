"""The rollout engine: what samples a run's episodes, picked by name.

A :class:`RolloutEngine` builds its policy, says whether it keeps weights of its
own on the trainer's GPU (``colocated``), takes the trainer's weights
(:meth:`~RolloutEngine.sync`), sleeps during the update
(:meth:`~RolloutEngine.sleep`; the next sync wakes it), gives its memory and
capacity lines to ``spreadrl plan`` (:meth:`~RolloutEngine.plan`) and offers the
engine that the held-out evaluation samples with
(:meth:`~RolloutEngine.eval_engine`). GRPO, eval, serve, ``data sft-build``, the
plan and the asynchronous producer all reach an engine through
:func:`engine_class`, by the name a recipe or a flag gives (``rollout.backend``,
``--backend``), so adding an engine is its own module and one line in
:data:`spreadrl.rollout.engines.ENGINES`, the registry. The engines live in
:mod:`spreadrl.rollout.engines`; no code outside them asks which engine it has.

The registry holds import paths, not classes: an engine's heavy dependency
(vLLM, an HTTP client) loads only when that engine is asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, MutableMapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from spreadrl.errors import ConfigError
from spreadrl.rollout.engines import ENGINES, Entry, engines_that

if TYPE_CHECKING:  # torch and transformers load with a model, not with the registry
    from torch import nn
    from transformers import PreTrainedTokenizerBase

    from spreadrl.rollout.config import RolloutConfig
    from spreadrl.rollout.policy import Policy


@dataclass(frozen=True)
class TrainingSetup:
    """What GRPO tells the engine it builds before any model is loaded.

    ``rank`` seeds a per-rank engine; ``local_rank`` is the rank's GPU under
    torchrun (None in one process); ``asynchronous``: ``rollout.max_staleness`` > 0."""

    rollout: RolloutConfig
    model_path: str
    model_dtype: str
    max_prompt_tokens: int
    seed: int
    rank: int = 0
    local_rank: int | None = None
    asynchronous: bool = False


@dataclass(frozen=True)
class LoadSpec:
    """What eval, serve and ``data sft-build`` load a fixed checkpoint with.

    ``max_model_len`` bounds an engine's context, hence its KV cache (None: the
    model's own limit)."""

    model: str | None
    device: str = "cpu"
    dtype: str = "auto"
    base_url: str | None = None
    max_batch_size: int = 64
    max_model_len: int | None = None


@dataclass(frozen=True)
class WeightFeed:
    """How the asynchronous producer samples and how the trainer's weights reach it.

    ``policy`` samples in the producer's thread, inside ``context()``;
    ``export(model)`` turns the trainer's weights into a payload (trainer's thread,
    at a step boundary); ``load(payload)`` applies one between two generation calls
    (producer's thread); ``discard(payload)`` frees one never applied;
    ``send_first``: the producer starts from the model's files, so the trainer's
    weights are published before it starts."""

    policy: Policy
    export: Callable[[nn.Module], object]
    load: Callable[[object], None]
    context: Callable[[], AbstractContextManager[object]]
    discard: Callable[[object], None] | None = None
    send_first: bool = False


@dataclass(frozen=True)
class MemoryQuery:
    """The per-GPU figures of a GRPO plan that an engine's footprint depends on (bytes).

    ``resident``: what the trainer holds through generation; ``gathered``: the
    whole model in the compute dtype, as the trainer's own forwards read it;
    ``engine_weights``: an engine copy of the weights in its dtype; ``sequences``:
    the step's sequences on one GPU; ``resident_peak``: ``resident`` as the device
    holds it (allocator reserve and CUDA context added)."""

    rollout: RolloutConfig
    device_bytes: float
    resident: float
    resident_peak: float
    gathered: float
    engine_weights: float
    kv_bytes_per_token: int
    max_model_len: int
    sequences: int
    on_cuda: bool


@dataclass
class EngineMemory:
    """An engine's share of a GRPO plan.

    ``generation``: the trainer's allocated bytes while it samples; ``share``:
    the device bytes the engine takes beside them; ``asleep``: what its process
    keeps through the log-prob passes and the update; ``rows``: component rows
    (name, bytes, note) for the plan's table."""

    generation: float
    share: float = 0.0
    asleep: float = 0.0
    kv_tokens: int = 0
    rows: list[tuple[str, float, str]] = field(default_factory=list)


class PlanView(Protocol):
    """What an engine reads of a finished plan (:class:`spreadrl.plan.Plan`)."""

    phases: dict[str, float]
    kv_tokens: int
    max_model_len: int
    margin_gib: float
    largest_utilization: float

    def spare(self, phase: str) -> float: ...


class RolloutEngine(Protocol):
    """One rollout engine (see the module docstring).

    What it can do (train, serve, load ``--model``) its registry entry says
    (:class:`~spreadrl.rollout.engines.Entry`). The class answers before anything is
    built (:meth:`load`, :meth:`plan`, :meth:`plan_report`,
    :meth:`allows_expandable_segments`); GRPO
    builds an instance with :meth:`for_training` (which refuses a setup that cannot
    run here, in one line) and :meth:`start`\\s it once the trained model exists."""

    colocated: bool  # weights of its own on the trainer's GPU (False: samples with the trainer's)
    policy: Policy  # after start()

    @classmethod
    def for_training(cls, setup: TrainingSetup) -> RolloutEngine: ...

    @classmethod
    def load(cls, spec: LoadSpec) -> tuple[Policy, PreTrainedTokenizerBase | None]: ...

    @classmethod
    def plan(cls, query: MemoryQuery) -> EngineMemory: ...

    @classmethod
    def plan_report(
        cls, query: MemoryQuery, plan: PlanView
    ) -> tuple[list[str] | None, list[tuple[str, str, str]]]: ...

    @classmethod
    def allows_expandable_segments(cls, environ: MutableMapping[str, str]) -> bool: ...

    def start(self, model: nn.Module, tokenizer: PreTrainedTokenizerBase) -> list[str]: ...

    def sync(self, model: nn.Module) -> None: ...

    def sleep(self) -> None: ...

    def eval_engine(
        self, model: nn.Module, tokenizer: PreTrainedTokenizerBase
    ) -> RolloutEngine: ...

    def producer(
        self,
        model: nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        context: Callable[[nn.Module], AbstractContextManager[object]],
    ) -> WeightFeed: ...


class EvalEngine:
    """Base of the engines that sample fixed weights for eval only (openai, oracle, noop).

    They take no trainer's weights, so GRPO and the plan refuse them in one line."""

    colocated = False
    name: ClassVar[str] = ""

    @classmethod
    def for_training(cls, setup: TrainingSetup) -> RolloutEngine:
        raise ConfigError(cls._refusal())

    @classmethod
    def plan(cls, query: MemoryQuery) -> EngineMemory:
        raise ConfigError(cls._refusal())

    @classmethod
    def plan_report(
        cls, query: MemoryQuery, plan: PlanView
    ) -> tuple[list[str] | None, list[tuple[str, str, str]]]:
        raise ConfigError(cls._refusal())

    @classmethod
    def allows_expandable_segments(cls, environ: MutableMapping[str, str]) -> bool:
        return True

    @classmethod
    def _refusal(cls) -> str:
        return (
            f"rollout.backend={cls.name} samples fixed weights for eval only; GRPO needs an "
            f"engine that takes the trainer's weights: {' or '.join(engines_that('trains'))}"
        )


def require_model(name: str, spec: LoadSpec) -> str:
    """``spec.model``, or one line saying that engine ``name`` needs one."""
    if not spec.model:
        raise ConfigError(f"the {name} backend needs --model (a local path or a model name)")
    return spec.model


def engine_class(name: str, *, setting: str = "backend") -> type[RolloutEngine]:
    """The engine registered as ``name``; an unknown name is one line naming the choices."""
    target: Any = ENGINES.get(name)
    if target is None:
        raise ConfigError(f"unknown {setting} {name!r}; choose one of {', '.join(ENGINES)}")
    if isinstance(target, Entry):
        module, _, attr = target.path.partition(":")
        target = getattr(importlib.import_module(module), attr)
    return target


def engine_can(name: str, ability: str) -> bool:
    """Whether engine ``name`` says yes to ``ability`` (see
    :class:`~spreadrl.rollout.engines.Entry`), without importing it."""
    entry = ENGINES.get(name)
    if entry is None:
        raise ConfigError(f"unknown backend {name!r}; choose one of {', '.join(ENGINES)}")
    return bool(getattr(entry, ability, False))


def load_policy(
    backend: str,
    model: str | None = None,
    *,
    device: str = "cpu",
    dtype: str = "auto",
    base_url: str | None = None,
    max_batch_size: int = 64,
    max_model_len: int | None = None,
) -> tuple[Policy, PreTrainedTokenizerBase | None]:
    """Return ``(policy, tokenizer)`` of engine ``backend`` over a fixed checkpoint (eval,
    serve, ``data sft-build``); the tokenizer is None for message-level policies.

    GRPO builds its engine around the model it trains instead
    (:meth:`RolloutEngine.for_training`): there the hf engine wraps the very module
    being trained and a colocated engine shares the GPU with the trainer. The
    settings are :class:`LoadSpec`'s."""
    spec = LoadSpec(model, device, dtype, base_url, max_batch_size, max_model_len)
    return engine_class(backend).load(spec)
