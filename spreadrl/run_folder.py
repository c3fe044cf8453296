"""One rule for the folders and files a command writes: never mix, overwrite or delete another run.

Every command that writes a run folder (``eval``, ``sft``, ``grpo``, ``demo``)
claims it with :func:`claim_run_folder` before it writes anything else:

- the folder records what produced it in ``run.json``: the command, the
  settings that decide its results (resolved config, model, tasks, backend,
  samples), their digest, and the versions that ran it;
- a folder holding the same run (same command, same settings) is resumed; one
  holding another run, or files that are no run of ours, is refused with one
  line naming what is there, each setting that differs, and what to pass;
- ``resume_changes`` (the commands' ``--resume``) lets a run continue with
  changes only to the settings its command declares safe (``steps``, logging);
  the changes are recorded in ``run.json``, so the folder still says what
  produced every step;
- a refusal never deletes anything.

Commands that write one artifact (``model init``, ``merge``, ``data synth``,
``data sft-build``) use :func:`check_output_folder` / :func:`check_output_file`:
an existing output is refused unless ``--overwrite`` is given.

On resume, :func:`cut_back_jsonl` drops the log rows written after the
checkpoint a run resumes from, so no step is logged twice. This module sits in
the low layer (beside ``config`` and ``errors``) so data, eval, train, the demo
and the command line all use the same rule.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spreadrl.errors import SpreadrlError

RUN_FILE = "run.json"
"""The record of what produced a run folder."""

_VERSIONED = ("torch", "transformers", "vllm")


@dataclass(frozen=True)
class RunIdentity:
    """What decides a run's results: its command and its settings (flat ``key -> value``).

    ``safe`` names the settings (a key, or a prefix ending in ``.``) that a resumed
    run may change with ``--resume``; ``files`` are the names the run writes, each
    of which is a result once it is non-empty; ``summary`` (model, tasks, backend,
    samples) is what a refusal shows of the run a folder holds.
    """

    command: str
    settings: Mapping[str, Any]
    files: tuple[str, ...] = ()
    safe: tuple[str, ...] = ()
    summary: Mapping[str, Any] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return settings_digest(self.settings)

    def is_safe(self, key: str) -> bool:
        return any(key == s or (s.endswith(".") and key.startswith(s)) for s in self.safe)


@dataclass
class Claim:
    """A run folder claimed for one run: new, or resumed (with the changes accepted)."""

    folder: Path
    resumed: bool
    changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists and scalars are leaves (as JSON)."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = json.loads(json.dumps(value, default=str))
    return flat


def settings_digest(settings: Mapping[str, Any]) -> str:
    """A short stable digest of ``settings`` (sha256 of their sorted JSON)."""
    text = json.dumps(dict(settings), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def versions() -> dict[str, str]:
    """spreadrl's, Python's and the model stack's versions (recorded, never compared)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": sys.version.split()[0]}
    for name in ("spreadrl", *_VERSIONED):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def has_results(folder: Path, results: Iterable[str]) -> bool:
    """Whether any of ``results`` in ``folder`` is a non-empty file or folder."""
    for name in results:
        path = folder / name
        if path.is_file() and path.stat().st_size > 0:
            return True
        if path.is_dir() and any(path.iterdir()):
            return True
    return False


def _listing(folder: Path, limit: int = 4) -> str:
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir())
    more = f", ... ({len(names)} entries)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def read_record(folder: Path) -> dict[str, Any] | None:
    """``folder/run.json`` as a dict; None when there is none; an error when unreadable."""
    path = folder / RUN_FILE
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SpreadrlError(f"{path}: not a spreadrl run record ({exc}); move it away") from exc
    if not isinstance(record, dict) or not isinstance(record.get("settings"), dict):
        raise SpreadrlError(f"{path}: not a spreadrl run record (no settings); move it away")
    return record


def describe_record(record: Mapping[str, Any]) -> str:
    """``eval run (model 'runs/a', tasks 'builtin:demo-test', samples 4)`` for a refusal,
    which puts "a", "an" or "another" before it."""
    summary = record.get("summary") or {}
    parts = [f"{key} {value!r}" for key, value in summary.items() if value is not None]
    shown = ", ".join(parts) or f"settings {record.get('digest', '?')}"
    return f"{record.get('command', '?')} run ({shown})"


