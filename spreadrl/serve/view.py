"""``spreadrl view RUN_DIR``: a local page to look at what a run did.

The page (``spreadrl/assets/web/viewer.html``) draws the training curves of
``metrics.jsonl`` with uPlot, shows one or two eval ``report.json`` side by
side, and browses trajectories turn by turn with the cells each tool call
changed. It reads only the files runs already write: ``metrics.jsonl``
(SFT, GRPO), ``trajectories.jsonl`` (GRPO's per-step samples, eval's episodes)
and ``report.json`` (eval), in RUN_DIR and in its sub-folders (the demo's
``runs/demo`` holds ``sft/``, ``grpo/``, ``eval-sft/``, ``eval-grpo/``).

Everything is read-only and scoped to RUN_DIR: a run is named by its folder
path relative to RUN_DIR and looked up among the folders found, never joined
from user input. :func:`mount_viewer` mounts ``view_router`` (module-level
handlers, which read RUN_DIR from ``app.state``) for ``spreadrl view`` and for
``spreadrl serve --view RUN_DIR``; the static files come from
``assets_router``, shared with the serve page.
"""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse

log = logging.getLogger(__name__)

ASSETS = Path(__file__).resolve().parent.parent / "assets" / "web"
RUN_FILES = ("metrics.jsonl", "trajectories.jsonl", "report.json")
MAX_CONFIG_CHARS = 200_000  # a config.yaml is a few KB; a huge file is cut, not streamed
MAX_DEPTH = 2
MAX_LIST = 2000  # trajectory summaries returned by one listing
_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".png": "image/png"}


def find_runs(root: Path) -> dict[str, Path]:
    """Folders under ``root`` (itself included, ``MAX_DEPTH`` levels down) holding run files,
    keyed by their path relative to ``root`` ("." for root itself)."""
    root = root.resolve()
    found: dict[str, Path] = {}

    def visit(folder: Path, depth: int) -> None:
        if any((folder / name).is_file() for name in RUN_FILES):
            found[folder.relative_to(root).as_posix() or "."] = folder
        if depth >= MAX_DEPTH:
            return
        try:
            children = sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink())
        except OSError:
            return
        for child in children:
            if child.name not in ("checkpoints", "final", "tensorboard", "wandb"):
                visit(child, depth + 1)

    visit(root, 0)
    return found


_CACHE: dict[Path, tuple[int, int, list[dict[str, Any]]]] = {}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file; a torn last line (a run still writing) is skipped.

    Parsed rows are kept while the file's size and mtime stay the same: an eval's
    trajectories.jsonl can be tens of MB and every click in the browser reads it."""
    try:
        stat = path.stat()
    except OSError:
        return []
    cached = _CACHE.get(path)
    if cached is not None and cached[:2] == (stat.st_mtime_ns, stat.st_size):
        return cached[2]
    rows = []
    with path.open() as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                log.warning("%s: skipped a line that is not JSON", path)
    if len(_CACHE) > 16:
        _CACHE.clear()
    _CACHE[path] = (stat.st_mtime_ns, stat.st_size, rows)
    return rows


def trajectory_summary(index: int, row: dict[str, Any]) -> dict[str, Any]:
    """The fields the trajectory list shows and filters on."""
    return {
        "index": index,
        "step": row.get("step"),
        "task_id": row.get("task_id"),
        "case": row.get("case"),
        "sample": row.get("sample"),
        "reward": row.get("reward"),
        "passed": row.get("passed"),
        "turns": row.get("turns"),
        "tool_calls": row.get("tool_calls"),
        "stop_reason": row.get("stop_reason"),
        "changed_cells": sum(
            int(c.get("total", 0))
            for c in (row.get("metadata") or {}).get("cell_changes", {}).values()
        ),
    }


def filter_trajectories(
    rows: list[dict[str, Any]],
    step: int | None = None,
    task: str | None = None,
    min_reward: float | None = None,
    max_reward: float | None = None,
    passed: bool | None = None,
) -> list[dict[str, Any]]:
    """Summaries of the rows that match every given filter (``task`` is a substring)."""
    out = []
    for i, row in enumerate(rows):
        reward = row.get("reward")
        if step is not None and row.get("step") != step:
            continue
        if task and task.lower() not in str(row.get("task_id", "")).lower():
            continue
        if min_reward is not None and (reward is None or reward < min_reward):
            continue
        if max_reward is not None and (reward is None or reward > max_reward):
            continue
        if passed is not None and bool(row.get("passed")) != passed:
            continue
        out.append(trajectory_summary(i, row))
    return out


@functools.cache
def _asset_files() -> dict[str, Path]:
    """The page assets by path: a fixed list, so a request can only name one of these."""
    return {p.relative_to(ASSETS).as_posix(): p for p in ASSETS.rglob("*") if p.is_file()}


assets_router = APIRouter()
"""``GET /static/{name}``: the page assets (uPlot, the shared trajectory component)."""


@assets_router.get("/static/{name:path}", include_in_schema=False)
async def static(name: str) -> FileResponse:
    path = _asset_files().get(name)
    if path is None:
        raise HTTPException(404, f"no static file {name!r}")
    return FileResponse(path, media_type=_TYPES.get(path.suffix, "application/octet-stream"))


view_router = APIRouter()
"""The viewer's page and JSON API; :func:`mount_viewer` mounts it over a run folder."""


