"""Run untrusted Python (the agent's code_interpreter calls) in a fresh, confined process.

Why this shape: the model writes arbitrary code during RL, thousands of times, on a
machine that also trains. Each call gets a new interpreter (no state leaks between
calls), resource limits (address space, CPU seconds, processes, file size, wall
time) and, with bubblewrap, a private filesystem view in which only the episode's
working folder is writable, no network, and its own pid namespace (so killing the
sandbox kills everything it started).

Two backends:

* ``bwrap`` -- bubblewrap plus rlimits. As root, bwrap runs privileged without a
  user namespace and the code is started through ``setpriv`` as a random
  unprivileged uid: ``RLIMIT_NPROC`` is not enforced for uid 0 (even when mapped
  from a user namespace), so a dedicated uid per call is what stops a fork bomb,
  and a unique uid means one sandbox's fork bomb cannot use up another's quota.
  The working folder is handed to that uid for the call and given back after.
* ``rlimit`` -- a plain subprocess with the same rlimits and wall clock, for
  machines without bwrap. It cannot hide the filesystem or the network, so it logs
  a loud warning once. As root it drops to an unprivileged uid when that uid can
  run the interpreter; otherwise the process limit is enforced by a watchdog that
  counts the session's processes and kills the group.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import shutil
import signal
import site
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from spreadrl.errors import SpreadrlError

log = logging.getLogger(__name__)

SANDBOX_UID_BASE = 200_000
SANDBOX_UID_SPAN = 1 << 24
_TRUNCATION_MARKER = "\n[... output truncated: {n} more characters not shown ...]"
_ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "alternatives",
    "fonts",
    "passwd",
    "group",
    "nsswitch.conf",
    "mime.types",
)
_warned_fallback = False


class SandboxUnavailableError(SpreadrlError):
    """The strict sandbox was asked for but bubblewrap is missing or does not work."""


@dataclass(frozen=True)
class SandboxLimits:
    """Per-call limits. Defaults follow the published gym (120 s, 1 GB)."""

    wall_time_s: float = 120
    cpu_time_s: int = 120
    memory_mb: int = 1024
    max_processes: int = 64
    max_file_mb: int = 64
    max_output_chars: int = 20000


@dataclass(frozen=True)
class SandboxResult:
    """What a call produced. ``error`` is set only for sandbox events (a limit hit, a
    launch failure), not for ordinary exceptions in the code, which show in stderr
    with a non-zero ``exit_code``. ``exit_code`` is negative for a signal, None when
    the process never reported one (wall-clock kill)."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    error: str | None
    duration_s: float
    sandbox: str


def run_python(
    code: str,
    workdir: Path,
    limits: SandboxLimits | None = None,
    *,
    mode: str = "auto",
    read_only: Sequence[str] = (),
    stop: threading.Event | None = None,
) -> SandboxResult:
    """Run ``code`` with this interpreter (``sys.executable``) in ``workdir``.

    mode: "auto" (bwrap if it works, else rlimit with a warning), "strict" (bwrap or
    :class:`SandboxUnavailableError`), "rlimit" (force the fallback). ``read_only``:
    more folders the code may read (bound read-only under bwrap; a harness's own
    source). ``stop``: set it to kill the process group early (``error`` then says so).
    """
    limits = limits or SandboxLimits()
    workdir = _check_workdir(workdir)
    backend = _choose_backend(mode)
    return _run(code, workdir, limits, backend, tuple(read_only), stop)


def _check_workdir(workdir: Path) -> Path:
    path = Path(workdir)
    if not path.is_dir():
        raise SpreadrlError(f"sandbox workdir {path} is not an existing directory")
    resolved = path.resolve()
    if resolved == Path("/"):
        raise SpreadrlError("sandbox workdir must not be the filesystem root")
    return resolved


