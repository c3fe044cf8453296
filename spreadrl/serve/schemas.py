"""Request and response shapes of the server, and its settings.

The chat shapes follow OpenAI's ``/v1/chat/completions`` closely enough that
the ``openai`` client and common agent frameworks talk to the server
unchanged. Unknown request fields (``presence_penalty``, ``user``, ...) are
accepted and ignored, as OpenAI-compatible servers usually do, so a client
that sends them is not turned away.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field


@dataclass(frozen=True)
class ServeSettings:
    """Limits and defaults of one server process (``spreadrl serve`` flags)."""

    model_name: str = "spreadrl"
    backend: str = "hf"
    max_concurrency: int = 2  # requests doing work at once; model calls still run one at a time
    max_queue: int = 16  # requests waiting for a slot; one more gets 503
    timeout_s: float = 120.0  # per request, queueing included; past it the client gets 504
    max_body_bytes: int = 10 * 1024 * 1024  # 413 above this
    max_tokens_limit: int = 4096  # the largest max_tokens a chat request may ask for
    default_max_tokens: int = 256
    preset: str = "full"  # tool preset of the task endpoint when a request names none
    env_workers: int = 1  # gym worker processes per task (0 = in the request's thread)
    task_max_turns: int = 20
    task_max_response_tokens: int = 8192
    keep_tasks: int = 32  # finished task folders kept for download; older ones are deleted
    context_tokens: int | None = None  # the model's context; a longer prompt gets 400
    view_url: str | None = None  # where the run viewer is (--view), linked from the page


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
