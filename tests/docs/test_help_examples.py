"""Every command's ``--help`` has examples, and each example is a command line that parses.

Each example is parsed by the command it names, as the shell would pass it
(``shlex``): an unknown command, a misspelt flag, a missing required option or a bad
value fails here. They are parsed, not run (most train or serve a model at full
size); the README and docs blocks are the ones that run (test_docs_blocks.py).
"""

from __future__ import annotations

import re
import shlex

import pytest
import typer.main
from typer import _click as click  # typer 0.29 carries its own click
from typer._click.exceptions import UsageError

from spreadrl.cli.main import app

ROOT_COMMAND = typer.main.get_command(app)


def walk(group: click.Command, path: tuple[str, ...] = ()) -> list:
    """Every leaf command under ``group`` with its name path."""
    ctx = click.Context(group)
    out = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        if hasattr(command, "list_commands"):
            out += walk(command, (*path, name))
        else:
            out.append(((*path, name), command))
    return out


COMMANDS = walk(ROOT_COMMAND)


def examples(command: click.Command) -> list[str]:
    """The ``spreadrl ...`` lines after "Examples:" in the command's help, continuations joined."""
    parts = re.split(r"\bExamples?\b[^\n]*:\n", command.help or "", maxsplit=1)
    if len(parts) < 2:
        return []
    lines, pending = [], ""
    for raw in parts[1].splitlines():
        line = raw.strip().replace("\\\\", "\\")
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        found = re.search(r"(?:^|\s|-m )spreadrl\s", line)
        if found:
            lines.append(line[found.start() :].strip().removeprefix("-m ").strip())
    return lines


@pytest.mark.parametrize("path,command", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_command_has_an_example(path, command):
    assert examples(command), f"`spreadrl {' '.join(path)} --help` shows no example"


EXAMPLES = [(p, e) for p, c in COMMANDS for e in examples(c)]


@pytest.mark.parametrize("path,example", EXAMPLES, ids=[e for _, e in EXAMPLES])
def test_each_help_example_parses(path, example):
    words = shlex.split(example.split("  #")[0].split(" > ")[0])
    assert words[0] == "spreadrl"
    args = [w for w in words[1:] if w not in ("--verbose", "-v")]
    group: click.Command = ROOT_COMMAND
    ctx = click.Context(group, info_name="spreadrl")
    while hasattr(group, "list_commands"):
        name, args = args[0], args[1:]
        found = group.get_command(ctx, name)
        assert found is not None, f"{example}: no command {name!r}"
        group = found
        ctx = click.Context(group, info_name=name, parent=ctx)
    try:
        group.make_context(group.name or "", list(args), parent=ctx.parent)
    except UsageError as exc:
        pytest.fail(f"{example}: {exc.format_message()}")
    _recipes_exist(example, args)


def _recipes_exist(example: str, args: list[str]) -> None:
    """A recipe an example names is shipped (`spreadrl sft --help` named one that was not)."""
    from spreadrl.recipes import find_recipe

    for flag, value in zip(args, args[1:], strict=False):
        if flag in ("--config", "-c") and not value.startswith(("runs/", "my-")):
            find_recipe(value)  # raises ConfigError naming the recipe


def test_no_flag_shows_a_bool_type():
    from typer.testing import CliRunner

    for path, _ in COMMANDS:
        shown = CliRunner().invoke(app, [*path, "--help"], terminal_width=200).output
        assert "<bool>" not in shown, f"spreadrl {' '.join(path)} --help shows <bool>"
