"""OpenAI's chat-completions wire format: request shapes, rendering, parsing a turn, responses.

Shared by ``spreadrl serve`` (:mod:`spreadrl.serve`) and the capturing endpoint
of harness training (:mod:`spreadrl.rollout.harness`), which sit on either side
of the rollout layer: both read a request the same way, render it with the
tokenizer's chat template (:mod:`spreadrl.rollout.chat`), and turn one sampled
assistant turn into OpenAI's response shape, its ``<tool_call>`` blocks as
``tool_calls`` with JSON-string arguments, so a client runs the tools and sends
the results back as ``role: "tool"`` messages.

The chat shapes follow OpenAI's ``/v1/chat/completions`` closely enough that
the ``openai`` client and common agent frameworks talk to either server
unchanged. Unknown request fields (``presence_penalty``, ``user``, ...) are
accepted and ignored, as OpenAI-compatible servers usually do, so a client
that sends them is not turned away.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.parsing import parse_assistant_turn
from spreadrl.rollout.types import PolicyTurn, SamplingParams


class ToolCallFunction(BaseModel):
    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCallItem(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str | None = None
    type: Literal["function"] = "function"
    function: ToolCallFunction


class ChatMessage(BaseModel):
    """One message of the conversation; ``content`` may be a string or OpenAI text parts."""

    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[ToolCallItem] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    # an assistant turn's reasoning, echoed back by the client under either name it is
    # returned under (``reasoning_content``; ``reasoning`` as vLLM's newer servers name it):
    # the template renders it, so the model sees the turns as it wrote them
    reasoning_content: str | None = Field(
        default=None, validation_alias=AliasChoices("reasoning_content", "reasoning")
    )

    def text(self) -> str:
        """The message's text: a string as is, text parts joined, None as ''."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(part.get("text", "")) for part in self.content if isinstance(part, dict))


class ToolSpec(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["function"] = "function"
    function: dict[str, Any]


class ChatCompletionRequest(BaseModel):
    """The body of ``POST /v1/chat/completions``."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ToolSpec] | None = None
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    n: int = Field(default=1, ge=1, le=1)
    seed: int | None = None
    stream: bool = False


def error_body(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    """An OpenAI-style error object: ``{"error": {"message", "type", "code"}}``."""
    return {"error": {"message": message, "type": kind, "code": code}}


@dataclass
class Completion:
    """One generated assistant turn, parsed."""

    text: str
    content: str | None
    reasoning: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int


def to_template_messages(request: ChatCompletionRequest) -> list[dict[str, Any]]:
    """Request messages as the chat template wants them (tool-call arguments as objects).

    An assistant turn's echoed reasoning (``reasoning_content`` or ``reasoning``)
    goes to the template as ``reasoning_content``; a turn sent back without it is
    rendered with an empty ``<think>`` block, a context the model never saw in
    training (docs/thinking.md)."""
    messages: list[dict[str, Any]] = []
    for message in request.messages:
        item: dict[str, Any] = {"role": message.role, "content": message.text()}
        if message.reasoning_content is not None:
            item["reasoning_content"] = message.reasoning_content
        if message.tool_calls:
            calls = []
            for call in message.tool_calls:
                args: object = call.function.arguments
                if isinstance(args, str):
                    # arguments that are not JSON are rendered verbatim, as the model wrote them
                    with contextlib.suppress(json.JSONDecodeError):
                        args = json.loads(args) if args.strip() else {}
                calls.append(
                    {
                        "type": "function",
                        "function": {"name": call.function.name, "arguments": args},
                    }
                )
            item["tool_calls"] = calls
        messages.append(item)
    return messages


def sampling_for(request: ChatCompletionRequest, max_tokens: int) -> SamplingParams:
    return SamplingParams(
        temperature=request.temperature,
        top_p=request.top_p,
        top_k=request.top_k,
        max_new_tokens=max_tokens,
        seed=request.seed,
    )


def parse_completion(chat: EpisodeChat, turn: PolicyTurn, prompt_tokens: int) -> Completion:
    """One sampled turn in OpenAI's terms: content, reasoning, ``tool_calls``, finish reason.

    The text is decoded from the sampled ids (only parsed, never re-encoded);
    ``chat`` is the caller's, its format derived once."""
    fmt = chat.fmt
    ids = turn.token_ids or []
    text = chat.tokenizer.decode(ids, skip_special_tokens=False) if turn.token_ids else turn.text
    text = fmt.strip_end_markers(text)
    parsed = parse_assistant_turn(text, None, max_calls=64, fmt=fmt)
    calls = [
        {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {
                "name": call.name,
                "arguments": json.dumps(call.arguments, ensure_ascii=False),
            },
        }
        for call in parsed.tool_calls
    ]
    if turn.finish_reason != "stop":
        finish = "length"
    elif calls:
        finish = "tool_calls"
    else:
        finish = "stop"
    content = parsed.content if (parsed.content or not calls) else None
    if parsed.errors and not calls:
        content = text.strip()  # malformed tool markup: give the client the raw text
    return Completion(
        text=text,
        content=content,
        reasoning=parsed.reasoning,
        tool_calls=calls,
        finish_reason=finish,
        prompt_tokens=prompt_tokens,
        completion_tokens=len(ids),
    )


def completion_body(done: Completion, model: str) -> dict[str, Any]:
    """The non-streaming response object (``object: chat.completion``)."""
    message: dict[str, Any] = {"role": "assistant", "content": done.content}
    if done.reasoning is not None:
        message["reasoning_content"] = done.reasoning
    if done.tool_calls:
        message["tool_calls"] = done.tool_calls
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": done.finish_reason}],
        "usage": {
            "prompt_tokens": done.prompt_tokens,
            "completion_tokens": done.completion_tokens,
            "total_tokens": done.prompt_tokens + done.completion_tokens,
        },
    }


def stream_chunks(done: Completion, model: str, piece_chars: int = 16) -> Iterator[str]:
    """Server-sent events for a finished turn: role, content pieces, tool calls, finish, [DONE].

    The model backends generate a whole turn per call, so the stream starts
    once the turn is ready; its wire format is OpenAI's, so streaming clients
    work unchanged.
    """
    ident = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    created = int(time.time())

    def event(delta: dict[str, Any], finish: str | None = None, **extra: dict[str, int]) -> str:
        chunk = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
        return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"

    yield event({"role": "assistant", "content": ""})
    if done.reasoning:
        for start in range(0, len(done.reasoning), piece_chars):
            yield event({"reasoning_content": done.reasoning[start : start + piece_chars]})
    content = done.content or ""
    for start in range(0, len(content), piece_chars):
        yield event({"content": content[start : start + piece_chars]})
    for index, call in enumerate(done.tool_calls):
        yield event({"tool_calls": [{"index": index, **call}]})
    usage = {
        "prompt_tokens": done.prompt_tokens,
        "completion_tokens": done.completion_tokens,
        "total_tokens": done.prompt_tokens + done.completion_tokens,
    }
    yield event({}, done.finish_reason, usage=usage)
    yield "data: [DONE]\n\n"
