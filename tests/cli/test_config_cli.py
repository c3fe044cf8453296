"""`spreadrl config show` and `spreadrl config keys`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from spreadrl.cli.main import app
from spreadrl.config import load_config
from spreadrl.errors import ConfigError
from spreadrl.train.config import GRPOConfig

runner = CliRunner()
RECIPE = Path(__file__).resolve().parents[2] / "configs" / "tiny-cpu.yaml"


def test_show_prints_the_resolved_recipe_with_overrides(tmp_path):
    result = runner.invoke(app, ["config", "show", str(RECIPE), "rollout.max_turns=5"])
    assert result.exit_code == 0, result.output
    shown = yaml.safe_load(result.output)
    recipe = yaml.safe_load(RECIPE.read_text())
    assert shown["rollout"]["max_turns"] == 5
    assert shown["optim"]["lr"] == pytest.approx(float(recipe["optim"]["lr"]))
    # every default is filled in, and the output loads back to the same config
    assert "kl_estimator" in shown["loss"]
    resolved = tmp_path / "resolved.yaml"
    resolved.write_text(result.output)
    assert load_config(GRPOConfig, resolved) == load_config(
        GRPOConfig, RECIPE, ["rollout.max_turns=5"]
    )


def test_show_rejects_a_bad_key_naming_it():
    result = runner.invoke(app, ["config", "show", str(RECIPE), "rollout.max_trns=5"])
    assert isinstance(result.exception, ConfigError)
    assert "rollout.max_trns" in str(result.exception)


def test_keys_lists_every_recipe():
    result = runner.invoke(app, ["config", "keys"])
    assert result.exit_code == 0, result.output
    assert "spreadrl grpo" in result.output and "spreadrl sft" in result.output
    assert "`rollout.max_turns`" in result.output
