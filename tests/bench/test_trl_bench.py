"""bench trl without TRL: the spreadrl half through its subprocess protocol, the summary and
the table, and the error when TRL is absent (trl is the optional bench extra, not in dev)."""

import math
import sys
from dataclasses import replace

import pytest

from spreadrl.bench.trl import (
    BENCH_VOCAB,
    SMOKE,
    build_bench_model,
    run_child,
    summarize,
    table_rows,
    trl_steps,
)
from spreadrl.errors import SpreadrlError


@pytest.fixture(scope="module")
def bench_model(tmp_path_factory):
    return build_bench_model(tmp_path_factory.mktemp("bench") / "model")


def test_bench_model_has_the_issue_shape(bench_model):
    from spreadrl.models.init import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(str(bench_model))
    cfg = model.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size) == (256, 4, 768)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (4, 2, 64)
    assert cfg.vocab_size == BENCH_VOCAB and len(tok) <= BENCH_VOCAB
    n = sum(p.numel() for p in model.parameters())
    assert 4.6e6 < n < 4.8e6  # 4.72M with tied embeddings


@pytest.mark.slow
def test_spreadrl_child_runs_the_shape(bench_model, tmp_path):
    shape = replace(SMOKE, steps=1, micro_batch_tokens=2048)
    result = run_child("spreadrl", bench_model, shape, tmp_path / "run")
    resolved = (tmp_path / "run" / "run" / "config.yaml").read_text()
    assert "micro_batch_tokens: 2048" in resolved  # --micro-batch-tokens reaches the recipe
    assert result["system"] == "spreadrl" and result["peak_rss_mb"] > 50
    (rec,) = result["records"]
    episodes = shape.prompts * shape.group
    assert 0 < rec["generated"] <= episodes * shape.new_tokens
    # the tool schema is in spreadrl's system prompt: far longer than the instruction alone
    assert rec["prompt_tokens"] > 100
    # trained tokens: the prompts, what was sampled, and any tokens the episode appended
    assert rec["tokens"] >= rec["prompt_tokens"] * episodes + rec["generated"]
    assert rec["step_s"] >= rec["generate_s"] > 0 and rec["update_s"] > 0


def _result(system, step_s, tokens, generated, rss):
    records = [
        {"step_s": s, "generate_s": s / 2, "update_s": s / 2, "tokens": tokens, "generated": g}
        for s, g in zip(step_s, generated, strict=True)
    ]
    return {"system": system, "records": records, "peak_rss_mb": rss}


def test_summary_skips_warmup_and_rows_give_ratios():
    results = [
        _result("trl", [100.0, 2.0, 2.0], 400, [100, 100, 100], 900),
        _result("spreadrl", [100.0, 1.0, 3.0], 800, [50, 50, 50], 1000),
        _result("trl", [100.0, 4.0, 4.0], 400, [100, 100, 100], 1100),
    ]
    summary = summarize(results)
    assert summary["trl"]["steps"] == 4 and summary["spreadrl"]["steps"] == 2
    assert summary["trl"]["step_s"] == 3.0 and summary["spreadrl"]["step_s"] == 2.0
    assert summary["trl"]["tokens_per_s"] == pytest.approx(1600 / 12)
    assert summary["spreadrl"]["generated_per_s"] == pytest.approx(100 / 4)
    assert summary["trl"]["peak_rss_mb"] == 1100  # the worst run
    rows = table_rows(summary)
    assert [r[0] for r in rows] == ["trl", "spreadrl", "spreadrl / TRL"]
    assert rows[-1][1] == f"{2.0 / 3.0:.2f}x"
    assert math.isnan(summary["trl"]["prompt_tokens"]) is False


def test_without_trl_the_error_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "trl", None)  # import trl now raises ImportError
    with pytest.raises(SpreadrlError, match=r"spreadrl\[bench\]"):
        trl_steps(tmp_path, SMOKE, tmp_path / "out")
