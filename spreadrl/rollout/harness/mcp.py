"""The gym's tools over MCP for harness episodes (``rollout.harness_mcp``).

With the switch on, the capturing endpoint also serves MCP (streamable HTTP,
stateless, JSON replies) at ``/s/<key>/mcp``, beside the episode's
``/s/<key>/v1``: the same loopback port and relay, so a sandboxed harness needs no
other network. Its tools are the recipe's (``env.tools``, the schemas the built-in
loop offers), built by :func:`spreadrl.env.spreadsheet.mcp.gym_server` as ``spreadrl env
serve`` builds its own; a call runs on the episode named by the URL's key, in a
:class:`spreadrl.env.spreadsheet.mcp.UserWorkbook` over that episode's private workbook (the
file the harness gets as ``workbook``): the gym's tools, budgets
(``env.max_tool_calls``) and path rules, the file written after each call that
succeeds. The gym opens the file at the episode's first MCP call.

:class:`EpisodeTools` counts each episode's calls and errors, as the gym counts
them in the built-in loop; the episode runner makes them the trajectory's
``tool_calls`` and ``tool_errors``.

fastmcp comes with the ``openenv`` extra; it is imported only when the switch is
on, and :func:`require_fastmcp` says so in one line before any episode starts.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spreadrl.env.config import EnvConfig
from spreadrl.errors import ConfigError

MCP_PATH = "/mcp"
"""Where an episode's MCP server answers, under its session's ``/s/<key>``."""
WORKDIR = ".gym"
"""The gym's own folder for an episode's MCP calls, inside the episode folder."""


def require_fastmcp() -> None:
    """A :class:`ConfigError` when fastmcp (the ``openenv`` extra) cannot be imported."""
    try:
        import fastmcp  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            "rollout.harness_mcp serves the gym's tools over MCP, which needs fastmcp: "
            "pip install 'spreadrl[openenv]'"
        ) from exc


@dataclass
class _Episode:
    workbook: Path
    book: Any = None  # the UserWorkbook, opened at the first call
    calls: int = 0
    errors: int = 0
    lock: threading.Lock | None = None


class EpisodeTools:
    """One rollout's MCP server over its episodes' workbooks (a session key each)."""

    def __init__(self, env: EnvConfig) -> None:
        require_fastmcp()
        from spreadrl.env.spreadsheet.episode import SpreadsheetEnv
        from spreadrl.env.spreadsheet.mcp import gym_server

        self.env = env
        self.schemas = SpreadsheetEnv(env).schemas  # a misspelt tool fails here, once
        self.server = gym_server("spreadrl-harness", self.schemas, self._call)
        self._episodes: dict[str, _Episode] = {}
        self._lock = threading.Lock()

    def app(self) -> Any:
        """The ASGI app to mount at ``/s/{key}`` (its lifespan runs the MCP sessions)."""
        return self.server.http_app(path=MCP_PATH, stateless_http=True, json_response=True)

    def open(self, key: str, workbook: Path) -> None:
        """Serve the tools to session ``key`` on ``workbook`` (the episode's own file)."""
        with self._lock:
            self._episodes[key] = _Episode(Path(workbook), lock=threading.Lock())

    def close(self, key: str) -> tuple[int, int]:
        """Stop serving ``key`` (a call in progress finishes first); its calls and errors."""
        with self._lock:
            episode = self._episodes.pop(key, None)
        if episode is None:
            return 0, 0
        assert episode.lock is not None
        with episode.lock:
            if episode.book is not None:
                episode.book.close()
            return episode.calls, episode.errors

    def _call(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """A tool call from the MCP server, on the episode its URL names."""
        with self._lock:
            episode = self._episodes.get(_session_key())
        if episode is None:
            return "Error: no such episode (it is over)", False
        assert episode.lock is not None
        with episode.lock:
            episode.calls += 1
            try:
                if episode.book is None:
                    from spreadrl.env.spreadsheet.mcp import UserWorkbook

                    root = episode.workbook.parent / WORKDIR
                    episode.book = UserWorkbook(episode.workbook, self.env, workdir_root=root)
            except Exception as exc:  # the harness left no workbook the gym can open
                episode.errors += 1
                return f"Error: the gym cannot open the episode's workbook ({exc})", False
            result = episode.book.call(name, arguments)
            episode.errors += 0 if result.ok else 1
            return result.observation, result.ok


def _session_key() -> str:
    """The session key of the MCP request being served (its URL's ``/s/<key>``)."""
    from fastmcp.server.dependencies import get_http_request

    request = get_http_request()
    key = request.path_params.get("key")
    if key is None:  # the path as sent: /s/<key>/mcp
        parts = request.url.path.strip("/").split("/")
        key = parts[1] if len(parts) > 2 and parts[0] == "s" else ""
    return str(key)
