"""The capturing endpoint's HTTP routes (FastAPI, the ``serve`` extra; imported when it starts).

``/s/<key>/v1/chat/completions`` and ``/s/<key>/v1/models``, one session per
episode, and with ``rollout.harness_mcp`` the gym's tools over MCP at ``/s/<key>/mcp``
(:mod:`spreadrl.rollout.harness.mcp`); the work is :meth:`CaptureEndpoint.chat_call`'s, the wire format
:mod:`spreadrl.rollout.openai_wire`'s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from spreadrl.rollout.harness.endpoint import MAX_IN_FLIGHT, CaptureEndpoint
from spreadrl.rollout.openai_wire import (
    ChatCompletionRequest,
    completion_body,
    error_body,
    stream_chunks,
)

if TYPE_CHECKING:
    from spreadrl.rollout.harness.mcp import EpisodeTools


def build_app(endpoint: CaptureEndpoint, tools: EpisodeTools | None = None) -> FastAPI:
    """The FastAPI app of ``endpoint``: chat completions and the model list, per session;
    with ``tools`` (``rollout.harness_mcp``), the gym's tools over MCP at ``/s/<key>/mcp``."""
    mcp_app = tools.app() if tools is not None else None

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if mcp_app is None:
            yield
            return
        async with mcp_app.router.lifespan_context(mcp_app):  # the MCP session manager
            yield

    app = FastAPI(title="spreadrl harness endpoint", version="1", lifespan=lifespan)

    def error(status: int, message: str, kind: str) -> JSONResponse:
        return JSONResponse(error_body(message, kind), status_code=status)

    @app.get("/s/{key}/v1/models")
    async def models(key: str) -> Any:
        if key not in endpoint.sessions:
            return error(404, "no such session", "not_found")
        return {
            "object": "list",
            "data": [{"id": endpoint.model_name, "object": "model", "owned_by": "spreadrl"}],
        }

    @app.post("/s/{key}/v1/chat/completions")
    async def chat(key: str, request: Request) -> Any:
        session = endpoint.sessions.get(key)
        if session is None:
            return error(404, "no such session (the episode is over)", "not_found")
        try:
            body = ChatCompletionRequest.model_validate(await request.json())
        except Exception as exc:  # not JSON, or fields that do not validate
            return error(422, f"invalid request: {exc}", "invalid_request_error")
        with session.lock:
            if session.in_flight >= MAX_IN_FLIGHT:
                session.refuse("too many calls at once")
                return error(429, "too many calls at once in one episode", "rate_limit")
            session.in_flight += 1
        try:
            result = await run_in_threadpool(endpoint.chat_call, session, body)
        finally:
            with session.lock:
                session.in_flight -= 1
        if isinstance(result, str):
            return error(429, result, "budget_exhausted")
        done = result["completion"]
        if body.stream:
            return StreamingResponse(
                stream_chunks(done, endpoint.model_name), media_type="text/event-stream"
            )
        return with_token_ids(completion_body(done, endpoint.model_name), result)

    if mcp_app is not None:  # after the routes above, which match first
        app.mount("/s/{key}", mcp_app)
    return app


def with_token_ids(body: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """The ids and log-probs of the call in vLLM's fields, for token-faithful proxies
    (OpenEnv's ``CaptureServer`` in front of this endpoint): top-level
    ``prompt_token_ids``, ``choices[0].token_ids`` and ``choices[0].logprobs.content``,
    one entry per sampled id, its token written ``token_id:N`` as vLLM's
    ``--return-tokens-as-token-ids`` writes it. The log-probs are the processed
    sampling distribution's (temperature, top-k, top-p), as the trainer recomputes them."""
    turn = result["turn"]
    ids = list(turn.token_ids or [])
    logprobs = list(turn.logprobs or [0.0] * len(ids))
    choice = body["choices"][0]
    choice["token_ids"] = ids
    choice["logprobs"] = {
        "content": [
            {"token": f"token_id:{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
            for t, lp in zip(ids, logprobs, strict=True)
        ]
    }
    body["prompt_token_ids"] = list(result["prompt_ids"])
    return body
