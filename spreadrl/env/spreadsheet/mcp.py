"""The Spreadsheet Gym's tools as MCP tools (fastmcp, the ``openenv`` extra; imported only where MCP is served).

Two places serve the gym's tools to MCP clients: ``spreadrl env serve``'s OpenEnv
environment (:mod:`spreadrl.integrations.openenv_env`, ``/mcp``) and harness
episodes with ``rollout.harness_mcp`` (:mod:`spreadrl.rollout.harness.mcp`, the
capturing endpoint's ``/s/<key>/mcp``). Both build their FastMCP server here
(:func:`gym_server`: each tool with the gym's own JSON schema, its call a step of
the gym) and both run the tools over one workbook file with :class:`UserWorkbook`
(one in-process gym episode over that file, saved after each call that succeeds).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fastmcp import FastMCP
from fastmcp.tools import Tool as FastMCPTool
from fastmcp.tools import ToolResult
from pydantic import Field

from spreadrl.data.task import Task, TaskCase
from spreadrl.env.config import EnvConfig
from spreadrl.env.types import StepResult, ToolCall

ToolRunner = Callable[[str, dict[str, Any]], tuple[str, bool]]
"""A tool call (name, arguments) to its response text and whether it succeeded."""

TEXT_RESULT: dict[str, Any] = {
    "type": "object",
    "properties": {"result": {"type": "string"}},
    "required": ["result"],
    "x-fastmcp-wrap-result": True,  # MCP clients read the text as the call's value
}


class GymTool(FastMCPTool):
    """A gym tool on a FastMCP server: its own JSON schema, its call the runner's (in a
    worker thread, so a slow tool does not hold the server's event loop)."""

    runner: Any = Field(default=None, exclude=True)

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        text, ok = await asyncio.to_thread(self.runner, self.name, arguments)
        return ToolResult(content=text, structured_content={"result": text}, is_error=not ok)


def gym_server(name: str, schemas: Sequence[dict[str, Any]], runner: ToolRunner) -> FastMCP:
    """A FastMCP server offering ``schemas`` (OpenAI function schemas, unchanged), each
    call answered by ``runner``."""
    server = FastMCP(name)
    for schema in schemas:
        function = schema["function"]
        server.add_tool(
            GymTool(
                name=function["name"],
                description=function.get("description") or "",
                parameters=function.get("parameters") or {"type": "object", "properties": {}},
                output_schema=TEXT_RESULT,
                runner=runner,
            )
        )
    return server


class UserWorkbook:
    """One workbook file under the gym's tools: an in-process gym episode over a copy of
    it (in a folder of its own, under ``workdir_root`` when given), one call at a time; a
    call that succeeds writes the file (atomically, keeping its mode and, where this
    process may, its owner). Production mode's workbook, and a harness episode's."""

    def __init__(self, path: Path, config: EnvConfig, workdir_root: Path | None = None) -> None:
        from spreadrl.env.spreadsheet.episode import SpreadsheetEnv

        self.path = Path(path)
        case = TaskCase(1, self.path, self.path)
        task = Task(self.path.stem, "", "", "", (case,), self.path.parent, source="workbook")
        self._env = SpreadsheetEnv(config, workdir_root=workdir_root)
        self._lock = threading.Lock()
        self.opening = self._env.reset(task, 1)

    def call(self, name: str, arguments: dict[str, Any]) -> StepResult:
        with self._lock:
            result = self._env.step(ToolCall(name, arguments))
            if result.ok and self._env.ctx is not None:
                self._write(self._env.ctx.book.save())
            return result

    def _write(self, saved: Path) -> None:
        before = self.path.stat()
        partial = self.path.with_name(f".{self.path.name}.spreadrl-tmp")
        shutil.copyfile(saved, partial)
        os.chmod(partial, before.st_mode & 0o7777)
        if (before.st_uid, before.st_gid) != (os.getuid(), os.getgid()):
            with contextlib.suppress(PermissionError):  # a harness's sandbox uid keeps it
                os.chown(partial, before.st_uid, before.st_gid)
        os.replace(partial, self.path)

    def overview(self) -> str:
        with self._lock:
            return self._env.overview()

    def close(self) -> None:
        with self._lock:
            self._env.close()
