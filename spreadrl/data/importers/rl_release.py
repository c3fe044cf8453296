"""The layout of Spreadsheet-RL's released dataset, and where its task folders are read from.

Facts taken from upstream's code (GitHub ``Spreadsheet-RL/Spreadsheet-RL``):
the README's dataset section (file names, splits, the zip's top folders), the
Slurm launcher ``scripts/multinode_train_fsdp.slurm`` (parquet files at the
download root or under ``data/``, ``spreadsheets.zip`` unpacked beside them),
``verl/verl/utils/paths.py`` (``reward_model.ground_truth`` is a task folder
path relative to that root, a string or a one-element list, never absolute,
never with ``..``), the agent loop (it copies the task's ``output.xlsx`` to
the episode's ``data.xlsx``) and the reward service's ``sample_meta.py``
(``instruction.json``'s ``answer_position``; the answer is ``target.xlsx``).

A task folder is read from the unpacked folder when it is there and from
``spreadsheets.zip`` otherwise, so a download root holding both (the README's
``unzip data/spreadsheets.zip -d data``) works, and so does one with only the
zip. Nothing here parses workbooks.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from spreadrl.errors import SpreadrlError, TaskFormatError

SPLITS = ("train", "test", "test_2", "test_verified", "test_domain")
PARSERS = ("hermes", "qwen3_coder")
# the zip's top folder holding each split's task folders (README, "Dataset")
SPLIT_FOLDERS = {
    "train": "excelforum",
    "test": "spreadsheetbench",
    "test_2": "spreadsheetbench_2",
    "test_verified": "spreadsheetbench_verified",
    "test_domain": "domain",
}
ARCHIVE = "spreadsheets.zip"
INSTRUCTION = "instruction.json"
START_WORKBOOK = "output.xlsx"  # the agent loop seeds data.xlsx from it, not from input.xlsx
ANSWER_WORKBOOK = "target.xlsx"
_PARQUET = re.compile(r"^(" + "|".join(SPLITS) + r")_(" + "|".join(PARSERS) + r")\.parquet$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._\-]")


def parquet_name(split: str, parser: str) -> str:
    """``{split}_{parser}.parquet``, the released file of one split in one tool-call format."""
    return f"{split}_{parser}.parquet"


def parse_parquet_name(path: Path) -> tuple[str, str] | None:
    """(split, parser) of a released parquet file's name, or None for any other name."""
    match = _PARQUET.match(path.name)
    return (match.group(1), match.group(2)) if match else None


def ground_truth_path(value: object, where: str) -> str:
    """The task folder a row points at, checked the way upstream's agent loop checks it."""
    if isinstance(value, list | tuple) and len(value) == 1:
        value = value[0]
    text = value.strip() if isinstance(value, str) else ""
    path = PurePosixPath(text)
    if not text or "\0" in text or path.is_absolute() or ".." in path.parts:
        raise TaskFormatError(
            f"{where}: reward_model.ground_truth {value!r} is not a relative task folder path "
            "inside spreadsheets.zip (e.g. excelforum/<category>/task-job-<hash>)"
        )
    return path.as_posix()


def task_id_for(folder: str) -> str:
    """A task id (a folder and file name) from a task folder path: ``/`` becomes ``__``."""
    return "__".join(_UNSAFE.sub("_", part) for part in PurePosixPath(folder).parts)


@dataclass
class TaskFolders:
    """Reads task folders from an unpacked release root, its ``spreadsheets.zip``, or both.

    ``root`` is the folder the ground-truth paths are relative to (holding
    ``excelforum/``, ``spreadsheetbench/``...), ``archive`` the zip. A folder
    present under ``root`` wins; the zip is the fallback, read member by member
    without unpacking it.
    """

    root: Path | None = None
    archive: Path | None = None
    _zip: zipfile.ZipFile | None = field(default=None, repr=False)
    _members: set[str] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        if self.archive is not None:
            try:
                self._zip = zipfile.ZipFile(self.archive)
            except (OSError, zipfile.BadZipFile) as exc:
                raise SpreadrlError(f"{self.archive}: not a readable zip archive ({exc})") from exc
            self._members = set(self._zip.namelist())

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()
            self._zip = None

    def describe(self) -> str:
        places = [str(p) for p in (self.root, self.archive) if p is not None]
        return " and ".join(places) or "nowhere"

    def _on_disk(self, folder: str) -> Path | None:
        if self.root is None:
            return None
        path = self.root / folder
        return path if (path / INSTRUCTION).is_file() else None

    def has(self, folder: str) -> bool:
        return self._on_disk(folder) is not None or f"{folder}/{INSTRUCTION}" in self._members

    def read(self, folder: str, name: str, task_id: str) -> bytes:
        """The bytes of ``folder/name``, from disk when unpacked, else from the zip."""
        on_disk = self._on_disk(folder)
        if on_disk is not None:
            path = on_disk / name
            if path.is_file():
                return path.read_bytes()
        elif f"{folder}/{name}" in self._members and self._zip is not None:
            return self._zip.read(f"{folder}/{name}")
        where = on_disk if on_disk is not None else f"{self.describe()}:{folder}"
        if not self.has(folder):
            raise TaskFormatError(
                f"task {task_id!r}: task folder {folder!r} is in neither {self.describe()} "
                f"(unzip {ARCHIVE} beside the parquet files, or pass its path with --workbooks)"
            )
        raise TaskFormatError(f"task {task_id!r}: {where} has no {name}")

    def folders(self, top: str | None) -> list[str]:
        """Every task folder (one holding instruction.json) under ``top``, on disk and zipped."""
        found: set[str] = set()
        if self.root is not None:
            base = self.root / top if top else self.root
            if base.is_dir():
                found |= {
                    p.parent.relative_to(self.root).as_posix() for p in base.rglob(INSTRUCTION)
                }
        prefix = f"{top}/" if top else ""
        for name in self._members:
            if name.startswith(prefix) and name.endswith(f"/{INSTRUCTION}"):
                found.add(name[: -len(INSTRUCTION) - 1])
        return sorted(found)

    def top_folders(self) -> list[str]:
        """Folder names at the top of the root and of the zip."""
        names: set[str] = set()
        if self.root is not None and self.root.is_dir():
            names |= {p.name for p in self.root.iterdir() if p.is_dir()}
        names |= {m.split("/", 1)[0] for m in self._members if "/" in m}
        return sorted(names)


def find_workbooks(base: Path, explicit: Path | None = None) -> TaskFolders | None:
    """The task folders beside parquet files in ``base`` (or at ``explicit``), or None.

    ``explicit`` may be the zip or an unpacked root. Otherwise ``base`` is
    searched for its unpacked top folders and its ``spreadsheets.zip`` (the
    README unzips the archive into the folder holding the parquet files).
    """
    if explicit is not None:
        if not explicit.exists():
            raise SpreadrlError(f"--workbooks {explicit}: no such file or folder")
        if explicit.is_file():
            return TaskFolders(archive=explicit)
        archive = explicit / ARCHIVE
        return TaskFolders(root=explicit, archive=archive if archive.is_file() else None)
    archive = base / ARCHIVE
    unpacked = any((base / top).is_dir() for top in SPLIT_FOLDERS.values())
    if not (unpacked or archive.is_file()):
        return None
    return TaskFolders(
        root=base if unpacked else None, archive=archive if archive.is_file() else None
    )
