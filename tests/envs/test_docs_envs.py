"""The docs pages marked ``<!-- docs-test: envs -->`` (docs/verifiers.md), run as written
by the docs tests' own runner, here in the standard-environment leg's verifiers venv:
their commands (vf-eval, vf-validate) come from it. The runner's network namespace is
off for them: verifiers' chat harness fetches its packages with uv."""

from __future__ import annotations

import json

import pytest

from tests.docs.test_docs_blocks import ENVS_DOCS, run_doc

pytestmark = pytest.mark.envs


def test_the_envs_pages_are_the_verifiers_page():
    assert [p.name for p in ENVS_DOCS] == ["verifiers.md"]


@pytest.mark.timeout(1800)  # a hang guard only
def test_docs_verifiers_page_runs_as_written(tmp_path):
    (page,) = ENVS_DOCS
    workdir = tmp_path / "work"
    workdir.mkdir()
    run_doc(page, workdir, own_network=False)
    # vf-validate: every task's reference solution scores 1, its untouched workbook 0
    (summary,) = (workdir / "runs" / "vf-validate").glob("*/summary.json")
    summary = json.loads(summary.read_text())
    assert summary["total"] == 4 and summary["outcomes"]["valid"] == 4, summary
    # vf-eval with the model served under the name the page asks for: scored episodes,
    # no errors (a wrong model name is an error on every episode, and vf-eval exits 0)
    (traces,) = (workdir / "runs" / "vf-eval").glob("*/traces.jsonl")
    episodes = [json.loads(line) for line in traces.read_text().splitlines()]
    assert len(episodes) == 2
    for episode in episodes:
        (trace,) = episode["traces"]
        assert episode["errors"] == [] and trace["errors"] == [], episode["errors"]
        assert trace["rewards"]["checker"]["score"] in (0.0, 1.0)
        assert trace["ok"] and len(trace["calls"]) >= 1  # the model took turns
