"""Parse an assistant turn (Hermes tool calls, ``<think>``-style reasoning) into text, reasoning and calls.

The markers come from the tokenizer's chat format (:mod:`spreadrl.rollout.chat`,
derived from its template); without one, Qwen3's (:data:`~spreadrl.rollout.chat.FALLBACK`).

Model output is untrusted: whatever it is, :func:`parse_assistant_turn`
returns a :class:`ParsedTurn` and never raises. Problems become ``errors``,
short messages written for the model (the rollout loop sends them back as the
observation and counts them), e.g. bad JSON, a missing ``"name"``, arguments
that are not an object, an unknown tool (listing the valid ones), too many
calls in one turn, or an unterminated ``<tool_call>``.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field

from spreadrl.env.types import ToolCall
from spreadrl.rollout.chat import FALLBACK, ChatFormat

_SNIPPET = 80


@dataclass(frozen=True)
class ParsedTurn:
    """One assistant turn, parsed.

    ``content``: the text outside ``<think>`` and ``<tool_call>`` blocks, stripped.
    ``reasoning``: the ``<think>`` block's text, or None when there is none.
    ``tool_calls``: the well-formed calls, in order (at most ``max_calls``).
    ``errors``: readable messages for the model; empty when the turn is well formed.
    """

    content: str
    reasoning: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def is_final(self) -> bool:
        """The agent answered: no tool call and nothing malformed."""
        return not self.tool_calls and not self.errors


def _snippet(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _SNIPPET else text[:_SNIPPET] + "..."


def _parse_call(body: str, tool_names: Collection[str] | None, opening: str) -> ToolCall | str:
    """A ToolCall, or an error message for the model."""
    body = body.strip()
    if not body:
        return f'empty {opening} block; write a JSON object with "name" and "arguments"'
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        return f"the tool call is not valid JSON ({exc.msg} at char {exc.pos}): {_snippet(body)}"
    except RecursionError:
        return "the tool call JSON is nested too deeply"
    if not isinstance(data, dict):
        return f"the tool call must be a JSON object, got {type(data).__name__}: {_snippet(body)}"
    name = data.get("name")
    if not isinstance(name, str) or not name:
        return 'the tool call has no "name" (a string naming the tool)'
    arguments = data.get("arguments", {})
    if isinstance(arguments, str):  # some models double-encode the arguments
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return f'"arguments" of {name} must be a JSON object, got a string that is not JSON'
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return f'"arguments" of {name} must be a JSON object, got {type(arguments).__name__}'
    if tool_names is not None and name not in tool_names:
        valid = ", ".join(sorted(tool_names)) or "(none)"
        return f"unknown tool {name!r}; valid tools are: {valid}"
    return ToolCall(name=name, arguments=arguments)


def parse_assistant_turn(
    text: str,
    tool_names: Collection[str] | None = None,
    *,
    max_calls: int = 1,
    fmt: ChatFormat | None = None,
) -> ParsedTurn:
    """Parse one assistant turn; never raises on model output.

    ``tool_names``: the valid tools (None accepts any name). ``max_calls``: calls
    allowed in one turn; extra calls are not run and add an error. ``fmt``: the
    tokenizer's chat format (markers, and whether the prompt opened the
    reasoning block); end-of-turn markers are ignored. Calls inside the
    reasoning are not run.
    """
    fmt = fmt or FALLBACK
    opening, closing = fmt.tool_call_open, fmt.tool_call_close
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    text = fmt.strip_end_markers(text)
    reasoning, rest = fmt.split_reasoning(text)
    if reasoning is not None:
        reasoning = reasoning.strip()
    content_parts: list[str] = []
    calls: list[ToolCall] = []
    errors: list[str] = []
    n_blocks = 0
    pos = 0
    while True:
        start = rest.find(opening, pos)
        stray_close = rest.find(closing, pos)
        if stray_close != -1 and (start == -1 or stray_close < start):
            content_parts.append(rest[pos:stray_close])
            errors.append(f"found {closing} without a matching {opening}")
            pos = stray_close + len(closing)
            continue
        if start == -1:
            content_parts.append(rest[pos:])
            break
        content_parts.append(rest[pos:start])
        body_start = start + len(opening)
        end = rest.find(closing, body_start)
        if end == -1:
            errors.append(
                f"unterminated {opening}: close each call with {closing}"
                f" ({_snippet(rest[body_start:]) or 'empty'})"
            )
            break
        n_blocks += 1
        result = _parse_call(rest[body_start:end], tool_names, opening)
        if isinstance(result, str):
            errors.append(result)
        elif len(calls) < max_calls:
            calls.append(result)
        pos = end + len(closing)
    if n_blocks > max_calls:
        errors.append(f"{n_blocks} tool calls in one turn; at most {max_calls} allowed per turn")
    return ParsedTurn(
        content="".join(content_parts).strip(),
        reasoning=reasoning,
        tool_calls=calls,
        errors=errors,
    )
