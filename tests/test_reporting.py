"""The library's default reporter: lines and tables to the log, no progress drawn.

Library code says what it does through a spreadrl.reporting.Reporter; called
outside the CLI (a script, a notebook, a benchmark) it must not print, only log.
"""

from __future__ import annotations

import logging

from spreadrl.reporting import LogReporter, Table, table_lines


def test_lines_go_to_the_log_verbatim_with_their_level(caplog, capsys):
    reporter = LogReporter()
    with caplog.at_level(logging.INFO, logger="spreadrl"):
        reporter.line("step 1/2  reward [+0.5]")
        reporter.line("dropped 3 conversations", level="warning")
        reporter.section("4. SFT cold start")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "step 1/2  reward [+0.5]"),
        (logging.WARNING, "dropped 3 conversations"),
        (logging.INFO, "== 4. SFT cold start"),
    ]
    assert capsys.readouterr() == ("", "")  # the library printed nothing


def test_a_table_is_logged_as_aligned_text(caplog):
    table = Table("pass@1 by family", ("family", "episodes", "pass@1"), justify=("left", "right"))
    table.add_row("aggregate", "12", "50.0%")
    table.add_row("lookup", "4", "100.0%", alert=True)
    assert table.alerts == {1}
    assert table_lines(table) == [
        "pass@1 by family",
        "family     episodes  pass@1",
        "aggregate        12  50.0%",
        "lookup            4  100.0%",
    ]
    with caplog.at_level(logging.INFO, logger="spreadrl"):
        LogReporter().table(table)
    assert caplog.records[0].getMessage() == "\n".join(table_lines(table))


def test_progress_draws_nothing(capsys, caplog):
    with caplog.at_level(logging.DEBUG), LogReporter().progress("eval", 3, status="-") as bar:
        for _ in range(3):
            bar.advance(status="pass 50%")
    assert capsys.readouterr() == ("", "")
    assert not caplog.records
