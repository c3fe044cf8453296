"""Parse an assistant turn (Hermes or qwen3_coder tool calls, ``<think>`` reasoning) into text, reasoning and calls.

The markers come from the tokenizer's chat format (:mod:`spreadrl.rollout.chat`,
derived from its template); without one, Qwen3's (:data:`~spreadrl.rollout.chat.FALLBACK`).

Model output is untrusted: whatever it is, :func:`parse_assistant_turn`
returns a :class:`ParsedTurn` and never raises. Problems become ``errors``,
short messages written for the model (the rollout loop sends them back as the
observation and counts them), e.g. bad JSON, a missing ``"name"``, arguments
that are not an object, an unknown tool (listing the valid ones), too many
calls in one turn, or an unterminated ``<tool_call>``.

Two tool-call formats share the ``<tool_call>`` markers: ``hermes`` (a JSON
object with ``name`` and ``arguments``) and ``qwen3_coder`` (XML-like
``<function=NAME><parameter=KEY>value</parameter></function>``, the format
Qwen3-Coder templates render; values are read by the tool schema's type, as
Spreadsheet-RL's parser reads them). A call inside the reasoning is ignored by
default, or reported (``calls_in_reasoning="error"``, Spreadsheet-RL's loop):
the model learns that such a call did not run.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from spreadrl.env.types import ToolCall
from spreadrl.rollout.chat import FALLBACK, ChatFormat

_SNIPPET = 80
CALL_FORMATS = ("hermes", "qwen3_coder")
_FUNCTION = re.compile(r"<function=([^>\r\n]+)>")
_PARAMETER = re.compile(r"<parameter=([^>\r\n]+)>")
_XML_EXAMPLE = "<function=NAME><parameter=KEY>value</parameter></function>"


@dataclass(frozen=True)
class ParsedTurn:
    """One assistant turn, parsed.

    ``content``: the text outside ``<think>`` and ``<tool_call>`` blocks, stripped.
    ``reasoning``: the ``<think>`` block's text, or None when there is none.
    ``tool_calls``: the well-formed calls, in order (at most ``max_calls``).
    ``errors``: readable messages for the model; empty when the turn is well formed.
    ``extra_calls``: well-formed calls past ``max_calls`` that were not kept, when
    the parser was told to skip them (``extra_calls="skip"``) rather than reject the turn.
    """

    content: str
    reasoning: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    extra_calls: int = 0

    @property
    def is_final(self) -> bool:
        """The agent answered: no tool call and nothing malformed."""
        return not self.tool_calls and not self.errors


def _snippet(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _SNIPPET else text[:_SNIPPET] + "..."


def _check_name(name: str, tool_names: Collection[str] | None) -> str | None:
    if tool_names is not None and name not in tool_names:
        valid = ", ".join(sorted(tool_names)) or "(none)"
        return f"unknown tool {name!r}; valid tools are: {valid}"
    return None


def _parse_json_call(body: str, tool_names: Collection[str] | None, opening: str) -> ToolCall | str:
    """A ToolCall from a Hermes JSON body, or an error message for the model."""
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
    return _check_name(name, tool_names) or ToolCall(name=name, arguments=arguments)


def _property_types(schemas: Sequence[dict[str, Any]] | None, name: str) -> dict[str, Any]:
    """``{argument: its JSON-schema type}`` of tool ``name`` (empty when unknown)."""
    for schema in schemas or ():
        fn = schema.get("function", schema) if isinstance(schema, dict) else {}
        if isinstance(fn, dict) and fn.get("name") == name:
            props = (fn.get("parameters") or {}).get("properties") or {}
            return {k: v.get("type") for k, v in props.items() if isinstance(v, dict)}
    return {}


def _literal(raw: str) -> Any:
    """A JSON (or Python) literal, or None when ``raw`` is neither."""
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, RecursionError):
        pass
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _xml_value(raw: str, kind: Any) -> Any:
    """A qwen3_coder parameter's text as its schema type says; text when it does not fit.

    Strings stay verbatim; integers, numbers and booleans are converted; arrays and
    objects are read as JSON (or Python) literals; a type list (``["array",
    "string"]``) takes any literal. ``null`` is None for every type.
    """
    if raw.lower() == "null":
        return None
    if kind is None or kind == "string":
        return raw
    if isinstance(kind, list):
        value = _literal(raw)
        return raw if value is None else value
    if kind == "integer":
        try:
            return int(raw)
        except ValueError:
            return raw
    if kind == "number":
        try:
            number = float(raw)
        except ValueError:
            return raw
        return int(number) if number.is_integer() else number
    if kind == "boolean":
        return raw.strip().lower() == "true"
    expected = {"array": list, "object": dict}.get(kind)
    value = _literal(raw)
    if expected is not None and not isinstance(value, expected):
        return raw
    return raw if value is None else value


def _parse_xml_calls(
    body: str, tool_names: Collection[str] | None, schemas: Sequence[dict[str, Any]] | None
) -> list[ToolCall] | str:
    """The calls of one qwen3_coder ``<tool_call>`` body, or an error message for the model."""
    calls: list[ToolCall] = []
    pos = 0
    while True:
        while pos < len(body) and body[pos].isspace():
            pos += 1
        if pos >= len(body):
            break
        match = _FUNCTION.match(body, pos)
        if match is None:
            return f"expected {_XML_EXAMPLE} inside <tool_call>: {_snippet(body[pos:])}"
        name = match.group(1).strip()
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            return f"invalid function name {name!r} in the tool call"
        types = _property_types(schemas, name)
        arguments: dict[str, Any] = {}
        pos = match.end()
        while True:
            while pos < len(body) and body[pos].isspace():
                pos += 1
            if body.startswith("</function>", pos):
                pos += len("</function>")
                break
            param = _PARAMETER.match(body, pos)
            if param is None:
                return f"unclosed <function={name}>: close it with </function> ({_XML_EXAMPLE})"
            end = body.find("</parameter>", param.end())
            if end == -1:
                return f"unclosed <parameter={param.group(1).strip()}>: close it with </parameter>"
            raw = body[param.end() : end]
            raw = raw[1:] if raw.startswith("\n") else raw
            raw = raw[:-1] if raw.endswith("\n") else raw
            key = param.group(1).strip()
            arguments[key] = _xml_value(raw, types.get(key))
            pos = end + len("</parameter>")
        problem = _check_name(name, tool_names)
        if problem:
            return problem
        calls.append(ToolCall(name=name, arguments=arguments))
    if not calls:
        return f"empty <tool_call> block; write {_XML_EXAMPLE}"
    return calls


def parse_assistant_turn(
    text: str,
    tool_names: Collection[str] | None = None,
    *,
    max_calls: int = 1,
    fmt: ChatFormat | None = None,
    call_format: str = "hermes",
    schemas: Sequence[dict[str, Any]] | None = None,
    calls_in_reasoning: Literal["ignore", "error"] = "ignore",
    extra_calls: Literal["reject", "skip"] = "reject",
) -> ParsedTurn:
    """Parse one assistant turn; never raises on model output.

    ``tool_names``: the valid tools (None accepts any name). ``max_calls``: calls
    kept from one turn; past it, ``extra_calls="reject"`` adds an error (so the
    turn runs nothing) and ``"skip"`` only counts them in ``extra_calls``.
    ``fmt``: the tokenizer's chat format (markers, and whether the prompt opened
    the reasoning block); end-of-turn markers are ignored. ``call_format``:
    ``hermes`` or ``qwen3_coder`` (its values typed by ``schemas``, the tools'
    JSON schemas). Calls inside the reasoning never run; with
    ``calls_in_reasoning="error"`` they are an error the model is told about.
    """
    fmt = fmt or FALLBACK
    opening, closing = fmt.tool_call_open, fmt.tool_call_close
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    text = fmt.strip_end_markers(text)
    reasoning, rest = fmt.split_reasoning(text)
    if reasoning is not None:
        reasoning = reasoning.strip()
    if call_format not in CALL_FORMATS:
        raise ValueError(
            f"unknown tool-call format {call_format!r}; use {' or '.join(CALL_FORMATS)}"
        )

    def parse_body(body: str) -> ToolCall | str | list[ToolCall]:
        if call_format == "qwen3_coder":
            return _parse_xml_calls(body, tool_names, schemas)
        return _parse_json_call(body, tool_names, opening)

    content, calls, errors, n_blocks, extra = _scan_calls(
        rest, opening, closing, parse_body, max_calls
    )
    if n_blocks > max_calls and extra_calls == "reject":
        errors.append(f"{n_blocks} tool calls in one turn; at most {max_calls} allowed per turn")
    if calls_in_reasoning == "error" and reasoning is not None and opening in reasoning:
        errors.insert(
            0,
            f"a tool call ({opening}) inside the reasoning is not run; "
            f"write tool calls after {fmt.think_close}",
        )
    return ParsedTurn(
        content=content,
        reasoning=reasoning,
        tool_calls=calls,
        errors=errors,
        extra_calls=extra if extra_calls == "skip" else 0,
    )


def _scan_calls(
    rest: str,
    opening: str,
    closing: str,
    parse_body: Callable[[str], ToolCall | str | list[ToolCall]],
    max_calls: int,
) -> tuple[str, list[ToolCall], list[str], int, int]:
    """Walk ``rest`` (the turn after its reasoning) block by block, in order.

    Returns the text outside the call blocks (stripped), the first ``max_calls`` calls,
    the errors in the order met (a stray close, a call that does not parse, an
    unterminated block, which ends the scan), the number of calls written and how many
    well-formed ones came past ``max_calls``."""
    content_parts: list[str] = []
    calls: list[ToolCall] = []
    errors: list[str] = []
    n_blocks = 0
    extra = 0  # well-formed calls past max_calls
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
        result = parse_body(rest[body_start:end])
        found = result if isinstance(result, list) else [result]
        n_blocks += len(found)
        for item in found:
            if isinstance(item, str):
                errors.append(item)
            elif len(calls) < max_calls:
                calls.append(item)
            else:
                extra += 1
        pos = end + len(closing)
    return "".join(content_parts).strip(), calls, errors, n_blocks, extra
