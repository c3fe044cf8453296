"""Build environment pools from a config section or a tool preset name.

One place decides which environment a run uses (the spreadsheet gym or the
math/code environment of GRPO-TCR) and whether tool calls run in worker
processes (``workers`` > 0) or inline.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from spreadrl.env.config import EnvSettings
from spreadrl.env.pool import EnvPool, InlineEnvPool


def _settings(env: EnvSettings | str | Sequence[str]) -> EnvSettings:
    """A config section (the recipe's ``env``), a preset name, or tool names."""
    if isinstance(env, EnvSettings):
        return env
    if isinstance(env, str):
        return EnvSettings(tools=[t.strip() for t in env.split(",") if t.strip()])
    if isinstance(env, Sequence):
        return EnvSettings(tools=list(env))
    raise TypeError(f"cannot build an environment from {env!r}")


def env_factory(env: Any) -> Callable[[], Any]:
    """A picklable zero-argument constructor of one environment."""
    settings = _settings(env)
    if settings.kind == "code":
        from spreadrl.env.code_env import CodeEnv, CodeEnvConfig

        code_config = CodeEnvConfig(
            max_tool_calls=settings.max_tool_calls,
            max_observation_chars=settings.max_observation_chars,
        )
        return functools.partial(CodeEnv, code_config)
    from spreadrl.env.config import EnvConfig
    from spreadrl.env.episode import SpreadsheetEnv

    tools: Any = (
        settings.tools[0]
        if len(settings.tools) == 1 and settings.tools[0] in ("minimal", "full")
        else list(settings.tools)
    )
    config = EnvConfig(
        tools=tools,
        max_tool_calls=settings.max_tool_calls,
        max_observation_chars=settings.max_observation_chars,
        overview=settings.overview,
    )
    return functools.partial(SpreadsheetEnv, config)


def make_env_pool(env: Any = "full", workers: int = 0) -> EnvPool | InlineEnvPool:
    """A pool of environments; use it as a context manager so workers shut down cleanly."""
    factory = env_factory(env)
    if workers <= 0:
        return InlineEnvPool(factory)
    return EnvPool(factory, num_workers=workers)
