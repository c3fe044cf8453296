"""spreadrl's Spreadsheet Gym as a verifiers 0.4 taskset (``verifiers.v1``).

``vf-eval spreadrl-spreadsheet-gym`` and ``vf-validate spreadrl-spreadsheet-gym`` load
this module by its taskset id. Each task is one case of a spreadrl task set
(``tasks``: ``builtin:<split>`` or a folder in SpreadsheetBench's layout); its prompt
is the instruction and the workbook overview, as spreadrl's own rollouts open. For
each rollout verifiers starts the task's tool server (:mod:`.toolset`), which runs
the gym's episode in its own process and serves the gym's tools over MCP, so the
model gets them as native tool calls (verifiers' ``null`` chat harness by default).
The reward ``checker`` is spreadrl's checker on the workbook the rollout left: 1.0
when every answer cell matches, else 0.0; ``tool_calls`` and ``tool_errors`` are
metrics. The gold check (``Task.validate``, what ``vf-validate`` runs) replays the
case's reference solution on the gym and passes when it scores 1.0; the no-op check
scores the untouched workbook, which must not pass.
"""

from spreadrl_spreadsheet_gym.taskset import (
    SpreadsheetGymConfig,
    SpreadsheetGymData,
    SpreadsheetGymEnv,
    SpreadsheetGymEnvConfig,
    SpreadsheetGymTask,
    SpreadsheetGymTaskConfig,
    SpreadsheetGymTaskset,
)
from spreadrl_spreadsheet_gym.toolset import SpreadsheetState, SpreadsheetToolset

__all__ = [
    "SpreadsheetGymConfig",
    "SpreadsheetGymData",
    "SpreadsheetGymEnv",
    "SpreadsheetGymEnvConfig",
    "SpreadsheetGymTask",
    "SpreadsheetGymTaskConfig",
    "SpreadsheetGymTaskset",
    "SpreadsheetState",
    "SpreadsheetToolset",
]
