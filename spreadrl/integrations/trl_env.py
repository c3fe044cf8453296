"""TRL's ``GRPOTrainer`` on ``spreadrl env serve``: an ``environment_factory`` over the OpenEnv client.

TRL 1.16's OpenEnv integration is ``GRPOTrainer(environment_factory=...)``: the
factory makes one environment object per rollout; its public methods are the
tools (their signatures and Google-style docstrings become the schemas in the
chat template), ``reset(**row)`` starts the rollout on a dataset row and may
return text that TRL appends to the last user message, and ``get_reward()``
scores the finished rollout: the environment owns the reward.

:func:`environment_factory` builds that class for the server at ``url``: one
method per tool of the server's preset (the signature and docstring written
from its JSON schema), each a step of openenv's own client
(:class:`~spreadrl.integrations.openenv_client.SpreadsheetEnvClient`);
``reset(task_id=...)`` resets the server's session on the row's task and returns
the workbook overview; ``get_reward()`` sends the final answer and returns the
checker's reward. ``calls`` keeps the rollout's tool calls, so a test can replay
them through the in-process gym.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from spreadrl.integrations.openenv_client import SpreadsheetEnvClient
from spreadrl.integrations.openenv_env import ANSWER_TOOL

_JSON_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "object": dict,
}


def python_type(spec: dict[str, Any]) -> Any:
    """The Python hint TRL (transformers' ``get_json_schema``) turns back into ``spec``'s type."""
    if isinstance(spec.get("type"), str) and spec["type"] in _JSON_TYPES:
        return _JSON_TYPES[spec["type"]]
    options = spec.get("anyOf") or spec.get("oneOf")
    if options:
        hints = [python_type(o) for o in options if o.get("type") != "null"]
        if hints and all(h is not Any for h in hints):
            union = hints[0]
            for hint in hints[1:]:
                union = union | hint
            return union
    return Any


class _SpreadsheetRollout:
    """One TRL rollout on the server: the tool methods are added per preset."""

    url = ""

    def __init__(self) -> None:
        self._env = SpreadsheetEnvClient(base_url=self.url, message_timeout_s=600).sync()
        self._env.connect()
        self._done = False
        self._reward: float | None = None
        self.calls: list[dict[str, Any]] = []
        self.task_id: str | None = None

    def reset(self, task_id: str | None = None, **_: Any) -> str:
        """Start the rollout's episode on ``task_id`` (a column of the dataset row)."""
        result = self._env.reset(task_id=task_id)
        self.task_id = result.observation.info.get("task_id", task_id)
        self._done, self._reward, self.calls = False, None, []
        overview = result.observation.workbook_overview
        return f"\n\n{overview}" if overview else ""

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self._done:
            return "Error: the episode is over; give your final answer"
        self.calls.append({"name": name, "arguments": arguments})
        step = self._env.step(SpreadsheetEnvClient.call(name, **arguments))
        if step.done:
            self._done, self._reward = True, float(step.reward or 0.0)
        return step.observation.text

    def get_reward(self) -> float:
        """The checker's reward for the rollout's workbook (the episode ends here)."""
        if not self._done:
            end = self._env.step(SpreadsheetEnvClient.call(ANSWER_TOOL, answer=""))
            self._done, self._reward = True, float(end.reward or 0.0)
        return float(self._reward or 0.0)


def _tool_method(schema: dict[str, Any]) -> Callable[..., str]:
    """A method named after the tool whose signature and docstring state its schema."""
    function = schema["function"]
    name = function["name"]
    params = function.get("parameters") or {}
    props: dict[str, Any] = params.get("properties") or {}
    required = set(params.get("required") or [])

    def tool(self: _SpreadsheetRollout, **arguments: Any) -> str:
        return self._call(name, {k: v for k, v in arguments.items() if v is not None})

    ordered = sorted(props, key=lambda p: p not in required)  # required ones first
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for arg in ordered:
        default = inspect.Parameter.empty if arg in required else None
        hint = python_type(props[arg])
        parameters.append(
            inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint)
        )
    tool.__name__ = tool.__qualname__ = name
    tool.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    tool.__annotations__ = {arg: python_type(props[arg]) for arg in ordered} | {"return": str}
    lines = [" ".join(str(function.get("description") or name).split()), "", "Args:"]
    for arg in ordered:
        text = " ".join(str(props[arg].get("description") or arg).split())
        lines.append(f"    {arg}: {text}")
    lines += ["", "Returns:", "    The tool's response."]
    tool.__doc__ = "\n".join(lines)
    return tool


def environment_factory(url: str) -> type:
    """A class for ``GRPOTrainer(environment_factory=...)`` over the server at ``url``."""
    with SpreadsheetEnvClient(base_url=url).sync() as probe:
        first = probe.reset()
    schemas = first.observation.tool_schemas
    methods = {s["function"]["name"]: _tool_method(s) for s in schemas}
    return type("SpreadsheetRollout", (_SpreadsheetRollout,), {"url": url, **methods})
