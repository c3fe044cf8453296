"""What library code tells the person at the terminal, without rendering it.

Library modules log and raise; only ``spreadrl/cli`` renders (rich colours,
tables, live progress bars). What a recipe, an evaluation or a download has to
say while it runs (a step line, a table of results, a progress bar) goes
through the :class:`Reporter` its caller passes in. The CLI passes a rich one
(:class:`spreadrl.cli.console.RichReporter`); code that calls the library
directly (tests, notebooks, benchmarks) gets :class:`LogReporter`, which hands
the same text to :mod:`logging` and shows no bar. So the library never decides
how anything looks, and the same run prints alike from every caller.

The verbs are the few the call sites need, and no more: a line (plain text, or
a warning), a section heading, a table given as plain data, and a progress
context that is advanced. This module imports nothing from the layers above.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Literal, Protocol

Level = Literal["info", "warning"]
"""How a line is meant: news, or something the reader should act on (rich: yellow)."""

Unit = Literal["items", "bytes"]
"""What a progress bar counts: episodes, tasks (a count of a total), or bytes (sizes, speed)."""

Justify = Literal["left", "right"]


@dataclass
class Table:
    """A table as plain data: the caller decides the cells, the reporter how they look.

    ``justify`` holds one entry per column (figures are right-aligned; missing
    entries are left); ``alerts`` the indexes of rows that report a fault (rich:
    red). ``show_header`` False for a two-column list of names and values."""

    title: str
    columns: tuple[str, ...]
    rows: list[tuple[str, ...]] = field(default_factory=list)
    justify: tuple[Justify, ...] = ()
    alerts: set[int] = field(default_factory=set)
    show_header: bool = True

    def add_row(self, *cells: str, alert: bool = False) -> None:
        """Append a row (``alert``: it reports a fault)."""
        if alert:
            self.alerts.add(len(self.rows))
        self.rows.append(cells)


class Progress(Protocol):
    """A running progress bar, advanced as work is done."""

    def advance(self, amount: int = 1, *, status: str | None = None) -> None:
        """``amount`` more done; ``status`` (optional) replaces the short text beside the bar."""
        ...


class Reporter(Protocol):
    """Where a library function's progress and result lines go (see the module docstring)."""

    def line(self, text: str, *, level: Level = "info") -> None:
        """One line of plain text, printed as written (brackets are not markup)."""
        ...

    def section(self, title: str) -> None:
        """A heading that opens the next part of a long run (the demo's stages)."""
        ...

    def table(self, table: Table) -> None:
        """A table of results."""
        ...

    def progress(
        self,
        label: str,
        total: int | None,
        *,
        unit: Unit = "items",
        done: int = 0,
        status: str = "",
        keep: bool = True,
    ) -> AbstractContextManager[Progress]:
        """A bar over ``total`` (None: unknown) starting at ``done``, closed when the
        ``with`` block ends; ``keep`` False: it disappears then (a download's bar)."""
        ...


class _NoBar:
    def advance(self, amount: int = 1, *, status: str | None = None) -> None:
        """Nothing to draw."""


@contextmanager
def _no_bar() -> Iterator[Progress]:
    yield _NoBar()


@dataclass(frozen=True)
class LogReporter:
    """The library's default: lines and tables go to ``logger`` (INFO, or WARNING for
    warnings), and progress is not shown. A script without logging set up sees the
    warnings only (Python's last-resort handler), which is what a library owes it."""

    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("spreadrl"))

    def line(self, text: str, *, level: Level = "info") -> None:
        self.logger.log(logging.WARNING if level == "warning" else logging.INFO, "%s", text)

    def section(self, title: str) -> None:
        self.logger.info("== %s", title)

    def table(self, table: Table) -> None:
        self.logger.info("%s", "\n".join(table_lines(table)))

    def progress(
        self,
        label: str,
        total: int | None,
        *,
        unit: Unit = "items",
        done: int = 0,
        status: str = "",
        keep: bool = True,
    ) -> AbstractContextManager[Progress]:
        return _no_bar()


def table_lines(table: Table) -> list[str]:
    """The table as plain text lines, columns padded (for logs and plain output)."""
    cells = [table.columns, *table.rows] if table.show_header else list(table.rows)
    count = max((len(row) for row in cells), default=0)
    widths = [max(len(row[i]) for row in cells if i < len(row)) for i in range(count)]
    lines = [table.title] if table.title else []
    for row in cells:
        parts = []
        for i, cell in enumerate(row):
            right = i < len(table.justify) and table.justify[i] == "right"
            parts.append(cell.rjust(widths[i]) if right else cell.ljust(widths[i]))
        lines.append("  ".join(parts).rstrip())
    return lines
