"""Every GRPO loss and batching option run end to end through ``train_grpo`` (issue 12, item 4).

Each test trains the tiny Qwen3 for one or two steps against a fake environment
and checks what the option must do, not only that the run finishes: the
reference log-probs are the step-0 policy's, the TIS weights scale the gradient,
constant groups are dropped or refilled, the second PPO pass clips, a nonzero
entropy bonus changes the gradient, LoRA moves only the adapters and merges to a
plain model. Internals are observed by wrapping
the functions the recipe calls (``policy_update``, ``policy_loss``), never by
replacing what they compute.
"""

from __future__ import annotations

import json
import math
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from spreadrl.config import load_config
from spreadrl.data.task import TaskSet
from spreadrl.env.types import EpisodeResult
from spreadrl.models.init import load_model_and_tokenizer
from spreadrl.train import trained_model as learner_module
from spreadrl.train.config import GRPOConfig
from spreadrl.train.grpo import train_grpo
from tests.rollout.fakes import FakePool, make_task
from tests.train.update_args import score


def _cfg(model_dir, out, steps=1, extra=()):
    return load_config(
        GRPOConfig,
        None,
        [
            f"model.name_or_path={model_dir}",
            f"output_dir={out}",
            f"steps={steps}",
            "device=cpu",
            "rollout.group_size=4",
            "rollout.prompts_per_step=2",
            "rollout.max_turns=1",
            "rollout.max_new_tokens_per_turn=12",
            "rollout.max_response_tokens=24",
            "sampling.mode=keep",
            "optim.lr=1e-2",
            "optim.weight_decay=0.0",
            "env.tools=[write_range]",
            *extra,
        ],
    )


class ScriptedRewardPool(FakePool):
    """FakePool whose outcome is set by the episode, not by the (random) policy.

    Episodes of a task in ``flat`` always pass (a constant group, no signal);
    any other task passes on even sample numbers only, so every group holds
    both outcomes and the random tiny model gets non-zero advantages."""

    def __init__(self, flat=()):
        super().__init__()
        self.flat = set(flat)

    def finish(self, episode_id, **kwargs):
        task_id, _case, sample = episode_id.rsplit("/", 2)
        passed = task_id in self.flat or int(sample) % 2 == 0
        f = Future()
        f.set_result(EpisodeResult(float(passed), passed, [], 0, 0, "done"))
        return f


def _tasks(*ids):
    return TaskSet(Path("."), [replace(make_task(), id=tid) for tid in ids or ["t1"]])


def _metrics(out):
    return [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]


class _Spy:
    """Wraps ``policy_update`` as the trained side calls it: records each step's samples (with the log-probs the
    recipe attached) and the policy's weights before the update."""

    def __init__(self, monkeypatch):
        self.steps: list[dict] = []
        real = learner_module.policy_update

        def spy(model, optimizer, samples, *sections, **kwargs):
            before = {n: p.detach().clone() for n, p in model.named_parameters()}
            out = real(model, optimizer, samples, *sections, **kwargs)
            self.steps.append({"samples": list(samples), "before": before, "model": model})
            return out

        monkeypatch.setattr(learner_module, "policy_update", spy)


def _logprobs_of(model_dir, samples):
    model, tok = load_model_and_tokenizer(str(model_dir))
    return score(model, samples, pad_id=tok.pad_token_id, micro_batch_tokens=4096)


def _trained_values(values, sample):
    """The entries of per-target ``values`` at the positions the loss trains."""
    return [v for v, m in zip(values, sample.mask[1:], strict=True) if m]


# --- KL against a frozen reference -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("lora", [False, True], ids=["full-reference", "lora-adapter-disabled"])
def test_kl_reference_is_the_step0_policy_and_kl_grows(tiny_model_dir, tmp_path, monkeypatch, lora):
    spy = _Spy(monkeypatch)
    extra = ["loss.kl_coef=0.5"]
    if lora:
        extra += ["model.lora.enabled=true", "model.lora.r=4", "model.lora.alpha=8"]
    train_grpo(
        _cfg(tiny_model_dir, tmp_path, 2, extra),
        pool=ScriptedRewardPool(),
        tasks=_tasks(),
    )
    metrics = _metrics(tmp_path)
    assert len(spy.steps) == 2
    for step in spy.steps:
        samples = step["samples"]
        assert samples and all(s.ref_logprobs is not None for s in samples)
        # the reference is frozen at the step-0 policy, i.e. the model on disk
        expected = _logprobs_of(tiny_model_dir, samples)
        for s, want in zip(samples, expected, strict=True):
            assert _trained_values(s.ref_logprobs, s) == pytest.approx(
                _trained_values(want, s), abs=1e-5
            )
    # step 1: the policy is the reference (k3 of a zero log-ratio is 0); step 2: it moved
    assert metrics[0]["kl"] == pytest.approx(0.0, abs=1e-6)
    assert metrics[1]["kl"] > 1e-6


# --- truncated importance sampling --------------------------------------------------------


