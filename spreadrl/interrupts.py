"""Ctrl-C held until a safe point between the items of a long loop.

Python raises KeyboardInterrupt wherever the main thread is when SIGINT arrives. Inside
a library's bare ``except:`` it turns into another error with a traceback (openpyxl's
type conversion has one: a ``data synth`` stopped while a workbook was saved printed
``TypeError: expected <class 'openpyxl.styles.colors.RgbColor'>``). A loop that writes
one item at a time holds SIGINT while an item is made and stops before the next one,
so the command ends as a plain Ctrl-C does (exit 130), with nothing half-written.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def interrupts_between_items() -> Iterator[Callable[[], None]]:
    """Within the block SIGINT only takes note; the yielded ``check()`` raises
    KeyboardInterrupt at the next item when one came, and so does leaving the block.
    Outside the main thread (no signal handler can be set there) ``check`` does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    asked: list[int] = []

    def hold(signum: int, _frame: object) -> None:
        asked.append(signum)

    def check() -> None:
        if asked:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield check
    finally:
        signal.signal(signal.SIGINT, previous)
    check()  # a Ctrl-C during the last item still stops the command
