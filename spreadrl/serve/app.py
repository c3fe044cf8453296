"""The FastAPI app: OpenAI-compatible chat, the task endpoint, health, metrics and the page.

``create_app(settings, policy, tokenizer)`` builds everything from objects the
caller made, so tests pass a tiny model and no global state exists: the app
holds its policy, admission queue, metrics and task folders on ``app.state``.
Every model call goes through one lock (one model, many request threads).
"""

from __future__ import annotations

import logging
import tempfile
import threading
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, File, Form, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    StreamingResponse,
)
from starlette.exceptions import HTTPException as StarletteHTTPException

from spreadrl.errors import SpreadrlError
from spreadrl.serve import agent
from spreadrl.serve.limits import (
    Admission,
    BodySizeLimit,
    Deadline,
    DeadlineExceeded,
    LockedPolicy,
    Metrics,
    Overloaded,
    RequestMetrics,
)
from spreadrl.serve.page import index_html
from spreadrl.serve.schemas import ChatCompletionRequest, ServeSettings, error_body
from spreadrl.serve.tasks import (
    PoolFactory,
    ProgressStore,
    TaskRequest,
    TaskStore,
    UploadError,
    check_upload,
    gym_pool_factory,
    run_task,
)

log = logging.getLogger(__name__)


def _error(status: int, message: str, kind: str, code: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, kind, code), status_code=status)