def _shift_rollout_logprobs(monkeypatch, shift):
    """Make the rollout engine look ``exp(-shift)`` times less likely than the trainer on
    every token, as a vLLM engine drifting from the trainer would."""
    real = learner_module.policy_update

    def shifted(model, optimizer, samples, *sections, **kwargs):
        for s in samples:
            s.rollout_logprobs = [v - shift for v in s.rollout_logprobs]
        return real(model, optimizer, samples, *sections, **kwargs)

    monkeypatch.setattr(learner_module, "policy_update", shifted)


@pytest.mark.slow
def test_tis_weights_scale_the_gradient_and_are_capped(tiny_model_dir, tmp_path, monkeypatch):
    # hf rollouts: the trainer's log-probs are the engine's, so TIS weights are ~1; shifting
    # the recorded rollout log-probs by log(1.5) makes every weight exp(log 1.5) = 1.5, and
    # by log(3) makes it 3, capped to tis_cap = 2. With one PPO pass the gradient is the
    # plain one times the weight, so the pre-clip grad norm scales by exactly that.
    pool, tasks = ScriptedRewardPool, _tasks
    plain = tmp_path / "plain"
    train_grpo(_cfg(tiny_model_dir, plain), pool=pool(), tasks=tasks())
    base = _metrics(plain)[0]["grad_norm"]
    assert base > 0
    for shift, weight in ((math.log(1.5), 1.5), (math.log(3.0), 2.0)):
        out = tmp_path / f"tis{weight}"
        with monkeypatch.context() as m:
            _shift_rollout_logprobs(m, shift)
            cfg = _cfg(tiny_model_dir, out, extra=["loss.tis=true", "loss.tis_cap=2.0"])
            train_grpo(cfg, pool=pool(), tasks=tasks())
        assert _metrics(out)[0]["grad_norm"] == pytest.approx(weight * base, rel=1e-3)


# --- dynamic sampling: constant groups ----------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["drop", "refill"])
def test_constant_groups_are_dropped_or_refilled(tiny_model_dir, tmp_path, monkeypatch, mode):
    # two tasks per step: "mixed" gives a group with both outcomes, "flat" always passes (a
    # constant group). drop trains on the mixed group only; refill draws more prompts (the
    # sampler's next epoch holds "mixed" again) until both kept groups carry signal.
    spy = _Spy(monkeypatch)
    cfg = _cfg(
        tiny_model_dir,
        tmp_path,
        extra=[f"sampling.mode={mode}", "sampling.max_refill_rounds=4"],
    )
    train_grpo(cfg, pool=ScriptedRewardPool(flat={"flat"}), tasks=_tasks("mixed", "flat"))
    m = _metrics(tmp_path)[0]
    trained = spy.steps[0]["samples"]
    assert all(s.advantage != 0 for s in trained)  # no sample of a constant group
    if mode == "drop":
        assert (m["groups"], m["groups_kept"], m["refill_rounds"]) == (2, 1, 0)
        assert m["trained_sequences"] == 4
    else:
        assert m["refill_rounds"] in (1, 2) and m["groups"] == 2 + m["refill_rounds"]
        assert m["groups_kept"] == 2 and m["trained_sequences"] == 8


@pytest.mark.slow
@pytest.mark.parametrize("ids,trained", [(("mixed", "flat"), 4), (("flat", "flat2"), 0)])
def test_lr_schedule_keeps_to_the_step_count_when_groups_are_dropped(
    tiny_model_dir, tmp_path, ids, trained
):
    # 8 rollouts in mini-batches of 4: two planned updates per step, so over 2 steps a
    # linear decay of 4 updates. drop keeps the mixed group only (4 samples: one update
    # per step) or nothing (flat tasks only: no update); the LR must still stand where
    # the plan puts it after each step: 0.5, then 0 of the base
    extra = ["sampling.mode=drop", "optim.mini_batch_size=4", "optim.schedule=linear"]
    cfg = _cfg(tiny_model_dir, tmp_path, steps=2, extra=extra)
    pool = ScriptedRewardPool(flat={"flat", "flat2"})
    train_grpo(cfg, pool=pool, tasks=_tasks(*ids))
    first, second = _metrics(tmp_path)
    assert first["trained_sequences"] == second["trained_sequences"] == trained
    assert first["lr"] == pytest.approx(0.5 * cfg.optim.lr)
    assert second["lr"] == pytest.approx(0.0, abs=1e-12)


# --- several PPO epochs and mini-batches --------------------------------------------------


