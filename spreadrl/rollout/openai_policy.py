"""Any OpenAI-compatible chat endpoint as the policy (a vLLM or SGLang server, a hosted model).

Used for evaluation and data generation, not RL (the server's tokens are not
ours to train on). Tool results are sent back as user turns wrapped in
``<tool_response>`` tags, which every server accepts, and structured
``tool_calls`` in a reply are turned into Hermes ``<tool_call>`` text so one
parser serves every backend.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from spreadrl.errors import SpreadrlError
from spreadrl.rollout.chat import HERMES_TOOL_RESPONSE, hermes_tool_call
from spreadrl.rollout.types import PolicyTurn, SamplingParams

if TYPE_CHECKING:
    from spreadrl.rollout.runner import EpisodeState


class OpenAIPolicy:
    """Chat completions over HTTP, one request per active episode, sent concurrently."""

    token_level = False

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = 300.0,
        concurrency: int = 16,
        send_tools: bool = True,
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
        url = f"{self.base_url}/chat/completions"
        try:
            response = self.client.post(url, json=body)
        except httpx.HTTPError as exc:
            raise SpreadrlError(f"openai backend: request to {url} failed: {exc}") from exc
        if response.status_code != 200:
            raise SpreadrlError(
                f"openai backend: {url} answered {response.status_code}: {response.text[:300]}"
            )
        choice = response.json()["choices"][0]
        message = choice.get("message") or {}
        text = message.get("content") or ""
        for call in message.get("tool_calls") or []:
            fn = call.get("function", {})
            args = fn.get("arguments", "{}")
            try:
                parsed = json.loads(args) if isinstance(args, str) else args
            except json.JSONDecodeError:
                parsed = args  # let the parser report the bad JSON to the model
            text += "\n" + hermes_tool_call(fn.get("name"), parsed)
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        return PolicyTurn(text=text.strip(), finish_reason=finish)


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
        else:
            out.append({"role": message["role"], "content": message["content"]})
    return [{k: v for k, v in m.items() if k != "_tool"} for m in out]
