"""The CLI's reporter: the library's lines, tables and progress drawn with rich.

What the library hands over is plain text and plain data; this is the one place
it gets colour, and the text must come out as written (brackets are not markup).
"""

from __future__ import annotations

import io

from rich.console import Console

from spreadrl.cli.console import RichReporter
from spreadrl.reporting import Table


def _reporter() -> tuple[RichReporter, Console]:
    console = Console(record=True, width=100, force_terminal=True, color_system="standard")
    return RichReporter(console), console


def test_lines_print_as_written_and_warnings_in_yellow():
    reporter, console = _reporter()
    reporter.line("pip install 'spreadrl[gpu]'")
    reporter.line("dropped 2 conversations", level="warning")
    assert console.export_text(clear=False).splitlines() == [
        "pip install 'spreadrl[gpu]'",
        "dropped 2 conversations",
    ]
    styled = console.export_text(styles=True)
    assert "\x1b[33mdropped " in styled  # yellow (the figures keep rich's highlighting)
    assert "\x1b[33mpip" not in styled


def test_a_table_keeps_its_cells_and_marks_alert_rows_red():
    reporter, console = _reporter()
    table = Table("oracle on [demo]", ("metric", "value"), justify=("left", "right"))
    table.add_row("stop reasons", "answer [x] 4")
    table.add_row("episode errors", "1", alert=True)
    reporter.table(table)
    text = console.export_text(clear=False)
    assert "oracle on [demo]" in text and "answer [x] 4" in text
    row = next(line for line in text.splitlines() if "episode errors" in line)
    assert row.rstrip().endswith("1 │")  # the figure right-aligned against the border
    styled = console.export_text(styles=True)
    assert "\x1b[31mepisode errors" in styled  # red
    assert "\x1b[31mstop reasons" not in styled


def test_progress_is_a_bar_with_count_and_status():
    buffer = io.StringIO()
    console = Console(file=buffer, width=100, force_terminal=True)
    reporter = RichReporter(console)
    with reporter.progress("eval", 4, status="pass -") as bar:
        bar.advance(2, status="pass 50.0%")
        bar.advance(2)
    shown = buffer.getvalue()
    assert "eval" in shown and "4/4" in shown and "pass 50.0%" in shown
    assert "━" in shown  # a bar, not just a line of text


def test_a_section_is_a_rule_with_its_title():
    reporter, console = _reporter()
    reporter.section("1. tasks [built-in]")
    (line,) = console.export_text().splitlines()
    assert "1. tasks [built-in]" in line and "─" in line
