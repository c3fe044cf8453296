"""A rollout engine registered by name from this file alone runs GRPO, eval and the plan.

The engine below is what a new engine (a colocated SGLang, say) would be: a module of
its own and one entry in the registry (here ``monkeypatch.setitem``). It keeps a copy
of its own of the trainer's weights (``colocated``), so the recipe must hand it the
weights before each rollout phase and let it sleep after, and its memory lines must
reach ``spreadrl plan``. Nothing outside this file is changed for it.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from spreadrl.cli.main import app
from spreadrl.config import load_config
from spreadrl.data.task import TaskSet
from spreadrl.plan import (
    ALLOCATOR_RESERVE,
    CUDA_CONTEXT_GIB,
    GIB,
    Hardware,
    plan_recipe,
)
from spreadrl.rollout import engines
from spreadrl.rollout.engine import EngineMemory, WeightFeed
from spreadrl.rollout.engines.hf import HFPolicy, snapshot_weights, weight_loader
from spreadrl.rollout.engines.scripted import OraclePolicy
from spreadrl.train.config import GRPOConfig
from spreadrl.train.grpo import train_grpo
from tests.rollout.fakes import FakePool, make_task
from tests.train.test_grpo_e2e import _cfg, _metrics
from tests.train.test_grpo_options import ScriptedRewardPool

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "tiny-cpu.yaml"
SHARE = 0.25  # of the GPU, the fake engine's plan says


def _digest(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode() + state[name].detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()


class CountingPolicy(HFPolicy):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls = 0

    def act(self, *args, **kwargs):
        self.calls += 1
        return super().act(*args, **kwargs)


class RecordingOracle(OraclePolicy):
    def __init__(self) -> None:
        self.turns = 0

    def act_messages(self, states, params):
        self.turns += len(states)
        return super().act_messages(states, params)


@dataclass
class FakeEngine:
    """A colocated engine with its own copy of the weights, sampled through transformers."""

    setup: object = None
    synced: list[str] = field(default_factory=list)  # digest of the weights each sync sent
    sleeps: int = 0
    lines_reported: list[str] = field(default_factory=list)
    own: torch.nn.Module | None = None
    policy: CountingPolicy | None = None

    trains = True
    serves = False
    needs_model = False
    colocated = True
    built: ClassVar[list[FakeEngine]] = []  # every engine GRPO built, for the test
    loaded: ClassVar[list[RecordingOracle]] = []  # every policy eval loaded

    @classmethod
    def for_training(cls, setup):
        engine = cls(setup)
        cls.built.append(engine)
        return engine

    @classmethod
    def load(cls, spec):
        policy = RecordingOracle()
        cls.loaded.append(policy)
        return policy, None

    @classmethod
    def plan(cls, query):
        share = SHARE * query.device_bytes
        row = ("fake engine share", share, "a quarter of the GPU")
        return EngineMemory(generation=query.resident, share=share, asleep=GIB, rows=[row])

    @classmethod
    def plan_report(cls, query, plan):
        return [], [("fake engine", "awake", f"{plan.max_model_len} tokens a sequence")]

    @classmethod
    def allows_expandable_segments(cls, environ):
        return True

    def start(self, model, tokenizer):
        self.own = copy.deepcopy(model).requires_grad_(False)
        self.policy = CountingPolicy(self.own, tokenizer, max_batch_size=8)
        return ["fake engine started"]

    def sync(self, model):
        self.own.load_state_dict(model.state_dict())
        self.synced.append(_digest(model.state_dict()))

    def sleep(self):
        self.sleeps += 1

    def eval_engine(self, model, tokenizer):
        return self

    def producer(self, model, tokenizer, context):
        return WeightFeed(
            policy=self.policy,
            export=snapshot_weights,
            load=weight_loader(self.own),
            context=contextlib.nullcontext,
            send_first=True,
        )


@pytest.fixture
def fake_engine(monkeypatch):
    monkeypatch.setitem(engines.ENGINES, "fake", FakeEngine)  # the registry line
    FakeEngine.built, FakeEngine.loaded = [], []
    return FakeEngine


def _tasks(n: int = 2) -> TaskSet:
    return TaskSet(Path("."), [replace(make_task(), id=f"t{i}") for i in range(n)])


class Lines:
    """A reporter that keeps the lines it is given."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def line(self, text, *, level="info"):
        self.lines.append(text)

    def section(self, title):
        pass

    def table(self, table):
        pass

    def progress(self, *args, **kwargs):
        return contextlib.nullcontext(type("Bar", (), {"advance": lambda *a, **k: None})())


