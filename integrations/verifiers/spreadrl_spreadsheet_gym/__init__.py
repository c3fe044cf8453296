"""spreadrl's Spreadsheet Gym for verifiers 0.4: a taskset over ``spreadrl env serve``.

verifiers 0.4 loads an environment by taskset id: the installed module of that
name, exporting its ``Taskset`` and ``Env`` subclasses (``vf.load_environment``).
Each task resets one OpenEnv session on the server (``task_id``); the ``Env``
plays the user. It opens with the task, the workbook overview and the tool
schemas. It sends each reply, read as one JSON tool call, to the server and
returns the tool's response as the next user turn. When the reply is
``{"answer": ...}``, or the turns run out, it ends the episode and records the
server's reward (spreadrl's checker) as ``checker``.
"""

from spreadrl_spreadsheet_gym.gym import (
    SpreadsheetGymConfig,
    SpreadsheetGymData,
    SpreadsheetGymEnv,
    SpreadsheetGymEnvConfig,
    SpreadsheetGymTask,
    SpreadsheetGymTaskset,
)

__all__ = [
    "SpreadsheetGymConfig",
    "SpreadsheetGymData",
    "SpreadsheetGymEnv",
    "SpreadsheetGymEnvConfig",
    "SpreadsheetGymTask",
    "SpreadsheetGymTaskset",
]
