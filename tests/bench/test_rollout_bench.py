"""`spreadrl bench rollout --against generate`: both run the same rows to the same length."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from spreadrl.bench.rollout import _contexts
from spreadrl.cli.main import app


def test_contexts_are_groups_of_one_prompt_each():
    rows = _contexts(vocab=50, batch=8, group=4, prompt_tokens=5, seed=0)
    assert len(rows) == 8 and all(len(r) == 5 for r in rows)
    assert rows[0] == rows[3] and rows[4] == rows[7] and rows[0] != rows[4]


def test_against_generate_times_both_on_equal_work(tmp_path, monkeypatch, tiny_model_dir):
    from transformers import GenerationMixin

    new_tokens = []
    original = GenerationMixin.generate

    def counting(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        width = kwargs["input_ids"].shape[1]
        new_tokens.append(out.shape[1] - width if hasattr(out, "shape") else None)
        return out

    monkeypatch.setattr(GenerationMixin, "generate", counting)
    out = tmp_path / "against.json"
    args = ["bench", "rollout", "--against", "generate", "--model", str(tiny_model_dir)]
    args += ["--batch", "4", "--group", "2", "--prompt-tokens", "6", "--max-new-tokens", "5"]
    args += ["--repeats", "1", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert set(report["runs"]) == {"transformers generate", "spreadrl hf (default)"}
    assert report["runs"]["transformers generate"]["vs_generate"] == 1.0
    assert all(r["tok_s"] > 0 and len(r["seconds"]) == 1 for r in report["runs"].values())
    assert [n for n in new_tokens if n is not None] == [5, 5]  # plain generate: warm-up, timed
    assert "x generate" in result.output


def test_against_anything_else_is_one_error_line(tiny_model_dir):
    result = CliRunner().invoke(app, ["bench", "rollout", "--against", "vllm"])
    assert result.exit_code != 0
    assert "'generate'" in str(result.exception) + result.output
