"""Scripted policies: baselines and test doubles that need no model.

``oracle`` replays a task case's reference solution one call per turn and then
answers (with the task's reference final answer, for math/code problems); ``noop`` answers at once. Both speak through the same text format as
a model (Hermes ``<tool_call>`` tags), so they exercise the real parser.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from spreadrl.rollout.chat import render_tool_call
from spreadrl.rollout.engine import EvalEngine, LoadSpec
from spreadrl.rollout.types import PolicyTurn, SamplingParams

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from spreadrl.rollout.policy import Policy
    from spreadrl.rollout.runner import EpisodeState

FINAL_ANSWER = "Done."


def format_tool_call(name: str, arguments: dict, call_format: str = "hermes") -> str:
    """A tool call in the format Qwen3 models emit (Hermes unless told qwen3_coder)."""
    return render_tool_call(name, arguments, call_format)


class OraclePolicy:
    """Replays the reference solution of each episode's task case."""

    token_level: Literal[False] = False

    def act_messages(
        self, states: Sequence[EpisodeState], params: SamplingParams
    ) -> list[PolicyTurn]:
        turns = []
        for state in states:
            calls = state.task.case(state.case).load_solution() or []
            done = state.turns_taken
            if done < len(calls):
                call = calls[done]
                turns.append(
                    PolicyTurn(text=format_tool_call(call["name"], call.get("arguments", {})))
                )
            else:
                # problem tasks (math/code) carry their reference final answer instead
                final = state.task.metadata.get("reference_solution") or FINAL_ANSWER
                turns.append(PolicyTurn(text=str(final)))
        return turns


class NoopPolicy:
    """Answers immediately without touching the workbook (a floor baseline)."""

    token_level: Literal[False] = False

    def act_messages(
        self, states: Sequence[EpisodeState], params: SamplingParams
    ) -> list[PolicyTurn]:
        return [PolicyTurn(text=FINAL_ANSWER) for _ in states]


class OracleEngine(EvalEngine):
    """``--backend oracle``: the reference solutions, no model."""

    name = "oracle"

    @classmethod
    def load(cls, spec: LoadSpec) -> tuple[Policy, PreTrainedTokenizerBase | None]:
        return OraclePolicy(), None


class NoopEngine(EvalEngine):
    """``--backend noop``: a final answer at once, no model."""

    name = "noop"

    @classmethod
    def load(cls, spec: LoadSpec) -> tuple[Policy, PreTrainedTokenizerBase | None]:
        return NoopPolicy(), None
