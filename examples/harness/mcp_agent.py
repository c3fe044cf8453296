"""A spreadsheet agent that uses spreadrl's own tools over MCP: the openai client and fastmcp's.

Nothing here imports spreadrl. It lists the tools the MCP server offers, gives them to
the model as OpenAI tools and runs the model's calls there. Train it with the gym's
tools served to it (docs/harness.md; fastmcp comes with spreadrl's openenv extra):

    spreadrl grpo --config configs/tiny-cpu.yaml rollout.harness_mcp=true \
        rollout.harness=examples/harness/mcp_agent.py:run
"""

import asyncio
import json
import os

import openai
from fastmcp import Client

PROMPT = (
    "You edit an Excel workbook with the tools below. Look at the cells you need, write "
    "the result where the task asks, then reply DONE with no tool call."
)


def openai_tool(tool):
    """An MCP tool as an OpenAI function tool (its JSON schema unchanged)."""
    schema = {"name": tool.name, "description": tool.description or ""}
    return {"type": "function", "function": {**schema, "parameters": tool.inputSchema}}


async def play(instruction, base_url, model, mcp_url, max_turns):
    llm = openai.AsyncOpenAI(base_url=base_url, api_key="unused")
    async with Client(mcp_url) as mcp:
        tools = [openai_tool(tool) for tool in await mcp.list_tools()]
        messages = [{"role": "system", "content": PROMPT}, {"role": "user", "content": instruction}]
        for _ in range(max_turns):
            try:
                reply = await llm.chat.completions.create(
                    model=model, messages=messages, tools=tools
                )
            except openai.RateLimitError:  # the trainer's budget for this episode is spent
                return
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                return
            for call in message.tool_calls:
                try:
                    arguments = json.loads(call.function.arguments or "{}")
                    result = await mcp.call_tool(
                        call.function.name, arguments, raise_on_error=False
                    )
                    text = "\n".join(part.text for part in result.content if hasattr(part, "text"))
                except Exception as exc:  # the model's mistake: tell it, as any agent would
                    text = f"error: {exc}"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})


def run(instruction, workbook, base_url, model, mcp_url, max_turns=8):
    """The tools edit ``workbook`` (the server at ``mcp_url`` holds it); return when done."""
    asyncio.run(play(instruction, base_url, model, mcp_url, max_turns))


if __name__ == "__main__":  # as a command: rollout.harness="python mcp_agent.py"
    env = os.environ
    run(
        env["SPREADRL_INSTRUCTION"],
        env["SPREADRL_WORKBOOK"],
        env["OPENAI_BASE_URL"],
        env["SPREADRL_MODEL"],
        env["SPREADRL_MCP_URL"],
    )
