"""Environment workers run under memory and CPU-time limits; going over one fails the request
or the episode with its reason, and the pool goes on (tests/env/test_pool.py: plain crashes).

The fake envs live at module level so spawned workers can import them.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from spreadrl.env.config import EnvConfig
from spreadrl.env.factory import make_env_pool
from spreadrl.env.limits import EnvLimitExceeded, WorkerLimits
from spreadrl.env.pool import EnvPool, EpisodeCrashed
from spreadrl.env.types import EndReason, Observation, StepResult, ToolCall
from tests.env.spreadsheet.gym_helpers import make_task, revenue_answer


class GreedyEnv:
    """``spin`` burns CPU in Python, ``hoard`` asks for 2 GiB, ``stick`` blocks in C forever,
    ``pid`` answers with the worker's pid."""

    def reset(self, task, case) -> Observation:
        return Observation(instruction=str(task), workbook_overview="", tool_schemas=[])

    def step(self, call: ToolCall) -> StepResult:
        if call.name == "spin":
            end = time.process_time() + 30
            while time.process_time() < end:
                pass
        elif call.name == "hoard":
            bytearray(2 << 30)
        elif call.name == "stick":
            lock = threading.Lock()
            lock.acquire()
            lock.acquire()  # blocks in C, holding nothing Python can interrupt
        return StepResult(observation=str(os.getpid()), ok=True)

    def finish(self, **kwargs):
        return None

    def close(self) -> None:
        pass


def _pid(pool: EnvPool, episode: str) -> int:
    pool.reset(episode, "t", 1).result(timeout=60)
    return int(pool.step(episode, ToolCall("pid")).result(timeout=60).observation)


def test_over_a_limit_the_request_fails_and_the_pool_goes_on():
    """Over the CPU budget or the memory cap in Python: that request fails, the worker serves
    on. Stuck in C past the watchdog: the worker ends, the pool starts another."""
    limits = WorkerLimits(memory_mb=1024, cpu_s=1, wall_s=600.0)
    with EnvPool(GreedyEnv, num_workers=1, limits=limits) as pool:
        pid = _pid(pool, "a")
        with pytest.raises(EnvLimitExceeded, match="1 s of CPU time"):
            pool.step("a", ToolCall("spin")).result(timeout=600)
        with pytest.raises(MemoryError):
            pool.step("a", ToolCall("hoard")).result(timeout=60)
        assert _pid(pool, "b") == pid and pool.restarts == 0  # the same worker, still serving
    stuck = WorkerLimits(memory_mb=1024, cpu_s=1, wall_s=5.0)  # blocking burns no CPU
    with EnvPool(GreedyEnv, num_workers=1, limits=stuck) as pool:
        pid = _pid(pool, "a")
        with pytest.raises(EpisodeCrashed, match="watchdog"):
            pool.step("a", ToolCall("stick")).result(timeout=60)
        assert _pid(pool, "b") != pid and pool.restarts == 1


# the agent's code (run in the sandbox, outside the worker's budget) leaves 250 formulas
# that take IronCalc about 7 CPU seconds here (the budget is 1-2 s: a machine three times
# as fast still overspends) to compute when the episode is graded
HEAVY_CODE = """
import openpyxl
wb = openpyxl.load_workbook("workbook.xlsx")
for r in range(2, 252):
    wb["Sheet1"].cell(r, 5).value = "=SUMPRODUCT(ROW($H$1:$H$100000)*1)"
wb.save("workbook.xlsx")
"""
SOLUTION = [
    {"name": "write_range", "arguments": {"range": "D2", "values": "=B2*C2"}},
    {"name": "fill_formula", "arguments": {"source": "D2", "target": "D3:D6"}},
]


@pytest.mark.slow
def test_a_grading_over_the_cpu_budget_scores_zero_and_the_next_episode_runs(tmp_path):
    task = make_task(tmp_path, revenue_answer)
    cfg = EnvConfig(engine="ironcalc", sandbox_mode="rlimit", worker_cpu_s=1)
    with make_env_pool(cfg, workers=1) as pool:
        pool.reset("heavy", task, 1).result(timeout=120)
        step = pool.step("heavy", ToolCall("code_interpreter", {"code": HEAVY_CODE}))
        assert step.result(timeout=120).ok
        result = pool.finish("heavy", final_answer="done").result(timeout=120)
        assert (result.reward, result.passed) == (0.0, False)
        assert result.stop_reason == EndReason.ENV_LIMIT
        assert "CPU time" in result.mismatches[0].reason
        pool.reset("next", task, 1).result(timeout=120)
        for call in SOLUTION:
            assert pool.step("next", ToolCall.from_json(call)).result(timeout=120).ok
        assert pool.finish("next", final_answer="done").result(timeout=120).reward == 1.0
        assert pool.restarts == 0


def test_the_settings_make_the_limits():
    limits = EnvConfig(worker_memory_mb=2048, worker_cpu_s=60, code_wall_time_s=30).worker_limits()
    assert (limits.memory_mb, limits.cpu_s) == (2048, 60)
    assert limits.wall_s > 60 + 30  # the watchdog waits out the budget and the sandbox
    assert EnvConfig(worker_cpu_s=0).worker_limits().wall_s == 0.0


def test_the_gym_ends_an_episode_over_a_limit_scored_zero(tmp_path, monkeypatch):
    """Out of memory in a tool call or in the grading: the episode ends env_limit, scored 0."""
    from spreadrl.env.spreadsheet import checker
    from spreadrl.env.spreadsheet.episode import SpreadsheetEnv
    from spreadrl.env.spreadsheet.tools import compute

    task = make_task(tmp_path, revenue_answer)
    env = SpreadsheetEnv(EnvConfig(tools="minimal"))
    env.reset(task, 1)

    def out_of_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(compute, "evaluated", out_of_memory)
    step = env.step(ToolCall("recalculate_and_read", {"ranges": ["A1"]}))
    assert step.terminated and not step.ok and step.info["end_reason"] == "env_limit"
    assert "out of memory" in step.observation
    result = env.finish(final_answer="done")
    assert (result.reward, result.stop_reason) == (0.0, EndReason.ENV_LIMIT)

    env.reset(task, 1)
    monkeypatch.setattr(checker, "check_workbook", out_of_memory)
    result = env.finish(final_answer="done")
    assert (result.reward, result.stop_reason) == (0.0, EndReason.ENV_LIMIT)
    assert "env.worker_memory_mb" in result.mismatches[0].reason
