"""A mistyped engine or backend name in any ``spreadrl bench`` command: one line, exit 1.

Runs the real entry point (``spreadrl.cli.main.main``). The commands are found
from the command tree, so a bench command that gains an ``--engine`` or
``--backend`` flag is covered without a new test.
"""

from __future__ import annotations

import sys

import pytest
import typer

from spreadrl.cli.main import app, main

NAME_FLAGS = ("--engine", "--backend")
# the choices each known flag must list (a flag not here must still say "choose")
CHOICES = {("recalc-fidelity", "--engine"): "ironcalc, libreoffice, hybrid"}


def _name_flags() -> list[tuple[str, str, int]]:
    """(bench command, flag, its required arguments) for every engine/backend flag."""
    bench = typer.main.get_command(app).commands["bench"]
    ctx = typer.Context(bench)
    found = []
    for name in sorted(bench.list_commands(ctx)):  # the group is lazy: look each one up
        command = bench.get_command(ctx, name)
        required = sum(1 for p in command.params if p.param_type_name == "argument" and p.required)
        for param in command.params:
            found += [(name, flag, required) for flag in param.opts if flag in NAME_FLAGS]
    return found


FLAGS = _name_flags()


def test_the_bench_commands_with_an_engine_flag_are_found():
    assert ("recalc-fidelity", "--engine", 1) in FLAGS  # the search finds what exists


@pytest.mark.parametrize(("command", "flag", "required"), FLAGS, ids=[f[0] for f in FLAGS])
def test_a_mistyped_engine_name_is_one_line_naming_the_flag_and_choices(
    command, flag, required, tmp_path, monkeypatch, capsys
):
    args = [str(tmp_path)] * required  # a folder for each required argument: never reached
    argv = ["spreadrl", "--verbose", "bench", command, *args, flag, "ironcalcc"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_info:
        main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 1, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {flag} 'ironcalcc'"), err
    assert CHOICES.get((command, flag), "choose") in lines[0]  # the choices, spelled out
