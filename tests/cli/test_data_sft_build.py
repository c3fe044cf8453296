"""`spreadrl data sft-build` samples with the recipe's rollout section, not a copy of it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from spreadrl.cli.main import app
from spreadrl.errors import SpreadrlError
from spreadrl.rollout import engine
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engines.scripted import OraclePolicy

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

    monkeypatch.setattr(engine, "load_policy", lambda *args, **kwargs: (Recording(), None))
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


RECIPE = Path(__file__).resolve().parents[2] / "configs" / "tiny-cpu.yaml"


def _easy_tasks(tmp_path: Path) -> Path:
    tasks = tmp_path / "tasks"
    argv = ["data", "synth", "--out", str(tasks), "--n", "3", "--cases", "1"]
    made = runner.invoke(app, [*argv, "--families", "column_sum", "--difficulty", "easy"])
    assert made.exit_code == 0, made.output
    return tasks


def test_sft_build_with_a_recipe_writes_rows_in_its_tools_and_overview(tmp_path):
    """The README's rows were in the full preset with an overview, 5k tokens each, while
    its GRPO recipe samples with one tool and no overview: SFT taught another format."""
    out = tmp_path / "sft.jsonl"
    built = runner.invoke(
        app,
        ["data", "sft-build", "--config", str(RECIPE), "--tasks", str(_easy_tasks(tmp_path))]
        + ["--out", str(out)],
    )
    assert built.exit_code == 0, built.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows
    for row in rows:
        assert [t["function"]["name"] for t in row["tools"]] == ["write_range"]
        user = next(m["content"] for m in row["messages"] if m["role"] == "user")
        assert "Sheet1" not in user  # env.overview: none, no workbook preview in the prompt
        assert sum(m["role"] == "assistant" for m in row["messages"]) <= 2  # max_turns: 2


def _short_context_model(tiny_model_dir: Path, tmp_path: Path, positions: int) -> Path:
    model = tmp_path / "short"
    shutil.copytree(tiny_model_dir, model)
    config = json.loads((model / "config.json").read_text())
    config["max_position_embeddings"] = positions
    (model / "config.json").write_text(json.dumps(config))
    return model


def test_rows_over_the_models_context_are_dropped_and_counted(tiny_model_dir, tmp_path):
    tasks = _easy_tasks(tmp_path)
    out = tmp_path / "sft.jsonl"
    argv = ["data", "sft-build", "--config", str(RECIPE), "--tasks", str(tasks)]
    argv += ["--out", str(out), "--model"]
    fits = runner.invoke(app, [*argv, str(tiny_model_dir)], terminal_width=200)
    assert fits.exit_code == 0, fits.output
    assert "dropped 0 over the model's 4096-token context" in fits.output
    kept = len(out.read_text().splitlines())
    assert kept
    short = _short_context_model(tiny_model_dir, tmp_path, 64)
    refused = runner.invoke(app, [*argv, str(short), "--overwrite"], terminal_width=200)
    assert isinstance(refused.exception, SpreadrlError)
    assert f"every one of the {kept} conversations is longer than" in str(refused.exception)
    assert "64-token context" in str(refused.exception)


class _StopsAt(OraclePolicy):
    """The oracle, with a Ctrl-C in its ``at``-th turn; counts the turns it was asked for."""

    asked = 0
    at: int | None = None

    def act_messages(self, states, params):
        type(self).asked += 1
        if type(self).asked == type(self).at:
            raise KeyboardInterrupt
        return super().act_messages(states, params)


def test_a_stopped_build_keeps_its_batches_and_the_same_command_finishes_it(tmp_path, monkeypatch):
    """A Ctrl-C used to lose every episode of the build. Now the finished batches stay in
    OUT.partial, the line says so, and the same command runs only the rest, writing what
    an uninterrupted build writes; a changed setting is refused instead of mixed in."""
    from spreadrl.train import sft_data

    monkeypatch.setattr(sft_data.build_sft_data, "__kwdefaults__", {
        **sft_data.build_sft_data.__kwdefaults__, "batch_size": 2})  # fmt: skip
    monkeypatch.setattr(engine, "load_policy", lambda *args, **kwargs: (_StopsAt(), None))
    tasks = tmp_path / "tasks"
    made = runner.invoke(app, ["data", "synth", "--out", str(tasks), "--n", "5", "--cases", "1"])
    assert made.exit_code == 0, made.output
    straight, out = tmp_path / "straight.jsonl", tmp_path / "sft.jsonl"
    other = ["data", "sft-build", "--tasks", str(tasks), "--seed", "4", "--out"]
    argv = [*other[:-2], "3", "--out"]
    assert runner.invoke(app, [*argv, str(straight)]).exit_code == 0
    per_build = _StopsAt.asked

    _StopsAt.asked, _StopsAt.at = 0, per_build - 1  # the last batch's last turn
    stopped = runner.invoke(app, [*argv, str(out)])
    assert stopped.exit_code == 130, stopped.output
    partial = out.with_name("sft.jsonl.partial")
    assert f"stopped: 4 episodes are kept in {partial}; the same command goes on" in " ".join(
        stopped.output.split()
    )
    assert not out.exists() and len(partial.read_text().splitlines()) == 1 + 2  # two batches

    refused = runner.invoke(app, [*other, str(out)])
    assert isinstance(refused.exception, SpreadrlError), refused.output  # one error line
    assert "other settings (seed)" in str(refused.exception)

    _StopsAt.asked, _StopsAt.at = 0, None
    resumed = runner.invoke(app, [*argv, str(out)])
    assert resumed.exit_code == 0, resumed.output
    assert "5 episodes, 5 passed" in resumed.output
    assert out.read_bytes() == straight.read_bytes() and not partial.exists()
    assert 0 < _StopsAt.asked < per_build  # the kept batches were not rolled out again

    _StopsAt.asked, _StopsAt.at = 0, 2  # stopped again, then --overwrite starts afresh
    runner.invoke(app, [*argv, str(tmp_path / "again.jsonl")])
    _StopsAt.asked, _StopsAt.at = 0, None
    again = runner.invoke(app, [*other, str(tmp_path / "again.jsonl"), "--overwrite"])
    assert again.exit_code == 0, again.output
    assert _StopsAt.asked == per_build


def test_a_partial_file_no_build_wrote_is_refused_and_kept(tmp_path, monkeypatch):
    """OUT.partial is a build's only when its first line is the build's settings: someone's
    own file of that name used to be cut back (its non-JSON lines dropped), crash the
    resume, or be deleted by --overwrite."""
    monkeypatch.setattr(engine, "load_policy", lambda *args, **kwargs: (OraclePolicy(), None))
    tasks = tmp_path / "tasks"
    made = runner.invoke(app, ["data", "synth", "--out", str(tasks), "--n", "2", "--cases", "1"])
    assert made.exit_code == 0, made.output
    out = tmp_path / "sft.jsonl"
    partial = out.with_name("sft.jsonl.partial")
    argv = ["data", "sft-build", "--tasks", str(tasks), "--out", str(out)]
    for text in ('{"step": 1}\nnotes, not json\n', "[1, 2]\n", '{"settings": {}}\n{"a": 1}\n'):
        partial.write_text(text)
        for flags in ([], ["--overwrite"]):
            refused = runner.invoke(app, [*argv, *flags])
            assert isinstance(refused.exception, SpreadrlError), refused.output
            assert "is not a stopped sft-build's file" in str(refused.exception)
            assert partial.read_text() == text and not out.exists()
    partial.unlink()
    partial.mkdir()
    refused = runner.invoke(app, [*argv, "--overwrite"])
    assert "is not a stopped sft-build's file" in str(refused.exception)
    assert partial.is_dir()
