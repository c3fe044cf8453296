"""Build environment pools from a config section or a tool preset name.

One place decides which environment a run uses (the spreadsheet gym, the
math/code environment of GRPO-TCR, or an OpenEnv server: ``env.kind openenv``)
and whether tool calls run in worker processes (``workers`` > 0) or inline.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from spreadrl.env.code.code_env import CodeEnv
from spreadrl.env.config import EnvConfig
from spreadrl.env.pool import EnvPool, InlineEnvPool
from spreadrl.env.spreadsheet.episode import SpreadsheetEnv

if TYPE_CHECKING:
    from spreadrl.env.openenv_pool import OpenEnvPool
from spreadrl.env.types import Env
from spreadrl.errors import SpreadrlError


def _settings(env: EnvConfig | str | Sequence[str]) -> EnvConfig:
    """A config section (the recipe's ``env``), a preset name, or tool names."""
    if isinstance(env, EnvConfig):
        return env
    if isinstance(env, str):
        return EnvConfig(tools=env)
    if isinstance(env, Sequence):
        return EnvConfig(tools=list(env))
    raise TypeError(f"cannot build an environment from {env!r}")


def env_factory(env: EnvConfig | str | Sequence[str]) -> Callable[[], Env]:
    """A picklable zero-argument constructor of one environment."""
    settings = _settings(env)
    if settings.kind == "openenv":
        raise SpreadrlError("env.kind openenv runs on its server: use make_env_pool")
    if settings.kind == "code":
        return functools.partial(CodeEnv, settings)
    return functools.partial(SpreadsheetEnv, settings)


def make_env_pool(
    env: EnvConfig | str | Sequence[str] = "full", workers: int = 0
) -> EnvPool | InlineEnvPool | OpenEnvPool:
    """A pool of environments; use it as a context manager so workers shut down cleanly."""
    settings = _settings(env)
    if settings.kind != "openenv":
        factory = env_factory(settings)
        if workers <= 0:
            return InlineEnvPool(factory)
        return EnvPool(factory, num_workers=workers, limits=settings.worker_limits())
    # openenv: the episodes run on the server; workers do not apply
    from spreadrl.env.openenv_pool import OpenEnvPool

    return OpenEnvPool(
        settings.url or "",
        max_sessions=settings.max_sessions,
        system_prompt=settings.system_prompt,
    )