def _choose_backend(mode: str) -> str:
    global _warned_fallback
    if mode not in ("auto", "strict", "rlimit"):
        raise SpreadrlError(f"sandbox mode {mode!r} is not one of auto, strict, rlimit")
    if mode == "rlimit":
        return "rlimit"
    problem = bwrap_problem()
    if problem is None:
        return "bwrap"
    if mode == "strict":
        raise SandboxUnavailableError(
            f"the strict sandbox needs bubblewrap: {problem}. Install it "
            "(apt-get install bubblewrap) or use --sandbox auto"
        )
    if not _warned_fallback:
        _warned_fallback = True
        log.warning(
            "bubblewrap unavailable (%s): code_interpreter runs with rlimits only, WITHOUT "
            "filesystem or network isolation. Install bubblewrap for a real sandbox.",
            problem,
        )
    return "rlimit"


@functools.cache
def bwrap_problem() -> str | None:
    """None when bwrap works here (probed once per process), else why not."""
    if shutil.which("bwrap") is None:
        return "bwrap is not on PATH"
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return "setpriv (util-linux) is needed to drop root inside bwrap"
    import tempfile

    with tempfile.TemporaryDirectory(prefix="spreadrl-probe-") as tmp:
        res = _run("print('ok')", Path(tmp).resolve(), SandboxLimits(wall_time_s=30), "bwrap")
    if res.exit_code == 0 and res.stdout.strip() == "ok":
        return None
    return f"bwrap probe failed: {(res.error or res.stderr).strip()[:300]}"


