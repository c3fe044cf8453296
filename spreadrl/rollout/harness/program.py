"""Which harness to run (``rollout.harness``) and the launcher that starts it in the sandbox.

``rollout.harness`` names a program in one of three ways:

- ``path/to/agent.py:run``: a function in a Python file;
- ``package.module:run``: a function in an importable module;
- a command line (anything with a space, e.g. ``python agent.py``): run as a process.

A function is called with keyword arguments ``instruction`` (the task), ``workbook``
(the path of the episode's private copy, to edit in place), ``base_url`` (the
OpenAI-compatible endpoint, ``.../v1``) and ``model`` (the model name to send). A
command gets the same as environment variables: ``SPREADRL_INSTRUCTION``,
``SPREADRL_WORKBOOK``, ``OPENAI_BASE_URL`` and ``SPREADRL_MODEL`` (and an
``OPENAI_API_KEY`` the endpoint does not check). Either returns when it is done. With
``rollout.harness_mcp`` a function also gets ``mcp_url`` and a command
``SPREADRL_MCP_URL``: the gym's tools over MCP on the episode's workbook
(:mod:`spreadrl.rollout.harness.mcp`).

The launcher (:func:`launcher_code`) runs inside the code interpreter's sandbox
(:mod:`spreadrl.env.sandbox`): it relays a loopback port of its own to the
endpoint's socket in the episode folder, confines every write of the harness and of
the programs it starts to that folder with Landlock where the kernel offers it (Linux
5.13+; ``SPREADRL_LANDLOCK`` says 1 or 0), ends the episode on a write outside it from
Python (an audit hook; under bubblewrap the rest of the filesystem is read-only
anyway), then calls the harness.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from spreadrl.errors import ConfigError

OUTSIDE_EXIT = 97
"""The launcher's exit status when the harness wrote outside its folder."""
OUTSIDE_MARK = "spreadrl-harness: write outside the episode folder:"


@dataclass(frozen=True)
class HarnessProgram:
    """A parsed ``rollout.harness``: a function (in a file or a module) or a command line."""

    spec: str
    kind: str  # "file", "module" or "command"
    target: str  # the file's path, the module's name, or the command line
    function: str = ""
    read_only: tuple[str, ...] = ()  # folders the sandbox must let it read

    @classmethod
    def parse(cls, spec: str) -> HarnessProgram:
        """Read ``spec``; a file or module that cannot be found is a :class:`ConfigError`."""
        spec = spec.strip()
        if not spec:
            raise ConfigError(
                "rollout.harness is empty; name a file.py:function, a module:function or a command"
            )
        if " " in spec or ":" not in spec:
            argv = shlex.split(spec)
            files = [Path(a).resolve() for a in argv if Path(a).is_file()]
            return cls(spec, "command", spec, read_only=readable_roots(files))
        target, _, function = spec.rpartition(":")
        if not function.isidentifier():
            raise ConfigError(f"rollout.harness {spec!r}: {function!r} is not a function name")
        if target.endswith(".py"):
            path = Path(target).resolve()
            if not path.is_file():
                raise ConfigError(f"rollout.harness {spec!r}: no file {path}")
            return cls(spec, "file", str(path), function, readable_roots([path]))
        try:
            found = importlib.util.find_spec(target)
        except (ImportError, ValueError) as exc:
            raise ConfigError(
                f"rollout.harness {spec!r}: cannot find module {target!r} ({exc})"
            ) from exc
        if found is None or not found.origin:
            raise ConfigError(f"rollout.harness {spec!r}: no module {target!r} is importable")
        origin = Path(found.origin).resolve()
        root = origin.parent
        for _ in range(target.count(".") + (origin.name == "__init__.py")):
            root = root.parent
        return cls(spec, "module", target, function, (str(root),))


def readable_roots(files: list[Path]) -> tuple[str, ...]:
    """What the sandbox binds read-only so that its unprivileged uid can read ``files``:
    each file's folder (its sibling modules stay importable) where others may enter and
    read that folder, else the file alone. A bind keeps the host's modes, so a 0700
    folder (a home, pytest's temporary root) would shut the sandbox's uid out."""
    roots = set()
    for path in files:
        folder_open = path.parent.stat().st_mode & 0o005 == 0o005
        roots.add(str(path.parent) if folder_open else str(path))
    return tuple(sorted(roots))


def launcher_args(
    program: HarnessProgram,
    *,
    instruction: str,
    workbook: Path,
    socket_path: Path,
    url_path: str,
    model: str,
    mcp_path: str = "",
) -> dict[str, object]:
    """What the launcher (or a forked episode, :mod:`~spreadrl.rollout.harness.forkserver`)
    needs of one episode; ``mcp_path``: the episode's MCP server (``rollout.harness_mcp``)."""
    return {
        "kind": program.kind,
        "target": program.target,
        "function": program.function,
        "roots": list(program.read_only),
        "instruction": instruction,
        "workbook": str(workbook),
        "folder": str(workbook.parent),
        "socket": str(socket_path),
        "path": url_path,
        "mcp_path": mcp_path,
        "model": model,
        "outside_exit": OUTSIDE_EXIT,
        "outside_mark": OUTSIDE_MARK,
    }


