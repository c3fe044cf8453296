"""The GRPO-TCR recipe on the math/code environment, end to end on CPU."""

import json
from pathlib import Path

import pytest

from spreadrl.config import load_config
from spreadrl.env.config import EnvConfig
from spreadrl.env.factory import make_env_pool
from spreadrl.eval.runner import read_trajectories, run_eval
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engines.scripted import OraclePolicy
from spreadrl.train.config import GRPOConfig, SFTConfig
from spreadrl.train.grpo import train_grpo
from spreadrl.train.sft import train_sft
from spreadrl.train.sft_data import trajectories_to_sft_rows

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.slow
def test_sft_then_grpo_tcr_on_builtin_code_tasks(tiny_model_dir, tmp_path):
    from spreadrl.data.sources import resolve_tasks

    train = resolve_tasks("builtin-code:train")
    with make_env_pool(EnvConfig(kind="code", tools=["code_interpreter"])) as pool:
        run_eval(
            train,
            OraclePolicy(),
            pool,
            RolloutConfig(max_turns=4),
            tmp_path / "oracle",
        )
    rows = trajectories_to_sft_rows(read_trajectories(tmp_path / "oracle"))
    assert len(rows) == len(train.episodes())  # every reference answer passes the grader
    sft_path = tmp_path / "sft.jsonl"
    sft_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sft = train_sft(
        load_config(
            SFTConfig,
            None,
            [
                f"model.name_or_path={tiny_model_dir}",
                f"data.path={sft_path}",
                f"output_dir={tmp_path / 'sft'}",
                "steps=2",
                "batch_size=4",
                "device=cpu",
            ],
        ),
    )
    cfg = load_config(
        GRPOConfig,
        CONFIGS / "grpo-tcr-4b.yaml",
        [
            f"model.name_or_path={sft}",
            "model.dtype=float32",
            "model.gradient_checkpointing=false",
            "data.train_tasks=builtin-code:train",
            "rollout.backend=hf",
            "rollout.group_size=2",
            "rollout.prompts_per_step=2",
            "rollout.max_turns=2",
            "rollout.max_new_tokens_per_turn=16",
            "rollout.max_response_tokens=64",
            "rollout.concurrency=0",
            "reward.overlong_buffer=32",
            "steps=2",
            f"output_dir={tmp_path / 'grpo'}",
            "device=cpu",
            "checkpoint.every_steps=0",
            "data.max_prompt_tokens=0",
        ],
    )
    final = train_grpo(cfg)
    metrics = [
        json.loads(line) for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [m["step"] for m in metrics] == [1, 2]
    # TCR is on: a wrong answer with no tool call is worth -1, never 0
    assert all(m["reward_mean"] < 0 or m["pass_rate"] > 0 for m in metrics)
    assert (final / "config.json").exists()
