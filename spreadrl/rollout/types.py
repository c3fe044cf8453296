"""Records of the agent loop: a request's sampling, a run's values, one policy turn, one trajectory.

A trajectory keeps the exact token ids the policy sampled (token-in/token-out):
``response_ids`` is everything after the prompt, sampled assistant tokens
(mask 1) interleaved with tool-response and template tokens (mask 0). The
trainer trains on exactly these ids; nothing is re-tokenized from text.
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass, field
from typing import Any

from spreadrl.env.types import EndReason
from spreadrl.rollout.config import RolloutConfig

STOP_REASONS = tuple(reason.value for reason in EndReason)
CRASHES = frozenset({EndReason.ERROR, EndReason.ABORTED, EndReason.LOST_REQUEST})
"""End reasons that say nothing of the model: a tool, worker, environment or engine failed."""


@dataclass(frozen=True)
class SamplingParams:
    """How the policy samples one generation request.

    It has no defaults of its own: :func:`sampling_params` builds it from the
    recipe's ``rollout`` section, the one place the sampling defaults live."""

    temperature: float
    top_p: float
    top_k: int
    max_new_tokens: int
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True)
class RunValues:
    """What one set of episodes runs with that is no recipe setting.

    The recipe's ``rollout`` section says how to sample and where the budgets
    are; these are the values the caller knows only at run time: the seed of
    this call (GRPO derives one per round), the prompt budget
    (``data.max_prompt_tokens``: longer prompts end at once, untrained; 0 = no
    limit), the model's context length (0 = unknown: ``run_episodes`` reads it
    off the policy) and where finished workbooks are kept (eval, serve)."""

    seed: int | None = None
    max_prompt_tokens: int = 0
    max_context_tokens: int = 0
    keep_outputs_dir: str | None = None


def sampling_params(
    cfg: RolloutConfig, *, seed: int | None, max_new_tokens: int | None = None
) -> SamplingParams:
    """One request's sampling from the recipe's ``rollout`` section (the one translation).

    ``max_new_tokens`` is the request's own budget (the turn's room left in the
    episode), at most ``cfg.max_new_tokens_per_turn``, which it defaults to."""
    return SamplingParams(
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        top_k=cfg.top_k,
        max_new_tokens=cfg.max_new_tokens_per_turn if max_new_tokens is None else max_new_tokens,
        seed=seed,
    )


def derive_seed(seed: int | None, key: str) -> int | None:
    """A reproducible seed of its own for each generation request.

    Engines like vLLM seed every request's sampler from its own seed: one
    shared seed would make the G rollouts of a GRPO group identical (same
    prompt, same random stream) and every advantage zero."""
    if seed is None:
        return None
    return (seed * 1_000_003 + zlib.crc32(key.encode())) % (2**31 - 1)


@dataclass
class PolicyTurn:
    """One assistant turn as the policy produced it.

    Token-level policies (hf, vllm) fill ``token_ids`` and ``logprobs`` (the
    rollout engine's log-probs of the sampled tokens, for truncated importance
    sampling); message-level policies (openai, scripted) give only ``text``.
    ``finish_reason`` is "stop" when the turn ended with the end-of-turn token
    and "length" when it was cut by the token budget.
    """

    text: str
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finish_reason: str = "stop"
    # the policy version (trainer steps taken) of the weights that sampled the turn;
    # set only by asynchronous GRPO's versioned policy (spreadrl.train.producer)
    version: int | None = None


@dataclass
class Trajectory:
    """A finished episode: the conversation, its tokens, its outcome."""

    task_id: str
    case: int
    sample: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    rollout_logprobs: list[float] = field(default_factory=list)
    # asynchronous GRPO only (empty otherwise): per response token, the policy version
    # that sampled it, -1 for tokens the policy did not sample (tool responses, template)
    response_versions: list[int] = field(default_factory=list)
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    parse_errors: int = 0
    generated_tokens: int = 0  # tokens the policy sampled (kept when the ids are not)
    stop_reason: EndReason = EndReason.ANSWERED
    env_reward: float = 0.0  # what the environment's checker gave
    reward: float = 0.0  # the reward trained on: env_reward, or shaped by the recipe
    passed: bool = False
    mismatches: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None  # one line: the exception's type and message
    traceback: str | None = None  # the whole traceback of a crash (the worker's too)
    timings: dict[str, float] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def crashed(self) -> bool:
        """The episode ended on a failure outside the model (:data:`CRASHES`): its reward
        measures the failure, so training must not take it for the model's doing."""
        return self.stop_reason in CRASHES

    @property
    def key(self) -> str:
        """Identity of the episode within a run (used for resuming)."""
        return f"{self.task_id}/{self.case}/{self.sample}"

    def to_json(self, *, with_tokens: bool = True) -> dict[str, Any]:
        data = asdict(self)
        if not data["response_versions"]:  # a synchronous run writes what it always wrote
            data.pop("response_versions")
        if data["traceback"] is None:  # so does an episode that did not crash
            data.pop("traceback")
        if not with_tokens:
            for name in ("prompt_ids", "response_ids", "response_mask", "rollout_logprobs"):
                data.pop(name)
            data.pop("response_versions", None)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Trajectory:
        known = {f for f in cls.__dataclass_fields__}
        kept = {k: v for k, v in data.items() if k in known}
        if kept.get("stop_reason") in STOP_REASONS:
            kept["stop_reason"] = EndReason(kept["stop_reason"])
        if "env_reward" not in kept and "reward" in kept:  # written before env_reward existed
            kept["env_reward"] = kept["reward"]
        return cls(**kept)
