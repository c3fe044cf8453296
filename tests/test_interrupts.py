"""Ctrl-C held between a loop's items: never turned into another error inside a library."""

from __future__ import annotations

import os
import signal

import pytest

from spreadrl.interrupts import interrupts_between_items


@pytest.fixture(autouse=True)
def python_ctrl_c():
    """Python's own SIGINT handler (KeyboardInterrupt) during each test, as a command
    started from a terminal has it: a process started in the background by a
    non-interactive shell inherits SIGINT ignored, and would receive no Ctrl-C here."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _library_call() -> None:
    """A library's bare ``except:`` (openpyxl's conversion): it eats whatever is raised
    inside and raises its own error instead."""
    try:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C arrives while the library runs
        for _ in range(1000):  # the handler runs between bytecodes, here
            pass
    except:  # noqa: E722
        raise TypeError("expected <class 'RgbColor'>") from None


def test_ctrl_c_inside_a_library_stops_before_the_next_item():
    done = []
    with pytest.raises(KeyboardInterrupt), interrupts_between_items() as check:
        for i in range(3):
            check()
            _library_call()
            done.append(i)
    assert done == [0]  # the item under way finished; the next one never started
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_without_the_hold_the_library_turns_ctrl_c_into_its_own_error():
    # what the hold prevents: the reason it exists
    with pytest.raises(TypeError):
        _library_call()


def test_ctrl_c_during_the_last_item_still_stops():
    with pytest.raises(KeyboardInterrupt), interrupts_between_items() as check:
        check()
        _library_call()