def mount_viewer(app: FastAPI, root: str | Path, prefix: str = "/view") -> None:
    """Serve the viewer over the runs found in ``root`` at ``prefix`` (``spreadrl view``,
    ``spreadrl serve --view``); the handlers read ``root`` from ``app.state``."""
    app.state.view_root = Path(root)
    app.include_router(view_router, prefix=prefix)


def _view_root(request: Request) -> Path:
    return request.app.state.view_root


RootDep = Annotated[Path, Depends(_view_root)]


def run_folder(root: Path, run: str) -> Path:
    """The folder of run ``run`` (a name :func:`find_runs` gave), looked up, never joined."""
    runs = find_runs(root)  # rescanned: a run in progress gains files
    if run not in runs:
        known = ", ".join(runs) or "none"
        raise HTTPException(404, f"no run {run!r} under {root}; runs: {known}")
    return runs[run]


@view_router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def page() -> HTMLResponse:
    return HTMLResponse((ASSETS / "viewer.html").read_text())


@view_router.get("/api/runs")
async def runs(root: RootDep) -> dict[str, Any]:
    out = []
    for name, folder in find_runs(root).items():
        files = {f: (folder / f).is_file() for f in RUN_FILES}
        report = folder / "report.json"
        # reports are offered oldest first: the demo's "before" eval, then "after"
        mtime = report.stat().st_mtime if files["report.json"] else None
        config = (folder / "config.yaml").is_file()
        out.append({"name": name, **files, "config.yaml": config, "report_mtime": mtime})
    return {"root": str(root.resolve()), "runs": out}


@view_router.get("/api/metrics")
async def metrics(run: str, root: RootDep) -> dict[str, Any]:
    return {"run": run, "rows": read_jsonl(run_folder(root, run) / "metrics.jsonl")}


@view_router.get("/api/config")
async def config(run: str, root: RootDep) -> dict[str, Any]:
    """The run's resolved config.yaml as text: what the curves were trained with."""
    path = run_folder(root, run) / "config.yaml"
    if not path.is_file():
        raise HTTPException(404, f"run {run!r} has no config.yaml")
    try:
        return {"run": run, "text": path.read_text()[:MAX_CONFIG_CHARS]}
    except UnicodeDecodeError as exc:
        raise HTTPException(422, f"{path}: not text") from exc


@view_router.get("/api/report")
async def report(run: str, root: RootDep) -> dict[str, Any]:
    path = run_folder(root, run) / "report.json"
    if not path.is_file():
        raise HTTPException(404, f"run {run!r} has no report.json")
    try:
        return {"run": run, "report": json.loads(path.read_text())}
    except json.JSONDecodeError as exc:
        raise HTTPException(422, f"{path}: not valid JSON ({exc})") from exc


@view_router.get("/api/trajectories")
async def trajectories(
    run: str,
    root: RootDep,
    step: int | None = None,
    task: str | None = None,
    min_reward: float | None = None,
    max_reward: float | None = None,
    passed: bool | None = None,
) -> dict[str, Any]:
    rows = read_jsonl(run_folder(root, run) / "trajectories.jsonl")
    items = filter_trajectories(rows, step, task, min_reward, max_reward, passed)
    steps = sorted({r["step"] for r in rows if isinstance(r.get("step"), int)})
    return {
        "run": run,
        "total": len(rows),
        "matched": len(items),
        "steps": steps,
        "items": items[:MAX_LIST],
    }


@view_router.get("/api/trajectory")
async def trajectory(run: str, root: RootDep, index: int = Query(..., ge=0)) -> dict[str, Any]:
    rows = read_jsonl(run_folder(root, run) / "trajectories.jsonl")
    if index >= len(rows):
        raise HTTPException(404, f"run {run!r} has {len(rows)} trajectories, no #{index}")
    return {"run": run, "index": index, "trajectory": rows[index]}


async def to_viewer() -> RedirectResponse:
    return RedirectResponse("/view/")


def create_view_app(root: str | Path) -> FastAPI:
    """A FastAPI app with only the viewer (``spreadrl view``); ``/`` redirects to it."""
    app = FastAPI(title="spreadrl view", version="1")
    app.include_router(assets_router)
    mount_viewer(app, root)
    app.add_api_route("/", to_viewer, methods=["GET"], include_in_schema=False)
    return app
