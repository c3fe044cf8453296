"""The eval recipe as a library call: no terminal, lines told to a reporter, errors raised."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from spreadrl.env.config import EnvConfig
from spreadrl.errors import SpreadrlError
from spreadrl.eval.recipe import (
    EngineSpec,
    EpisodeSettings,
    EvalSpec,
    check_episode_errors,
    evaluate,
)
from spreadrl.rollout.config import RolloutConfig


@dataclass
class Lines:
    """A reporter that keeps the lines it is told (tables and progress are not needed here)."""

    told: list[tuple[str, str]] = field(default_factory=list)

    def line(self, text: str, *, level: str = "info") -> None:
        self.told.append((level, text))

    def progress(self, *args, **kwargs):
        from spreadrl.reporting import LogReporter

        return LogReporter().progress(*args, **kwargs)


EPISODE = EpisodeSettings(RolloutConfig(max_turns=4), EnvConfig(), max_prompt_tokens=0)
ENGINE = EngineSpec(device="cpu", base_url=None, batch_size=8)


def test_evaluate_returns_the_report_and_tells_a_resume(tmp_path):
    spec = EvalSpec(model=None, backend="oracle", tasks="builtin:demo-test", samples=1, seed=0)
    out = tmp_path / "eval"
    reporter = Lines()
    report = evaluate(EPISODE, spec, ENGINE, out, recipe=None, skip_bad=False, reporter=reporter)
    assert report["episodes"] > 0 and report["episode_errors"] == 0
    assert json.loads((out / "report.json").read_text())["episodes"] == report["episodes"]
    assert not any("resuming" in text for _, text in reporter.told)
    again = evaluate(EPISODE, spec, ENGINE, out, recipe=None, skip_bad=False, reporter=reporter)
    assert again["episodes"] == report["episodes"]
    assert ("info", f"resuming the eval in {out} (finished episodes are kept)") in reporter.told


def test_evaluate_raises_on_a_run_folder_given_as_the_model(tmp_path):
    run = tmp_path / "grpo"
    run.mkdir()
    (run / "run.json").write_text("{}")
    spec = EvalSpec(model=str(run), backend="hf", tasks="builtin:demo-test", samples=1, seed=0)
    with pytest.raises(SpreadrlError, match="is a run folder, not a model"):
        evaluate(
            EPISODE, spec, ENGINE, tmp_path / "e", recipe=None, skip_bad=False, reporter=Lines()
        )
    assert not (tmp_path / "e").exists()


def test_episode_errors_raise_after_the_report(tmp_path):
    report = {"episode_errors": 0, "episodes": 3, "errors": []}
    check_episode_errors(report, tmp_path)  # nothing failed: no error
    report = {"episode_errors": 1, "episodes": 3, "errors": [{"episode": "t/0", "error": "boom"}]}
    with pytest.raises(
        SpreadrlError, match=r"1 of 3 episodes failed with an error \(first, t/0: boom\)"
    ):
        check_episode_errors(report, tmp_path)
