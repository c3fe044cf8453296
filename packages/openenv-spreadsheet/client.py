"""The light client: openenv's MCP tool client, nothing of spreadrl imported.

    async with SpreadsheetEnv(base_url="http://127.0.0.1:8000") as env:
        await env.reset(task_id="demo-test-4000-00000")
        print([t.name for t in await env.list_tools()])
        await env.call_tool("write_range", range="B13", values=[["=AVERAGE(B2:B11)"]])
        print(await env.call_tool("final_answer", answer="done"))  # "reward 1"
"""

from openenv.core.mcp_client import MCPToolClient


class SpreadsheetEnv(MCPToolClient):
    """An MCP client of the Spreadsheet Gym: ``reset`` over its session, tools on ``/mcp``."""
