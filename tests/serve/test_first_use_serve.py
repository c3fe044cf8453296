"""`spreadrl serve` as a newcomer met it: the README's model served with tools it never saw,
and a task that never started shown as done.

The served model's own recipe preset is the default of ``/v1/tasks`` (and the
page offers it, selected); a task whose prompt does not fit the model's context
is a 422 with one line saying what to change, never a 200 the page calls "Done.".
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from spreadrl.config import dump_config, load_config
from tests.serve.conftest import xlsx_bytes
from tests.serve.fakes import ScriptedPolicy

XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


@pytest.fixture
def readme_run(tmp_path, monkeypatch, tiny_model_dir) -> Path:
    """``runs/grpo`` as the README session's `spreadrl grpo --config tiny-cpu` leaves it."""
    from spreadrl.run_folder import RunIdentity, claim_run_folder
    from spreadrl.train.config import GRPOConfig

    monkeypatch.chdir(tmp_path)
    run = Path("runs/grpo")
    claim_run_folder(run, RunIdentity("grpo", {"steps": 4}))
    (run / "config.yaml").write_text(dump_config(load_config(GRPOConfig, "tiny-cpu")))
    shutil.copytree(tiny_model_dir, run / "final")
    return run


def test_serve_defaults_to_the_tools_the_model_was_trained_with(readme_run, monkeypatch, capsys):
    import spreadrl.cli.serve as serve_cli
    import spreadrl.rollout.engine as engine
    from spreadrl.cli.main import main
    from spreadrl.serve.page import index_html

    seen = {}
    monkeypatch.setattr(engine, "load_policy", lambda *a, **k: (None, None))
    monkeypatch.setattr(serve_cli, "_serve_policy", lambda sock, settings, *a, **k: seen.update(
        settings=settings) or sock.close())  # fmt: skip
    monkeypatch.setattr(
        sys, "argv", ["spreadrl", "serve", "--model", "runs/grpo/final", "--port", "0"]
    )
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 0, capsys.readouterr().err
    assert seen["settings"].preset == "write_range"  # tiny-cpu's env.tools
    page = index_html(seen["settings"].preset)
    assert '<option value="write_range" selected>write_range</option>' in page


def test_a_model_outside_a_run_keeps_the_full_preset(tmp_path, tiny_model_dir):
    from spreadrl.serve.context import recipe_preset

    assert recipe_preset(str(tiny_model_dir)) is None
    assert recipe_preset("Qwen/Qwen3-4B") is None


class TinyContextPolicy(ScriptedPolicy):
    """A policy whose context no prompt of the gym fits (a small model and a big preset)."""

    max_context_tokens = 64


def test_a_task_that_never_started_is_a_422_not_done(app_factory, tiny_policy):
    tokenizer = tiny_policy[1]
    app = app_factory(policy=TinyContextPolicy(tokenizer, []), pool_factory=None, preset="full")
    with TestClient(app) as client:
        r = client.post(  # the docs' /v1/tasks example
            "/v1/tasks",
            files={"file": ("book.xlsx", xlsx_bytes(), XLSX)},
            data={"instruction": "Put the total of column B in B10", "max_turns": "10"},
        )
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "prompt_too_long"
    assert error["message"].startswith("the task never started: its prompt")
    assert "tool preset 'full'" in error["message"] and "write_range" in error["message"]


def test_the_page_never_calls_a_task_without_turns_done():
    from spreadrl.serve.page import index_html

    page = index_html()
    done = page.index('setStatus("Done.", false)')
    assert "if (data.turns)" in page[done - 80 : done]  # only a task that took a turn is done
    assert "The agent never started" in page
