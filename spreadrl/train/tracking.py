"""Experiment tracking: one metrics log, several backends (``logging.backends``).

``metrics.jsonl`` in the run folder is always the source of truth (``spreadrl
view`` and the benchmarks read it); TensorBoard, Weights & Biases and Trackio
are optional mirrors that researchers coming from TRL and verl expect. Each
backend's package is imported only when the backend is asked for; a missing one
is a one-line :class:`MissingDependencyError` naming the extra to install. The
run's resolved config is logged with every backend that has a place for it.

Not handled here: system metrics, artifacts, model uploads, and anything that
needs the network (wandb honours ``WANDB_MODE=offline``; Trackio writes a local
SQLite database unless told to sync to a Space).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from spreadrl.errors import ConfigError, MissingDependencyError
from spreadrl.run_folder import appending
from spreadrl.train.config import LoggingConfig

log = logging.getLogger(__name__)

BACKENDS = ("jsonl", "tensorboard", "wandb", "trackio")
# backend -> (import name, extra that installs it)
_PACKAGES = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "trackio": ("trackio", "trackio"),
}


class Tracker(Protocol):
    """One place metrics go: ``log`` a step's scalars, ``close`` at the end."""

    def log(self, step: int, metrics: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


def require(backend: str) -> ModuleType:
    """Import ``backend``'s package, or raise a one-line error naming its extra."""
    import importlib

    module, extra = _PACKAGES[backend]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"logging.backends includes {backend!r} but the {module!r} package is not "
            f"installed; install it with: pip install 'spreadrl[{extra}]'"
        ) from exc


def scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """The numeric entries of a metrics dict (bools as 0/1); other values are dropped."""
    return {
        k: float(v)
        for k, v in metrics.items()
        if isinstance(v, int | float) and not isinstance(v, str)
    }


class JsonlTracker:
    """Append-only ``metrics.jsonl``, one object per step (what ``spreadrl view`` reads)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        with appending(self.path) as fh:
            fh.write(json.dumps({"step": step, **metrics}, default=float) + "\n")

    def close(self) -> None:
        pass


class TensorBoardTracker:
    """Scalars under ``RUN/tensorboard`` (torch's SummaryWriter; needs ``tensorboard``)."""

    def __init__(self, folder: Path, config: dict[str, Any]) -> None:
        require("tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(folder))
        self.writer.add_text("config", "```\n" + json.dumps(config, indent=2) + "\n```", 0)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        for key, value in scalars(metrics).items():
            self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    """A Weights & Biases run (``WANDB_MODE=offline`` keeps it in ``RUN/wandb``)."""

    def __init__(self, folder: Path, project: str, name: str, config: dict[str, Any]) -> None:
        wandb = require("wandb")
        folder.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=project,
            name=name,
            dir=str(folder),
            config=config,
            settings=wandb.Settings(console="off", silent=True),
            reinit="create_new",
        )

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        self.run.log(scalars(metrics), step=step)

    def close(self) -> None:
        self.run.finish()


class TrackioTracker:
    """A Trackio run: a local SQLite database (``TRACKIO_DIR``), viewed with ``trackio show``."""

    def __init__(self, project: str, name: str, config: dict[str, Any]) -> None:
        trackio = require("trackio")
        # trackio prints setup hints with print(); keep the console spreadrl's own
        with contextlib.redirect_stdout(io.StringIO()):
            self.run = trackio.init(
                project=project, name=name, config=config, auto_log_cpu=False, auto_log_gpu=False
            )
        self._trackio = trackio

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        self.run.log(scalars(metrics), step=step)

    def close(self) -> None:
        # the module-level finish also forgets the run, so trackio's exit hook
        # does not finish (and print) it a second time
        with contextlib.redirect_stdout(io.StringIO()):
            self._trackio.finish()


class MetricsLog:
    """Fans each step's metrics out to the configured trackers.

    ``metrics.jsonl`` is always written, whatever ``backends`` says: the run
    viewer and the benchmarks read it.
    """

    def __init__(self, trackers: Sequence[Tracker], path: Path) -> None:
        self.trackers = list(trackers)
        self.path = path

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        for tracker in self.trackers:
            tracker.log(step, metrics)

    def close(self) -> None:
        for tracker in self.trackers:
            try:
                tracker.close()
            except Exception:  # a tracker failing at exit must not lose the trained model
                log.warning("closing %s failed", type(tracker).__name__, exc_info=True)
        self.trackers = []


def build_metrics_log(
    logging_cfg: LoggingConfig, out: Path, config: dict[str, Any], *, main: bool = True
) -> MetricsLog:
    """The run's metrics log: ``out/metrics.jsonl`` plus ``logging_cfg.backends``.

    Args:
        logging_cfg: a ``LoggingConfig`` (``backends``, ``project``, ``run_name``).
        out: the run folder.
        config: the resolved config as plain data, logged with every backend.
        main: False on the non-main ranks of a distributed run, which mirror nothing.

    Raises:
        ConfigError: an unknown backend name.
        MissingDependencyError: a backend whose package is not installed.
    """
    names = list(dict.fromkeys(logging_cfg.backends))
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        raise ConfigError(
            f"logging.backends: unknown backend {unknown[0]!r}; choose from {', '.join(BACKENDS)}"
        )
    path = out / "metrics.jsonl"
    trackers: list[Tracker] = [JsonlTracker(path)]
    if not main:
        return MetricsLog(trackers, path)
    project = logging_cfg.project or "spreadrl"
    name = logging_cfg.run_name or out.resolve().name
    built: list[Tracker] = []
    try:
        for backend in names:
            if backend == "tensorboard":
                built.append(TensorBoardTracker(out / "tensorboard", config))
            elif backend == "wandb":
                built.append(WandbTracker(out, project, name, config))
            elif backend == "trackio":
                built.append(TrackioTracker(project, name, config))
    except BaseException:
        MetricsLog(built, path).close()
        raise
    return MetricsLog(trackers + built, path)
