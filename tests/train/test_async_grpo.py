"""Asynchronous GRPO end to end on the tiny model with a fake environment (hf backend).

The trainer's update of step 1 is held until the producer has sampled a turn of
step 2 (:class:`Hold`), so what the tests assert does not depend on which thread
the machine happens to run first: step 2's rollouts start under version 0, one
version older than the weights step 2 trains.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import threading
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import spreadrl.rollout.engines.hf as hf_engine
import spreadrl.train.episodes as rollouts
import spreadrl.train.grpo as grpo
import spreadrl.train.sources as async_steps
import spreadrl.train.trained_model as learner
from spreadrl.data.task import TaskSet
from spreadrl.errors import RunStopped
from spreadrl.rollout.engines.hf import HFPolicy
from spreadrl.train.config import GRPOConfig
from spreadrl.train.sampler import EpochShuffle
from tests.rollout.fakes import FakePool, make_task
from tests.train.test_grpo_e2e import _cfg as e2e_cfg

WAIT_S = 120.0  # only a broken producer waits this long (the test then fails)
TIMINGS = ("_s", "tokens_per_s", "overlap", "peak_gb")  # wall-clock figures differ run to run


def _cfg(model_dir: Path, out: Path, steps: int, extra: tuple[str, ...] = ()) -> GRPOConfig:
    """The end-to-end test's tiny GRPO run, saving every trajectory of a step."""
    return e2e_cfg(model_dir, out, steps, ("logging.trajectories_per_step=8", *extra))


def _tasks(n: int = 1) -> TaskSet:
    base = make_task()
    return TaskSet(Path("."), [replace(base, id=f"t{i}") for i in range(n)])


def _metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _weights_digest(final: Path) -> str:
    state = load_file(str(final / "model.safetensors"))
    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode() + state[name].float().numpy().tobytes())
    return digest.hexdigest()


class Hold:
    """``policy_update`` of every step s but the last waits until the producer has sampled
    a turn of step s + 1 (so that turn is sampled by the weights before the update);
    records what each update was given."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, steps: int) -> None:
        self.cond = threading.Condition()
        self.acts: dict[int, int] = {}  # step -> the producer's generation calls for it
        self.collecting = 0  # the step the producer is rolling out
        self.updates = 0
        self.steps = steps
        self.settings: list = []
        self.samples: list = []
        hold = self

        class CountingHF(HFPolicy):
            def act(self, *args, **kwargs):
                with hold.cond:
                    hold.acts[hold.collecting] = hold.acts.get(hold.collecting, 0) + 1
                    hold.cond.notify_all()
                return super().act(*args, **kwargs)

        real_collect, real_update = rollouts.collect_rollouts, learner.policy_update

        def collect(*args, seed, **kwargs):
            hold.collecting = seed  # the step (collect_rollouts' seed is cfg.seed + step; 0 here)
            return real_collect(*args, seed=seed, **kwargs)

        def held_update(model, optimizer, samples, loss, *sections, **kwargs):
            self.updates += 1
            self.settings.append(loss)
            self.samples.append(list(samples))
            if self.updates < self.steps:
                with self.cond:
                    following = lambda: self.acts.get(self.updates + 1, 0) > 0  # noqa: E731
                    assert self.cond.wait_for(following, WAIT_S), "the producer never ran ahead"
            self.on_update(self.updates)
            return real_update(model, optimizer, samples, loss, *sections, **kwargs)

        monkeypatch.setattr(hf_engine, "HFPolicy", CountingHF)  # the producer's policy
        monkeypatch.setattr(rollouts, "collect_rollouts", collect)
        monkeypatch.setattr(learner, "policy_update", held_update)

    def on_update(self, step: int) -> None:
        pass


@pytest.mark.slow
def test_max_staleness_zero_never_builds_the_producer_and_is_bit_reproducible(
    tiny_model_dir, tmp_path, monkeypatch
):
    """0 is the synchronous loop itself: the producer is never built (it raises here), and
    final weights and every non-timing metric equal a second run's bit for bit."""
    runs = []
    for name in ("a", "b"):
        if name == "a":

            def refuse(*args, **kwargs):
                raise AssertionError("max_staleness=0 must not start a producer")

            monkeypatch.setattr(async_steps.AsyncSource, "start", refuse)
        else:
            monkeypatch.undo()
        out = tmp_path / name
        extra = ("rollout.max_staleness=0",) if name == "a" else ()
        final = grpo.train_grpo(
            _cfg(tiny_model_dir, out, 2, extra),
            pool=FakePool(),
            tasks=_tasks(),
        )
        metrics = [{k: v for k, v in m.items() if not k.endswith(TIMINGS)} for m in _metrics(out)]
        runs.append((_weights_digest(final), metrics))
        assert not any("staleness_max" in m for m in metrics)
    assert runs[0] == runs[1]
    assert any(m["grad_norm"] > 0 for m in runs[0][1])  # the update did move something


