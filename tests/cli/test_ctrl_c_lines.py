"""Ctrl-C in a command that writes a task set: one line saying the output folder was left
as it was, exit 130, and the folder really is as it was (typer's own exit said nothing).

The interrupt is raised from inside the copy of a workbook, halfway through the work, as a
Ctrl-C landing there would raise it."""

from __future__ import annotations

import shutil

import pytest

from tests.cli.test_cli_mistakes import cli
from tests.cli.test_first_use import _snapshot

COMMANDS = {
    "import": ["data", "import", "--from", "spreadsheetbench", "SRC", "--out", "OUT"],
    "split": ["data", "split", "SRC", "--out", "OUT"],
    "filter": ["data", "filter", "SRC", "--out", "OUT"],
    "builtin": ["data", "builtin", "--split", "demo-test", "--out", "OUT"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_ctrl_c_while_writing_leaves_the_old_output_whole_and_says_so(
    command, tmp_path, monkeypatch, capsys
):
    src, out = tmp_path / "src", tmp_path / "out"
    assert (
        cli(monkeypatch, capsys, "data", "builtin", "--split", "demo-test", "--out", str(src))[0]
        == 0
    )
    argv = [{"SRC": str(src), "OUT": str(out)}.get(a, a) for a in COMMANDS[command]]
    code, _, err = cli(monkeypatch, capsys, *argv)  # a first, finished run: the old output
    assert code == 0, err
    before = _snapshot(out)
    assert before

    copies = []
    real_copy = shutil.copyfile

    def interrupted_copy(a, b, *args, **kwargs):
        copies.append(b)
        if len(copies) == 20:  # some workbooks staged, most not
            raise KeyboardInterrupt
        return real_copy(a, b, *args, **kwargs)

    monkeypatch.setattr(shutil, "copyfile", interrupted_copy)
    code, _, err = cli(monkeypatch, capsys, *argv, "--overwrite")
    monkeypatch.setattr(shutil, "copyfile", real_copy)

    assert len(copies) == 20  # stopped in the middle, not before or after the work
    assert code == 130
    assert "Traceback" not in err
    assert (
        err.strip().splitlines()[-1] == f"stopped: {out} was left as it was (nothing half-written)"
    )
    assert _snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "src"]  # no staging folder left
