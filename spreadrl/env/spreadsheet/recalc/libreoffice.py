"""LibreOffice headless as a recalculation engine (only where ``soffice`` is on PATH).

Two ways to drive it. Where the system Python has LibreOffice's UNO binding
(Debian: python3-uno, installed by ``make sysdeps``), ONE persistent headless
``soffice`` per process serves every call (:class:`LibreOfficeServer`, through
the small helper ``uno_helper.py`` run under ``/usr/bin/python3`` over a
pipe): load hidden with macros off, ``calculateAll``, store as xlsx. Without
UNO, each call runs ``soffice --headless --convert-to xlsx`` with a throwaway
profile whose ``OOXMLRecalcMode`` is 0 ("always recalculate"), one process
per call (about 0.75 s on a quiet machine, several seconds on a busy one).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import resource
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from spreadrl.archive_gate import check_archive
from spreadrl.env.spreadsheet import recalc
from spreadrl.env.spreadsheet.recalc.ironcalc_engine import read_cached
from spreadrl.env.spreadsheet.recalc.lo_service import ServiceClient, service_mode
from spreadrl.env.spreadsheet.recalc.locales import DEFAULT_LOCALE, current_locale
from spreadrl.errors import ConfigError, EngineCrashed, MissingDependencyError, WorkbookError

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "the 'libreoffice' recalculation engine needs LibreOffice's `soffice` on PATH "
    "(Debian/Ubuntu: `apt-get install -y libreoffice-calc-nogui`; macOS: `brew install --cask "
    "libreoffice`), or use the default engine 'ironcalc'"
)

_RECALC_ALWAYS = """<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry" xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<item oor:path="/org.openoffice.Office.Calc/Formula/Load"><prop oor:name="OOXMLRecalcMode" oor:op="fuse"><value>0</value></prop></item>
<item oor:path="/org.openoffice.Office.Calc/Formula/Load"><prop oor:name="ODFRecalcMode" oor:op="fuse"><value>0</value></prop></item>
</oor:items>
"""


SYSTEM_PYTHON = "/usr/bin/python3"


def locale_item(locale: str) -> str:
    """The profile setting that makes soffice render TEXT and number formats in ``locale``."""
    return (
        '<item oor:path="/org.openoffice.Setup/L10N"><prop oor:name="ooSetupSystemLocale" '
        f'oor:op="fuse"><value>{locale}</value></prop></item>\n'
    )


@lru_cache(maxsize=4)
def uno_python(python: str = SYSTEM_PYTHON) -> str | None:
    """``python`` if it can ``import uno`` (LibreOffice's binding), else None. Checked once."""
    if not Path(python).is_file():
        return None
    try:
        probe = subprocess.run(
            [python, "-c", "import uno"], capture_output=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return python if probe.returncode == 0 else None


class LibreOfficeServer:
    """One persistent headless LibreOffice, driven over UNO by ``uno_helper.py``.

    Started on first use, restarted after a crash or a timeout (the helper and
    soffice run in their own process group, killed together), and closed at
    exit. A forked child never shares its parent's server: it starts its own.
    """

    def __init__(
        self,
        soffice: str,
        python: str,
        timeout_s: float = 120.0,
        limits: LoLimits | None = None,
        locale: str = "en-US",
    ) -> None:
        self.soffice = soffice
        self.python = python
        self.timeout_s = timeout_s
        self.limits = limits or LoLimits.from_environment()
        self.locale = locale
        self._proc: subprocess.Popen | None = None
        self._pid = 0
        self._profile: tempfile.TemporaryDirectory | None = None
        self._lock = threading.Lock()

    def _read_line(self, timeout_s: float) -> dict:
        assert self._proc is not None and self._proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self._proc.stdout, selectors.EVENT_READ)
            if not selector.select(timeout_s):
                raise TimeoutError
        line = self._proc.stdout.readline()
        if not line:
            raise EOFError
        return json.loads(line)

    def _start(self) -> None:
        # soffice.bin can still be writing its profile for a moment after the kill in
        # close(): a failed cleanup must not print a traceback at the process's exit
        self._profile = tempfile.TemporaryDirectory(
            prefix="spreadrl-lo-profile-", ignore_cleanup_errors=True
        )
        helper = Path(__file__).with_name("uno_helper.py")
        self._proc = subprocess.Popen(
            [self.python, str(helper), self.soffice, self._profile.name, self.locale],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=self.limits.apply_memory,  # noqa: PLW1509 -- only setrlimit, no locks
        )
        self._pid = os.getpid()
        try:
            ready = self._read_line(120.0)
        except (TimeoutError, EOFError, ValueError) as exc:
            self.close()
            raise WorkbookError(f"LibreOffice (UNO) did not start ({type(exc).__name__})") from exc
        if not ready.get("ready"):
            self.close()
            raise WorkbookError(f"LibreOffice (UNO) did not start: {ready.get('error')}")

    def convert(self, src: Path, dst: Path) -> None:
        """Recalculate ``src`` with LibreOffice and store it as xlsx at ``dst``.

        soffice dying in the middle (killed, out of memory) restarts it and the request
        is tried once more; a second death raises EngineCrashed, an engine failure that
        no caller may score as the workbook's fault."""
        with self._lock:
            try:
                self._convert_once(src, dst)
            except EngineCrashed as exc:
                log.warning("%s; restarted it, trying once more", exc)
                self._convert_once(src, dst)

    def _convert_once(self, src: Path, dst: Path) -> None:
        if self._proc is None or self._proc.poll() is not None or self._pid != os.getpid():
            if self._pid == os.getpid():
                self.close()
            else:  # inherited through fork: the parent's pipes are not ours to use
                self._forget_parents()
            self._start()
        assert self._proc is not None and self._proc.stdin is not None
        request = {"src": str(Path(src).resolve()), "dst": str(Path(dst).resolve())}
        self.limits.budget_cpu(self._proc.pid)
        try:
            self._proc.stdin.write((json.dumps(request) + "\n").encode())
            self._proc.stdin.flush()
            reply = self._read_line(self.timeout_s)
        except TimeoutError as exc:
            self.close()
            raise WorkbookError(
                f"{src}: LibreOffice timed out while recalculating it "
                f"(limit {self.timeout_s:.0f} s)"
            ) from exc
        except (EOFError, BrokenPipeError, ValueError) as exc:
            self.close()
            raise EngineCrashed(f"{src}: LibreOffice died while recalculating it") from exc
        if reply.get("crashed"):  # the helper lost its soffice (UNO's connection died)
            self.close()
            raise EngineCrashed(f"{src}: LibreOffice died while recalculating it")
        if not reply.get("ok"):
            # soffice may be dying (over its limits) or unwell: the next request
            # starts a fresh one (about 1.3 s, paid only after a failure)
            self.close()
            raise WorkbookError(
                f"{src}: LibreOffice could not recalculate it ({reply.get('error')})"
            )

    def _forget_parents(self) -> None:
        """In a forked child: drop the parent's server without touching it (its profile
        folder must not be deleted when our copy of the handle is collected)."""
        if self._profile is not None:
            self._profile._finalizer.detach()
        self._proc, self._profile = None, None

    def close(self) -> None:
        """Stop the helper and its soffice (the whole process group)."""
        if self._pid != os.getpid():
            self._forget_parents()
            return
        proc, self._proc = self._proc, None
        if proc is not None and self._pid == os.getpid():
            try:
                if proc.stdin is not None:
                    proc.stdin.close()
                proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if proc.stdout is not None:  # else a ResourceWarning at interpreter exit
                proc.stdout.close()
        if self._profile is not None:
            self._profile.cleanup()
            self._profile = None


@dataclass(frozen=True)
class LoLimits:
    """The memory and CPU-time limits of the helper and soffice (0 turns one off).

    Set from ``SPREADRL_LIBREOFFICE_MEMORY_MB`` (default 4096; soffice itself maps
    about 800 MB) and ``SPREADRL_LIBREOFFICE_CPU_S`` (default 120, CPU seconds per
    recalculation) where they are set: the service is shared by every process of the
    user, so it has no recipe of its own. Over either, soffice dies, the request
    fails (the hybrid keeps IronCalc's values, warned) and the next one restarts it.
    """

    memory_mb: int = 4096
    cpu_s: int = 120

    @classmethod
    def from_environment(cls) -> LoLimits:
        try:
            return cls(
                int(os.environ.get("SPREADRL_LIBREOFFICE_MEMORY_MB", cls.memory_mb)),
                int(os.environ.get("SPREADRL_LIBREOFFICE_CPU_S", cls.cpu_s)),
            )
        except ValueError as exc:
            raise ConfigError(f"SPREADRL_LIBREOFFICE_MEMORY_MB / _CPU_S: {exc}") from exc

    def apply_memory(self) -> None:
        """In the helper before it starts (soffice inherits it): cap the address space."""
        if self.memory_mb > 0:
            cap = self.memory_mb << 20
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    def apply_one_shot(self) -> None:
        """Before a one-conversion soffice starts: the address space and its CPU seconds."""
        self.apply_memory()
        if self.cpu_s > 0:
            resource.setrlimit(resource.RLIMIT_CPU, (self.cpu_s, self.cpu_s + 5))

    def budget_cpu(self, root: int) -> None:
        """Before a request: each process under ``root`` may use ``cpu_s`` more CPU seconds.

        The soft ``RLIMIT_CPU`` of a running process is moved from here (``prlimit``;
        the hard limit stays), since soffice lives across many requests."""
        if self.cpu_s <= 0:
            return
        for pid in _process_tree(root):
            with contextlib.suppress(OSError, ValueError):
                _, hard = resource.prlimit(pid, resource.RLIMIT_CPU)
                soft = int(_cpu_seconds(pid)) + self.cpu_s + 1
                if hard != resource.RLIM_INFINITY:
                    soft = min(soft, hard)
                resource.prlimit(pid, resource.RLIMIT_CPU, (soft, hard))


def _process_tree(root: int) -> list[int]:
    """``root`` and its descendants (soffice runs two levels below the helper)."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{pid}/task"):
                todo += [
                    int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()
                ]
    return found


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_SERVERS: dict[tuple[str, str], LibreOfficeServer] = {}
_SERVERS_LOCK = threading.Lock()


def shared_server(soffice: str, python: str, locale: str = "en-US") -> LibreOfficeServer:
    """The process-wide server for ``soffice`` in ``locale`` (one LibreOffice per locale)."""
    with _SERVERS_LOCK:
        server = _SERVERS.get((soffice, locale))
        if server is None:
            server = _SERVERS[(soffice, locale)] = LibreOfficeServer(soffice, python, locale=locale)
        return server


@atexit.register
def _close_servers() -> None:
    for server in list(_SERVERS.values()):
        server.close()


class LibreOfficeEngine:
    """Recalculate by a round trip through headless LibreOffice Calc.

    ``persistent`` (default: when ``soffice`` was found on PATH and the system
    Python has UNO) uses the machine's LibreOffice service
    (:mod:`spreadrl.env.spreadsheet.recalc.lo_service`, one soffice shared by every process of the
    user), or with ``SPREADRL_LIBREOFFICE=process`` the process-wide
    :class:`LibreOfficeServer`; otherwise one ``soffice --convert-to`` process per call.
    """

    name = "libreoffice"

    def __init__(
        self, soffice: str | None = None, timeout_s: float = 120.0, persistent: bool | None = None
    ) -> None:
        binary = soffice or recalc.find_soffice()  # through the package: tests hide soffice
        if binary is None:
            raise MissingDependencyError(INSTALL_HINT)
        self.soffice = binary
        self.timeout_s = timeout_s
        python = uno_python() if (persistent or (persistent is None and soffice is None)) else None
        if persistent and python is None:
            raise MissingDependencyError(
                f"persistent LibreOffice needs LibreOffice's UNO binding for {SYSTEM_PYTHON} "
                "(Debian/Ubuntu: `apt-get install -y python3-uno`)"
            )
        # the recalculation locale (spreadrl.env.spreadsheet.recalc.locales): the machine's service
        # renders en-US; another locale gets a soffice of its own in this process
        self.locale = current_locale()
        self.server: LibreOfficeServer | ServiceClient | None = None
        if python:
            if self.locale != DEFAULT_LOCALE:
                self.server = shared_server(binary, python, self.locale)
            elif service_mode() == "machine":
                self.server = ServiceClient(binary, python, timeout_s)
            else:
                self.server = shared_server(binary, python)

    def recalculate(self, src: Path, dst: Path | None = None) -> None:
        src = Path(src)
        dst = Path(dst) if dst is not None else src
        if not src.is_file():
            raise WorkbookError(f"{src}: file does not exist")
        check_archive(src)  # soffice inflates what it is given
        if self.server is not None:
            dst.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix="spreadrl-soffice-") as tmp:
                # LibreOffice picks the import filter by extension: give it a clean name.
                staged_src = Path(tmp) / ("in" + (src.suffix.lower() or ".xlsx"))
                shutil.copyfile(src, staged_src)
                out = Path(tmp) / "out.xlsx"
                self.server.convert(staged_src, out)
                staged = dst.parent / f".recalc-{os.getpid()}-{dst.name}"
                shutil.copyfile(out, staged)
                os.replace(staged, dst)
            return
        with tempfile.TemporaryDirectory(prefix="spreadrl-soffice-") as tmp:
            profile = Path(tmp) / "profile"
            (profile / "user").mkdir(parents=True)
            (profile / "user" / "registrymodifications.xcu").write_text(
                _RECALC_ALWAYS.replace("</oor:items>", locale_item(self.locale) + "</oor:items>")
            )
            outdir = Path(tmp) / "out"
            command = [
                self.soffice,
                f"-env:UserInstallation={profile.as_uri()}",
                "--headless",
                "--norestore",
                "--convert-to",
                "xlsx:Calc MS Excel 2007 XML",
                "--outdir",
                str(outdir),
                str(src.resolve()),
            ]
            try:
                proc = subprocess.run(
                    command,
                    capture_output=True,
                    text=True,
                    timeout=self.timeout_s,
                    check=False,
                    preexec_fn=LoLimits.from_environment().apply_one_shot,  # noqa: PLW1509
                )
            except subprocess.TimeoutExpired as exc:
                raise WorkbookError(
                    f"{src}: LibreOffice did not finish within {self.timeout_s:.0f} s"
                ) from exc
            produced = outdir / (src.stem + ".xlsx")
            if proc.returncode != 0 or not produced.is_file():
                detail = (proc.stderr or proc.stdout).strip()[-300:]
                raise WorkbookError(f"{src}: LibreOffice could not recalculate it ({detail})")
            dst.parent.mkdir(parents=True, exist_ok=True)
            staged = dst.parent / f".recalc-{os.getpid()}-{dst.name}"
            staged.write_bytes(produced.read_bytes())
            os.replace(staged, dst)

    def evaluate(self, path: Path) -> dict[str, dict[str, object]]:
        with tempfile.TemporaryDirectory(prefix="spreadrl-soffice-") as tmp:
            out = Path(tmp) / Path(path).name
            self.recalculate(Path(path), out)
            return read_cached(out)
