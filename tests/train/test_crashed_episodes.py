"""Crashed episodes are never trained on, and a run that keeps crashing or keeps nothing stops.

A tool that raises (a bug in spreadrl's own tool code, not the model's mistake)
ends its episode as ``error`` with the whole traceback kept, worker side included;
its group is dropped whatever the sampling mode; ``episode_errors`` counts it;
above ``sampling.max_crashed_fraction`` the run stops with one line. Steps that
keep no group say so in their line, and ``sampling.max_untrained_steps`` of them
in a row stop the run.
"""

from __future__ import annotations

import io
import json
import logging
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from rich.console import Console

from spreadrl.cli.console import RichReporter
from spreadrl.config import load_config
from spreadrl.data.task import TaskSet
from spreadrl.env.pool import EnvPool
from spreadrl.env.types import EndReason, EpisodeResult, Observation, StepResult
from spreadrl.errors import RunHalted
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engines.scripted import FINAL_ANSWER, format_tool_call
from spreadrl.rollout.types import PolicyTurn, Trajectory
from spreadrl.train.config import DynamicSamplingConfig, GRPOConfig, RewardConfig
from spreadrl.train.episodes import collect_rollouts, to_samples
from spreadrl.train.grpo import train_grpo
from spreadrl.train.sampler import EpochShuffle
from spreadrl.train.step_metrics import LINE_WIDTH
from tests.rollout.fakes import SCHEMAS, make_task
from tests.train.test_grpo_options import ScriptedRewardPool, _cfg, _Spy


def _write_range(task_id: str) -> str:
    if task_id == "bug":
        return str(1 / 0)  # spreadrl's own tool failing: nothing the model did
    return "wrote"


class BuggyEnv:
    """An environment whose one tool raises on task ``bug`` (run in a worker process)."""

    def reset(self, task, case=1):
        self.task, self.calls = task.id, 0
        return Observation("Put 42 in A1.", "Sheet1: A1:B2", SCHEMAS)

    def step(self, call):
        self.calls += 1
        return StepResult(_write_range(self.task), True)

    def finish(self, final_answer=None, output_path=None):
        passed = self.calls > 0
        return EpisodeResult(float(passed), passed, [], self.calls, 0, EndReason.ANSWERED)

    def close(self):
        pass


class OneCallPolicy:
    """Calls write_range once, then answers."""

    token_level = False

    def act_messages(self, states, params):
        return [
            PolicyTurn(
                text=format_tool_call("write_range", {"range": "A1", "values": 42})
                if not s.turns_taken
                else FINAL_ANSWER
            )
            for s in states
        ]


def _tasks(*ids):
    return TaskSet(Path("."), [replace(make_task(), id=tid) for tid in ids])


def test_a_tool_that_raises_keeps_its_traceback_and_its_group_is_never_kept():
    tasks = _tasks("bug", "ok")
    rollout = RolloutConfig(group_size=2, prompts_per_step=2, max_turns=3)
    with EnvPool(BuggyEnv, num_workers=1) as pool:
        step = collect_rollouts(
            OneCallPolicy(),
            pool,
            None,  # type: ignore[arg-type]  # a message-level policy needs no chat
            tasks,
            EpochShuffle([("bug", 1), ("ok", 1)], seed=0),
            rollout,
            DynamicSamplingConfig(mode="keep"),  # keep would train every group...
            RewardConfig(),
            max_prompt_tokens=0,
            seed=0,
        )
    by_task = {t.task_id: t for t in step.trajectories}
    bug, ok = by_task["bug"], by_task["ok"]
    assert bug.crashed and bug.stop_reason == EndReason.ERROR and not ok.crashed
    assert bug.error == "ZeroDivisionError: division by zero"  # one line
    # the whole traceback, the worker's frames included (the pool's note)
    assert "worker traceback" in bug.traceback and "_write_range" in bug.traceback
    assert "1 / 0" in bug.traceback
    assert "traceback" in bug.to_json() and "traceback" not in ok.to_json()
    groups = [step.trajectories[i * 2].task_id for i in range(2)]
    # ...but never a group with a crashed episode
    assert step.keep.tolist() == [g != "bug" for g in groups]


def test_a_crashed_episode_never_becomes_a_sample_even_in_a_kept_group():
    good = Trajectory("t", 1, 0, [], prompt_ids=[1, 2], response_ids=[3], response_mask=[1])
    good.rollout_logprobs = [0.0]
    crashed = replace(good, sample=1, stop_reason=EndReason.ERROR)
    samples = to_samples([good, crashed], torch.zeros(1, 2), torch.ones(1, dtype=torch.bool), 2)
    assert len(samples) == 1


