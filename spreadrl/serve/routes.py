"""The server's routes and error handlers, as module-level functions.

Each handler reads what it needs from the :class:`Served` object that
:func:`spreadrl.serve.app.create_app` puts on ``app.state`` (through the
``Served`` dependency), so a handler is a plain function a reader can find by
its path and a test can reach through the app, and no route captures the
builder's local variables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar, TypeVarTuple

from fastapi import APIRouter, Depends, File, Form, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    StreamingResponse,
)
from starlette.exceptions import HTTPException as StarletteHTTPException

from spreadrl.env.spreadsheet.tools import resolve_tools
from spreadrl.env.types import EndReason
from spreadrl.errors import SpreadrlError
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.serve import agent
from spreadrl.serve.context import ContextExceeded, generation_budget
from spreadrl.serve.examples import example_list, example_workbook
from spreadrl.serve.limits import Admission, DeadlineExceeded, LockedPolicy, Metrics, Overloaded
from spreadrl.serve.page import index_html
from spreadrl.serve.preview import workbook_grid
from spreadrl.serve.schemas import ChatCompletionRequest, ServeSettings, error_body
from spreadrl.serve.tasks import (
    PoolFactory,
    ProgressStore,
    TaskRequest,
    TaskStore,
    UploadError,
    check_upload,
    run_task,
)


@dataclass
class Served:
    """Everything the routes share: one per app, on ``app.state.served``.

    ``store`` is made when the app starts (its folder lives as long as the app).
    """

    settings: ServeSettings
    admission: Admission
    metrics: Metrics
    policy: LockedPolicy
    chat: EpisodeChat  # the tokenizer and its chat format, derived once per app
    pool_factory: PoolFactory
    progress: ProgressStore
    work_dir: Path | None
    store: TaskStore | None = None


def _served(request: Request) -> Served:
    return request.app.state.served


ServedDep = Annotated[Served, Depends(_served)]

router = APIRouter()

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


def error(status: int, message: str, kind: str, code: str | None = None) -> JSONResponse:
    """An OpenAI-style error response (``{"error": {...}}``)."""
    return JSONResponse(error_body(message, kind, code), status_code=status)


async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    """A body that is not JSON is a 400; fields that do not validate a 422 naming each."""
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        detail = errors[0].get("ctx", {}).get("error", "")
        return error(
            400,
            f"the request body is not valid JSON {detail}".strip(),
            "invalid_request_error",
            "invalid_json",
        )
    parts = []
    for e in errors[:10]:
        where = ".".join(str(p) for p in e.get("loc", ()) if p != "body")
        parts.append(f"{where or 'body'}: {e.get('msg')}")
    return error(422, "; ".join(parts), "invalid_request_error", "invalid_fields")


async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """Starlette's own errors (404, 405, the body limit's 413) in the same error shape."""
    code = "body_too_large" if exc.status_code == 413 else None
    return error(exc.status_code, str(exc.detail), "http_error", code)


async def admitted(served: Served, fn: Callable[[*Ts], T], *args: *Ts) -> T | JSONResponse:
    """Run blocking work under the concurrency limit; map overload and timeout to errors
    (the error response is returned, so a handler passes it on as it is)."""
    settings = served.settings
    try:
        return await served.admission.run(settings.timeout_s, fn, *args)
    except Overloaded:
        return error(
            503,
            f"server busy: {settings.max_concurrency} requests running and "
            f"{settings.max_queue} queued; retry later",
            "overloaded",
            "queue_full",
        )
    except DeadlineExceeded:
        return error(
            504,
            f"request took longer than the server's {settings.timeout_s:g} s timeout",
            "timeout",
            "timeout",
        )


def _too_many_tokens(max_tokens: int, settings: ServeSettings) -> JSONResponse | None:
    if max_tokens <= settings.max_tokens_limit:
        return None
    return error(
        422,
        f"max_tokens {max_tokens} exceeds the server's limit of {settings.max_tokens_limit}",
        "invalid_request_error",
        "max_tokens",
    )


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def index(served: ServedDep) -> HTMLResponse:
    settings = served.settings
    return HTMLResponse(
        index_html(
            settings.preset, settings.model_name, settings.view_url, settings.default_max_tokens
        )
    )


@router.get("/v1/examples")
async def examples() -> dict[str, Any]:
    """Built-in example tasks the page offers (instruction + workbook, no upload needed)."""
    return {"object": "list", "data": example_list()}


@router.get("/v1/examples/{task_id}/input.xlsx", response_model=None)
async def example_input(task_id: str) -> JSONResponse | FileResponse:
    try:
        path = example_workbook(task_id)
    except SpreadrlError as exc:
        return error(404, str(exc), "not_found", "no_example")
    return FileResponse(
        path,
        media_type="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        filename=f"{task_id}.xlsx",
    )


@router.get("/v1/examples/{task_id}/preview", response_model=None)
async def example_preview(task_id: str) -> JSONResponse | dict[str, Any]:
    try:
        return workbook_grid(example_workbook(task_id))
    except SpreadrlError as exc:
        return error(404, str(exc), "not_found", "no_example")


@router.get("/health")
async def health(served: ServedDep) -> dict[str, Any]:
    return {
        "status": "ok",
        "model": served.settings.model_name,
        "backend": served.settings.backend,
        "in_flight": served.admission.running,
        "queue_depth": served.admission.waiting,
    }


@router.get("/metrics", response_model=None)
async def get_metrics(
    served: ServedDep, format: str = "json"
) -> PlainTextResponse | dict[str, Any]:
    if format == "prometheus":
        return PlainTextResponse(
            served.metrics.prometheus(), media_type="text/plain; version=0.0.4"
        )
    return served.metrics.snapshot()


@router.get("/v1/models")
async def models(served: ServedDep) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {
                "id": served.settings.model_name,
                "object": "model",
                "created": int(served.metrics.started),
                "owned_by": "spreadrl",
            }
        ],
    }


@router.post("/v1/chat/completions", response_model=None)
async def chat(
    body: ChatCompletionRequest, served: ServedDep
) -> JSONResponse | StreamingResponse | dict[str, Any]:
    settings = served.settings
    max_tokens = body.max_completion_tokens or body.max_tokens or settings.default_max_tokens
    if (refused := _too_many_tokens(max_tokens, settings)) is not None:
        return refused
    if body.model and body.model != settings.model_name:
        return error(
            404,
            f"model {body.model!r} is not served here; this server serves {settings.model_name!r}",
            "invalid_request_error",
            "model_not_found",
        )
    asked = bool(body.max_completion_tokens or body.max_tokens)
    try:
        result = await admitted(served, _complete_in_context, served, body, max_tokens, asked)
    except ContextExceeded as exc:
        return error(400, str(exc), "invalid_request_error", "context_length_exceeded")
    if isinstance(result, JSONResponse):
        return result
    served.metrics.add_tokens(result.prompt_tokens, result.completion_tokens)
    if body.stream:
        return StreamingResponse(
            agent.stream_chunks(result, settings.model_name),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache"},
        )
    return agent.completion_body(result, settings.model_name)


def _complete_in_context(
    served: Served, body: ChatCompletionRequest, max_tokens: int, asked: bool
) -> agent.Completion:
    """One reply, refused (ContextExceeded) when the prompt does not fit the model's context.

    The prompt is rendered here to count it, and again by ``agent.complete``: a
    tokenizer pass, small beside generation, keeps the agent unaware of the limit."""
    context = served.settings.context_tokens
    if context is not None:
        tools = [t.model_dump() for t in body.tools] if body.tools else None
        prompt = served.chat.prompt_ids(agent.to_template_messages(body), tools)
        max_tokens = generation_budget(len(prompt), max_tokens, asked, context)
    return agent.complete(served.policy, served.chat, body, max_tokens)


@router.post("/v1/tasks", response_model=None)
async def tasks(
    served: ServedDep,
    file: UploadFile = File(..., description="the .xlsx workbook to edit"),
    instruction: str = Form(..., min_length=1, description="what the agent should do"),
    max_turns: int | None = Form(
        default=None, ge=1, le=100, description="default: the server's --task-max-turns"
    ),
    preset: str | None = Form(default=None, description="default: the server's tool preset"),
    temperature: float = Form(default=0.6, ge=0.0, le=2.0),
    max_tokens: int | None = Form(
        default=None, ge=1, description="default: the server's default max_tokens"
    ),
    progress_id: str | None = Form(
        default=None, description="8-32 hex digits; poll GET /v1/tasks/progress/{id}"
    ),
) -> JSONResponse | dict[str, Any]:
    settings = served.settings
    max_tokens = settings.default_max_tokens if max_tokens is None else max_tokens
    if (refused := _too_many_tokens(max_tokens, settings)) is not None:
        return refused
    chosen = settings.preset if preset is None else preset
    try:
        resolve_tools(chosen)  # an unknown preset or tool: 422 now, not an error episode
    except SpreadrlError as exc:
        return error(422, f"preset: {exc}", "invalid_request_error", "unknown_preset")
    data = await file.read()
    try:
        check_upload(file.filename, data)
        progress = served.progress.new(progress_id) if progress_id else None
    except UploadError as exc:
        return error(exc.status, str(exc), "invalid_upload", exc.code)
    request = TaskRequest(
        instruction=instruction.strip(),
        max_turns=settings.task_max_turns if max_turns is None else max_turns,
        preset=chosen,
        temperature=temperature,
        max_tokens=max_tokens,
        timeout_s=settings.timeout_s,
    )
    result: dict[str, Any] | JSONResponse | None = None
    try:
        result = await admitted(
            served,
            run_task,
            served.policy,
            served.chat,
            served.pool_factory,
            served.store,
            data,
            request,
            settings.task_max_response_tokens,
            progress,
        )
    except SpreadrlError as exc:
        return error(422, str(exc), "invalid_request_error", "task_failed")
    finally:
        if progress is not None and not isinstance(result, dict):
            progress.finish()  # refused (503) or failed: the page stops polling
    too_long = EndReason.PROMPT_TOO_LONG.value
    if (
        isinstance(result, dict)
        and result.get("turns") == 0
        and result.get("stop_reason") == too_long
    ):
        # the agent never ran: no result to show as one, but the request to change
        return error(422, _never_started(chosen, settings), "invalid_request_error", too_long)
    if isinstance(result, dict):
        result["preview"] = _before_after(served, data, result)
    return result


def _never_started(preset: str, settings: ServeSettings) -> str:
    """Why a task whose prompt did not fit never ran, and what to change."""
    context = f" of {settings.context_tokens} tokens" if settings.context_tokens else ""
    return (
        f"the task never started: its prompt (the instruction, the workbook overview and the "
        f"schemas of tool preset {preset!r}) does not fit the model's context{context}; choose "
        "a smaller preset (the tools the model was trained with, such as write_range), or a "
        "shorter instruction"
    )


def _before_after(served: Served, data: bytes, result: dict[str, Any]) -> dict[str, Any]:
    """Grids of the uploaded workbook and of the agent's output (None when it has none)."""
    output = served.store.output_path(result["id"]) if served.store and "id" in result else None
    return {
        "before": workbook_grid(data),
        "after": workbook_grid(output) if output is not None else None,
    }


@router.get("/v1/tasks/progress/{progress_id}", response_model=None)
async def task_progress(progress_id: str, served: ServedDep) -> JSONResponse | dict[str, Any]:
    record = served.progress.get(progress_id)
    if record is None:
        return error(404, f"no task with progress id {progress_id!r}", "not_found", "no_progress")
    return record.snapshot()


@router.get("/v1/tasks/{task_id}/output.xlsx", response_model=None)
async def task_output(task_id: str, served: ServedDep) -> JSONResponse | FileResponse:
    path = served.store.output_path(task_id) if served.store is not None else None
    if path is None:
        return error(404, f"no finished workbook for task {task_id!r}", "not_found", "no_output")
    return FileResponse(
        path,
        media_type="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        filename=f"{task_id}_output.xlsx",
    )