@pytest.mark.slow
def test_second_ppo_pass_over_two_minibatches_clips(tiny_model_dir, tmp_path, monkeypatch):
    from spreadrl.train import losses  # grpo_token_loss calls policy_loss by this name

    calls = []
    real = losses.policy_loss

    def recording(*args, **kwargs):
        loss, info = real(*args, **kwargs)
        calls.append(info)
        return loss, info

    monkeypatch.setattr(losses, "policy_loss", recording)
    spy = _Spy(monkeypatch)
    extra = ["optim.ppo_epochs=2", "optim.mini_batch_size=4"]
    train_grpo(
        _cfg(tiny_model_dir, tmp_path, extra=extra),
        pool=ScriptedRewardPool(),
        tasks=_tasks(),
    )
    samples = spy.steps[0]["samples"]
    assert len(samples) == 8 and all(s.old_logprobs is not None for s in samples)
    # 2 passes x 2 mini-batches of 4 sequences (one micro-batch each)
    assert len(calls) == 4
    first, second = calls[:2], calls[2:]
    # the first mini-batch is scored by the weights that produced the old log-probs
    assert first[0]["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert first[0]["clip_frac_low"] == first[0]["clip_frac_high"] == 0.0
    assert sum(c["clip_frac_low"] + c["clip_frac_high"] for c in second) > 0


# --- entropy bonus ------------------------------------------------------------------------


@pytest.mark.slow
def test_entropy_bonus_changes_the_gradient(tiny_model_dir, tmp_path):
    # every group constant ("flat" always passes) and kept: advantages are all 0, so the
    # policy term has no gradient and whatever moves the weights is the entropy bonus
    for coef in (0.0, 0.5):
        out = tmp_path / f"ent{coef}"
        cfg = _cfg(tiny_model_dir, out, extra=[f"loss.entropy_coef={coef}"])
        train_grpo(cfg, pool=ScriptedRewardPool(flat={"flat"}), tasks=_tasks("flat"))
        grad_norm = _metrics(out)[0]["grad_norm"]
        if coef == 0:
            assert grad_norm == 0.0
        else:
            assert grad_norm > 1e-6


# --- LoRA ---------------------------------------------------------------------------------


class _ModelSpy:
    """Wraps trained_model.build_model: keeps the built policy and a copy of its first weights."""

    def __init__(self, monkeypatch):
        from spreadrl.train import sft, trained_model

        self.model = None
        self.initial: dict[str, torch.Tensor] = {}
        real = trained_model.build_model

        def spy(*args, **kwargs):
            model, tok, levers = real(*args, **kwargs)
            self.model = model
            self.initial = {n: p.detach().clone() for n, p in model.named_parameters()}
            return model, tok, levers

        monkeypatch.setattr(trained_model, "build_model", spy)  # GRPO's build_policy calls it
        monkeypatch.setattr(sft, "build_model", spy)

    def changed(self):
        now = dict(self.model.named_parameters())
        return {n for n, before in self.initial.items() if not torch.equal(now[n], before)}


def _check_lora_then_merge(spy, final, tmp_path):
    """Only adapter weights moved; `spreadrl merge` of the saved adapter is a plain model
    with the trained policy's logits."""
    from transformers import AutoModelForCausalLM
    from typer.testing import CliRunner

    from spreadrl.cli.main import app

    changed = spy.changed()
    assert changed and all("lora_" in n for n in changed), sorted(changed)[:5]
    assert (final / "adapter_config.json").exists()
    merged_dir = tmp_path / "merged"
    result = CliRunner().invoke(app, ["merge", "--adapter", str(final), "--out", str(merged_dir)])
    assert result.exit_code == 0, result.output
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32)
    assert not any("lora" in n for n, _ in merged.named_parameters())
    ids = torch.tensor([[1, 5, 9, 42, 7, 100, 3, 250]])
    spy.model.eval()
    with torch.no_grad():
        want = spy.model(input_ids=ids).logits
        got = merged(input_ids=ids).logits
    assert torch.allclose(got, want, atol=1e-5, rtol=0)


LORA = ["model.lora.enabled=true", "model.lora.r=4", "model.lora.alpha=8"]


@pytest.mark.slow
def test_lora_grpo_trains_only_adapters_and_merges(tiny_model_dir, tmp_path, monkeypatch):
    spy = _ModelSpy(monkeypatch)
    final = train_grpo(
        _cfg(tiny_model_dir, tmp_path / "run", extra=LORA),
        pool=ScriptedRewardPool(),
        tasks=_tasks(),
    )
    _check_lora_then_merge(spy, final, tmp_path)


@pytest.mark.slow
def test_lora_sft_trains_only_adapters_and_merges(tiny_model_dir, tmp_path, monkeypatch):
    from spreadrl.train.config import SFTConfig
    from spreadrl.train.sft import train_sft
    from tests.train.test_sft_e2e import _rows, _write

    data = _write(tmp_path / "sft.jsonl", _rows(4))
    cfg = load_config(
        SFTConfig,
        None,
        [
            f"model.name_or_path={tiny_model_dir}",
            f"data.path={data}",
            f"output_dir={tmp_path / 'run'}",
            "steps=2",
            "batch_size=2",
            "device=cpu",
            "optim.lr=1e-2",
            *LORA,
        ],
    )
    spy = _ModelSpy(monkeypatch)
    final = train_sft(cfg)
    _check_lora_then_merge(spy, final, tmp_path)
