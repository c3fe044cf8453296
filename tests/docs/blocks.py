"""The fenced command blocks of README.md and docs/*.md, and how the docs tests run them.

A command block is a fence whose info string is ``bash`` or ``sh``. The line right
above a fence (blank lines aside) may hold one marker, an HTML comment (shown in the
source, not on the rendered page):

- ``<!-- docs-test: skip, REASON -->``: not runnable here (a GPU, the network); the
  test lists each skipped block with its reason.
- ``<!-- docs-test: background -->``: each command of the block is a server; it starts
  in the background, the next blocks run once it prints its URL, and it stops when
  the file's blocks are done.

A file may say once, anywhere, ``<!-- docs-test: after README -->``: its blocks start
in a copy of the folder the README's session left (its models and runs), as a reader
who followed the README would. A file that says ``<!-- docs-test: envs -->`` needs the
standard-environment packages (verifiers, openenv): the docs job leaves it to the
standard-environment leg (``make test-envs``), which runs its blocks in its venv
(tests/envs/test_docs_envs.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMAND_INFOS = ("bash", "sh")
MARKER = re.compile(
    r"<!--\s*docs-test:\s*(?P<kind>skip|background|after README|envs)\b,?\s*(?P<why>.*?)\s*-->"
)
FILE_MARKERS = ("after README", "envs")  # said once per file, not of one block
FENCE = re.compile(r"^(?P<fence>```+|~~~+)\s*(?P<info>[^`]*)$")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its info string, its text and its marker."""

    path: Path
    line: int
    info: str
    text: str
    marker: str = ""
    why: str = ""

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def is_command(self) -> bool:
        return self.info.split()[0] in COMMAND_INFOS if self.info else False


def doc_files() -> list[Path]:
    """README.md first (other files may start from its session), then docs/*.md."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def read_blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path`` with the marker on the line above it, if any."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        fence, start = opened["fence"], i
        i += 1
        while i < len(lines) and not lines[i].startswith(fence):
            i += 1
        marker, why = _marker_above(lines, start)
        body = "\n".join(lines[start + 1 : i])
        blocks.append(Block(path, start + 1, opened["info"].strip(), body, marker, why))
        i += 1
    return blocks


def _marker_above(lines: list[str], fence_line: int) -> tuple[str, str]:
    j = fence_line - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    found = MARKER.search(lines[j]) if j >= 0 else None
    if not found or found["kind"] in FILE_MARKERS:
        return "", ""
    return found["kind"], found["why"]


def starts_after_readme(path: Path) -> bool:
    """Whether ``path`` asks to start from the README session's folder."""
    return "<!-- docs-test: after README -->" in path.read_text()


def runs_in_envs_leg(path: Path) -> bool:
    """Whether ``path``'s blocks run in the standard-environment leg, not the docs job."""
    return "<!-- docs-test: envs -->" in path.read_text()


def commands(block: Block) -> list[str]:
    """The block's commands: continuation lines joined, comments and blanks dropped."""
    out: list[str] = []
    pending = ""
    for raw in block.text.splitlines():
        line = raw.rstrip()
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    return out
