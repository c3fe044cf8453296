"""typer's own output follows the CLI's rule: off a terminal no line is wrapped.

A usage error (an unknown option, an extra argument) and ``--help`` are typer's,
drawn in boxes by rich. Off a terminal (a pipe, a log file, CI) they used to be
laid out at 80 columns, cutting a path across three lines of a box; now each box
is as wide as its longest line. On a terminal nothing changed: the boxes take the
terminal's width. Each case runs ``python -m spreadrl`` in a real process with
its output a pipe, as a shell pipe or a scheduler runs it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

LONG = "/data/" + "a-folder-name-long-enough-to-be-cut/" * 4 + "set"  # 153 characters
STYLE = re.compile(r"\x1b\[[0-9;]*m")  # a terminal's bold and colours


def spreadrl(*args: str, terminal: bool = False) -> subprocess.CompletedProcess[str]:
    """``python -m spreadrl args`` with stdout and stderr pipes; rich told whether they are
    a terminal (``TTY_COMPATIBLE``), 80 columns wide when they are (its styles dropped
    from the output here)."""
    env = {k: v for k, v in os.environ.items()}
    for key in ("COLUMNS", "TERMINAL_WIDTH", "FORCE_COLOR", "PY_COLORS", "NO_COLOR"):
        env.pop(key, None)
    env["TTY_COMPATIBLE"] = "1" if terminal else "0"
    if terminal:
        env["COLUMNS"] = "80"
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-m", "spreadrl", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=120,
    )
    result.stdout, result.stderr = STYLE.sub("", result.stdout), STYLE.sub("", result.stderr)
    return result


def test_a_usage_error_keeps_its_150_character_path_on_one_line():
    assert len(LONG) > 150
    result = spreadrl("version", LONG)
    assert result.returncode == 2  # typer's usage error (spreadrl's own errors exit 1)
    lines = result.stderr.splitlines()
    assert any("Got unexpected extra argument" in line and LONG in line for line in lines), (
        result.stderr
    )
    box = [line for line in lines if line[:1] in "╭│╰"]
    assert len({len(line) for line in box}) == 1, box  # still a box: its lines align


def test_help_into_a_file_wraps_no_option_help():
    result = spreadrl("grpo", "--help")
    assert result.returncode == 0, result.stderr
    resume = "Continue the run in output_dir with changed steps, epochs, logging or checkpoint"
    line = next(line for line in result.stdout.splitlines() if resume in line)
    assert line.rstrip(" │").endswith("need a new output_dir)."), result.stdout


def test_on_a_terminal_the_boxes_keep_its_width():
    result = spreadrl("version", LONG, terminal=True)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert not any(LONG in line for line in lines), result.stderr  # wrapped, for reading
    assert max(len(line) for line in lines) <= 80, result.stderr


@pytest.mark.parametrize("terminal", [False, True])
def test_a_run_error_is_one_line_and_exits_1(tmp_path, terminal):
    """spreadrl's own errors: one ``error:`` line, whole on a terminal too (soft wrap)."""
    missing = tmp_path / LONG.strip("/")
    result = spreadrl("data", "info", str(missing), terminal=terminal)
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("error: ") and str(missing) in result.stderr.splitlines()[0]
