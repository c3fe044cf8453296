"""The server's settings; the request and response shapes live in :mod:`spreadrl.rollout.openai_wire`.

The chat shapes follow OpenAI's ``/v1/chat/completions`` closely enough that
the ``openai`` client and common agent frameworks talk to the server
unchanged. Unknown request fields (``presence_penalty``, ``user``, ...) are
accepted and ignored, as OpenAI-compatible servers usually do, so a client
that sends them is not turned away.
"""

from __future__ import annotations

from dataclasses import dataclass

from spreadrl.rollout.openai_wire import (  # noqa: F401  (the chat shapes, shared with training)
    ChatCompletionRequest,
    ChatMessage,
    ToolCallFunction,
    ToolCallItem,
    ToolSpec,
    error_body,
)


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