def create_app(
    settings: ServeSettings,
    policy: Any,
    tokenizer: Any,
    *,
    pool_factory: PoolFactory | None = None,
    work_dir: str | Path | None = None,
    view_dir: str | Path | None = None,
    deadline: Deadline | None = None,
) -> FastAPI:
    """Build the server around an already loaded ``policy`` and ``tokenizer``.

    ``pool_factory(preset)`` returns a context manager yielding an environment
    pool for one task (default: the gym's ``make_env_pool``). ``work_dir`` holds
    the served tasks' folders (default: a temporary folder removed at shutdown).
    ``view_dir`` also mounts the run viewer (``spreadrl view``) over that folder at ``/view/``.
    ``deadline(timeout_s)`` decides when a request's time is up (default: ``asyncio.sleep``;
    tests pass one they fire themselves).
    """
    if tokenizer is None:
        raise SpreadrlError(
            "spreadrl serve needs a token-level backend (hf or vllm) and its tokenizer"
        )
    admission = Admission(settings.max_concurrency, settings.max_queue, deadline=deadline)
    metrics = Metrics(admission)
    locked = LockedPolicy(policy, threading.Lock())
    factory = pool_factory or gym_pool_factory(settings.env_workers)
    progress_store = ProgressStore()
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        tmp = None
        if work_dir is None:
            tmp = tempfile.TemporaryDirectory(prefix="spreadrl-serve-")
            root = Path(tmp.name)
        else:
            root = Path(work_dir)
        state["store"] = TaskStore(root, settings.keep_tasks)
        log.info("serving %s (%s backend)", settings.model_name, settings.backend)
        try:
            yield
        finally:  # uvicorn has finished in-flight requests by now; wait for their threads
            admission.shutdown()
            if tmp is not None:
                tmp.cleanup()

    app = FastAPI(title="spreadrl serve", version="1", lifespan=lifespan)
    app.state.settings = settings
    app.state.admission = admission
    app.state.metrics = metrics

    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(RequestMetrics, metrics=metrics)  # outermost: counts the 413s too

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            detail = errors[0].get("ctx", {}).get("error", "")
            return _error(
                400,
                f"the request body is not valid JSON {detail}".strip(),
                "invalid_request_error",
                "invalid_json",
            )
        parts = []
        for e in errors[:10]:
            where = ".".join(str(p) for p in e.get("loc", ()) if p != "body")
            parts.append(f"{where or 'body'}: {e.get('msg')}")
        return _error(422, "; ".join(parts), "invalid_request_error", "invalid_fields")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = "body_too_large" if exc.status_code == 413 else None
        return _error(exc.status_code, str(exc.detail), "http_error", code)

    async def admitted(fn: Any, *args: Any) -> Any:
        """Run blocking work under the concurrency limit; map overload and timeout to errors."""
        try:
            return await admission.run(settings.timeout_s, fn, *args)
        except Overloaded:
            return _error(
                503,
                f"server busy: {settings.max_concurrency} requests running and "
                f"{settings.max_queue} queued; retry later",
                "overloaded",
                "queue_full",
            )
        except DeadlineExceeded:
            return _error(
                504,
                f"request took longer than the server's {settings.timeout_s:g} s timeout",
                "timeout",
                "timeout",
            )

    from spreadrl.serve.view import assets_router, view_router

    app.include_router(assets_router())  # the page's shared trajectory component
    if view_dir is not None:
        app.include_router(view_router(view_dir))

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(index_html(settings.preset))

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "model": settings.model_name,
            "backend": settings.backend,
            "in_flight": admission.running,
            "queue_depth": admission.waiting,
        }

    @app.get("/metrics")
    async def get_metrics(format: str = "json") -> Any:
        if format == "prometheus":
            return PlainTextResponse(metrics.prometheus(), media_type="text/plain; version=0.0.4")
        return metrics.snapshot()

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": settings.model_name,
                    "object": "model",
                    "created": int(metrics.started),
                    "owned_by": "spreadrl",
                }
            ],
        }

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest) -> Any:
        max_tokens = body.max_completion_tokens or body.max_tokens or settings.default_max_tokens
        if max_tokens > settings.max_tokens_limit:
            return _error(
                422,
                f"max_tokens {max_tokens} exceeds the server's limit of {settings.max_tokens_limit}",
                "invalid_request_error",
                "max_tokens",
            )
        if body.model and body.model != settings.model_name:
            return _error(
                404,
                f"model {body.model!r} is not served here; this server serves {settings.model_name!r}",
                "invalid_request_error",
                "model_not_found",
            )
        result = await admitted(agent.complete, locked, tokenizer, body, max_tokens)
        if isinstance(result, JSONResponse):
            return result
        metrics.add_tokens(result.prompt_tokens, result.completion_tokens)
        if body.stream:
            return StreamingResponse(
                agent.stream_chunks(result, settings.model_name),
                media_type="text/event-stream",
                headers={"cache-control": "no-cache"},
            )
        return agent.completion_body(result, settings.model_name)

    @app.post("/v1/tasks")
    async def tasks(
        file: UploadFile = File(..., description="the .xlsx workbook to edit"),
        instruction: str = Form(..., min_length=1, description="what the agent should do"),
        max_turns: int = Form(default=settings.task_max_turns, ge=1, le=100),
        preset: str = Form(default=settings.preset),
        temperature: float = Form(default=0.6, ge=0.0, le=2.0),
        max_tokens: int = Form(default=settings.default_max_tokens, ge=1),
        progress_id: str | None = Form(
            default=None, description="8-32 hex digits; poll GET /v1/tasks/progress/{id}"
        ),
    ) -> Any:
        if max_tokens > settings.max_tokens_limit:
            return _error(
                422,
                f"max_tokens {max_tokens} exceeds the server's limit of {settings.max_tokens_limit}",
                "invalid_request_error",
                "max_tokens",
            )
        data = await file.read()
        try:
            check_upload(file.filename, data)
            progress = progress_store.new(progress_id) if progress_id else None
        except UploadError as exc:
            return _error(exc.status, str(exc), "invalid_upload", exc.code)
        request = TaskRequest(
            instruction=instruction.strip(),
            max_turns=max_turns,
            preset=preset,
            temperature=temperature,
            max_tokens=max_tokens,
            timeout_s=settings.timeout_s,
        )
        result: Any = None
        try:
            result = await admitted(
                run_task,
                locked,
                tokenizer,
                factory,
                state["store"],
                data,
                request,
                settings.task_max_response_tokens,
                progress,
            )
        except SpreadrlError as exc:
            return _error(422, str(exc), "invalid_request_error", "task_failed")
        finally:
            if progress is not None and not isinstance(result, dict):
                progress.finish()  # refused (503) or failed: the page stops polling
        return result

    @app.get("/v1/tasks/progress/{progress_id}")
    async def task_progress(progress_id: str) -> Any:
        record = progress_store.get(progress_id)
        if record is None:
            return _error(
                404, f"no task with progress id {progress_id!r}", "not_found", "no_progress"
            )
        return record.snapshot()

    @app.get("/v1/tasks/{task_id}/output.xlsx")
    async def task_output(task_id: str) -> Any:
        path = state["store"].output_path(task_id)
        if path is None:
            return _error(
                404, f"no finished workbook for task {task_id!r}", "not_found", "no_output"
            )
        return FileResponse(
            path,
            media_type="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
            filename=f"{task_id}_output.xlsx",
        )

    return app