def with_args(args: dict[str, object], body: str) -> str:
    """``body`` (source using :data:`LAUNCHER_DEFS`) preceded by ``ARGS`` and those defs."""
    return f"import json\nARGS = json.loads({json.dumps(json.dumps(args))})\n{LAUNCHER_DEFS}{body}"


def launcher_code(args: dict[str, object]) -> str:
    """The Python source the sandbox runs for one episode (given on stdin); ``args``:
    :func:`launcher_args`."""
    return with_args(args, _LAUNCHER)


LAUNCHER_DEFS = r"""
import ctypes, importlib, importlib.util, os, shlex, socket, subprocess, sys, tempfile, threading

FOLDER = os.path.realpath(ARGS["folder"])
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _outside(path):
    if isinstance(path, int):
        return None
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    real = os.path.realpath(os.path.join(FOLDER, path))
    if real == FOLDER or real.startswith(FOLDER + os.sep) or real.startswith("/dev/"):
        return None
    return real


def _audit(event, args):
    if event != "open" or len(args) < 3:
        return
    path, mode, flags = args[0], args[1], args[2]
    writes = (mode and any(c in mode for c in "wax+")) or (flags or 0) & WRITE_FLAGS
    where = _outside(path) if writes else None
    if where is not None:
        sys.stderr.write(f"{ARGS['outside_mark']} {where}\n")
        sys.stderr.flush()
        os._exit(ARGS["outside_exit"])


def _pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _relay(server, name):
    while True:
        client, _ = server.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.connect(name)  # relative: the cwd is the episode's folder
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def _confine():
    # Landlock (Linux 5.13+, unprivileged): from here on this process and every process
    # it starts may create, write, remove or rename files only under FOLDER (and write
    # to existing devices, /dev/null); reading is left alone. The audit hook sees a
    # Python agent's own writes; this stops those of the programs it starts too, and
    # keeps forked episodes out of each other's folders. False where the kernel has none.
    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(444, None, 0, 1)  # landlock_create_ruleset(VERSION)
    if abi < 1:
        return False
    write = 1 << 1
    handled = write | sum(1 << bit for bit in range(4, 13))  # remove_*, make_*
    handled |= (1 << 13 if abi >= 2 else 0) | (1 << 14 if abi >= 3 else 0)  # refer, truncate

    class Beneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    ruleset = libc.syscall(444, ctypes.byref(ctypes.c_uint64(handled)), 8, 0)
    if ruleset < 0:
        return False
    try:
        for path, allowed in ((FOLDER, handled), ("/dev", handled & (write | 1 << 14))):
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = Beneath(allowed, fd)
                if libc.syscall(445, ruleset, 1, ctypes.byref(rule), 0) != 0:
                    return False
            finally:
                os.close(fd)
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS, which Landlock asks
            return False
        return libc.syscall(446, ruleset, 0) == 0  # landlock_restrict_self
    finally:
        os.close(ruleset)


def _enter(args):
    # confine the episode's writes to its folder, relay a loopback port to the
    # endpoint's socket, set the episode's environment, enter its folder; the
    # harness's base URL
    scratch = os.path.join(FOLDER, ".tmp")
    os.makedirs(scratch, exist_ok=True)
    os.environ["SPREADRL_LANDLOCK"] = "1" if _confine() else "0"
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    name = os.path.basename(args["socket"])
    threading.Thread(target=_relay, args=(server, name), daemon=True).start()
    base_url = f"http://127.0.0.1:{server.getsockname()[1]}{args['path']}"
    os.environ.pop("SPREADRL_MCP_URL", None)
    if args.get("mcp_path"):  # the gym's tools over MCP, through the same relay
        port = server.getsockname()[1]
        os.environ["SPREADRL_MCP_URL"] = f"http://127.0.0.1:{port}{args['mcp_path']}"
    os.environ.update(
        HOME=FOLDER,  # where a program looks to write its caches: the one writable place
        TMPDIR=scratch,
        OPENAI_BASE_URL=base_url,
        OPENAI_API_KEY="spreadrl",
        SPREADRL_MODEL=args["model"],
        SPREADRL_INSTRUCTION=args["instruction"],
        SPREADRL_WORKBOOK=args["workbook"],
    )
    tempfile.tempdir = scratch
    os.chdir(FOLDER)
    return base_url


def _load(args):
    if args["kind"] == "file":
        spec = importlib.util.spec_from_file_location("spreadrl_harness", args["target"])
        module = importlib.util.module_from_spec(spec)
        sys.modules["spreadrl_harness"] = module
        spec.loader.exec_module(module)
        return module
    sys.path[:0] = args["roots"]
    return importlib.import_module(args["target"])


def _play(module, args, base_url):
    # mcp_url only when the gym's tools are served: a four-argument agent keeps working
    extra = {"mcp_url": os.environ["SPREADRL_MCP_URL"]} if args.get("mcp_path") else {}
    getattr(module, args["function"])(
        instruction=args["instruction"],
        workbook=args["workbook"],
        base_url=base_url,
        model=args["model"],
        **extra,
    )
"""

_LAUNCHER = r"""
base_url = _enter(ARGS)
if ARGS["kind"] == "command":
    sys.exit(subprocess.call(shlex.split(ARGS["target"])))
sys.addaudithook(_audit)
_play(_load(ARGS), ARGS, base_url)
"""
