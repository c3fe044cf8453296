"""README.md and docs/*.md as tests: every fenced command block runs, as written.

Each file's ``bash`` blocks run in order, as one script, in a fresh folder outside
the checkout with the ``spreadrl`` entry point on PATH; a file marked ``after
README`` starts from a copy of what the README's session left. Only a block marked
``<!-- docs-test: skip, REASON -->`` (a GPU, the network) is left out, and the run
prints each one with its reason. With bubblewrap installed, a file runs in a network
namespace of its own, so the servers the docs start on fixed ports (8000, 8400)
never meet another process's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import (
    ROOT,
    Block,
    doc_files,
    read_blocks,
    runs_in_envs_leg,
    starts_after_readme,
)
from tests.docs.script import file_script

FILES = doc_files()


def runnable(path: Path) -> list[Block]:
    return [b for b in read_blocks(path) if b.is_command and b.marker != "skip"]


def skipped() -> list[Block]:
    return [b for p in FILES for b in read_blocks(p) if b.is_command and b.marker == "skip"]


def run_doc(path: Path, workdir: Path, *, own_network: bool = True) -> str:
    """Run ``path``'s command blocks in ``workdir``; return the output, failing on an error.
    ``own_network``: in a network namespace of its own when bubblewrap is there (off for a
    file whose tools fetch packages, as verifiers' harness does with uv)."""
    script = workdir / ".docs-test.sh"
    script.write_text(file_script(runnable(path)))
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    argv = ["bash", str(script)]
    if own_network and shutil.which("bwrap"):
        argv = ["bwrap", "--dev-bind", "/", "/", "--unshare-net", "--die-with-parent", *argv]
    done = subprocess.run(
        argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=1700, check=False
    )
    output = done.stdout + done.stderr
    failed_in = [line for line in done.stdout.splitlines() if line.startswith("@@block")]
    assert done.returncode == 0 and "@@done" in done.stdout, (
        f"{failed_in[-1] if failed_in else path.name} failed (rc {done.returncode}):\n"
        + output[-6000:]
    )
    return output


@pytest.fixture(scope="session")
def readme_session(tmp_path_factory) -> tuple[Path, str]:
    """The README's blocks, run once; later files may start from the folder they leave."""
    workdir = tmp_path_factory.mktemp("readme")
    assert ROOT not in workdir.parents
    return workdir, run_doc(ROOT / "README.md", workdir)


# a hang guard only: on an idle 2-core machine the README session takes about two minutes
GUARD = pytest.mark.timeout(1800)


@pytest.mark.slow
@pytest.mark.heavy
@GUARD
def test_readme_session_runs_as_written_and_ends_with_real_episodes(readme_session):
    workdir, _ = readme_session
    report = json.loads((workdir / "runs" / "eval" / "report.json").read_text())
    episodes = report["episodes"]
    assert episodes > 0
    # real episodes: the model took turns, not one prompt refused as too long
    stops = report.get("stop_reasons", {})
    assert stops.get("prompt_too_long", 0) < episodes, stops
    assert report["mean_turns"] >= 1, report


DOCS = [p for p in FILES if p.name != "README.md" and not runs_in_envs_leg(p) and runnable(p)]
ENVS_DOCS = [p for p in FILES if runs_in_envs_leg(p)]  # run by make test-envs


@pytest.mark.slow
@pytest.mark.heavy
@GUARD
@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_doc_command_blocks_run_as_written(path, readme_session, tmp_path):
    workdir = tmp_path / "work"
    if starts_after_readme(path):
        shutil.copytree(readme_session[0], workdir, ignore=shutil.ignore_patterns(".*"))
    else:
        workdir.mkdir()
    run_doc(path, workdir)


def test_skipped_blocks_are_listed_with_a_reason(capsys):
    blocks = skipped()
    for block in blocks:
        assert block.why, f"{block.where}: a skip marker needs its reason"
    with capsys.disabled():
        print("\ndocs blocks not run here:")
        for block in blocks:
            print(f"  {block.where}: {block.why}")
        for path in ENVS_DOCS:
            print(
                f"  {path.relative_to(ROOT)}: run by make test-envs (tests/envs/test_docs_envs.py)"
            )


def test_no_command_hides_in_an_untagged_or_text_block():
    """A ``spreadrl`` command in a plain or ``text`` fence would escape the docs tests."""
    hidden = [
        b.where
        for p in FILES
        for b in read_blocks(p)
        if not b.is_command
        and b.info in ("", "console", "shell", "sh-session")
        and any(line.startswith(("spreadrl ", "$ spreadrl")) for line in b.text.splitlines())
    ]
    assert not hidden, f"command blocks not tagged bash: {hidden}"
