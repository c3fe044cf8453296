"""Text the user reads keeps its brackets: help texts, error lines, install hints.

rich reads ``[word]`` as a style tag and drops it: "pip install 'spreadrl[gpu]'"
printed as markup reads "pip install 'spreadrl'". These tests walk every
command's help and every install hint in the package, and fail on a lost extra.
"""

from __future__ import annotations

import ast
import io
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.rich_utils
from rich.console import Console
from typer.main import get_command
from typer.testing import CliRunner

from spreadrl.cli.console import plain, print_error
from spreadrl.cli.main import app, main

PACKAGE = Path(__file__).resolve().parents[2] / "spreadrl"
# a bracketed word with its neighbours, no spaces inside: 'spreadrl[bench]'. or [gpu]
BRACKETED = re.compile(r"[\w'.:/-]*\[[A-Za-z][^\]\s]*\][\w'.:/-]*")
EXTRA = re.compile(r"spreadrl\[[a-z,-]+\]")


def _commands(command: Any, path: tuple[str, ...] = ()):
    yield path, command
    if hasattr(command, "list_commands"):  # a group, through its lookup: bench's is lazy
        ctx = typer.Context(command)
        for name in command.list_commands(ctx):
            yield from _commands(command.get_command(ctx, name), (*path, name))


def _help_sources(command: Any) -> str:
    """The help texts typer renders for ``command``, as written in the source."""
    texts = [command.help, command.short_help, command.epilog]
    texts += [getattr(p, "help", None) for p in command.params]
    # the commands escape their texts when built: undo that to get the source text back
    return "\n".join(t.replace("\\[", "[") for t in texts if t)


ALL_COMMANDS = list(_commands(get_command(app)))


def test_the_walk_finds_every_group_and_command():
    paths = {" ".join(path) for path, _ in ALL_COMMANDS}
    assert {"", "bench", "bench trl", "eval", "eval compare", "data", "grpo", "sft"} <= paths
    assert len(paths) > 30


@pytest.mark.parametrize(
    ("path", "command"), ALL_COMMANDS, ids=[" ".join(p) or "spreadrl" for p, _ in ALL_COMMANDS]
)
def test_help_keeps_every_bracketed_word(path, command, monkeypatch):
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", 500)  # one line per text: no wrapping
    result = CliRunner().invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    for word in BRACKETED.findall(_help_sources(command)):
        assert word in result.output, f"`spreadrl {' '.join(path)} --help` lost {word!r}"


def test_bench_trl_help_names_the_bench_extra(monkeypatch):
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", 500)
    result = CliRunner().invoke(app, ["bench", "trl", "--help"])
    assert "pip install 'spreadrl[bench]'" in result.output


def _install_hints() -> list[tuple[str, str]]:
    """(file:line, text) of every string literal in the package holding ``pip install``."""
    hints = []
    for file in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(file.read_text(), str(file))):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and "pip install" in text:
                hints.append((f"{file.relative_to(PACKAGE.parent)}:{node.lineno}", text))
    return hints


INSTALL_HINTS = _install_hints()


def test_the_package_has_install_hints_with_extras():
    with_extra = [where for where, text in INSTALL_HINTS if EXTRA.search(text)]
    assert len(with_extra) >= 6, INSTALL_HINTS  # gpu, serve x2, qwen, recalc, bench, tracking


@pytest.mark.parametrize(("where", "text"), INSTALL_HINTS, ids=[w for w, _ in INSTALL_HINTS])
def test_every_install_hint_prints_with_its_extra(where, text):
    out = io.StringIO()
    print_error(text, Console(file=out, width=1000))
    for extra in EXTRA.findall(text):
        assert extra in out.getvalue(), f"{where}: the error line lost {extra!r}"


def test_markup_would_have_eaten_the_extra():
    """The failure the tests above guard against is real: rich markup drops the extra."""
    out = io.StringIO()
    Console(file=out, width=1000).print("pip install 'spreadrl[gpu]'")
    assert "spreadrl[gpu]" not in out.getvalue()
    out = io.StringIO()
    Console(file=out, width=1000).print(f"[red]x[/] {plain('spreadrl[gpu]')}")
    assert "spreadrl[gpu]" in out.getvalue()


def test_the_vllm_startup_error_keeps_the_gpu_extra(tmp_path, monkeypatch, capsys):
    """End to end through the CLI's error handler: one line, the extra intact, exit 1."""
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm fails, installed or not
    argv = ["spreadrl", "eval", "--backend", "vllm", "--model", str(tmp_path / "m")]
    argv += ["--tasks", "builtin:demo-test", "--out", str(tmp_path / "run")]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert "pip install 'spreadrl[gpu]'" in err
    assert "Traceback" not in err
