"""The typed OpenEnv client of ``spreadrl env serve`` (openenv-core's ``EnvClient``).

As each OpenEnv environment ships one: ``SpreadsheetEnvClient(base_url=...)``
is openenv's async WebSocket client with spreadrl's action, observation and
state types; ``.sync()`` gives openenv's synchronous wrapper.

    with SpreadsheetEnvClient(base_url="http://127.0.0.1:8000").sync() as env:
        first = env.reset(task_id="demo-test-00001")
        step = env.step(SpreadsheetAction(name="inspect_range", arguments={"range": "A1:B3"}))
        end = env.step(SpreadsheetAction(answer="done"))   # end.reward: the checker's
"""

from __future__ import annotations

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from spreadrl.integrations.openenv_env import (
    SpreadsheetAction,
    SpreadsheetObservation,
    SpreadsheetState,
)


class SpreadsheetEnvClient(EnvClient[SpreadsheetAction, SpreadsheetObservation, SpreadsheetState]):
    """openenv-core's client, typed for the Spreadsheet Gym."""

    def _step_payload(self, action: SpreadsheetAction) -> dict[str, Any]:
        return action.model_dump(exclude_none=True)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[SpreadsheetObservation]:
        obs = SpreadsheetObservation(
            **payload.get("observation", {}),
            done=payload.get("done", False),
            reward=payload.get("reward"),
        )
        return StepResult(observation=obs, reward=payload.get("reward"), done=obs.done)

    def _parse_state(self, payload: dict[str, Any]) -> SpreadsheetState:
        return SpreadsheetState(**payload)
