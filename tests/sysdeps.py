"""The system packages some tests need, and what their absence means.

``make sysdeps`` installs bubblewrap, LibreOffice Calc and python3-uno (needs root and
apt). On a developer's machine without them, the tests that need them skip (saying
why) or check what can be checked without them. CI sets ``SPREADRL_REQUIRE_SYSDEPS=1``
(``.ci/run``): there a missing package must turn the run red, not quietly shrink it,
so those tests run in full and fail where the package is missing.
"""

from __future__ import annotations

import os

import pytest

REQUIRED = os.environ.get("SPREADRL_REQUIRE_SYSDEPS") == "1"


def have_libreoffice() -> bool:
    """LibreOffice and its UNO binding are installed here."""
    from spreadrl.env.spreadsheet import recalc
    from spreadrl.env.spreadsheet.recalc.libreoffice import uno_python

    return recalc.find_soffice() is not None and uno_python() is not None


def use_libreoffice() -> bool:
    """Whether a test should exercise LibreOffice: it is installed, or CI requires it
    (then a missing one fails the test instead of narrowing it)."""
    return REQUIRED or have_libreoffice()


needs_libreoffice = pytest.mark.skipif(
    not use_libreoffice(),
    reason="LibreOffice + python3-uno not installed (make sysdeps; CI requires them)",
)


def have_landlock() -> bool:
    """The kernel offers Landlock (Linux 5.13+, not blocked by a seccomp profile): the
    harness launcher confines a harness's writes with it."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(444, None, 0, 1) >= 1  # landlock_create_ruleset(VERSION): its ABI


needs_landlock = pytest.mark.skipif(
    not (REQUIRED or have_landlock()),
    reason="the kernel offers no Landlock (Linux 5.13+; CI requires it)",
)
