"""`spreadrl view RUN_DIR`: a local web page with a run's curves, eval reports and trajectories."""

from __future__ import annotations

from pathlib import Path

import typer

from spreadrl.cli.console import plain
from spreadrl.errors import MissingDependencyError, SpreadrlError

EXAMPLES = """
Examples:

  spreadrl view runs/demo                  # the demo: SFT + GRPO curves, both evals, trajectories

  spreadrl view runs/grpo --port 8401

Then open http://127.0.0.1:8400/view/ in a browser.

It reads metrics.jsonl, trajectories.jsonl and report.json in RUN_DIR and its sub-folders.

Reload the page to see a run that is still writing.
"""


def view(
    run_dir: Path = typer.Argument(..., help="A run folder (or a folder of runs, like runs/demo)."),
    host: str = typer.Option("127.0.0.1", help="Interface to listen on (0.0.0.0 for all)."),
    port: int = typer.Option(8400, min=0, max=65535, help="TCP port."),
) -> None:
    from spreadrl.cli.console import cli_console

    if not run_dir.is_dir():
        raise SpreadrlError(f"{run_dir}: not a folder; pass a run folder such as runs/demo")
    try:
        import uvicorn  # noqa: F401  # the serve extra, checked before anything starts

        from spreadrl.serve.view import create_view_app, find_runs
    except ImportError as exc:
        raise MissingDependencyError(
            f"spreadrl view needs FastAPI and uvicorn ({exc.name} is missing): "
            "pip install 'spreadrl[serve]'"
        ) from exc
    runs = find_runs(run_dir)
    if not runs:
        raise SpreadrlError(
            f"{run_dir}: no metrics.jsonl, trajectories.jsonl or report.json here or in its "
            "sub-folders; point at a training or eval output folder"
        )
    from spreadrl.serve.listen import bind, serve_on, url_of

    sock = bind(host, port)  # a taken port: one error line, and no URL printed
    console = cli_console()
    console.print(
        f"[bold]spreadrl view[/] {plain(run_dir)}: {len(runs)} run folder(s): "
        f"{plain(', '.join(runs))}"
    )
    console.print(f"open [bold]{plain(url_of(sock, '/view/'))}[/]  (Ctrl-C to stop)")
    serve_on(sock, create_view_app(run_dir), log_level="warning")


view.__doc__ = "Look at a run: training curves, eval reports and trajectories.\n" + EXAMPLES