def _a(command: str) -> str:
    """The article a refusal puts before ``command`` ("an eval run", "an sft run")."""
    return "an" if command[:1] in ("a", "e", "i", "o", "u") or command == "sft" else "a"


def differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Each setting whose value differs (a key only one side has reads as None on the other)."""
    keys = sorted(set(old) | set(new))
    return {k: (old.get(k), new.get(k)) for k in keys if old.get(k) != new.get(k)}


def _shown(changes: Mapping[str, tuple[Any, Any]], limit: int = 8) -> str:
    items = [f"{k} {a!r} -> {b!r}" for k, (a, b) in changes.items()]
    more = f", and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def claim_run_folder(
    folder: Path,
    identity: RunIdentity,
    *,
    resume_changes: bool = False,
    elsewhere: str = "--out NEW_FOLDER",
    write: bool = True,
) -> Claim:
    """Check ``folder`` may hold this run, record it in ``run.json``; say whether it resumes.

    Args:
        folder: the run folder (created when missing).
        identity: what this run is.
        resume_changes: the command's ``--resume``: continue the run in ``folder``
            although settings in ``identity.safe`` changed (others never may).
        elsewhere: how the command is pointed at another folder, for the messages.
        write: False on the ranks of a distributed run that only follow the main one.

    Raises:
        SpreadrlError: ``folder`` is a file, holds another run, holds files that are
            no spreadrl run, or ``resume_changes`` was given with nothing to resume.
    """
    if folder.exists() and not folder.is_dir():
        raise SpreadrlError(f"{folder} is a file, not a folder; choose a folder ({elsewhere})")
    if write:  # the following ranks of a distributed run leave the folder to the main one
        check_creatable(folder, flag=elsewhere.split("=")[0].split()[0])
    record = read_record(folder) if folder.is_dir() else None
    # what counts as a result is the recorded run's own (an eval's folder may hold a grpo run)
    files = (record or {}).get("files") or identity.files
    started = folder.is_dir() and has_results(folder, files)
    if record is None or not started:
        _check_unclaimed(folder, identity, record, resume_changes, elsewhere)
        claim = Claim(folder, resumed=False)
        if write:
            _write_record(folder, identity, history=[])
        return claim
    changes = _check_same_run(folder, identity, record, resume_changes, elsewhere)
    if write:
        history = list(record.get("history") or [])
        if changes:
            history.append({"at": _now(), "changes": {k: list(v) for k, v in changes.items()}})
        _write_record(folder, identity, history=history, created=record.get("created"))
    return Claim(folder, resumed=True, changes=changes)


def _check_unclaimed(
    folder: Path,
    identity: RunIdentity,
    record: dict[str, Any] | None,
    resume_changes: bool,
    elsewhere: str,
) -> None:
    """A folder with no results of a run: refuse files that are not ours, and --resume."""
    if resume_changes:
        raise SpreadrlError(
            f"--resume: {folder} holds no {identity.command} run to resume; drop --resume to "
            "start one"
        )
    if record is not None or not folder.is_dir():
        return  # a run that recorded itself and wrote no result yet: take it over
    if any(folder.iterdir()):
        raise SpreadrlError(
            f"{folder} is not empty and holds no spreadrl run record ({RUN_FILE}): "
            f"{_listing(folder)}; a new run needs a new or empty folder ({elsewhere}); "
            "nothing was changed"
        )


def _check_same_run(
    folder: Path,
    identity: RunIdentity,
    record: dict[str, Any],
    resume_changes: bool,
    elsewhere: str,
) -> dict[str, tuple[Any, Any]]:
    """The accepted changes when ``record`` is this run; else the error naming each difference."""
    if record.get("command") != identity.command:
        raise SpreadrlError(
            f"{folder} holds {_a(str(record.get('command')))} {describe_record(record)}; "
            f"{_a(identity.command)} {identity.command} run needs its own "
            f"folder ({elsewhere}); nothing was changed"
        )
    changes = differences(record["settings"], identity.settings)
    if not changes:
        return changes
    unsafe = {k: v for k, v in changes.items() if not identity.is_safe(k)}
    if unsafe:
        raise SpreadrlError(
            f"{folder} holds another {describe_record(record)}: this run differs in "
            f"{_shown(unsafe)}; resume it with its own settings, or start this one in "
            f"another folder ({elsewhere}); nothing was changed"
        )
    if not resume_changes:
        raise SpreadrlError(
            f"{folder} holds this {identity.command} run with other settings: {_shown(changes)}; "
            "pass --resume to continue it with these changes, or start a new run in another "
            f"folder ({elsewhere})"
        )
    return changes


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _write_record(
    folder: Path,
    identity: RunIdentity,
    *,
    history: list[dict[str, Any]],
    created: str | None = None,
) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "command": identity.command,
        "digest": identity.digest,
        "created": created or _now(),
        "versions": versions(),
        "summary": dict(identity.summary),
        "files": list(identity.files),
        "settings": dict(identity.settings),
        "history": history,
    }
    tmp = folder / f".{RUN_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(record, indent=2, default=str) + "\n")
    tmp.replace(folder / RUN_FILE)


FULL_DISK = (errno.ENOSPC, errno.EDQUOT)
"""A write that found the disk full or over quota: the user's to fix, not a bug."""


