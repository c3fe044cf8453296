"""Any OpenAI-compatible chat endpoint as the policy (a vLLM or SGLang server, a hosted model).

Used for evaluation and data generation, not RL (the server's tokens are not
ours to train on). Tool results are sent back as user turns wrapped in
``<tool_response>`` tags, which every server accepts, and structured
``tool_calls`` in a reply are turned into Hermes ``<tool_call>`` text so one
parser serves every backend.

Reasoning is kept. A server with a reasoning parser (vLLM's
``--reasoning-parser``, ``spreadrl serve``) returns it apart from the content,
as ``reasoning_content`` or ``reasoning`` (streamed or not); the turn's text
gets it back as a ``<think>`` block, so the trajectory saves it as the
message's ``reasoning_content`` and the parser sees it as a token-level
rollout's. It is sent back inline, ``<think>\nREASONING\n</think>\n\n`` before
the content, which Qwen3's templates split off and render as the model sampled
it, so from turn 2 on the model sees the context it was trained on
(``docs/thinking.md``). It is not also sent as a field: vLLM copies an
assistant message's ``reasoning`` onto ``reasoning_content`` for the template,
which would then render the field and leave the inline block in the content,
the reasoning twice.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Literal

from spreadrl.errors import SpreadrlError
from spreadrl.rollout.chat import FALLBACK, HERMES_TOOL_RESPONSE, hermes_tool_call
from spreadrl.rollout.engine import EvalEngine, LoadSpec, require_model
from spreadrl.rollout.types import PolicyTurn, SamplingParams

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from spreadrl.rollout.policy import Policy
    from spreadrl.rollout.runner import EpisodeState


class OpenAIPolicy:
    """Chat completions over HTTP, one request per active episode, sent concurrently."""

    token_level: Literal[False] = False

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = 300.0,
        concurrency: int = 16,
        send_tools: bool = True,
        stream: bool = False,
    ) -> None:
        import httpx

        self.model = model
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or "").rstrip("/")
        if not self.base_url:
            raise SpreadrlError(
                "the openai backend needs an endpoint: pass --base-url or set OPENAI_BASE_URL "
                "(e.g. http://127.0.0.1:8000/v1 for a local vLLM server)"
            )
        key = api_key or os.environ.get("OPENAI_API_KEY", "EMPTY")
        self.client = httpx.Client(timeout=timeout_s, headers={"Authorization": f"Bearer {key}"})
        self.concurrency = concurrency
        self.send_tools = send_tools
        self.stream = stream  # ask for server-sent events (each chunk resets the read timeout)

    def close(self) -> None:
        self.client.close()

    def act_messages(
        self, states: Sequence[EpisodeState], params: SamplingParams
    ) -> list[PolicyTurn]:
        with ThreadPoolExecutor(max_workers=max(1, min(self.concurrency, len(states)))) as ex:
            return list(ex.map(lambda s: self._complete(s.messages, s.tools, params), states))

    def _complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], params: SamplingParams
    ) -> PolicyTurn:
        import httpx

        body: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(messages),
            "max_tokens": params.max_new_tokens,
            "temperature": max(params.temperature, 0.0),
            "top_p": params.top_p,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        if self.send_tools and tools:
            body["tools"] = tools
        if self.stream:
            body["stream"] = True
        url = f"{self.base_url}/chat/completions"
        try:
            response = self.client.post(url, json=body)
        except httpx.HTTPError as exc:
            raise SpreadrlError(f"openai backend: request to {url} failed: {exc}") from exc
        if response.status_code != 200:
            raise SpreadrlError(
                f"openai backend: {url} answered {response.status_code}: {response.text[:300]}"
            )
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            message, finish_reason = read_stream(response.text)
        else:
            choice = response.json()["choices"][0]
            message, finish_reason = choice.get("message") or {}, choice.get("finish_reason")
        finish = "length" if finish_reason == "length" else "stop"
        return PolicyTurn(text=reply_text(message), finish_reason=finish)


def reply_text(message: dict[str, Any]) -> str:
    """A reply message as the text the model wrote: reasoning, content, Hermes tool calls.

    The reasoning (``reasoning_content``, or ``reasoning`` as vLLM's newer
    servers name it) is put back in front as a ``<think>`` block; structured
    ``tool_calls`` become ``<tool_call>`` text after the content, one per line,
    as the template renders them.
    """
    content = message.get("content") or ""
    parts = [content.strip()] if content.strip() else []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        args = fn.get("arguments", "{}")
        try:
            parsed = json.loads(args) if isinstance(args, str) else args
        except json.JSONDecodeError:
            parsed = args  # let the parser report the bad JSON to the model
        parts.append(hermes_tool_call(fn.get("name"), parsed))
    text = "\n".join(parts)
    reasoning = message.get("reasoning_content")
    if not isinstance(reasoning, str):
        reasoning = message.get("reasoning")
    if not isinstance(reasoning, str):
        return text
    return FALLBACK.assistant_text(text, reasoning)


def read_stream(events: str) -> tuple[dict[str, Any], str | None]:
    """The message and finish reason of a streamed reply (``data:`` lines of chunks).

    Deltas are joined: ``content`` and the reasoning pieces in order, each tool
    call's name and argument pieces by its ``index``."""
    pieces: dict[str, list[str]] = {"content": [], "reasoning_content": [], "reasoning": []}
    calls: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    for line in events.splitlines():
        data = line[len("data:") :].strip() if line.startswith("data:") else ""
        if not data or data == "[DONE]":
            continue
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError as exc:
            raise SpreadrlError(
                f"openai backend: a streamed chunk is not JSON: {data[:200]}"
            ) from exc
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            for key, parts in pieces.items():
                if isinstance(delta.get(key), str):
                    parts.append(delta[key])
            for item in delta.get("tool_calls") or []:
                call = calls.setdefault(
                    item.get("index", len(calls)), {"name": "", "arguments": ""}
                )
                fn = item.get("function") or {}
                call["name"] += fn.get("name") or ""
                args = fn.get("arguments")
                call["arguments"] += args if isinstance(args, str) else json.dumps(args or {})
            finish = choice.get("finish_reason") or finish
    message: dict[str, Any] = {k: "".join(v) for k, v in pieces.items() if v}
    message["tool_calls"] = [{"function": calls[i]} for i in sorted(calls)]
    return message, finish


