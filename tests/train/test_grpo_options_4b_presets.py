"""Both 4B presets load and run one GRPO step on CPU (issue 12, item 6).

The model is ``spreadrl model init --preset tiny --tokenizer qwen3``: a random Qwen3
with Qwen3's real tokenizer and chat template and the real vocabulary (151,936
embedding rows), so the vocabulary-sized tensors (embedding, logits, log-probs)
have their real width, and tiny layers in place of Qwen3-4B's. Everything else
comes from the preset file as written, except what must shrink for a CPU test,
each override with its reason:

- ``model.name_or_path``: the random model (no weights can be downloaded);
- ``data.train_tasks``: the presets name data folders that are not in the repo;
- ``steps=1``, ``rollout.group_size=2``, ``rollout.prompts_per_step=1``: one small step;
- ``rollout.max_new_tokens_per_turn=8``, ``rollout.max_response_tokens=16``,
  ``optim.micro_batch_tokens=512``: token budgets (a random policy never stops on
  its own, and the float32 logits of 32k tokens over 151,936 ids would not fit);
- ``reward.overlong_buffer=8`` (grpo-tcr-4b): the 3,000-token buffer must stay
  below the shrunk response budget;
- ``rollout.backend=hf``: vLLM needs a GPU; ``rollout.concurrency=0``: no worker
  processes on a 2-core CI machine; ``device=cpu``. The preset's bfloat16 dtype and
  gradient checkpointing are kept.

spreadsheet-rl-4b runs against the fake one-tool environment of
tests/rollout/fakes.py: the gym's 12-tool prompt is ~2,200 Qwen3 tokens, whose
float32 logits over 151,936 ids are ~1.3 GB per sequence, several times over in
the update, too much for a CPU test. grpo-tcr-4b runs its own environment (the
code interpreter; ~240-token prompts) on the built-in math/code problems.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spreadrl.config import load_config
from spreadrl.data.task import TaskSet
from spreadrl.train.config import GRPOConfig
from spreadrl.train.grpo import train_grpo
from tests.rollout.fakes import FakePool, make_task

REPO = Path(__file__).resolve().parents[2]
QWEN3_VOCAB = 151_936
SHRINK = [
    "steps=1",
    "rollout.group_size=2",
    "rollout.prompts_per_step=1",
    "rollout.max_new_tokens_per_turn=8",
    "rollout.max_response_tokens=16",
    "optim.micro_batch_tokens=512",
    "rollout.backend=hf",
    "rollout.concurrency=0",
    "device=cpu",
]


@pytest.fixture(scope="module")
def qwen3_vocab_model(tmp_path_factory):
    from typer.testing import CliRunner

    from spreadrl.cli.main import app

    out = tmp_path_factory.mktemp("qwen3-vocab") / "model"
    args = ["model", "init", "--preset", "tiny", "--tokenizer", "qwen3", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return out


def _one_step(preset, overrides, **kwargs):
    cfg = load_config(GRPOConfig, REPO / "configs" / preset, overrides)
    assert cfg.model.dtype == "bfloat16" and cfg.model.gradient_checkpointing
    final = train_grpo(cfg, **kwargs)
    metrics = [json.loads(x) for x in (Path(cfg.output_dir) / "metrics.jsonl").open()]
    assert [m["step"] for m in metrics] == [1]
    config = json.loads((final / "config.json").read_text())
    assert config["vocab_size"] == QWEN3_VOCAB
    return cfg, metrics[0]


@pytest.mark.slow
def test_spreadsheet_rl_4b_preset_runs_one_step(qwen3_vocab_model, tmp_path):
    common = [f"model.name_or_path={qwen3_vocab_model}", f"output_dir={tmp_path}", *SHRINK]
    cfg, m = _one_step(
        "spreadsheet-rl-4b.yaml",
        common,
        pool=FakePool(),
        tasks=TaskSet(Path("."), [make_task()]),
    )
    assert cfg.loss.kl_coef > 0 and not cfg.loss.tis  # the preset's KL ran; TIS is off
    assert m["trained_sequences"] == 2 and "kl" in m
    assert m["grad_norm"] == m["grad_norm"]  # not NaN


@pytest.mark.slow
def test_grpo_tcr_4b_preset_runs_one_step(qwen3_vocab_model, tmp_path):
    cfg, m = _one_step(
        "grpo-tcr-4b.yaml",
        [
            f"model.name_or_path={qwen3_vocab_model}",
            f"output_dir={tmp_path}",
            "data.train_tasks=builtin-code:train",
            "reward.overlong_buffer=8",
            *SHRINK,
        ],
    )
    assert cfg.env.kind == "code" and cfg.reward.tool_call_reward and cfg.loss.tis
    assert m["trained_sequences"] == 2
    assert m["grad_norm"] == m["grad_norm"]  # not NaN