def full_disk(exc: OSError) -> str | None:
    """``no space left on device writing PATH`` for a write that found the disk full (or
    over quota); None for any other ``OSError``."""
    if exc.errno not in FULL_DISK:
        return None
    where = f" writing {exc.filename}" if exc.filename else ""
    return f"{os.strerror(exc.errno).lower()}{where}"


def name_the_file(exc: BaseException, path: Path) -> None:
    """Let an ``OSError`` that names no file name ``path`` (a ``write`` that finds the disk
    full names none, and the user's one line should say where)."""
    if isinstance(exc, OSError) and exc.filename is None:
        exc.filename = str(path)


@contextlib.contextmanager
def naming(path: Path) -> Iterator[None]:
    """:func:`name_the_file` for an ``OSError`` raised inside."""
    try:
        yield
    except OSError as exc:
        name_the_file(exc, path)
        raise


@contextlib.contextmanager
def appending(path: Path) -> Iterator[Any]:
    """``path`` opened to append, :func:`naming` it."""
    with naming(path), path.open("a") as fh:
        yield fh


def cut_back_jsonl(path: Path, step: int | None = None) -> int:
    """Keep the rows of ``path`` logged at or before ``step`` (``None``: every readable row);
    return how many were dropped.

    A resumed run logs again every step after its checkpoint, so the rows the
    interrupted run wrote after it would appear twice. A row without a ``step``
    is kept; a torn line (a write cut by a kill) is dropped, so what a resume
    appends starts on a line of its own.
    """
    if not path.is_file():
        return 0
    kept: list[str] = []
    dropped = 0
    for line in path.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            dropped += 1
            continue
        row_step = row.get("step") if isinstance(row, dict) else None
        if step is not None and isinstance(row_step, int) and row_step > step:
            dropped += 1
            continue
        kept.append(line)
    if dropped:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        tmp.replace(path)
    return dropped


def check_creatable(path: Path, flag: str = "--out") -> None:
    """Refuse, in one line, a folder ``path`` that cannot be made (under a file, in /proc, a
    read-only or forbidden place); an existing folder passes.

    The first missing folder on the way is made and removed again: only the
    system knows whether it can be made, and the command has written nothing yet.
    """
    probe, missing = path.absolute(), None
    while not probe.exists() and not probe.is_symlink() and probe != probe.parent:
        probe, missing = probe.parent, probe
    if not probe.is_dir():
        raise SpreadrlError(f"{flag} {path} cannot be created: {probe} is a file, not a folder")
    if missing is None:
        return
    try:
        missing.mkdir()
    except FileExistsError:
        return  # made meanwhile (another rank, another process): it can be
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise SpreadrlError(f"{flag} {path} cannot be created: {reason} ({missing})") from exc
    with contextlib.suppress(OSError):  # another process may have written into it meanwhile
        missing.rmdir()


FolderCheck = Callable[[Path], "str | None"]
"""Given a non-empty output folder: what in it its command did not write (None when nothing)."""


def run_holding(path: Path) -> Path | None:
    """The run folder (one holding ``run.json``) that ``path`` is or lies in; None when none."""
    path = path.absolute()
    for folder in (path, *path.parents):
        if (folder / RUN_FILE).is_file():
            return folder
    return None


