"""bench trl without TRL: the spreadrl half through its subprocess protocol, the prompts a
same-prompt TRL run gets, the run plan of the CLI's modes, the summary and the table, and the
error when TRL is absent (trl is the optional bench extra, not in dev)."""

import json
import math
import sys
from dataclasses import replace

import pytest
from typer.testing import CliRunner

import spreadrl.bench.trl as bench
from spreadrl.bench.trl import (
    BENCH_VOCAB,
    SMOKE,
    SPREADRL_ASYNC,
    TRL_INSTRUCTION,
    build_bench_model,
    check_same_work,
    check_trl_prompt_ids,
    run_child,
    run_plan,
    same_prompts,
    summarize,
    table_rows,
    trl_dataset_rows,
    trl_steps,
)
from spreadrl.cli.main import app
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
    # a benchmark measures steps: no end-state checkpoint, no final model
    assert not (tmp_path / "run" / "run" / "final").exists()
    assert not any((tmp_path / "run" / "run").glob("checkpoints/*"))
    assert result["system"] == "spreadrl" and result["peak_rss_mb"] > 50
    (rec,) = result["records"]
    episodes = shape.prompts * shape.group
    assert 0 < rec["generated"] <= episodes * shape.new_tokens
    # the tool schema is in spreadrl's system prompt: far longer than the instruction alone
    assert rec["prompt_tokens"] > 100
    # trained tokens: the prompts, what was sampled, and any tokens the episode appended
    assert rec["tokens"] >= rec["prompt_tokens"] * episodes + rec["generated"]
    assert rec["step_s"] >= rec["generate_s"] > 0 and rec["update_s"] > 0

    # --same-prompt: the ids TRL starts from are the ids spreadrl's first step started from.
    # TRL 1.16 tokenizes a text prompt as processing_class(text=prompts)["input_ids"]
    # (GRPOTrainer._tokenize_prompts) and repeats each prompt `group` times in a row
    prompts = same_prompts(bench_model, shape)
    assert len(prompts) == shape.prompts * shape.steps
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(bench_model))
    rows = trl_dataset_rows(prompts)
    trl_ids = tokenizer(text=[r["prompt"] for r in rows[: shape.prompts]])["input_ids"]
    trl_first = [list(ids) for ids in trl_ids for _ in range(shape.group)]
    assert len(result["first_prompt_ids"]) == episodes
    assert trl_first == result["first_prompt_ids"]
    check_trl_prompt_ids(trl_first, prompts, 0, shape)  # the TRL child's own check passes
    # the old mode (a chat of the bare instruction) starts from other, far fewer ids
    bare = trl_dataset_rows(None)[0]["prompt"]
    bare_ids = tokenizer.apply_chat_template(bare, add_generation_prompt=True, tokenize=True)
    bare_ids = bare_ids["input_ids"] if hasattr(bare_ids, "keys") else bare_ids
    assert 0 < len(bare_ids) < len(trl_first[0]) / 5


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
    more = summarize(
        results
        + [
            _result(TRL_INSTRUCTION, [9.0, 1.0], 100, [90, 90], 500),
            _result(SPREADRL_ASYNC, [9.0, 0.5], 800, [50, 50], 1000),
        ]
    )
    ratios = {r[0]: r[1] for r in table_rows(more) if " / " in r[0]}
    assert ratios == {
        "spreadrl / TRL": "0.67x",
        "spreadrl / TRL (instruction prompt)": "2.00x",
        "spreadrl async / TRL": "0.17x",
        "spreadrl async / TRL (instruction prompt)": "0.50x",
    }
    assert math.isnan(summary["trl"]["prompt_tokens"]) is False


def test_trl_prompt_check_refuses_other_ids():
    shape = replace(SMOKE, prompts=2, group=2)
    prompts = [
        {"text": t, "ids": ids} for t, ids in zip("abcd", [[1, 2], [3], [4], [5]], strict=True)
    ]
    check_trl_prompt_ids([[1, 2], [1, 2], [3], [3]], prompts, 0, shape)
    check_trl_prompt_ids([[4], [4], [5], [5]], prompts, 1, shape)  # step 2: the next draws
    with pytest.raises(SpreadrlError, match="step 1 differ"):
        check_trl_prompt_ids([[1, 2], [3], [1, 2], [3]], prompts, 0, shape)  # wrong order
    with pytest.raises(SpreadrlError, match="step 1 differ"):
        check_trl_prompt_ids([[1], [1], [3], [3]], prompts, 0, shape)


