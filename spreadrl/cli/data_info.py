"""`spreadrl data info`'s tables: a task set's summary (plain data, built by
:func:`spreadrl.data.info.summarize_tasks`) drawn with rich, here in cli/ where
the rendering lives."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table

from spreadrl.cli.console import plain


def _size(n: int) -> str:
    """A byte count as people read it (KiB, MiB, GiB)."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def render_summary(summary: dict[str, Any]) -> Group:
    """Rich renderables for a summary: an overview table, one table per breakdown, problems."""
    overview = Table(title=f"Task set {plain(summary['root'])}", show_header=False)
    overview.add_column("what", style="bold")
    overview.add_column("value", justify="right")
    overview.add_row("tasks", str(summary["tasks"]))
    overview.add_row("cases", str(summary["cases"]))
    sizes = summary["workbook_bytes"]
    overview.add_row("input workbooks", _size(sizes["input"]))
    overview.add_row("answer workbooks", _size(sizes["answer"]))
    overview.add_row("answer cells checked", str(summary["answer_cells"]))
    if summary["tasks_with_column_ranges"]:
        overview.add_row("tasks with column ranges", str(summary["tasks_with_column_ranges"]))
    if "input_cells" in summary:
        overview.add_row("non-empty input cells", str(summary["input_cells"]))
    parts: list[Any] = [overview]
    breakdowns = (
        ("instruction type", "by_instruction_type"),
        ("source", "by_source"),
        ("family", "by_family"),
        ("difficulty", "by_difficulty"),
        ("cases per task", "cases_per_task"),
    )
    for title, key in breakdowns:
        counts = summary[key]
        if not counts or list(counts) == ["-"]:
            continue
        table = Table(title=title)
        table.add_column(title)
        table.add_column("tasks", justify="right")
        for name, count in counts.items():
            table.add_row(plain(name), str(count))
        parts.append(table)
    if summary["problems"]:
        table = Table(title=f"{len(summary['problems'])} task(s) skipped", title_style="red")
        table.add_column("task")
        table.add_column("problem", overflow="fold")
        for problem in summary["problems"]:
            table.add_row(plain(problem["task_id"]), plain(problem["message"]))
        parts.append(table)
    return Group(*parts)
