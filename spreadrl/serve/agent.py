"""One chat completion with the loaded model: render, generate, parse into OpenAI's shape.

The conversation is rendered with the tokenizer's chat template (the one the
agent was trained on; its format is derived by :mod:`spreadrl.rollout.chat`), one assistant turn is
generated, and its ``<tool_call>`` blocks become OpenAI ``tool_calls`` with
JSON-string arguments, so a client can run the tools and send the results
back as ``role: "tool"`` messages.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.parsing import parse_assistant_turn
from spreadrl.rollout.policy import TokenPolicy
from spreadrl.rollout.types import SamplingParams
from spreadrl.serve.schemas import ChatCompletionRequest


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


def complete(
    policy: TokenPolicy,
    chat: EpisodeChat,
    request: ChatCompletionRequest,
    max_tokens: int,
) -> Completion:
    """Generate one assistant turn for ``request`` (blocking; run it in a worker thread).

    ``chat`` is the server's, its format derived once when the app was built."""
    tokenizer, fmt = chat.tokenizer, chat.fmt
    tools = [t.model_dump() for t in request.tools] if request.tools else None
    prompt_ids = chat.prompt_ids(to_template_messages(request), tools)
    (turn,) = policy.act([prompt_ids], sampling_for(request, max_tokens))
    ids = turn.token_ids or []
    text = tokenizer.decode(ids, skip_special_tokens=False) if turn.token_ids else turn.text
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
        prompt_tokens=len(prompt_ids),
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
