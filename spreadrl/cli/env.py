"""`spreadrl env`: the Spreadsheet Gym's tool schemas and scripted-episode replay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from spreadrl.data.importers.common import is_xlsx_bytes_file
from spreadrl.data.sources import spreadsheet_tasks
from spreadrl.data.task import Task, load_tasks
from spreadrl.env.config import EnvConfig
from spreadrl.errors import SpreadrlError

app = typer.Typer(help="The Spreadsheet Gym: tool schemas, episode replay.", no_args_is_help=True)


@app.command("tools")
def tools(
    preset: str = typer.Option(
        "full", "--preset", help="minimal | full, or comma-separated tool names."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print the JSON schemas instead of a table."
    ),
) -> None:
    """Print the tools the model sees (Hermes/OpenAI function schemas).

    Examples:

      spreadrl env tools

      spreadrl env tools --preset minimal --json

      spreadrl env tools --preset write_range,inspect_range
    """
    from rich.table import Table

    from spreadrl.cli.console import cli_console
    from spreadrl.env.spreadsheet.tools import resolve_tools, signature

    chosen = resolve_tools(preset)
    if as_json:
        typer.echo(json.dumps([t.schema() for t in chosen], indent=2))
        return
    table = Table(title=f"Spreadsheet Gym tools ({preset})")
    table.add_column("tool", style="bold")
    table.add_column("arguments (? = optional)")
    table.add_column("description")
    for tool in chosen:
        table.add_row(tool.name, signature(tool).split("(", 1)[1][:-1], tool.description)
    cli_console().print(table)


def _find_task(ref: str, tasks_dir: Path | None, trajectory: Path) -> Task:
    """A task by id within --tasks DIR, or by folder (relative to cwd or the trajectory)."""
    if tasks_dir is not None:
        task_set = spreadsheet_tasks(tasks_dir)
        for task in task_set:
            if task.id == ref or task.folder.resolve() == (tasks_dir / ref).resolve():
                return task
        return task_set.get(ref)
    for folder in (Path(ref), trajectory.parent / ref):
        if (folder / "dataset.json").is_file():
            task_set = load_tasks(folder)
            if len(task_set) == 1:
                return task_set.tasks[0]
        if folder.is_dir() and (folder.parent / "dataset.json").is_file():
            for task in load_tasks(folder.parent):
                if task.folder.resolve() == folder.resolve():
                    return task
    if (trajectory.parent.parent / "dataset.json").is_file():  # a solution file in its task folder
        return load_tasks(trajectory.parent.parent).get(ref)
    raise SpreadrlError(
        f"{trajectory}: task {ref!r} is not a task folder; pass --tasks DIR to look up an id"
    )


def _load_trajectory(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SpreadrlError(f"{path}: cannot read the trajectory ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("calls"), list):
        raise SpreadrlError(f"{path}: expected {{'task': ..., 'case': 1, 'calls': [...]}}")
    if not isinstance(data.get("task"), str):
        raise SpreadrlError(f"{path}: 'task' must be a task folder or id (a string)")
    for i, call in enumerate(data["calls"]):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise SpreadrlError(f"{path}: calls[{i}] needs a 'name' and an 'arguments' object")
    return data


@app.command("replay")
def replay_command(
    trajectory: Path = typer.Argument(..., help="Trajectory JSON: {task, case, calls}."),
    tasks_dir: Path | None = typer.Option(
        None, "--tasks", help="Task set in which 'task' is an id: a folder or builtin:<split>."
    ),
    preset: str = typer.Option("full", "--preset", help="Tool preset or comma-separated names."),
    output: Path | None = typer.Option(
        None, "--output", help="Also keep the resulting workbook here."
    ),
    max_tool_calls: int = typer.Option(1000, "--max-tool-calls", help="Tool-call budget."),
) -> None:
    """Replay a scripted episode and print reward, observations and mismatches as JSON.

    The trajectory is {"task": "<task folder or id>", "case": 1, "calls": [{"name":
    "write_range", "arguments": {...}}, ...]}; synthesized tasks' reference solutions
    ({n}_{id}_solution.json) are in this format.

    Examples:

      spreadrl env replay traj.json --tasks data/tasks

      spreadrl env replay data/tasks/synth-0-00001/1_synth-0-00001_solution.json
    """
    from spreadrl.env.spreadsheet.episode import replay

    if output is not None:  # a folder in its place is one line before the episode runs
        from spreadrl.run_folder import check_output_file

        check_output_file(output, overwrite=True, flag="--output")
    data = _load_trajectory(trajectory)
    task = _find_task(data["task"], tasks_dir, trajectory)
    case = int(data.get("case", 1))
    config = EnvConfig(tools=preset, max_tool_calls=max_tool_calls)
    result, steps = replay(task, case, data["calls"], config=config, output_path=output)
    report = {
        "task": task.id,
        "case": case,
        "reward": result.reward,
        "passed": result.passed,
        "stop_reason": result.stop_reason,
        "tool_calls": result.tool_calls,
        "tool_errors": result.tool_errors,
        "steps": [
            {
                "name": call["name"],
                "ok": step.ok,
                "truncated": step.truncated,
                "observation": step.observation,
            }
            for call, step in zip(data["calls"], steps, strict=False)
        ],
        "mismatches": [
            {
                "sheet": m.sheet,
                "cell": m.cell,
                "expected": m.expected,
                "actual": m.actual,
                "reason": m.reason,
            }
            for m in result.mismatches
        ],
        "output_path": result.output_path,
    }
    typer.echo(json.dumps(report, indent=2, ensure_ascii=False, default=str))


def _check_user_workbook(path: Path) -> None:
    """Production mode edits this file in place: refuse anything but a readable .xlsx."""
    if path.suffix.lower() != ".xlsx" or not path.is_file():
        raise SpreadrlError(f"--workbook {path}: not an .xlsx file")
    if not is_xlsx_bytes_file(path):
        raise SpreadrlError(f"--workbook {path}: not a readable .xlsx workbook")


@app.command("serve")
def serve_command(
    tasks: str | None = typer.Option(
        None, "--tasks", help="Task set: a folder, or builtin:SPLIT (e.g. builtin:demo-test)."
    ),
    workbook: Path | None = typer.Option(
        None,
        "--workbook",
        help="Production mode: serve the tools over this .xlsx (saved after each call) "
        "instead of tasks.",
    ),
    tools: str = typer.Option("full", "--tools", help="Tool preset or comma-separated names."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8000, "--port", help="Port to listen on."),
    workers: int = typer.Option(
        2, "--workers", help="Gym worker processes shared by the sessions (0: in each session)."
    ),
    max_sessions: int = typer.Option(64, "--max-sessions", help="Concurrent sessions allowed."),
    max_tool_calls: int = typer.Option(20, "--max-tool-calls", help="Tool calls per episode."),
) -> None:
    """Serve the gym as an OpenEnv MCP environment (OpenEnv's own server).

    Each session is one episode at a time in its own folder; reset takes task_id
    (and case), else the set's next task; the gym's tools are MCP tools (list_tools,
    call_tool; also on /mcp), and the final_answer tool ends the episode with the
    checker's reward. Needs the openenv extra. See docs/environments.md.

    Examples:

      spreadrl env serve --tasks builtin:demo-test --tools write_range,inspect_range

      spreadrl env serve --tasks data/tasks --tools full --port 8001 --workers 4

      spreadrl env serve --workbook budget.xlsx --tools full
    """
    if workbook is not None:
        _check_user_workbook(workbook)  # before the openenv extra is imported
    from spreadrl.integrations.openenv_server import ServeOptions, serve

    config = EnvConfig(tools=tools, max_tool_calls=max_tool_calls)

    def announce() -> None:
        what = tasks if workbook is None else f"{workbook} (production mode)"
        typer.echo(f"serving {what} as an OpenEnv environment on http://{host}:{port}")

    options = ServeOptions(tasks, config, workers, max_sessions, workbook)
    serve(options, host, port, on_ready=announce)
