"""``spreadrl env serve``: the Spreadsheet Gym behind openenv-core's own server.

:func:`build_app` returns openenv-core's FastAPI app (``create_app``: HTTP
``/reset`` ``/step`` ``/state`` ``/schema`` ``/health`` and the ``/ws`` session
endpoint its clients use), one :class:`SpreadsheetEnvironment` per WebSocket
session, all sharing one spreadrl env pool. ``ENABLE_WEB_INTERFACE=1`` adds
openenv's web page, as for any OpenEnv server.
"""

from __future__ import annotations

import functools
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from spreadrl.data.sources import resolve_tasks
from spreadrl.env.config import EnvConfig
from spreadrl.env.factory import make_env_pool
from spreadrl.errors import SpreadrlError


@dataclass(frozen=True)
class ServeOptions:
    """What ``spreadrl env serve`` serves: the tasks, the gym's settings, the sessions."""

    tasks: str
    env: EnvConfig
    workers: int = 2
    max_sessions: int = 64


def build_app(options: ServeOptions, resources: ExitStack) -> Any:
    """openenv-core's app over the task set; the env pool is entered on ``resources``."""
    try:
        from openenv.core.env_server.http_server import create_app
    except ImportError as exc:
        raise SpreadrlError(
            "spreadrl env serve needs openenv-core: pip install 'spreadrl[openenv]'"
        ) from exc
    from spreadrl.integrations.openenv_env import (
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
    picker = TaskPicker(resolve_tasks(options.tasks))
    pool = resources.enter_context(make_env_pool(options.env, workers=options.workers))
    factory = functools.partial(SpreadsheetEnvironment, picker, pool)
    return create_app(
        factory,
        SpreadsheetAction,
        SpreadsheetObservation,
        env_name="spreadrl-spreadsheet",
        max_concurrent_envs=options.max_sessions,
    )


def serve(options: ServeOptions, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve until interrupted; the env pool's workers stop with the server."""
    import uvicorn

    with ExitStack() as resources:
        app = build_app(options, resources)
        uvicorn.run(app, host=host, port=port, log_level="warning")
