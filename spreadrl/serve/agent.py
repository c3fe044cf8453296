"""One chat completion with the loaded model: render, generate, parse into OpenAI's shape.

The conversation is rendered with the tokenizer's chat template (the one the
agent was trained on; its format is derived by :mod:`spreadrl.rollout.chat`), one assistant turn is
generated, and its ``<tool_call>`` blocks become OpenAI ``tool_calls`` with
JSON-string arguments, so a client can run the tools and send the results
back as ``role: "tool"`` messages.
"""

from __future__ import annotations

from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.openai_wire import (  # noqa: F401  (the wire format, shared with training)
    Completion,
    completion_body,
    parse_completion,
    sampling_for,
    stream_chunks,
    to_template_messages,
)
from spreadrl.rollout.policy import TokenPolicy
from spreadrl.serve.schemas import ChatCompletionRequest


def complete(
    policy: TokenPolicy,
    chat: EpisodeChat,
    request: ChatCompletionRequest,
    max_tokens: int,
) -> Completion:
    """Generate one assistant turn for ``request`` (blocking; run it in a worker thread).

    ``chat`` is the server's, its format derived once when the app was built."""
    tools = [t.model_dump() for t in request.tools] if request.tools else None
    prompt_ids = chat.prompt_ids(to_template_messages(request), tools)
    (turn,) = policy.act([prompt_ids], sampling_for(request, max_tokens))
    return parse_completion(chat, turn, len(prompt_ids))