class CrashingPool(ScriptedRewardPool):
    """Mixed outcomes in every group, and the worker of sample 0's episodes fails."""

    def reset(self, episode_id, task, case):
        if episode_id.endswith("/0"):
            future = Future()
            try:
                _start_workbook()
            except RuntimeError as exc:
                future.set_exception(exc)
            return future
        return super().reset(episode_id, task, case)


def _start_workbook():
    raise RuntimeError("the workbook worker died")


@pytest.mark.slow
def test_grpo_drops_the_crashed_group_counts_it_and_stops_above_the_limit(
    tiny_model_dir, tmp_path, monkeypatch, caplog
):
    spy = _Spy(monkeypatch)
    out = tmp_path / "tolerant"
    text = io.StringIO()
    reporter = RichReporter(Console(file=text, width=200))
    cfg = _cfg(tiny_model_dir, out, extra=["sampling.max_crashed_fraction=0.2"])
    train_grpo(cfg, reporter=reporter, pool=CrashingPool(), tasks=_tasks("t1"))
    (m,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    # 2 groups of 4; one episode of group 0 crashed: its group (4) is not trained
    assert (m["episode_errors"], m["groups_kept"], m["trained_sequences"]) == (1, 1, 4)
    assert {s.group for s in spy.steps[0]["samples"]} == {1}
    line = next(row for row in text.getvalue().splitlines() if row.startswith("step"))
    assert "crashed 1 (crashes/step-000001.log)" in line  # kept past LINE_WIDTH if need be
    # the file the line names holds the crashed episode's whole traceback, worker side too
    crash_log = (out / "crashes" / "step-000001.log").read_text()
    assert "the workbook worker died" in crash_log and "_start_workbook" in crash_log
    assert crash_log.count("=== episode ") == 1

    strict = tmp_path / "strict"  # the default limit: 1 of 8 is too many
    with caplog.at_level(logging.ERROR), pytest.raises(RunHalted) as halted:
        train_grpo(
            _cfg(tiny_model_dir, strict), reporter=reporter, pool=CrashingPool(), tasks=_tasks("t1")
        )
    message = str(halted.value)
    assert "\n" not in message and "step 1: 1 of 8 episodes crashed" in message
    assert "sampling.max_crashed_fraction=0.05" in message and "the workbook worker died" in message
    assert "tracebacks in crashes/step-000001.log" in message
    assert "_start_workbook" in (strict / "crashes" / "step-000001.log").read_text()
    assert "_start_workbook" in caplog.text  # the whole traceback goes to the log
    assert len(spy.steps) == 1  # the halted step never reached the update


@pytest.mark.slow
def test_steps_that_keep_no_group_say_so_and_stop_the_run(tiny_model_dir, tmp_path):
    out = tmp_path / "flat"
    text = io.StringIO()
    cfg = _cfg(
        tiny_model_dir,
        out,
        steps=5,
        extra=["sampling.mode=drop", "sampling.max_untrained_steps=2"],
    )
    with pytest.raises(RunHalted) as halted:  # every episode passes: no group has signal
        train_grpo(
            cfg,
            reporter=RichReporter(Console(file=text, width=200)),
            pool=ScriptedRewardPool(flat={"t1"}),
            tasks=_tasks("t1"),
        )
    assert "step 2: no group kept for 2 steps in a row" in str(halted.value)
    assert "sampling.max_untrained_steps=2" in str(halted.value)
    # step 1 trained nothing and said so; step 2, the second in a row, stopped the run
    # before its update
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["groups_kept"], r["trained_sequences"]) for r in rows] == [(1, 0, 0)]
    lines = [row for row in text.getvalue().splitlines() if row.startswith("step")]
    assert len(lines) == 1 and "groups 0/2 untrained" in lines[0]
    assert len(lines[0]) <= LINE_WIDTH


def test_the_stop_rules_are_settings_and_refuse_nonsense():
    cfg = load_config(GRPOConfig, None, [])
    assert (cfg.sampling.max_crashed_fraction, cfg.sampling.max_untrained_steps) == (0.05, 3)
    with pytest.raises(Exception, match="max_crashed_fraction"):
        load_config(GRPOConfig, None, ["sampling.max_crashed_fraction=1.5"])
