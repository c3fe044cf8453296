"""The capturing endpoint's HTTP routes (FastAPI, the ``serve`` extra; imported when it starts).

``/s/<key>/v1/chat/completions`` and ``/s/<key>/v1/models``, one session per
episode; the work is :meth:`CaptureEndpoint.chat_call`'s, the wire format
:mod:`spreadrl.rollout.openai_wire`'s.
"""

from __future__ import annotations

from typing import Any

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


def build_app(endpoint: CaptureEndpoint) -> FastAPI:
    """The FastAPI app of ``endpoint``: chat completions and the model list, per session."""
    app = FastAPI(title="spreadrl harness endpoint", version="1")

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
        return completion_body(done, endpoint.model_name)

    return app
