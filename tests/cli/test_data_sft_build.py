"""`spreadrl data sft-build` samples with the recipe's rollout section, not a copy of it."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from spreadrl.cli.main import app
from spreadrl.rollout import backends
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.scripted import OraclePolicy

runner = CliRunner()


def test_sft_build_asks_each_turn_for_the_rollout_sections_token_budget(tmp_path, monkeypatch):
    """It used to build its own sampling settings, whose per-turn budget (256 tokens)
    was a second default beside ``rollout.max_new_tokens_per_turn`` (1,024): a
    rejection-sampled turn was cut at a quarter of what training and eval allow."""
    seen = []

    class Recording(OraclePolicy):
        def act_messages(self, states, params):
            seen.append(params)
            return super().act_messages(states, params)

    monkeypatch.setattr(backends, "load_policy", lambda *args, **kwargs: (Recording(), None))
    tasks, out = tmp_path / "tasks", tmp_path / "sft.jsonl"
    made = runner.invoke(app, ["data", "synth", "--out", str(tasks), "--n", "2", "--cases", "1"])
    assert made.exit_code == 0, made.output
    result = runner.invoke(
        app,
        ["data", "sft-build", "--tasks", str(tasks), "--out", str(out)]
        + ["--temperature", "0.5", "--seed", "3", "--max-turns", "6"],
    )
    assert result.exit_code == 0, result.output
    assert seen, "the policy was never asked for a turn"
    budget = RolloutConfig().max_new_tokens_per_turn
    assert budget == 1024
    assert {(p.max_new_tokens, p.temperature, p.seed) for p in seen} == {(budget, 0.5, 3)}
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2  # the oracle's reference conversations passed and were kept
