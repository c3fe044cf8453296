"""`spreadrl bench levers`: each variant runs the same step; FLOPs show what a lever changes."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from spreadrl.bench.levers import LeverShape, run_levers
from spreadrl.cli.main import app

TINY = LeverShape(preset="tiny", sequences=2, seq_len=32, prompt_len=8, steps=1)


def test_levers_keep_the_numbers_and_selective_checkpointing_counts_fewer_flops(tmp_path):
    results = run_levers(TINY, ["selective-ac", "no-ac", "fused-head", "packed"], tmp_path)
    base = results["baseline"]
    assert list(results)[0] == "baseline"
    # recomputing half the layers, then none: fewer FLOPs; the fused head does the same work
    assert base["flops"] > results["selective-ac"]["flops"] > results["no-ac"]["flops"]
    assert results["fused-head"]["flops"] == base["flops"]
    assert results["packed"]["flops"] < base["flops"]  # no padding computed
    for name, r in results.items():  # same weights, same batch: the same first step
        assert r["first_loss"] == pytest.approx(base["first_loss"], rel=1e-5), name
        assert r["first_grad_norm"] == pytest.approx(base["first_grad_norm"], rel=1e-4), name
    trace = json.loads((tmp_path / "update-baseline.json").read_text())
    assert trace["traceEvents"]  # the baseline's step, profiled
    assert "aten::" in (tmp_path / "update-baseline.txt").read_text()


def test_an_unknown_lever_is_one_error_line():
    result = CliRunner().invoke(app, ["bench", "levers", "--lever", "turbo"])
    assert result.exit_code != 0
    assert "turbo" in str(result.exception) + result.output
