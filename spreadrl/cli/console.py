"""A clean console: spreadrl's own rich output, and third-party noise only with ``--verbose``.

Also the one output path for text that is not markup. rich reads ``[word]`` as
a style tag and drops it, so "pip install 'spreadrl[gpu]'" printed as markup
reads "pip install 'spreadrl'". Error messages go through :func:`print_error`
(printed verbatim), values put into a markup line go through :func:`plain`,
and help texts through :func:`plain_help` (typer parses them as markup too).

transformers prints a progress bar for every model load and save ("Loading
weights", "Writing model shards"), huggingface_hub and datasets one per file,
and several libraries emit FutureWarnings on every run; in ``make run`` they
buried the demo's own lines. ``quiet_third_party`` silences them for this
process and the worker processes it starts (through environment variables,
which children inherit). Variables the user set are left alone.

Not silenced: errors, spreadrl's own warnings and log records, and anything a
library writes straight to the terminal from native code.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import typer
import typer.rich_utils
from rich import progress as bars
from rich.console import Console, RenderableType
from rich.markup import escape
from rich.table import Table as RichTable
from typer.core import TyperCommand, TyperGroup

from spreadrl.reporting import Level, Progress, Table, Unit

# environment variables read by the libraries when they are imported (here or in workers)
QUIET_ENV = {
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # huggingface_hub, and transformers' own bars
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "TOKENIZERS_PARALLELISM": "false",  # its fork warning
    "PYTHONWARNINGS": "ignore::FutureWarning,ignore::DeprecationWarning,ignore::UserWarning",
    "WANDB_SILENT": "true",
}
NOISY_LOGGERS = ("transformers", "huggingface_hub", "datasets", "peft", "accelerate", "torch")
NOISY_WARNINGS = (FutureWarning, DeprecationWarning, UserWarning)


def quiet_third_party() -> None:
    """Silence third-party progress bars, warnings and info logs (see the module docstring)."""
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    for category in NOISY_WARNINGS:
        warnings.filterwarnings("ignore", category=category)
    warnings.filterwarnings("default", module=r"spreadrl\.")  # ours stay visible
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    # libraries imported before this call read their settings already: tell them directly
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()


def cli_console(*, stderr: bool = False, width: int | None = None) -> Console:
    """The CLI's rich console: wrapped for reading on a terminal, one line per message off one.

    Off a terminal (a pipe, ``| tee log``, a scheduler collecting stdout, CI, a
    test's captured output) rich would still hard-wrap every line at 80 columns
    (or ``COLUMNS``), cutting a printed path across lines, so ``grep`` and
    copy-paste miss it. git, pip and pytest never wrap output that does not go to
    a terminal; neither does this console there: it soft-wraps (each message
    stays one line, however long). Tables and rules still take their width from
    ``COLUMNS`` (or 80). ``width`` fixes the width on a terminal and off it.
    """
    console = Console(stderr=stderr, width=width)
    console.soft_wrap = not console.is_terminal
    return console


UNWRAPPED_WIDTH = 10_000
"""The widest line typer's help and error panels are laid out for off a terminal."""


class _UnwrappedConsole(Console):
    """typer's console off a terminal: each panel exactly as wide as its longest line.

    rich lays a panel or table out at the console's width, so a wide console alone
    would draw every box thousands of columns wide; and rich cannot measure typer's
    option rows (a ``Columns`` measures as any width). So each renderable is laid out
    at the narrowest width that wraps none of its lines: the fewest lines it takes
    at :data:`UNWRAPPED_WIDTH`, found by bisection (a few renders of a help panel).
    """

    def print(self, *objects: object, **kwargs: object) -> None:  # rich's signature, passed on
        if len(objects) == 1 and kwargs.get("width") is None and not isinstance(objects[0], str):
            kwargs["width"] = self._unwrapped_width(objects[0])  # type: ignore[arg-type]
        super().print(*objects, **kwargs)  # type: ignore[arg-type]

    def _unwrapped_width(self, renderable: RenderableType) -> int:
        def lines(width: int) -> int:
            options = self.options.update_width(width)
            return len(self.render_lines(renderable, options, pad=False))

        fewest = lines(self.width)
        low, high = 1, self.width
        while low < high:
            mid = (low + high) // 2
            low, high = (low, mid) if lines(mid) <= fewest else (mid + 1, high)
        return low


_typer_console = typer.rich_utils._get_rich_console


def _typer_console_unwrapped(stderr: bool = False) -> Console:
    console = _typer_console(stderr=stderr)
    # a terminal as cli_console sees one (typer also takes GitHub Actions' log for one);
    # TERMINAL_WIDTH, typer's own setting, is kept
    terminal = cli_console(stderr=stderr).is_terminal
    if terminal or typer.rich_utils.MAX_WIDTH is not None:
        return console
    console.__class__ = _UnwrappedConsole  # typer's console (its theme), laid out unwrapped
    console.width = UNWRAPPED_WIDTH
    console.soft_wrap = True  # its plain lines ("Try 'spreadrl grpo --help' for help.")
    return console


def typer_output_unwrapped() -> None:
    """typer's own output (usage errors, ``--help``) follows :func:`cli_console`'s rule.

    On a terminal it is unchanged: boxes at the terminal's width, text wrapped in
    them. Off one (``--help > file``, a usage error in CI's log) no line is cut:
    each box is as wide as its longest line, so a path or value in an error, a
    default or an example stays whole. typer makes every console it prints with
    in ``typer.rich_utils._get_rich_console``; that is the one place this changes.
    """
    typer.rich_utils._get_rich_console = _typer_console_unwrapped


def plain(value: object) -> str:
    """``value`` as text to put inside a markup string: its brackets are printed, not parsed."""
    return escape(str(value))


@contextmanager
def said_on_ctrl_c(line: str | Callable[[], str]) -> Iterator[None]:
    """A Ctrl-C inside prints ``line`` (what the stop left behind; a callable is asked then)
    and exits 130 as an interrupted command does: typer's own exit says nothing, and a
    user who stopped a command wants to know whether their folder is whole."""
    try:
        yield
    except KeyboardInterrupt:
        text = line() if callable(line) else line
        cli_console(stderr=True).print(text, markup=False, highlight=False)
        raise typer.Exit(130) from None


def left_as_it_was(out: object) -> str:
    """The line of a command that writes ``out`` in a staging folder and renames it last."""
    return f"stopped: {out} was left as it was (nothing half-written)"


def print_error(message: str, console: Console | None = None) -> None:
    """The CLI's one error line: a red ``error:`` prefix, then ``message`` verbatim (no markup)."""
    console = console or cli_console(stderr=True)
    console.print(f"[bold red]error:[/] {plain(message)}", highlight=False, soft_wrap=True)


def _escape_help(command: TyperCommand | TyperGroup) -> None:
    for owner in (command, *command.params):
        for attr in ("help", "short_help", "epilog"):
            text = getattr(owner, attr, None)
            if isinstance(text, str):
                setattr(owner, attr, escape(text))
    for param in command.params:
        _no_flag_type(param)


def _no_flag_type(param: object) -> object:
    """A flag takes no value: show no ``<bool>`` type beside it (typer shows one)."""
    if getattr(param, "is_flag", False) and not getattr(param, "count", False):
        param.metavar = ""  # type: ignore[attr-defined]  # typer shows a metavar when set
    return param


class PlainHelpCommand(TyperCommand):
    """A typer command whose help texts are shown as written (brackets kept)."""

    def __init__(self, *args: object, **kwargs: object) -> None:  # typer's, passed on
        super().__init__(*args, **kwargs)
        _escape_help(self)

    def get_help_option(self, ctx: typer.Context) -> object:  # typer's own option class
        return _no_flag_type(super().get_help_option(ctx))


class PlainHelpGroup(TyperGroup):
    """A typer group whose help texts are shown as written (brackets kept)."""

    def __init__(self, *args: object, **kwargs: object) -> None:  # typer's, passed on
        super().__init__(*args, **kwargs)
        _escape_help(self)

    def get_help_option(self, ctx: typer.Context) -> object:  # typer's own option class
        return _no_flag_type(super().get_help_option(ctx))


def plain_help(app: typer.Typer) -> typer.Typer:
    """Make every command and group under ``app`` print its help text verbatim.

    typer's rich help renders docstrings and option help as rich markup, so an
    install hint such as "pip install 'spreadrl[bench]'" lost its extra. The
    panels stay; only the texts are escaped, once, when typer builds the commands.
    Call it after every subcommand is registered.
    """
    app.info.cls = PlainHelpGroup
    for command in app.registered_commands:
        command.cls = PlainHelpCommand
    for group in app.registered_groups:
        own = group.typer_instance.info.cls if group.typer_instance is not None else None
        # a group class of its own (bench's lazy one) is already a PlainHelpGroup
        own_is_plain = isinstance(own, type) and issubclass(own, PlainHelpGroup)
        group.cls = own if own_is_plain else PlainHelpGroup
        if group.typer_instance is not None:
            plain_help(group.typer_instance)
    return app


class RichReporter:
    """The CLI's :class:`spreadrl.reporting.Reporter`: the library's lines, tables and
    progress bars drawn on a rich console (the library itself renders nothing).

    Lines are printed as written (no markup: a path with brackets keeps them);
    warnings in yellow; alert rows of a table in red."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or cli_console()

    def line(self, text: str, *, level: Level = "info") -> None:
        style = "yellow" if level == "warning" else None
        self.console.print(text, markup=False, style=style)

    def section(self, title: str) -> None:
        self.console.rule(f"[bold]{plain(title)}")

    def table(self, table: Table) -> None:
        self.console.print(rich_table(table))

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
        return _rich_bar(self.console, label, total, unit, done, status, keep)


def rich_table(table: Table) -> RichTable:
    """A :class:`spreadrl.reporting.Table` as a rich table (cells printed as written)."""
    out = RichTable(title=plain(table.title), show_header=table.show_header)
    for i, name in enumerate(table.columns):
        right = i < len(table.justify) and table.justify[i] == "right"
        out.add_column(plain(name), justify="right" if right else "left")
    for i, row in enumerate(table.rows):
        out.add_row(*(plain(cell) for cell in row), style="red" if i in table.alerts else None)
    return out


class _RichBar:
    def __init__(self, bar: bars.Progress, task: bars.TaskID) -> None:
        self.bar, self.task = bar, task

    def advance(self, amount: int = 1, *, status: str | None = None) -> None:
        if status is None:
            self.bar.advance(self.task, amount)
        else:
            self.bar.update(self.task, advance=amount, status=status)


@contextmanager
def _rich_bar(
    console: Console, label: str, total: int | None, unit: Unit, done: int, status: str, keep: bool
) -> Iterator[Progress]:
    """Counts: label, bar, done/total, status, time left; bytes: bar, size, speed."""
    columns: tuple[bars.ProgressColumn, ...]
    if unit == "bytes":
        columns = (bars.BarColumn(), bars.DownloadColumn(), bars.TransferSpeedColumn())
    else:
        columns = (
            bars.TextColumn(f"[bold]{plain(label)}"),
            bars.BarColumn(),
            bars.MofNCompleteColumn(),
            bars.TextColumn("{task.fields[status]}", markup=False),
            bars.TimeRemainingColumn(),
        )
    with bars.Progress(*columns, console=console, transient=not keep) as bar:
        yield _RichBar(bar, bar.add_task(label, total=total, completed=done, status=status))