@functools.cache
def _fallback_uid_works() -> bool:
    """As root, can an unprivileged uid run this interpreter (e.g. not under /root)?"""
    uid = SANDBOX_UID_BASE
    try:
        proc = subprocess.run(
            [sys.executable, "-c", "import site"],
            user=uid,
            group=uid,
            extra_groups=[],
            capture_output=True,
            timeout=30,
            cwd="/",
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def _python_paths() -> list[str]:
    """Directories the interpreter needs: prefixes and site-packages, outermost only."""
    cands = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    cands.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    cands.update(site.getsitepackages())
    real = sorted({os.path.realpath(p) for p in cands if os.path.isdir(p)} | cands)
    out: list[str] = []
    for p in sorted(q for q in real if os.path.isdir(q)):
        if p.startswith("/usr/") or any(p == o or p.startswith(o + "/") for o in out):
            continue
        out.append(p)
    return out


def _sandbox_env(workdir: Path) -> dict[str, str]:
    bindir = os.path.dirname(sys.executable)
    return {
        "PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(workdir),
        "PYTHONPATH": os.pathsep.join(site.getsitepackages()),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
        "MPLBACKEND": "Agg",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
        "USER": "sandbox",
        "LOGNAME": "sandbox",
    }


def _count_user_processes(uid: int) -> int:
    n = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                n += entry.stat().st_uid == uid
            except OSError:
                continue
    return n


def _prlimit_args(limits: SandboxLimits, nproc: int | None) -> list[str]:
    args = [
        f"--as={limits.memory_mb * 1024 * 1024}",
        f"--cpu={int(limits.cpu_time_s)}:{int(limits.cpu_time_s) + 1}",
        f"--fsize={limits.max_file_mb * 1024 * 1024}",
        "--core=0",
    ]
    if nproc is not None:
        args.append(f"--nproc={nproc}")
    return args


def _ancestors_dirs(dest: str, made: set[str]) -> list[str]:
    """``--perms 0755 --dir`` for each missing ancestor: bwrap would copy the host's
    0700 modes (``/root``, pytest's temp root), shutting the unprivileged uid out."""
    args: list[str] = []
    parts = Path(dest).parts[1:-1]
    cur = ""
    for part in parts:
        cur += "/" + part
        if cur in made or cur in ("/usr", "/proc", "/dev"):
            continue
        made.add(cur)
        args += ["--perms", "0755", "--dir", cur]
    return args


def _bwrap_argv(workdir: Path, uid: int | None, read_only: tuple[str, ...] = ()) -> list[str]:
    argv = ["bwrap", "--die-with-parent", "--new-session"]
    if uid is None:  # not root: an unprivileged user namespace does it all
        argv += ["--unshare-all", "--uid", "1000", "--gid", "1000", "--cap-drop", "ALL"]
    else:
        argv += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
        argv += ["--unshare-cgroup-try", "--cap-drop", "ALL"]
        # setpriv needs SETUID/SETGID; DAC_OVERRIDE lets bwrap chdir into the folder
        # handed to the sandbox uid. setpriv's uid change clears all of them.
        for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_DAC_OVERRIDE"):
            argv += ["--cap-add", cap]
    argv += ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = f"/{name}"
        if os.path.islink(host):
            argv += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            argv += ["--ro-bind", host, host]
    argv += ["--perms", "0755", "--dir", "/etc"]
    for name in _ETC_FILES:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp"]
    made = {"/etc", "/tmp"}
    for path in _python_paths():
        argv += _ancestors_dirs(path, made) + ["--ro-bind", path, path]
    for path in read_only:
        argv += _ancestors_dirs(path, made) + ["--ro-bind", path, path]
    argv += _ancestors_dirs(str(workdir), made)
    argv += ["--bind", str(workdir), str(workdir), "--chdir", str(workdir)]
    if uid is not None:
        argv += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        argv += ["--no-new-privs", "--"]
    return argv


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    os.lchown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            try:
                os.lchown(os.path.join(dirpath, name), uid, gid)
            except FileNotFoundError:
                continue


class _Capped:
    """Drain a pipe on a thread, keeping at most ``cap`` characters' worth of bytes."""

    def __init__(self, stream, cap_chars: int) -> None:
        self.data = bytearray()
        self.total = 0
        self._cap = cap_chars * 4 + 4
        self._thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self._thread.start()

    def _drain(self, stream) -> None:
        while chunk := stream.read(65536):
            self.total += len(chunk)
            room = self._cap - len(self.data)
            if room > 0:
                self.data += chunk[:room]
        stream.close()

    def text(self, cap_chars: int) -> str:
        self._thread.join(timeout=5)
        text = self.data.decode("utf-8", errors="replace")
        dropped = self.total > len(self.data)
        if len(text) > cap_chars or dropped:
            more = len(text) - cap_chars if len(text) > cap_chars else 0
            extra = self.total - len(self.data)
            n = more + extra  # bytes beyond the kept ones counted as characters
            return text[:cap_chars] + _TRUNCATION_MARKER.format(n=n)
        return text


def _session_process_count(sid: int) -> int:
    n = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        n += int(fields[3]) == sid
    return n


def _kill_group(pgid: int, until_gone: bool) -> None:
    """SIGKILL the group; with ``until_gone`` repeat until it is empty (the leader
    must be reaped first, or its zombie keeps the group alive)."""
    for _ in range(50):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return
        if not until_gone:
            return
        time.sleep(0.01)


def _run(
    code: str,
    workdir: Path,
    limits: SandboxLimits,
    backend: str,
    read_only: tuple[str, ...] = (),
    stop: threading.Event | None = None,
) -> SandboxResult:
    start = time.monotonic()
    is_root = os.geteuid() == 0
    uid = random.randrange(SANDBOX_UID_BASE, SANDBOX_UID_BASE + SANDBOX_UID_SPAN)
    popen_user: dict = {}
    watchdog = False
    if backend == "bwrap":
        nproc = limits.max_processes
        if not is_root:
            nproc += _count_user_processes(os.getuid())
        argv = _bwrap_argv(workdir, uid if is_root else None, read_only)
        owner = uid if is_root else None
    else:
        argv = []
        owner = uid if is_root and _fallback_uid_works() else None
        if is_root and owner is not None:
            popen_user = {"user": owner, "group": owner, "extra_groups": []}
            nproc = limits.max_processes
        elif is_root:
            nproc, watchdog = None, True
        else:
            nproc = limits.max_processes + _count_user_processes(os.getuid())
    argv += [sys.executable, "-"]
    if shutil.which("prlimit"):
        argv = ["prlimit", *_prlimit_args(limits, nproc), "--", *argv]
        preexec = None
    else:
        preexec = functools.partial(_set_rlimits, limits, nproc)
    if owner is not None:
        _chown_tree(workdir, owner, owner)
    try:
        return _execute(
            argv, code, workdir, limits, backend, popen_user, preexec, watchdog, start, stop
        )
    finally:
        if owner is not None:
            _chown_tree(workdir, os.getuid(), os.getgid())


def _set_rlimits(limits: SandboxLimits, nproc: int | None) -> None:
    import resource

    mb = 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_mb * mb,) * 2)
    cpu = int(limits.cpu_time_s)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.max_file_mb * mb,) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if nproc is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def _guard(pgid, deadline, watchdog, limits, done, verdict, stop=None) -> None:
    """Kill the group at the wall-clock deadline, when ``stop`` is set or, in watchdog
    mode, when it has more processes than allowed; record why in ``verdict``."""
    polling = watchdog or stop is not None
    while True:
        left = deadline - time.monotonic()
        if done.wait(min(left, 0.05) if polling else max(left, 0.0)):
            return
        if stop is not None and stop.is_set():
            verdict.append("stopped")
        elif time.monotonic() >= deadline:
            verdict.append("timeout")
        elif watchdog and _session_process_count(pgid) > limits.max_processes:
            verdict.append("processes")
        else:
            continue
        _kill_group(pgid, until_gone=False)
        return


