"""`spreadrl plan` never prints "fits" rows for a run it then refuses (issue 32)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from spreadrl.cli.main import app
from spreadrl.errors import ConfigError

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "tiny-cpu.yaml"


def test_a_rank_count_the_prompts_do_not_divide_over_is_one_error_and_no_table():
    """8 prompts per step over 3 ranks (the issue saw it with --gpus 100000)."""
    _refused()


def _refused():
    result = CliRunner().invoke(
        app, ["plan", str(RECIPE), "--shape", "tiny", "--gpus", "3"], terminal_width=200
    )
    assert isinstance(result.exception, ConfigError), result.output
    assert "cannot run on 3 GPUs" in str(result.exception)
    assert "prompts_per_step" in str(result.exception)
    assert "fits" not in result.output


def test_a_plan_that_fits_still_prints_its_table():
    result = CliRunner().invoke(app, ["plan", str(RECIPE), "--shape", "tiny"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "peak: update" in result.output and "fits" in result.output
