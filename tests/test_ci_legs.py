"""The heavy leg is deselected from `make test` and still run by CI, after `make test`."""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_make_test_leaves_out_the_heavy_leg_which_ci_runs_next():
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    addopts = shlex.split(options["ini_options"]["addopts"])
    marks = addopts[addopts.index("-m") + 1]
    assert "not heavy" in marks
    assert any(m.startswith("heavy:") for m in options["ini_options"]["markers"])
    makefile = (ROOT / "Makefile").read_text()
    assert "test-heavy: install sysdeps\n\t$(PY) -m pytest -q -m heavy\n" in makefile
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert lines[lines.index("make test") + 1] == "make test-heavy"


def test_the_heavy_leg_holds_the_readme_session_and_the_torchrun_signals():
    from tests.docs import test_docs_blocks as docs
    from tests.train import test_stop_signals_torchrun as signals

    def marks(test) -> set[str]:
        return {m.name for m in getattr(test, "pytestmark", [])}

    assert "heavy" in marks(docs.test_readme_session_runs_as_written_and_ends_with_real_episodes)
    assert "heavy" in marks(docs.test_doc_command_blocks_run_as_written)
    assert signals.pytestmark.name == "heavy"
    # the docs that start from the README's session go with it (or they would run it)
    assert all(docs.starts_after_readme(p) for p in docs.DOCS)


def test_the_docs_pages_marked_envs_run_in_the_envs_leg_not_the_docs_job():
    """A page that needs verifiers or openenv (docs-test: envs) is left out of the docs
    job's venv and run by make test-envs in its verifiers venv, where its commands are."""
    from tests.docs import test_docs_blocks as docs

    assert docs.ENVS_DOCS, "no docs page is marked docs-test: envs"
    assert not set(docs.ENVS_DOCS) & set(docs.DOCS)
    assert all(docs.runnable(page) for page in docs.ENVS_DOCS)
    makefile = (ROOT / "Makefile").read_text()
    assert (
        "ENVS_VF_TESTS := tests/envs/test_verifiers_spreadsheet.py tests/envs/test_docs_envs.py\n"
        in makefile
    )
    assert "$(ENVS_VF_PY) -m pytest -q -m envs $(ENVS_VF_TESTS)" in makefile
    assert "make test-envs" in (ROOT / ".ci" / "run").read_text().splitlines()
    source = (ROOT / "tests" / "envs" / "test_docs_envs.py").read_text()
    assert "pytestmark = pytest.mark.envs" in source and "run_doc(page" in source