@pytest.mark.slow
def test_max_staleness_one_trains_on_stale_rollouts_with_the_corrected_loss(
    tiny_model_dir, tmp_path, monkeypatch
):
    steps = 3
    hold = Hold(monkeypatch, steps)
    out = tmp_path / "async"
    # two PPO epochs: the proximal log-probs get their own pass at the start of the update
    extra = ("rollout.max_staleness=1", "loss.tis=false", "optim.ppo_epochs=2")
    cfg = _cfg(tiny_model_dir, out, steps, extra)
    final = grpo.train_grpo(cfg, pool=FakePool(), tasks=_tasks())
    assert (final / "model.safetensors").exists()
    metrics = _metrics(out)
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert all(m["trained_sequences"] == 8 for m in metrics)
    assert any(m["grad_norm"] > 0 for m in metrics)  # the updates did move the weights
    # step 1 trains version 0 on version-0 rollouts; step 2's started under version 0
    # (held above) while it trains version 1
    assert [m["staleness_max"] for m in metrics] == [0.0, 1.0, metrics[2]["staleness_max"]]
    assert metrics[2]["staleness_max"] <= 1.0
    assert all(0.0 <= m["overlap"] <= 1.0 for m in metrics)
    assert metrics[0]["overlap"] > 0.0  # the producer rolled out step 2 during update 1
    # the behaviour weights are on although loss.tis is off, against proximal log-probs
    assert all(s.tis for s in hold.settings)
    assert all(x.old_logprobs is not None and x.version is not None for x in hold.samples[1])
    assert {x.version for x in hold.samples[1]} == {0}
    assert all("behaviour_weight_mean" in m and "tis_weight_mean" in m for m in metrics)
    # hf samples what the trainer computes: up to float rounding, weights of 1 at version 0
    assert metrics[0]["behaviour_weight_mean"] == pytest.approx(1.0, abs=1e-3)
    logged = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    assert {row["step"] for row in logged} == {1, 2, 3}


@pytest.mark.slow
def test_ctrl_c_stops_the_producer_and_the_resumed_run_draws_the_in_flight_prompts_again(
    tiny_model_dir, tmp_path, monkeypatch
):
    """Stopped after step 1 while step 2 was being rolled out: the checkpoint keeps the
    sampler as it was after step 1's prompts, and the resumed run draws step 2's again."""
    tasks = _tasks(4)
    out = tmp_path / "run"
    extra = ("rollout.max_staleness=1", "checkpoint.every_steps=0")
    hold = Hold(monkeypatch, steps=3)
    hold.on_update = lambda step: os.kill(os.getpid(), signal.SIGINT) if step == 1 else None
    with pytest.raises(RunStopped):
        grpo.train_grpo(
            _cfg(tiny_model_dir, out, 3, extra),
            pool=FakePool(),
            tasks=tasks,
        )
    assert hold.acts.get(2, 0) > 0 and hold.updates == 1  # the producer had begun step 2
    state = torch.load(next(out.rglob("step-000001/trainer_state.pt")), weights_only=False)
    sampler = state["extra"]["sampler"]
    assert (sampler["epoch"], sampler["position"]) == (0, 2)  # step 1's prompts, no later ones

    monkeypatch.undo()
    grpo.train_grpo(
        _cfg(tiny_model_dir, out, 3, extra),
        pool=FakePool(),
        tasks=tasks,
    )
    metrics = _metrics(out)
    assert [m["step"] for m in metrics] == [1, 2, 3]
    # one epoch, one mini-batch: no proximal pass, the behaviour weights are still applied
    assert all("tis_weight_mean" in m and "behaviour_weight_mean" not in m for m in metrics)
    expected = EpochShuffle([(t.id, c) for t, c in tasks.episodes()], seed=0)
    draws = [sorted(tid for tid, _ in expected.next(2)) for _ in range(3)]
    logged = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    for step in (1, 2, 3):
        got = sorted({row["task_id"] for row in logged if row["step"] == step})
        assert got == sorted(set(draws[step - 1])), step
