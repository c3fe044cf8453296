"""GRPO end to end on the tiny model with a fake environment: runs, logs, resumes exactly."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from spreadrl.config import load_config, section_dict
from spreadrl.data.task import TaskSet
from spreadrl.train.config import GRPOConfig
from spreadrl.train.grpo import train_grpo
from spreadrl.train.setup import claim_training_folder
from tests.rollout.fakes import FakePool, make_task


def tiny_overrides(model_dir, out, steps) -> list[str]:
    """The tiny GRPO run's command-line overrides (also run as a command by test_faults).

    Overlong shaping on a short budget makes rewards differ with response length, so a
    random model still gets non-zero advantages."""
    return [
        f"model.name_or_path={model_dir}",
        f"output_dir={out}",
        f"steps={steps}",
        "device=cpu",
        "rollout.group_size=4",
        "rollout.prompts_per_step=2",
        "rollout.max_turns=2",
        "rollout.max_new_tokens_per_turn=16",
        "rollout.max_response_tokens=48",
        "reward.overlong=true",
        "reward.overlong_buffer=40",
        "sampling.mode=keep",
        "optim.lr=1e-3",
        "optim.weight_decay=0.0",
        "env.tools=[write_range]",
    ]


def _cfg(model_dir, out, steps, extra=()):
    return load_config(GRPOConfig, None, [*tiny_overrides(model_dir, out, steps), *extra])


def _metrics(out):
    return [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_grpo_runs_logs_and_resumes_to_the_same_next_step(tiny_model_dir, tmp_path):
    tasks = TaskSet(Path("."), [make_task()])
    straight = tmp_path / "straight"
    final = train_grpo(_cfg(tiny_model_dir, straight, 3), pool=FakePool(), tasks=tasks)
    assert (final / "config.json").exists() and (straight / "config.yaml").exists()
    full = _metrics(straight)
    assert [m["step"] for m in full] == [1, 2, 3]
    assert all(m["trained_sequences"] == 8 for m in full)
    assert any(abs(m["loss"]) > 0 for m in full)

    resumed = tmp_path / "resumed"
    train_grpo(
        _cfg(tiny_model_dir, resumed, 2, ["checkpoint.every_steps=1"]),
        pool=FakePool(),
        tasks=tasks,
    )
    longer = _cfg(tiny_model_dir, resumed, 3, ["checkpoint.every_steps=1"])
    claim_training_folder(
        longer, section_dict(longer), resume_changes=True
    )  # what `spreadrl grpo --resume` does
    train_grpo(longer, pool=FakePool(), tasks=tasks)
    again = _metrics(resumed)
    assert [m["step"] for m in again] == [1, 2, 3]
    for key in ("loss", "reward_mean", "response_tokens", "grad_norm"):
        assert again[2][key] == pytest.approx(full[2][key], rel=1e-5, abs=1e-7), key


@pytest.mark.slow
def test_a_lora_run_resumes_from_its_adapter_checkpoint_bit_identical(tiny_model_dir, tmp_path):
    """A LoRA checkpoint holds the adapter alone (no config.json): resuming puts it back
    on the base with the optimizer, schedule, RNG and data position, and the run ends
    where one never interrupted ends (the KL term's reference is the adapters-off base)."""
    tasks = TaskSet(Path("."), [make_task()])
    lora = ["model.lora.enabled=true", "model.lora.r=4", "model.lora.alpha=8", "loss.kl_coef=0.05"]
    straight = tmp_path / "straight"
    train_grpo(_cfg(tiny_model_dir, straight, 3, lora), pool=FakePool(), tasks=tasks)

    resumed = tmp_path / "resumed"
    every = [*lora, "checkpoint.every_steps=1"]
    train_grpo(_cfg(tiny_model_dir, resumed, 2, every), pool=FakePool(), tasks=tasks)
    assert not (resumed / "checkpoints" / "step-000002" / "config.json").exists()
    longer = _cfg(tiny_model_dir, resumed, 3, every)
    claim_training_folder(
        longer, section_dict(longer), resume_changes=True
    )  # what `spreadrl grpo --resume` does
    final = train_grpo(longer, pool=FakePool(), tasks=tasks)

    got = load_file(final / "adapter_model.safetensors")
    want = load_file(straight / "final" / "adapter_model.safetensors")
    assert got.keys() == want.keys()
    assert any(got[k].abs().sum() > 0 for k in got if "lora_B" in k)  # the adapters trained
    assert all(torch.equal(got[k], want[k]) for k in got), "final adapter weights differ"
    timing = ("_s", "per_s", "memory", "mem_", "_gb", "time")

    def computed(out):
        return [
            {k: v for k, v in m.items() if not any(t in k for t in timing)} for m in _metrics(out)
        ]

    assert [m["step"] for m in _metrics(resumed)] == [1, 2, 3]
    assert computed(resumed) == computed(straight)