def test_same_work_compares_first_steps_of_same_prompt_runs_only():
    def run(system, ids):
        return {"system": system, "records": [], "first_prompt_ids": ids, "peak_rss_mb": 1.0}

    ours = run("spreadrl", [[1, 2], [1, 2]])
    assert check_same_work([run("trl", [[1, 2], [1, 2]]), ours]) is True
    assert check_same_work([run("trl", [[1, 2], [1, 2]]), ours, run("trl", [[1], [1]])]) is False
    # the instruction-prompt runs are not meant to match, and are not compared
    assert check_same_work([run(TRL_INSTRUCTION, [[9], [9]]), ours]) is None
    assert check_same_work([run("trl", [[1, 2]])]) is None
    # asynchronous GRPO draws its first step as the synchronous trainer does
    assert check_same_work([run("trl", [[1, 2], [1, 2]]), run(SPREADRL_ASYNC, [[1], [1]])]) is False


def test_run_plan_modes_and_alternation():
    assert run_plan(["trl", "spreadrl"], True, False, 2) == [
        ["trl", "spreadrl"],
        ["spreadrl", "trl"],
    ]
    assert run_plan(["trl", "spreadrl"], False, False, 1) == [[TRL_INSTRUCTION, "spreadrl"]]
    both = run_plan(["trl", "spreadrl"], True, True, 2)
    assert both == [["trl", TRL_INSTRUCTION, "spreadrl"], ["spreadrl", TRL_INSTRUCTION, "trl"]]
    assert run_plan(["spreadrl"], True, True, 1) == [["spreadrl"]]
    assert run_plan(["trl", "spreadrl"], True, False, 2, with_async=True) == [
        ["trl", "spreadrl", SPREADRL_ASYNC],
        [SPREADRL_ASYNC, "spreadrl", "trl"],
    ]


def test_cli_async_staleness_runs_spreadrl_async_beside_the_synchronous(monkeypatch, tmp_path):
    seen = []

    def fake_child(system, model_dir, shape, work, threads=0, prompts=None):
        seen.append((system, shape.max_staleness))
        rec = {"step_s": 1.0, "generate_s": 0.5, "update_s": 0.5, "tokens": 2.0, "generated": 1.0}
        return {"system": system, "records": [rec], "first_prompt_ids": [], "peak_rss_mb": 1.0}

    monkeypatch.setattr(bench, "build_bench_model", lambda out: out)
    monkeypatch.setattr(bench, "run_child", fake_child)
    args = ["bench", "trl", "--systems", "spreadrl", "--rounds", "1", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, [*args, "--async-staleness", "2"])
    assert result.exit_code == 0, result.output
    assert seen == [("spreadrl", 0), ("spreadrl", 2)]
    assert "spreadrl-async" in result.output


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], [("trl", True, True)]),
        (["--same-prompt"], [("trl", True, True)]),
        (["--instruction-prompt"], [("trl", False, False)]),
        (["--both-modes"], [("trl", True, True), ("trl", False, False)]),
    ],
)
def test_cli_prompt_mode_reaches_the_trl_runs(monkeypatch, tmp_path, flags, expected):
    """The mode decides what the TRL child is given: the same-prompt file, or nothing."""
    seen = []
    drawn = [{"text": "x", "ids": [1]}]

    def fake_child(system, model_dir, shape, work, threads=0, prompts=None):
        given = json.loads(prompts.read_text()) if prompts and shape.same_prompt else None
        seen.append((system, shape.same_prompt, given == drawn))
        ids = [[1]] * (shape.prompts * shape.group)
        rec = {"step_s": 1.0, "generate_s": 0.5, "update_s": 0.5, "tokens": 2.0, "generated": 1.0}
        return {"system": system, "records": [rec], "first_prompt_ids": ids, "peak_rss_mb": 1.0}

    monkeypatch.setattr(bench, "build_bench_model", lambda out: out)
    monkeypatch.setattr(bench, "same_prompts", lambda model_dir, shape: drawn)
    monkeypatch.setattr(bench, "run_child", fake_child)
    args = ["bench", "trl", "--systems", "trl", "--rounds", "1", "--out", str(tmp_path), *flags]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert seen == expected


def test_without_trl_the_error_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "trl", None)  # import trl now raises ImportError
    with pytest.raises(SpreadrlError, match=r"spreadrl\[bench\]"):
        trl_steps(tmp_path, SMOKE, tmp_path / "out")
