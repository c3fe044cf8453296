"""The taskset, its tasks and its Env (see the package docstring)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import verifiers.v1 as vf
from pydantic import field_validator

from spreadrl.data.sources import resolve_tasks
from spreadrl.env.spreadsheet import checker as gym_checker
from spreadrl.env.spreadsheet.episode import SpreadsheetEnv, replay
from spreadrl.env.spreadsheet.tools import resolve_tools
from spreadrl.errors import SpreadrlError
from spreadrl.rollout.config import DEFAULT_SYSTEM_PROMPT
from spreadrl_spreadsheet_gym.toolset import (
    WORKBOOK,
    SpreadsheetState,
    SpreadsheetToolset,
    SpreadsheetToolsetConfig,
    gym_settings,
    gym_task,
)


class SpreadsheetGymData(vf.TaskData):
    """One case of one spreadrl task: the files it names and the gym's settings."""

    task_id: str
    case: int
    instruction: str
    instruction_type: str
    answer_position: str
    input_path: str
    answer_path: str
    solution_path: str | None
    tools: str | list[str]
    max_tool_calls: int


class SpreadsheetGymTaskConfig(vf.TaskConfig):
    toolset: SpreadsheetToolsetConfig = SpreadsheetToolsetConfig()
    """Where the rollout's tool server (the gym) runs: by default a subprocess here."""


class SpreadsheetGymConfig(vf.TasksetConfig):
    tasks: str = "builtin:demo-test"
    """A spreadrl task set: builtin:<split> or a task folder (SpreadsheetBench's layout)."""
    task_ids: list[str] = []
    """Only these tasks of the set (empty: every task)."""
    tools: str | list[str] = "full"
    """The gym's tools: a preset (minimal, full, ...) or tool names (docs/tools.md)."""
    max_tool_calls: int = 20
    """Tool calls per episode; the call that spends them ends the episode, scored."""
    task: SpreadsheetGymTaskConfig = SpreadsheetGymTaskConfig()

    @field_validator("tools")
    @classmethod
    def _known_tools(cls, tools: str | list[str]) -> str | list[str]:
        """A misspelt tool is one line from the command line, not a traceback at load."""
        try:
            resolve_tools(tools)
        except SpreadrlError as exc:
            raise ValueError(str(exc)) from None
        return tools


class SpreadsheetGymTask(vf.Task[SpreadsheetGymData, SpreadsheetState, SpreadsheetGymTaskConfig]):
    """A rollout: the gym's tools as native tools, spreadrl's checker as the reward."""

    @classmethod
    def toolsets(cls, config: SpreadsheetGymTaskConfig) -> list[vf.Toolset]:
        return [SpreadsheetToolset(config.toolset)]

    @property
    def key(self) -> str:
        return f"{self.data.task_id}#{self.data.case}"

    async def setup(self, trace: vf.Trace) -> None:
        """Name the folder the tool server saves the working copy in (made on first save)."""
        folder = Path(tempfile.gettempdir()) / f"spreadrl-vf-{uuid.uuid4().hex}"
        trace.state.folder = str(folder)

    @vf.stop
    async def budget_spent(self, trace: vf.Trace) -> bool:
        """The gym ended the episode (its tool-call budget, a refused workbook)."""
        return bool(trace.state.ended)

    @vf.reward(weight=1.0)
    async def checker(self, trace: vf.Trace) -> float:
        """spreadrl's checker on the workbook as the rollout left it: 1.0 or 0.0."""
        state = trace.state
        folder = Path(state.folder) if state.folder else None
        try:
            if state.scored_zero:
                return 0.0
            saved = folder / WORKBOOK if folder is not None else None
            path = saved if saved is not None and saved.exists() else Path(self.data.input_path)
            return 1.0 if await asyncio.to_thread(self._passes, path) else 0.0
        finally:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)

    def _passes(self, path: Path) -> bool:
        settings = gym_settings(self.data)
        result = gym_checker.check_workbook(
            path,
            Path(self.data.answer_path),
            self.data.answer_position,
            engine=settings.engine,
            scoring=settings.scoring,
            locale=settings.locale,
        )
        return result.passed

    @vf.metric
    async def tool_calls(self, trace: vf.Trace) -> float:
        return float(trace.state.tool_calls)

    @vf.metric
    async def tool_errors(self, trace: vf.Trace) -> float:
        return float(trace.state.tool_errors)

    async def validate(self, runtime: vf.Runtime) -> bool | None:
        """The gold check (vf-validate): the case's reference solution, replayed on the
        gym, scores 1.0 with every call accepted; None when the case has none."""
        task = gym_task(self.data)
        calls = task.case(self.data.case).load_solution()
        if calls is None:
            return None
        result, steps = await asyncio.to_thread(
            replay, task, self.data.case, calls, gym_settings(self.data)
        )
        return result.reward == 1.0 and all(step.ok for step in steps)


class SpreadsheetGymTaskset(vf.Taskset[SpreadsheetGymTask, SpreadsheetGymConfig]):
    def load(self) -> Iterator[SpreadsheetGymTask]:
        config = self.config
        tasks = resolve_tasks(config.tasks)
        wanted = set(config.task_ids)
        for task, case in tasks.episodes():
            if wanted and task.id not in wanted:
                continue
            files = task.case(case)
            data = SpreadsheetGymData(
                id=f"{task.id}#{case}",
                name=task.id,
                prompt=opening(task, case, config),
                system_prompt=DEFAULT_SYSTEM_PROMPT,
                task_id=task.id,
                case=case,
                instruction=task.instruction,
                instruction_type=task.instruction_type,
                answer_position=task.answer_position,
                input_path=str(files.input_path),
                answer_path=str(files.answer_path),
                solution_path=str(files.solution_path) if files.solution_path else None,
                tools=config.tools,
                max_tool_calls=config.max_tool_calls,
            )
            yield SpreadsheetGymTask(data, config.task)


def opening(task, case: int, config: SpreadsheetGymConfig) -> str:
    """The first user turn, as spreadrl's rollouts write it: the task, then the workbook."""
    with SpreadsheetEnv(gym_settings(config)) as env:
        obs = env.reset(task, case)
    if obs.workbook_overview:
        return f"{obs.instruction}\n\n{obs.workbook_overview}"
    return obs.instruction


class SpreadsheetGymEnvConfig(vf.SingleAgentEnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"}, runtime=vf.SubprocessConfig())
    """verifiers' plain chat harness (native tool calls), on this machine."""


class SpreadsheetGymEnv(vf.Env[SpreadsheetGymEnvConfig]):
    """One agent seat playing the taskset (verifiers' single-agent case)."""

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        await agents.agent.run(task)