def refuse_inside_run(path: Path, flag: str = "--out") -> None:
    """Refuse to replace ``path`` when it is, or lies in, a run folder: a run is never replaced.

    The refusal names the run and asks for another path; it never suggests
    ``--overwrite``, which cannot apply to a run.
    """
    run = run_holding(path)
    if run is None:
        return
    try:
        record = read_record(run)
        held = f"{_a(str(record.get('command')))} {describe_record(record)}" if record else "a run"
    except SpreadrlError:
        held = "a run"
    where = "holds" if run == path.absolute() else f"lies in {run}, which holds"
    raise SpreadrlError(
        f"{flag} {path} {where} {held}, recorded in its {RUN_FILE}; a run is never replaced, with or without "
        f"--overwrite: choose another {flag}; nothing was changed"
    )


def foreign_to_model(out: Path) -> str | None:
    """What in ``out`` no command writing a model folder wrote (``model init``, ``merge``).

    Such a folder is flat: ``config.json`` beside the weights and tokenizer files.
    """
    if not (out / "config.json").is_file():
        return f"files that are no model (no config.json: {_listing(out)})"
    folders = sorted(p.name + "/" for p in out.iterdir() if p.is_dir())
    if folders:
        return f"folders no model folder holds ({', '.join(folders[:4])})"
    return None


def check_output_folder(
    out: Path,
    *,
    overwrite: bool,
    flag: str = "--out",
    remedy: str = "choose a new folder or pass --overwrite to replace it",
    written_by: FolderCheck | None = None,
) -> None:
    """Refuse an output folder that is a file, or holds anything, unless ``overwrite``.

    ``--overwrite`` replaces only what the same command wrote: a non-empty
    folder that holds a run (``run.json``, here or in a folder above) is always
    refused, and so is one holding anything ``written_by`` says the command did
    not write. Commands that only add files to a folder (``overwrite=True`` as a
    work folder) pass no ``written_by``.
    """
    if out.exists() and not out.is_dir():
        raise SpreadrlError(f"{flag} {out} is a file, not a folder")
    check_creatable(out, flag)
    if not out.is_dir() or not any(out.iterdir()):
        return
    refuse_inside_run(out, flag)
    foreign = written_by(out) if written_by is not None else None
    if foreign is not None:
        raise SpreadrlError(
            f"{flag} {out} holds {foreign}, which this command did not write; --overwrite "
            f"replaces only this command's own output: choose a new or empty folder; "
            "nothing was changed"
        )
    if not overwrite:
        raise SpreadrlError(f"{flag} {out} is not empty ({_listing(out)}); {remedy}")


def check_output_file(
    path: Path,
    *,
    overwrite: bool,
    flag: str = "--out",
    written_by: Callable[[Path], bool] | None = None,
) -> None:
    """Refuse an output file that is a folder, or exists, unless ``overwrite``.

    An existing file in a run folder is never replaced, nor one that
    ``written_by`` says the command did not write.
    """
    if path.is_dir():
        raise SpreadrlError(f"{flag} {path} is a folder; give a file path (e.g. {path}/rows.jsonl)")
    if path.exists():
        refuse_inside_run(path, flag)
        if written_by is not None and not written_by(path):
            raise SpreadrlError(
                f"{flag} {path} exists and is not a file this command wrote; --overwrite "
                "replaces only this command's own output: choose a new file; nothing was changed"
            )
    if path.exists() and not overwrite:
        raise SpreadrlError(
            f"{flag} {path} exists; choose a new file or pass --overwrite to replace it"
        )
    if path.parent.exists() and not path.parent.is_dir():
        raise SpreadrlError(f"{flag} {path}: {path.parent} is a file, not a folder")
    check_creatable(path.parent, flag)


def remove_owned(folder: Path, names: Sequence[str]) -> list[str]:
    """Delete ``names`` (files or folders) in ``folder``, and nothing else; return those removed.

    For a command that owns fixed entries of its folder (the demo's stages):
    anything else in the folder is left as it is.
    """
    import shutil

    removed = []
    for name in names:
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        else:
            continue
        removed.append(name)
    return removed
