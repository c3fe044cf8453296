"""The typed OpenEnv client of ``spreadrl env serve`` (openenv's ``EnvClient``).

As each OpenEnv environment ships one: ``SpreadsheetEnvClient(base_url=...)``
is openenv's async WebSocket client with spreadrl's observation and state
types; ``.sync()`` gives openenv's synchronous wrapper. Actions are MCP's
(``call_tool`` / ``list_tools``); :meth:`SpreadsheetEnvClient.call` builds one.

    with SpreadsheetEnvClient(base_url="http://127.0.0.1:8000").sync() as env:
        first = env.reset(task_id="demo-test-00001")
        step = env.step(SpreadsheetEnvClient.call("inspect_range", range="A1:B3"))
        end = env.step(SpreadsheetEnvClient.call("final_answer", answer="done"))
        # end.reward: the checker's
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

_FIELDS = set(SpreadsheetObservation.model_fields)


class SpreadsheetEnvClient(EnvClient[SpreadsheetAction, SpreadsheetObservation, SpreadsheetState]):
    """openenv's client, typed for the Spreadsheet Gym."""

    @staticmethod
    def call(tool: str, **arguments: Any) -> SpreadsheetAction:
        """An MCP ``call_tool`` action for ``tool``."""
        return SpreadsheetAction(type="call_tool", tool_name=tool, arguments=arguments)

    def _step_payload(self, action: SpreadsheetAction) -> dict[str, Any]:
        return action.model_dump(exclude_none=True)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[SpreadsheetObservation]:
        fields = {k: v for k, v in payload.get("observation", {}).items() if k in _FIELDS}
        obs = SpreadsheetObservation(
            **fields, done=payload.get("done", False), reward=payload.get("reward")
        )
        return StepResult(observation=obs, reward=payload.get("reward"), done=obs.done)

    def _parse_state(self, payload: dict[str, Any]) -> SpreadsheetState:
        return SpreadsheetState(**payload)
