"""What the agent loop needs from a policy: one protocol per way of generating.

- :class:`TokenPolicy` (hf, vllm): token ids in, token ids and log-probs out;
  the loop keeps the exact sampled ids (token-in/token-out).
- :class:`StreamingPolicy` (vllm): a token policy that also takes requests one by
  one (``submit`` / ``poll``), which the episode scheduler of
  :mod:`spreadrl.rollout.streaming` uses.
- :class:`MessagePolicy` (openai, the scripted oracle and noop): reads the
  conversation, returns text; nothing is trained on it.

Every member the loop reads is declared here, so the loop reads them as they
are (``policy.max_context_tokens``) and never asks whether a policy happens to
have one. ``token_level`` says whether a policy is a token or a message policy
(:func:`is_token_level`), ``streaming`` whether a token policy streams
(:func:`is_streaming`). Policies are built by the rollout engines
(:mod:`spreadrl.rollout.engine`): from a checkpoint for eval and serve
(:func:`~spreadrl.rollout.engine.load_policy`), or, in training, around the
trainer's own model (:meth:`~spreadrl.rollout.engine.RolloutEngine.start`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, Protocol, TypeGuard

from spreadrl.rollout.types import PolicyTurn, SamplingParams

if TYPE_CHECKING:
    from spreadrl.rollout.episode import EpisodeState

Contexts = Sequence[Sequence[int]]
"""One token history per episode, each ending in the assistant header."""

Seeds = Sequence[int | None]
"""One sampling seed per context (None where the run has no seed)."""


class TokenPolicy(Protocol):
    """Samples one turn for each context (token ids); returns ids and log-probs."""

    token_level: Literal[True]

    @property
    def streaming(self) -> bool:
        """Whether this is a :class:`StreamingPolicy` (it then declares ``Literal[True]``)."""
        ...

    @property
    def seeds_per_context(self) -> bool:
        """Whether ``act`` should be given a seed per context (``seeds``).

        True (hf): the loop derives one per episode and turn, so an episode's tokens
        do not depend on which episodes share its batch (nor on the rank under
        torchrun). False: the policy seeds its rows itself from ``params.seed``."""
        ...

    @property
    def max_context_tokens(self) -> int:
        """The model's context length in tokens; 0 = not declared (the loop adds no limit).

        The loop clips each turn's token budget to it (unless the run sets its own
        limit), so no turn generates past the positions the model has."""
        ...

    def act(
        self, contexts: Contexts, params: SamplingParams, *, seeds: Seeds | None = None
    ) -> list[PolicyTurn]:
        """One turn per context; row i samples with ``seeds[i]`` when seeds are given."""
        ...


class StreamingPolicy(TokenPolicy, Protocol):
    """A token policy that takes requests one by one and returns them when done.

    Which policies stream is declared (``streaming: Literal[True]``) and read by
    :func:`is_streaming`, as ``token_level`` is read by :func:`is_token_level`: a
    wrapper (the asynchronous trainer's versioned policy) or a test double says what
    it is in one line, and a type checker then holds it to these methods.
    ``isinstance`` on a runtime-checkable protocol would only test that methods so
    named exist (the attribute probe again), and a nominal base class would put vLLM's
    policy, the wrappers and the doubles into one class tree for the sake of a flag.
    """

    @property
    def streaming(self) -> Literal[True]:
        """Always True: what :func:`is_streaming` reads."""
        ...

    def submit(self, request_id: str, context: Sequence[int], params: SamplingParams) -> None:
        """Queue one turn; ``params.seed`` is this request's own."""
        ...

    def poll(self) -> list[tuple[str, PolicyTurn]]:
        """Advance generation a little; return the turns that finished meanwhile.

        A turn whose ``finish_reason`` is "abort" never finished (the engine dropped it)."""
        ...

    def abort(self, request_ids: Sequence[str]) -> None:
        """Stop requests the scheduler gave up on (past their episode's wall time)."""
        ...

    def has_unfinished(self) -> bool | None:
        """Whether the engine still holds any submitted request; None: it cannot say
        (the scheduler then waits a little after a poll that brought nothing)."""
        ...

    def take_started(self) -> list[str] | None:
        """The requests the engine began to serve since the last call, each named once;
        None: this engine does not report it (an episode's clock then starts when its
        turn is submitted, not when the engine first serves it)."""
        ...


class MessagePolicy(Protocol):
    """Writes one turn for each episode from its messages; returns text only."""

    token_level: Literal[False]

    def act_messages(
        self, states: Sequence[EpisodeState], params: SamplingParams
    ) -> list[PolicyTurn]: ...


Policy = TokenPolicy | MessagePolicy
"""Any policy the agent loop can drive (a :class:`StreamingPolicy` is a token policy)."""


def is_token_level(policy: Policy) -> TypeGuard[TokenPolicy]:
    """True for a token-level policy (its ids are kept and trained on)."""
    return policy.token_level is True


def is_streaming(policy: Policy) -> TypeGuard[StreamingPolicy]:
    """True for a token policy that declares it streams (``streaming``)."""
    return policy.token_level is True and policy.streaming is True
