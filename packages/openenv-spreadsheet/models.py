"""The environment's types: MCP's actions (``ListToolsAction``, ``CallToolAction``) and
observations, as openenv defines them; spreadrl's server adds ``text``, ``ok`` and ``info``."""

from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
)

__all__ = ["CallToolAction", "CallToolObservation", "ListToolsAction", "ListToolsObservation"]