@pytest.mark.slow
def test_grpo_samples_with_the_registered_engine_and_syncs_it(
    tiny_model_dir, tmp_path, fake_engine
):
    out = tmp_path / "run"
    extra = ("rollout.backend=fake", "eval.every_steps=1", "eval.max_cases=1")
    reporter = Lines()
    final = train_grpo(
        _cfg(tiny_model_dir, out, 2, extra),
        reporter=reporter,
        pool=ScriptedRewardPool(),  # both outcomes in every group: every update moves
        tasks=_tasks(),
        eval_tasks=_tasks(1),
    )
    (engine,) = fake_engine.built
    assert engine.policy.calls > 0  # the rollouts were sampled by the engine's policy
    assert "fake engine started" in reporter.lines
    # two rollout phases and two held-out evals, each woken with the weights, then asleep
    assert len(engine.synced) == 4 and engine.sleeps == 4
    assert all(m["loss"] != 0 for m in _metrics(out))  # every step changed the weights
    rollouts_1, eval_1, rollouts_2, eval_2 = engine.synced
    assert eval_1 != rollouts_1  # the held-out eval after step 1 got the updated weights
    assert rollouts_2 == eval_1  # nothing was updated between it and step 2's rollouts
    assert eval_2 != rollouts_2
    # the last sync (after the last update) sent the weights the run saved
    saved, own = load_file(str(Path(final) / "model.safetensors")), engine.own.state_dict()
    assert saved and all(torch.equal(own[name], tensor) for name, tensor in saved.items())


@pytest.mark.slow
def test_the_asynchronous_producer_samples_with_the_registered_engine(
    tiny_model_dir, tmp_path, fake_engine
):
    out = tmp_path / "async"
    train_grpo(
        _cfg(tiny_model_dir, out, 2, ("rollout.backend=fake", "rollout.max_staleness=1")),
        pool=FakePool(),
        tasks=_tasks(),
    )
    (engine,) = fake_engine.built
    assert engine.policy.calls > 0
    assert engine.synced == [] and engine.sleeps == 0  # the producer's feed, not the cycle


def test_eval_loads_the_registered_engine_by_name(tmp_path, fake_engine):
    out = tmp_path / "eval"
    args = ["eval", "--config", str(RECIPE), "--backend", "fake", "--tasks", "builtin:demo-test"]
    result = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    (policy,) = fake_engine.loaded
    assert policy.turns > 0


def test_the_plan_counts_the_registered_engines_share_and_prints_its_lines(fake_engine):
    hardware = Hardware(gpus=1, memory_gib=79.6)
    cfg = load_config(GRPOConfig, RECIPE, ["rollout.backend=hf"])
    hf = plan_recipe(cfg, hardware, shape_name="tiny")
    fake = plan_recipe(replace_backend(cfg, "fake"), hardware, shape_name="tiny")
    assert fake.fits and fake.gib("fake engine share") == pytest.approx(SHARE * 79.6)
    # the trainer's own model does not sample: its gathered copy and KV cache are not counted
    assert fake.allocated["generation"] < hf.allocated["generation"]
    device_peak = fake.allocated["generation"] * (1 + ALLOCATOR_RESERVE) + CUDA_CONTEXT_GIB
    assert fake.phases["generation"] == pytest.approx(device_peak + SHARE * 79.6)
    assert fake.engine_lines == [("fake engine", "awake", "256 tokens a sequence")]
    assert hf.engine_lines == []
    result = CliRunner().invoke(
        app, ["plan", str(RECIPE), "rollout.backend=fake", "--shape", "tiny"], terminal_width=200
    )
    assert result.exit_code == 0, result.output
    assert "fake engine share" in result.output and "256 tokens a sequence" in result.output


def replace_backend(cfg: GRPOConfig, name: str) -> GRPOConfig:
    return replace(cfg, rollout=replace(cfg.rollout, backend=name))
