"""What the agent loop needs from a policy: three small protocols.

- :class:`TokenPolicy` (hf, vllm): token ids in, token ids and log-probs out;
  the loop keeps the exact sampled ids (token-in/token-out).
- :class:`MessagePolicy` (openai, the scripted oracle and noop): reads the
  conversation, returns text; nothing is trained on it.
- :class:`StreamingPolicy` (vllm, in :mod:`spreadrl.rollout.streaming`): a token
  policy that also takes requests one by one (``submit`` / ``poll``), which the
  episode scheduler uses.

``token_level`` says which of the first two a policy is; the loop reads it
through :func:`is_token_level` and nothing else. Policies are built by
:func:`spreadrl.rollout.backends.load_policy` (by backend name, from a checkpoint)
or, in training, around the trainer's own model
(``spreadrl.train.rollout_backend.build_rollout_policy``; its docstring says why not one builder).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from spreadrl.rollout.types import PolicyTurn, SamplingParams

if TYPE_CHECKING:
    from spreadrl.rollout.episode import EpisodeState


@runtime_checkable
class TokenPolicy(Protocol):
    """Samples one turn for each context (token ids); returns ids and log-probs."""

    token_level: Literal[True]

    def act(
        self, contexts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[PolicyTurn]: ...


@runtime_checkable
class MessagePolicy(Protocol):
    """Writes one turn for each episode from its messages; returns text only."""

    token_level: Literal[False]

    def act_messages(
        self, states: Sequence[EpisodeState], params: SamplingParams
    ) -> list[PolicyTurn]: ...


Policy = TokenPolicy | MessagePolicy
"""Any policy the agent loop can drive."""


def is_token_level(policy: Policy) -> bool:
    """True for a token-level policy (its ids are kept and trained on)."""
    return policy.token_level is True
