"""check_env: the spreadsheet gym, the code environment and a small test env keep the contract."""

from __future__ import annotations

from pathlib import Path

import pytest

from spreadrl.data.code_tasks import make_problem_task
from spreadrl.data.task import CELL_LEVEL, Task, TaskCase
from spreadrl.env.check import EnvContractError, check_env
from spreadrl.env.code import code_env
from spreadrl.env.code.code_env import CodeEnv
from spreadrl.env.config import EnvConfig
from spreadrl.env.spreadsheet.episode import SpreadsheetEnv
from spreadrl.env.types import EndReason, Env, EpisodeResult, Observation, StepResult, ToolCall
from spreadrl.errors import SpreadrlError
from tests.env.spreadsheet.gym_helpers import make_task, revenue_answer

SCHEMA = {
    "type": "function",
    "function": {
        "name": "guess",
        "description": "Guess the number.",
        "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
    },
}


class GuessEnv:
    """The smallest environment: guess a number with one tool; three calls allowed."""

    def __init__(self, budget: int = 3) -> None:
        self.budget, self.task, self.calls, self.right = budget, None, 0, False

    def reset(self, task: Task, case: int = 1) -> Observation:
        self.task, self.calls, self.right = task, 0, False
        return Observation(task.instruction, "", [SCHEMA])

    def step(self, call: ToolCall) -> StepResult:
        if self.task is None:
            raise SpreadrlError("step() before reset()")
        if self.calls >= self.budget:
            return StepResult("Error: no calls left", ok=False, truncated=True)
        self.calls += 1
        spent = self.calls >= self.budget
        if call.name != "guess" or not isinstance(call.arguments.get("n"), int):
            return StepResult("Error: call guess with an integer n", ok=False, truncated=spent)
        self.right = call.arguments["n"] == 7
        return StepResult("right" if self.right else "wrong", ok=True, truncated=spent)

    def finish(self, final_answer: str | None = None, output_path: str | None = None):
        reason = EndReason.MAX_TOOL_CALLS if self.calls >= self.budget else EndReason.ANSWERED
        return EpisodeResult(float(self.right), self.right, [], self.calls, 0, reason)

    def close(self) -> None:
        self.task = None


def _guess_task() -> Task:
    case = TaskCase(1, Path("in.xlsx"), Path("ans.xlsx"))
    return Task("g1", "Guess the number.", CELL_LEVEL, "A1", (case,), Path("."))


def test_a_small_test_env_passes():
    env = GuessEnv()
    assert isinstance(env, Env)  # structural: it has the protocol's methods
    check_env(env, _guess_task())


def test_the_spreadsheet_gym_passes(tmp_path):
    task = make_task(tmp_path, revenue_answer)
    env = SpreadsheetEnv(EnvConfig(max_tool_calls=3), workdir_root=tmp_path / "eps")
    assert isinstance(env, Env)
    check_env(env, task)


def test_the_code_env_passes(tmp_path, monkeypatch):
    monkeypatch.setattr(code_env, "WORKDIR_ROOT", str(tmp_path))
    task = make_problem_task("m1", "What is 6 * 7?", kind="math", answer="42")
    env = CodeEnv(EnvConfig(kind="code", tools=["code_interpreter"], max_tool_calls=3))
    assert isinstance(env, Env)
    check_env(env, task)


class RaisesOnBadCalls(GuessEnv):
    def step(self, call: ToolCall) -> StepResult:
        if call.name != "guess":
            raise SpreadrlError(f"unknown tool {call.name}")
        return super().step(call)


class NoBudget(GuessEnv):
    def step(self, call: ToolCall) -> StepResult:
        result = super().step(call)
        return StepResult(result.observation, result.ok)  # never truncated


class StringReason(GuessEnv):
    def finish(self, final_answer: str | None = None, output_path: str | None = None):
        result = super().finish(final_answer, output_path)
        return EpisodeResult(result.reward, result.passed, [], result.tool_calls, 0, "done")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (RaisesOnBadCalls(), "must come back as an ok=False observation"),
        (NoBudget(), "never truncated"),
        (StringReason(), "is not an EndReason"),
    ],
)
def test_broken_envs_fail_with_a_reason(env, message):
    with pytest.raises(EnvContractError, match=message):
        check_env(env, _guess_task(), max_steps=20)
