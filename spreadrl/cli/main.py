"""The ``spreadrl`` command line: thin typer commands over the library.

Subcommand modules import heavy libraries (torch, transformers, openpyxl)
inside their command functions so that ``spreadrl --help`` stays fast.
"""

from __future__ import annotations

import sys

import typer

from spreadrl import __version__
from spreadrl.cli import (
    bench,
    check,
    config,
    data,
    demo,
    env,
    eval,
    grpo,
    merge,
    model,
    plan,
    serve,
    sft,
)
from spreadrl.cli import view as view_cli
from spreadrl.cli.console import (
    cli_console,
    plain_help,
    print_error,
    quiet_third_party,
    typer_output_unwrapped,
)
from spreadrl.errors import RunStopped, SpreadrlError
from spreadrl.run_folder import full_disk

app = typer.Typer(
    name="spreadrl",
    help="Train and evaluate small language models as spreadsheet agents with RL.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)
app.add_typer(data.app, name="data")
app.add_typer(env.app, name="env")
app.add_typer(model.app, name="model")
app.add_typer(bench.app, name="bench")
app.add_typer(eval.app, name="eval")
app.add_typer(config.app, name="config")
app.command("check")(check.check)
app.command("sft")(sft.sft)
app.command("grpo")(grpo.grpo)
app.command("plan")(plan.plan)
app.command("merge")(merge.merge)
app.command("serve")(serve.serve)
app.command("demo")(demo.demo)
app.command("view")(view_cli.view)


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    lines = [f"spreadrl {__version__}", f"python {sys.version.split()[0]}"]
    for name in ("torch", "transformers", "peft", "datasets", "openpyxl", "ironcalc", "vllm"):
        try:
            lines.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            lines.append(f"{name} (not installed)")
    return "\n".join(lines)


@app.command("version")
def version_command() -> None:
    """Print the versions of spreadrl and its key dependencies (paste them into a bug report).

    Examples:

      spreadrl version
    """
    cli_console().print(_versions())


def _version_callback(value: bool) -> None:
    if value:
        cli_console().print(_versions())
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_version_callback,
        is_eager=True,
        help="Print versions and exit.",
    ),
    verbose: bool = typer.Option(
        False,
        "--verbose",
        "-v",
        envvar="SPREADRL_VERBOSE",
        help="Show third-party progress bars, warnings and logs (hidden by default).",
    ),
) -> None:
    """Train and evaluate small language models as spreadsheet agents with RL."""
    if not verbose:
        quiet_third_party()


plain_help(app)  # last: every command above shows its help text verbatim
typer_output_unwrapped()  # off a terminal, typer's usage errors and help wrap no line


def main() -> None:
    """Entry point: user errors become one red line and exit code 1, never a traceback;
    a run stopped by a signal after saving prints where, and exits 0."""
    try:
        app()
    except SpreadrlError as exc:
        print_error(str(exc))
        sys.exit(1)
    except RunStopped as stopped:  # a signal stopped training after saving (e.g. in the demo)
        if stopped.announce:
            cli_console(stderr=True).print(
                stopped.message, highlight=False, markup=False, soft_wrap=True
            )
        sys.exit(0)
    except OSError as exc:  # a full disk is the user's to fix: one line; any other, a bug
        why = full_disk(exc)
        if why is None:
            raise
        print_error(
            f"{why}; the command stopped there. Free space and run it again: an eval or a "
            "data sft-build goes on from the episodes it kept, training from its checkpoint"
        )
        sys.exit(1)