def to_openai_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our conversation (with role "tool") as plain chat turns any server accepts."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] == "tool":
            opening, closing = HERMES_TOOL_RESPONSE
            wrapped = f"{opening}{message['content']}{closing}"
            if out and out[-1]["role"] == "user" and out[-1].get("_tool"):
                out[-1]["content"] += "\n" + wrapped
            else:
                out.append({"role": "user", "content": wrapped, "_tool": True})
        elif message["role"] == "assistant":
            out.append({"role": "assistant", "content": _with_reasoning(message)})
        else:
            out.append({"role": message["role"], "content": message["content"]})
    return [{k: v for k, v in m.items() if k != "_tool"} for m in out]


def _with_reasoning(message: dict[str, Any]) -> str:
    """An assistant message's content with its ``reasoning_content`` inline as a ``<think>`` block.

    Qwen3's templates split an inline block off the content and render it as
    they render ``reasoning_content``; a message saved verbatim (irregular
    markup) already holds its reasoning and goes as it is."""
    reasoning = message.get("reasoning_content")
    if not isinstance(reasoning, str):
        return message["content"]
    return FALLBACK.assistant_text(message["content"], reasoning)


class OpenAIEngine(EvalEngine):
    """``--backend openai``: a chat-completions endpoint (``--base-url``) serving
    ``--model``; message-level, so no tokenizer."""

    name = "openai"

    @classmethod
    def load(cls, spec: LoadSpec) -> tuple[Policy, PreTrainedTokenizerBase | None]:
        return OpenAIPolicy(require_model("openai", spec), base_url=spec.base_url), None