def _execute(argv, code, workdir, limits, backend, popen_user, preexec, watchdog, start, stop):
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workdir,
            env=_sandbox_env(workdir),
            start_new_session=True,
            preexec_fn=preexec,
            **popen_user,
        )
    except OSError as exc:
        return SandboxResult("", "", None, False, f"could not start: {exc}", 0.0, backend)
    out = _Capped(proc.stdout, limits.max_output_chars)
    err = _Capped(proc.stderr, limits.max_output_chars)
    try:
        proc.stdin.write(code.encode("utf-8"))
    except BrokenPipeError:
        pass
    finally:
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
    verdict: list[str] = []  # "timeout" or "processes", set by the guard thread
    done = threading.Event()
    guard = threading.Thread(
        target=_guard,
        args=(proc.pid, start + limits.wall_time_s, watchdog, limits, done, verdict, stop),
    )
    guard.start()
    proc.wait()  # a blocking wait: Popen.wait(timeout) polls with up to 50 ms sleeps
    done.set()
    guard.join()
    timed_out, too_many = "timeout" in verdict, "processes" in verdict
    stopped = "stopped" in verdict
    _kill_group(
        proc.pid, until_gone=True
    )  # leftovers of the fallback; bwrap's pid namespace is gone
    stdout, stderr = out.text(limits.max_output_chars), err.text(limits.max_output_chars)
    code_ = None if timed_out or too_many or stopped else proc.returncode
    if backend == "bwrap" and code_ is not None and 128 < code_ < 160:
        code_ = -(code_ - 128)  # bwrap reports a signalled child as 128 + signal
    error = (
        "stopped by the caller"
        if stopped
        else _describe(code_, timed_out, too_many, stderr, limits)
    )
    return SandboxResult(stdout, stderr, code_, timed_out, error, time.monotonic() - start, backend)


def _describe(code, timed_out, too_many, stderr, limits) -> str | None:
    if timed_out:
        return f"wall-clock limit of {limits.wall_time_s:g} s exceeded; the process was killed"
    if too_many:
        return f"process limit of {limits.max_processes} exceeded; the process group was killed"
    if code == -signal.SIGXCPU:
        return f"CPU time limit of {limits.cpu_time_s} s exceeded"
    if code == -signal.SIGXFSZ:
        return f"file size limit of {limits.max_file_mb} MB exceeded"
    if code is not None and code < 0:
        return f"killed by signal {signal.Signals(-code).name}"
    if code and "MemoryError" in stderr[-2000:]:
        return f"memory limit of {limits.memory_mb} MB exceeded"
    return None
