"""``spreadrl env serve``: the Spreadsheet Gym behind OpenEnv's own server.

:func:`build_app` returns openenv's FastAPI app (``create_app``: HTTP ``/reset``
``/step`` ``/state`` ``/schema`` ``/metadata`` ``/health``, the ``/ws`` session
endpoint its clients use and ``/mcp``, MCP's JSON-RPC), one
:class:`SpreadsheetEnvironment` per session, all sharing one spreadrl env pool.
The tool set is resolved before the server listens, so a misspelt tool is one
error line at start-up, not a failure at every reset. ``ENABLE_WEB_INTERFACE=1``
adds openenv's web page, as for any OpenEnv server.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from importlib import resources as package_files
from pathlib import Path
from typing import Any

from spreadrl import __version__
from spreadrl.data.sources import resolve_tasks
from spreadrl.env.config import EnvConfig
from spreadrl.env.factory import make_env_pool
from spreadrl.errors import SpreadrlError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeOptions:
    """What ``spreadrl env serve`` serves: the tasks (simulation mode) or a user's own
    workbook (production mode), the gym's settings, the sessions."""

    tasks: str | None
    env: EnvConfig
    workers: int = 2
    max_sessions: int = 64
    workbook: Path | None = None


def build_app(options: ServeOptions, resources: ExitStack) -> Any:
    """openenv's app over the task set; the env pool is entered on ``resources``."""
    try:
        from openenv.core.env_server.http_server import create_app
    except ImportError as exc:
        raise SpreadrlError(
            "spreadrl env serve needs openenv: pip install 'spreadrl[openenv]'"
        ) from exc
    from spreadrl.env.spreadsheet.episode import SpreadsheetEnv
    from spreadrl.integrations.openenv_env import (
        GymInfo,
        SpreadsheetAction,
        SpreadsheetEnvironment,
        SpreadsheetObservation,
        TaskPicker,
    )

    if options.env.kind != "spreadsheet":
        raise SpreadrlError(
            f"env serve serves the spreadsheet gym, not env.kind {options.env.kind}"
        )
    if options.max_sessions < 1:
        raise SpreadrlError(f"--max-sessions must be at least 1, got {options.max_sessions}")
    if (options.tasks is None) == (options.workbook is None):
        raise SpreadrlError("env serve needs --tasks (simulation) or --workbook (production)")
    schemas = tuple(SpreadsheetEnv(options.env).schemas)  # a bad tool name fails here
    if options.workbook is not None:
        gym = GymInfo(None, None, schemas, __version__, readme(), _workbook(options, resources))
    else:
        picker = TaskPicker(resolve_tasks(str(options.tasks)))
        pool = resources.enter_context(make_env_pool(options.env, workers=options.workers))
        gym = GymInfo(picker, pool, schemas, __version__, readme())
    # a partial of the class: openenv reads SUPPORTS_CONCURRENT_SESSIONS from it
    app = create_app(
        functools.partial(SpreadsheetEnvironment, gym),
        SpreadsheetAction,
        SpreadsheetObservation,
        env_name="spreadrl-spreadsheet",
        max_concurrent_envs=options.max_sessions,
    )
    app.add_middleware(QuietClose)
    if gym.workbook is not None:
        _speak_mcp(app, SpreadsheetEnvironment(gym).mcp_server)
    return app


def _speak_mcp(app: Any, server: Any) -> None:
    """MCP's own transport (streamable HTTP: ``initialize``, then ``tools/list`` and
    ``tools/call``) on ``/mcp`` beside OpenEnv's JSON-RPC there, so any MCP client can use
    production mode's tools. MCP clients accept ``text/event-stream``; OpenEnv's do not,
    which tells the two apart. The MCP app's session manager runs in the app's lifespan."""
    mcp_app = server.http_app(path="/mcp", stateless_http=True, json_response=True)
    outer = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(owner: Any) -> AsyncIterator[Any]:
        async with outer(owner) as state, mcp_app.router.lifespan_context(mcp_app):
            yield state

    app.router.lifespan_context = lifespan
    app.add_middleware(McpTransport, mcp_app=mcp_app)


class McpTransport:
    """Sends MCP clients' requests on ``/mcp`` to the MCP app (see :func:`_speak_mcp`)."""

    def __init__(self, app: Any, mcp_app: Any) -> None:
        self.app = app
        self.mcp_app = mcp_app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].rstrip("/") == "/mcp":
            accept = dict(scope.get("headers") or []).get(b"accept", b"")
            if b"text/event-stream" in accept or scope["method"] in ("GET", "DELETE"):
                await self.mcp_app(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _workbook(options: ServeOptions, resources: ExitStack) -> Any:
    """Production mode's workbook, open until the server stops; no tool-call budget."""
    from spreadrl.integrations.openenv_env import UserWorkbook

    path = options.workbook
    assert path is not None
    if path.suffix.lower() != ".xlsx" or not path.is_file():
        raise SpreadrlError(f"--workbook {path}: not an .xlsx file")
    book = UserWorkbook(path, replace(options.env, max_tool_calls=2**31 - 1))
    resources.callback(book.close)
    return book


class QuietClose:
    """A WebSocket the client has closed is a session's normal end, not an error: openenv
    before 0.10 closes it once more and lets the disconnect escape to uvicorn, which logs
    a traceback per session."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        from starlette.websockets import WebSocketDisconnect

        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            log.debug("a WebSocket session closed by its client")


def readme() -> str | None:
    """The environment's README (package data), shown by ``/metadata`` and hubs."""
    try:
        return (package_files.files("spreadrl") / "assets/openenv/README.md").read_text()
    except OSError:
        return None


def serve(
    options: ServeOptions,
    host: str = "127.0.0.1",
    port: int = 8000,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Serve until interrupted; the env pool's workers stop with the server. ``on_ready``
    runs once the app is built (the tasks and tools checked), before it listens."""
    import uvicorn

    with ExitStack() as resources:
        app = build_app(options, resources)
        if on_ready is not None:
            on_ready()
        uvicorn.run(app, host=host, port=port, log_level="warning")
