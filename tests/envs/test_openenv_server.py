"""spreadrl's gym behind openenv-core's server, driven by openenv-core's own client."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from spreadrl.data.task import load_tasks

pytestmark = pytest.mark.envs


def _oracle(tasks_dir: Path, index: int) -> tuple[str, list[dict]]:
    task = load_tasks(tasks_dir).tasks[index]
    calls = task.case(1).load_solution()
    assert calls, "the synthesized task has a reference solution"
    return task.id, calls


def test_oracle_scores_one_and_noop_zero(openenv_url, tasks_dir):
    from spreadrl.integrations.openenv_client import SpreadsheetEnvClient
    from spreadrl.integrations.openenv_env import SpreadsheetAction

    task_id, calls = _oracle(tasks_dir, 0)
    with SpreadsheetEnvClient(base_url=openenv_url).sync() as env:
        first = env.reset(task_id=task_id)
        assert not first.done and first.observation.instruction
        names = {s["function"]["name"] for s in first.observation.tool_schemas}
        assert names == {"write_range", "inspect_range"}
        for call in calls:
            step = env.step(SpreadsheetAction(name=call["name"], arguments=call["arguments"]))
            assert step.observation.ok, step.observation.text
            assert not step.done and step.reward is None
        state = env.state()
        assert (state.task_id, state.tool_calls, state.end_reason) == (task_id, len(calls), None)
        end = env.step(SpreadsheetAction(answer="done"))
        assert end.done and end.reward == 1.0
        assert env.state().end_reason == "answered"

        env.reset(task_id=task_id)  # the same session, a fresh copy of the workbook
        noop = env.step(SpreadsheetAction(answer="I did nothing"))
        assert noop.done and noop.reward == 0.0
        assert noop.observation.info["mismatches"]


def test_malformed_actions_get_error_observations_and_the_episode_goes_on(openenv_url, tasks_dir):
    from spreadrl.integrations.openenv_client import SpreadsheetEnvClient
    from spreadrl.integrations.openenv_env import SpreadsheetAction

    task_id, calls = _oracle(tasks_dir, 1)
    with SpreadsheetEnvClient(base_url=openenv_url).sync() as env:
        env.reset(task_id=task_id)
        bad = [
            SpreadsheetAction(name="write_range", arguments='{"range": "B2", "values": [[1]'),
            SpreadsheetAction(name="no_such_tool", arguments={}),
            SpreadsheetAction(name="write_range", arguments={"range": 12}),
            SpreadsheetAction(arguments={"range": "A1"}),
        ]
        for action in bad:
            step = env.step(action)
            assert not step.done and not step.observation.ok
            assert step.observation.text.startswith("Error")
        # arguments as JSON text, as OpenAI-style clients send them
        for call in calls:
            args = json.dumps(call["arguments"])
            assert env.step(SpreadsheetAction(name=call["name"], arguments=args)).observation.ok
        assert env.state().tool_errors == len(bad)
        assert env.step(SpreadsheetAction(answer="done")).reward == 1.0


def test_concurrent_sessions_stay_isolated(openenv_url, tasks_dir):
    """Two sessions on the same task at once: only the one that solves it scores 1."""
    from spreadrl.integrations.openenv_client import SpreadsheetEnvClient
    from spreadrl.integrations.openenv_env import SpreadsheetAction

    task_id, calls = _oracle(tasks_dir, 2)

    async def solver() -> float:
        async with SpreadsheetEnvClient(base_url=openenv_url) as env:
            await env.reset(task_id=task_id)
            await asyncio.sleep(0.2)  # let the other session reset too
            for call in calls:
                await env.step(SpreadsheetAction(name=call["name"], arguments=call["arguments"]))
            await asyncio.sleep(0.5)
            return (await env.step(SpreadsheetAction(answer="done"))).reward

    async def idler() -> float:
        async with SpreadsheetEnvClient(base_url=openenv_url) as env:
            await env.reset(task_id=task_id)
            await asyncio.sleep(0.5)  # the solver's writes happen meanwhile
            return (await env.step(SpreadsheetAction(answer="nothing"))).reward

    async def both() -> list[float]:
        return list(await asyncio.gather(solver(), idler(), solver(), idler()))

    assert asyncio.run(both()) == [1.0, 0.0, 1.0, 0.0]


def test_reset_without_a_task_walks_the_set(openenv_url, tasks_dir):
    from spreadrl.integrations.openenv_client import SpreadsheetEnvClient

    ids = {t.id for t in load_tasks(tasks_dir)}
    with SpreadsheetEnvClient(base_url=openenv_url).sync() as env:
        seen = {env.reset().observation.info["task_id"] for _ in range(len(ids))}
        by_seed = [env.reset(seed=5).observation.info["task_id"] for _ in range(2)]
    assert seen == ids
    assert by_seed[0] == by_seed[1]
