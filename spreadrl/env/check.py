"""``check_env``: does an environment keep the contract of :class:`spreadrl.env.types.Env`?

In the spirit of Gymnasium's ``utils/env_checker.py``: drive ``reset``,
``step``, ``finish`` and ``close`` the way the agent loop does and check what
comes back, so a new environment (or a change to one) fails here, with one
sentence saying what broke, rather than deep in a training run. Checked:

- misuse raises :class:`~spreadrl.errors.SpreadrlError`: ``step`` before ``reset``;
- ``reset`` returns an :class:`Observation` with text and tool schemas, and is
  deterministic (the same task twice gives the same observation);
- malformed calls (an unknown tool, bad arguments) come back as ``ok=False``
  observations, never as exceptions: the model's calls are hostile input;
- ``terminated`` and ``truncated`` are booleans; the tool-call budget ends in
  ``truncated=True`` and stays spent;
- ``finish`` returns an :class:`EpisodeResult` whose reward is a number in
  [0, 1], whose ``stop_reason`` is an :class:`EndReason` and whose tool-call count
  is what was stepped; ``close`` may be called twice.

Not checked: that the reward is right (each environment's tests do that).
"""

from __future__ import annotations

import math

from spreadrl.data.task import Task
from spreadrl.env.types import EndReason, Env, EpisodeResult, Observation, StepResult, ToolCall
from spreadrl.errors import SpreadrlError


class EnvContractError(SpreadrlError):
    """An environment broke the reset / step / finish / close contract."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise EnvContractError(message)


def _check_step(result: object, what: str) -> StepResult:
    _require(isinstance(result, StepResult), f"step({what}) returned {type(result).__name__}")
    assert isinstance(result, StepResult)
    _require(isinstance(result.observation, str), f"step({what}): observation is not text")
    for flag in ("ok", "terminated", "truncated"):
        value = getattr(result, flag)
        _require(isinstance(value, bool), f"step({what}): {flag} is {value!r}, not a bool")
    _require(isinstance(result.info, dict), f"step({what}): info is not a dict")
    return result


def _schema_names(obs: Observation) -> list[str]:
    names = []
    for schema in obs.tool_schemas:
        function = schema.get("function") if isinstance(schema, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        _require(isinstance(name, str), f"reset: tool schema without function.name: {schema!r:.80}")
        names.append(str(name))
    return names


def check_env(env: Env, task: Task, *, case: int = 1, max_steps: int = 200) -> None:
    """Raise :class:`EnvContractError` naming the first broken rule; return None if all hold.

    Args:
        env: a fresh environment (it is reset several times and closed at the end).
        task: a task the environment accepts.
        case: which case of ``task`` to use.
        max_steps: malformed calls made at most while waiting for the budget to end.
    """
    for method in ("reset", "step", "finish", "close"):
        _require(callable(getattr(env, method, None)), f"the environment has no {method}()")
    try:
        env.step(ToolCall("no_such_tool", {}))
    except SpreadrlError:
        pass
    else:
        raise EnvContractError("step() before reset() must raise SpreadrlError")

    first = env.reset(task, case)
    _require(isinstance(first, Observation), f"reset returned {type(first).__name__}")
    _require(
        isinstance(first.instruction, str) and bool(first.instruction), "reset: no instruction"
    )
    _require(bool(first.tool_schemas), "reset: no tool schemas")
    names = _schema_names(first)
    again = env.reset(task, case)
    _require(
        (again.instruction, again.workbook_overview, again.tool_schemas)
        == (first.instruction, first.workbook_overview, first.tool_schemas),
        "reset is not deterministic: the same task case gave two different observations",
    )

    steps = 0
    for call in (ToolCall("no_such_tool", {"x": 1}), ToolCall(names[0], {"no_such_argument": 1})):
        try:
            result = _check_step(env.step(call), call.name)
        except SpreadrlError as exc:
            raise EnvContractError(
                f"step({call.name}) with bad input raised {type(exc).__name__}; "
                "a malformed call must come back as an ok=False observation"
            ) from exc
        steps += 1
        _require(not result.ok, f"step({call.name}) with bad input returned ok=True")
        _require(bool(result.observation), f"step({call.name}): empty error observation")
        if result.truncated:
            break
    else:
        while steps < max_steps:
            result = _check_step(env.step(ToolCall("no_such_tool", {})), "no_such_tool")
            steps += 1
            if result.truncated:
                break
        _require(result.truncated, f"no tool-call budget: {max_steps} calls never truncated")
    spent = _check_step(env.step(ToolCall("no_such_tool", {})), "after the budget")
    _require(spent.truncated and not spent.ok, "a call after the spent budget was accepted")

    end = env.finish(None)
    _require(isinstance(end, EpisodeResult), f"finish returned {type(end).__name__}")
    _require(
        isinstance(end.reward, float | int) and math.isfinite(end.reward) and 0 <= end.reward <= 1,
        f"finish: reward {end.reward!r} is not a number in [0, 1]",
    )
    _require(isinstance(end.passed, bool), f"finish: passed is {end.passed!r}")
    _require(
        isinstance(end.stop_reason, EndReason),
        f"finish: stop_reason {end.stop_reason!r} is not an EndReason",
    )
    _require(
        end.stop_reason == EndReason.MAX_TOOL_CALLS,
        f"finish: the budget was spent but stop_reason is {end.stop_reason!r}",
    )
    _require(
        end.tool_calls == steps,
        f"finish: tool_calls is {end.tool_calls}, but {steps} calls were counted",
    )
    env.close()
    env.close()
