"""What the capturing endpoint keeps of one episode: each call's ids as the engine saw them.

A harness talks to the endpoint in messages; the engine sees token ids. For every
call the endpoint keeps the prompt ids it generated from, the ids it sampled and
their log-probs (:class:`CapturedCall`), and builds the episode's training samples
from those ids alone, nothing re-tokenized:

- a call whose prompt starts with the previous call's prompt plus completion
  continues the same sample: the ids in between (tool results, template) are
  appended with loss mask 0, the sampled ids with mask 1, exactly as the
  built-in loop appends them;
- a call whose prompt does not (the harness re-rendered its history: a template
  that drops earlier reasoning, an edited message) starts a new sample, and the
  break is counted (:attr:`SessionCapture.prefix_breaks`). The episode's samples
  share its reward and advantage.

The prompt of a call is built the built-in loop's way when it can be: when the
request repeats the previous request's messages and the reply the endpoint gave,
followed by tool results only, the prompt is the previous context plus the
template's tool-response ids (:meth:`EpisodeChat.tool_response_ids`), so the
sampled ids are kept rather than re-encoded from their text. Any other request is
rendered whole by the chat template, and only then compared.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.types import PolicyTurn


@dataclass
class CapturedCall:
    """One engine call: the prompt ids it saw, the ids it sampled and their log-probs."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    reply: dict[str, Any]  # the assistant message returned (template form)
    tool_calls: int = 0
    continued: bool = False  # the prompt was built by appending to the previous context


@dataclass
class CapturedSample:
    """One training sample: a prompt and everything after it, with mask and log-probs."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)

    @property
    def context(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    def to_json(self) -> dict[str, list]:
        return {
            "prompt_ids": self.prompt_ids,
            "response_ids": self.response_ids,
            "response_mask": self.response_mask,
            "rollout_logprobs": self.logprobs,
        }


def _normal_message(message: dict[str, Any]) -> tuple:
    """A template message reduced to what the template renders (for comparing echoes)."""
    calls = tuple(
        (
            c.get("function", {}).get("name"),
            json.dumps(c.get("function", {}).get("arguments"), sort_keys=True),
        )
        for c in message.get("tool_calls") or ()
    )
    return (
        message.get("role"),
        message.get("content") or "",
        message.get("reasoning_content") or None,
        calls,
    )


class SessionCapture:
    """One episode's calls and the samples they make (see the module docstring)."""

    def __init__(self, chat: EpisodeChat) -> None:
        self.chat = chat
        self.calls: list[CapturedCall] = []
        self.samples: list[CapturedSample] = []
        self.prefix_breaks = 0

    def prompt_ids(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> tuple[list[int], bool]:
        """The ids the engine generates from for this request, and whether they continue
        the previous call's context (built by appending, not by rendering)."""
        observations = self._appended_tool_results(messages, tools)
        if observations is not None:
            return self.samples[-1].context + self.chat.tool_response_ids(observations), True
        return self.chat.prompt_ids(messages, tools), False

    def _appended_tool_results(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> list[str] | None:
        """The tool results this request adds to the previous one, when that is all it
        adds (same tools, same messages, the reply echoed as given); else None."""
        if not self.calls or not self.samples:
            return None
        last = self.calls[-1]
        seen = len(last.messages)
        if tools != last.tools or len(messages) <= seen + 1:
            return None
        if [_normal_message(m) for m in messages[:seen]] != [
            _normal_message(m) for m in last.messages
        ]:
            return None
        if _normal_message(messages[seen]) != _normal_message(last.reply):
            return None
        tail = messages[seen + 1 :]
        if not all(m.get("role") == "tool" for m in tail):
            return None
        return [str(m.get("content") or "") for m in tail]

    def record(
        self,
        prompt_ids: list[int],
        turn: PolicyTurn,
        *,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        reply: dict[str, Any],
        tool_calls: int,
        continued: bool,
    ) -> None:
        """Keep one call and extend the samples with it (joined or a new sample)."""
        ids = list(turn.token_ids or [])
        lps = list(turn.logprobs or [0.0] * len(ids))
        self.calls.append(
            CapturedCall(
                prompt_ids=list(prompt_ids),
                completion_ids=ids,
                logprobs=lps,
                finish_reason=turn.finish_reason,
                messages=messages,
                tools=tools,
                reply=reply,
                tool_calls=tool_calls,
                continued=continued,
            )
        )
        sample = self.samples[-1] if self.samples else None
        if sample is not None and prompt_ids[: len(sample.context)] == sample.context:
            between = prompt_ids[len(sample.context) :]
            sample.response_ids += between
            sample.response_mask += [0] * len(between)
            sample.logprobs += [0.0] * len(between)
        else:
            if sample is not None:
                self.prefix_breaks += 1
            sample = CapturedSample(list(prompt_ids))
            self.samples.append(sample)
        sample.response_ids += ids
        sample.response_mask += [1] * len(ids)
        sample.logprobs += lps
        if turn.finish_reason != "stop":  # closed as the built-in loop closes a cut turn
            closing = self.chat.assistant_end_ids()
            sample.response_ids += closing
            sample.response_mask += [0] * len(closing)
            sample.logprobs += [0.0] * len(closing)

    def room(self, prompt_ids: list[int], max_response_tokens: int) -> int:
        """Tokens the episode's response budget leaves for a call with this prompt: the
        sample it would join's response so far counts against it; a new sample starts
        with the whole budget."""
        sample = self.samples[-1] if self.samples else None
        if sample is not None and prompt_ids[: len(sample.context)] == sample.context:
            return max_response_tokens - (len(prompt_ids) - len(sample.prompt_ids))
        return max_response_tokens
