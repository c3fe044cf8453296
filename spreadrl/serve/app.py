"""The FastAPI app: OpenAI-compatible chat, the task endpoint, health, metrics and the page.

``create_app(settings, policy, tokenizer)`` builds everything from objects the
caller made, so tests pass a tiny model and no global state exists: the app
holds its policy, admission queue, metrics and task folders in one
:class:`~spreadrl.serve.routes.Served` on ``app.state``, which the routes
(module-level handlers in :mod:`spreadrl.serve.routes`) read. Every model call
goes through one lock (one model, many request threads).
"""

from __future__ import annotations

import logging
import tempfile
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from transformers import PreTrainedTokenizerBase

from spreadrl.errors import SpreadrlError
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.policy import TokenPolicy
from spreadrl.serve import routes
from spreadrl.serve.limits import (
    Admission,
    BodySizeLimit,
    Deadline,
    LockedPolicy,
    Metrics,
    RequestMetrics,
)
from spreadrl.serve.routes import Served
from spreadrl.serve.schemas import ServeSettings
from spreadrl.serve.tasks import PoolFactory, ProgressStore, TaskStore, gym_pool_factory
from spreadrl.serve.view import assets_router, mount_viewer

log = logging.getLogger(__name__)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Make the task store's folder at start; at shutdown wait for running work, stop the
    policy's engine (vLLM's processes would outlive a server ended by SIGTERM), then
    remove the folder."""
    served: Served = app.state.served
    tmp = None
    if served.work_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="spreadrl-serve-")
        root = Path(tmp.name)
    else:
        root = served.work_dir
    served.store = TaskStore(root, served.settings.keep_tasks)
    log.info("serving %s (%s backend)", served.settings.model_name, served.settings.backend)
    try:
        yield
    finally:  # uvicorn has finished in-flight requests by now; wait for their threads
        served.admission.shutdown()
        try:
            served.policy.close()
        finally:
            if tmp is not None:
                tmp.cleanup()


def create_app(
    settings: ServeSettings,
    policy: TokenPolicy,
    tokenizer: PreTrainedTokenizerBase | None,
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
    served = Served(
        settings=settings,
        admission=admission,
        metrics=metrics,
        policy=LockedPolicy(policy, threading.Lock()),
        chat=EpisodeChat.of(tokenizer),
        pool_factory=pool_factory or gym_pool_factory(settings.env_workers),
        progress=ProgressStore(),
        work_dir=Path(work_dir) if work_dir is not None else None,
    )

    app = FastAPI(title="spreadrl serve", version="1", lifespan=lifespan)
    app.state.served = served
    app.state.settings = settings
    app.state.admission = admission
    app.state.metrics = metrics

    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(RequestMetrics, metrics=metrics)  # outermost: counts the 413s too
    app.add_exception_handler(RequestValidationError, routes.bad_request)
    app.add_exception_handler(StarletteHTTPException, routes.http_error)

    app.include_router(assets_router)  # the page's shared trajectory component
    if view_dir is not None:
        mount_viewer(app, view_dir)
    app.include_router(routes.router)
    return app
