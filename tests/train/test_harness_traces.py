"""A harness run writes its episodes as OpenEnv TrainingTraces (``logging.harness_traces``),
in the layout ``rollout.traces`` trains on; a resumed run keeps none past its checkpoint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import spreadrl.train.grpo as grpo
from spreadrl.config import load_config
from spreadrl.errors import ConfigError
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.harness.trace import samples_from_trace
from spreadrl.rollout.harness.trace_folder import TraceEpisodes
from spreadrl.rollout.runner import EpisodeJob
from spreadrl.rollout.types import EndReason, Trajectory
from spreadrl.train.config import GRPOConfig, LoggingConfig, SFTConfig
from spreadrl.train.step_metrics import save_harness_traces
from tests.cli.test_cli_mistakes import cli, one_error_line
from tests.rollout.harness.test_harness_episodes import AGENT, workbook_task
from tests.train.test_grpo_smoke import RECIPE, _stops_often, _two_tasks


def _args(model: Path, tasks: Path, out: Path, steps: int, *extra: str) -> list[str]:
    """A GRPO run of the tiny model whose rewards differ within a group: overlong shaping
    from the first token on a model that stops often (tests/train/test_grpo_smoke.py)."""
    return [
        "grpo",
        "--config",
        str(RECIPE),
        f"model.name_or_path={model}",
        f"data.train_tasks={tasks}",
        f"output_dir={out}",
        f"steps={steps}",
        "rollout.group_size=2",
        "rollout.prompts_per_step=2",
        "rollout.max_new_tokens_per_turn=16",
        "rollout.max_response_tokens=48",
        "reward.overlong=true",
        "reward.overlong_buffer=47",
        "sampling.mode=keep",
        "optim.lr=1e-3",
        *extra,
    ]


class Trained:
    """What each step of a run trained on: its trajectories and samples (``to_samples``)."""

    def __init__(self, monkeypatch):
        self.steps: list[tuple[list[Trajectory], list]] = []
        real = grpo.to_samples

        def spy(trajs, *args):
            samples = real(trajs, *args)
            self.steps.append((list(trajs), samples))
            return samples

        monkeypatch.setattr(grpo, "to_samples", spy)


def _groups(step_folder: Path) -> list[Path]:
    return sorted(p for p in step_folder.iterdir() if p.is_dir())


@pytest.fixture()
def setup(tiny_model_dir, tmp_path):
    tasks, _, _ = _two_tasks(tmp_path / "tasks")
    return _stops_often(tiny_model_dir, tmp_path / "model"), tasks


def test_a_harness_run_writes_the_traces_a_traces_run_trains_on(
    setup, tmp_path, monkeypatch, capsys
):
    model, tasks = setup
    trained = Trained(monkeypatch)
    out = tmp_path / "run"
    harness = [f"rollout.harness={AGENT}:run", "logging.harness_traces=true"]
    code, _, err = cli(monkeypatch, capsys, *_args(model, tasks, out, 1, *harness))
    assert code == 0, err
    ((trajs, samples),) = trained.steps
    step = out / "traces" / "step-000001"
    groups = _groups(step)
    assert [g.name.split("-")[0] for g in groups] == ["000", "001"]  # a folder per group
    ids = []
    for index, group in enumerate(groups):
        assert sorted(p.name for p in group.iterdir()) == ["e0.json", "e1.json", "rewards.json"]
        rewards = json.loads((group / "rewards.json").read_text())
        for i in range(2):
            traj = trajs[2 * index + i]
            trace = json.loads((group / f"e{i}.json").read_text())
            assert trace["schema_version"] == 1 and trace["turns"]
            (sample,), breaks = samples_from_trace(trace)
            assert breaks == 0
            # the trace's ids are those of the sample the step trained on, token for token
            assert sample.prompt_ids == traj.prompt_ids
            assert sample.response_ids == traj.response_ids
            assert sample.response_mask == traj.response_mask
            assert sample.logprobs == traj.rollout_logprobs
            assert trace["turns"][0]["prompt_token_ids"] == traj.prompt_ids
            ids.append(sample.prompt_ids + sample.response_ids)
            assert rewards[f"e{i}"] == traj.reward  # the shaped reward the step trained on
        assert group.name.endswith(f"-{trajs[2 * index].task_id}-c{trajs[2 * index].case}")
    assert [s.ids for s in samples] == ids
    assert len({t.reward for t in trajs}) > 1  # the advantages are not all 0
    # the traces are not logged twice: trajectories.jsonl stays without them
    logged = (out / "trajectories.jsonl").read_text()
    assert '"training_trace"' not in logged and logged

    # a second run trains on the step's folder: the same samples and rewards, and the
    # weights move; reward shaping off, so the rewards are taken as the files give them
    again = tmp_path / "again"
    traces = [f"rollout.traces={step}", "reward.tool_call_reward=false", "reward.overlong=false"]
    code, _, err = cli(monkeypatch, capsys, *_args(model, tasks, again, 1, *traces))
    assert code == 0, err
    (replayed, resampled) = trained.steps[1]
    assert [s.ids for s in resampled] == ids
    assert [t.reward for t in replayed] == [t.reward for t in trajs]
    assert [s.advantage for s in resampled] == [s.advantage for s in samples]
    assert not (again / "traces").exists()
    before = load_file(str(model / "model.safetensors"))
    after = load_file(str(again / "final" / "model.safetensors"))
    assert sum(not torch.equal(before[k], after[k]) for k in before) > len(before) // 2


def test_a_resumed_run_keeps_no_traces_past_its_checkpoint(setup, tmp_path, monkeypatch, capsys):
    model, tasks = setup
    out = tmp_path / "run"
    base = [f"rollout.harness={AGENT}:run", "checkpoint.every_steps=1"]
    code, _, err = cli(
        monkeypatch, capsys, *_args(model, tasks, out, 2, *base, "logging.harness_traces=true")
    )
    assert code == 0, err
    assert [p.name for p in sorted((out / "traces").iterdir())] == ["step-000001", "step-000002"]
    first = {p.name: p.read_text() for p in (out / "traces" / "step-000001").rglob("*.json")}

    # a stop after step 2 wrote its traces, before it was saved: the run resumes from
    # step 1 with the option off, so the traces of step 2 go and none are written again
    shutil.rmtree(out / "checkpoints" / "step-000002")
    (out / "checkpoints" / "latest").write_text("step-000001")
    args = _args(model, tasks, out, 2, *base, "logging.harness_traces=false", "--resume")
    code, printed, err = cli(monkeypatch, capsys, *args)
    assert code == 0, err
    assert "at step 1" in printed
    assert [p.name for p in (out / "traces").iterdir()] == ["step-000001"]
    kept = {p.name: p.read_text() for p in (out / "traces" / "step-000001").rglob("*.json")}
    assert kept == first


def test_the_option_without_a_harness_or_in_sft_is_one_config_error(tmp_path, monkeypatch, capsys):
    with pytest.raises(ConfigError, match="set rollout.harness too"):
        load_config(GRPOConfig, RECIPE, ["logging.harness_traces=true"])
    with pytest.raises(ConfigError, match="GRPO's"):
        SFTConfig(logging=LoggingConfig(harness_traces=True))
    code, _, err = cli(
        monkeypatch,
        capsys,
        "grpo",
        "--config",
        str(RECIPE),
        "logging.harness_traces=true",
        f"output_dir={tmp_path / 'run'}",
    )
    assert code == 1 and "logging.harness_traces" in one_error_line(err)
    assert not (tmp_path / "run").exists()


def test_a_crashed_episode_is_written_unscored_under_a_safe_group_name(tmp_path):
    task = workbook_task(tmp_path)
    jobs = [EpisodeJob(task, 1, i) for i in range(2)]
    trace = {"schema_version": 1, "turns": [_turn([1, 2], [3])]}
    scored = Trajectory("a/b c:..", 1, 0, [], reward=0.5, metadata={"training_trace": trace})
    crashed = Trajectory("a/b c:..", 1, 1, [], stop_reason=EndReason.ERROR, error="fell over")
    assert save_harness_traces(tmp_path / "run", 3, [scored, crashed], 2, rank=None) == 1
    (group,) = _groups(tmp_path / "run" / "traces" / "step-000003")
    assert group.name == "000-a_b_c_..-c1"
    assert "training_trace" not in scored.metadata  # taken out: trajectories.jsonl omits it
    assert json.loads((group / "rewards.json").read_text()) == {"e0": 0.5}
    assert json.loads((group / "e1.json").read_text()) == {"schema_version": 1, "turns": []}
    # read back as rollout.traces reads it: the crashed one unscored, never a zero reward
    first, second = TraceEpisodes.of(str(group.parent))(
        None, None, jobs, RolloutConfig(group_size=2)
    ).trajectories
    assert first.reward == 0.5 and first.response_ids == [3] and not first.crashed
    assert second.crashed and "no reward" in second.error
    # under torchrun each rank writes its own groups, named by rank
    save_harness_traces(tmp_path / "run", 3, [scored, crashed], 2, rank=1)
    assert _groups(tmp_path / "run" / "traces" / "step-000003")[1].name.startswith("r1-000-")


def _turn(prompt: list[int], completion: list[int]) -> dict:
    return {
        "node_id": "n",
        "prompt_token_ids": prompt,
        "completion_token_ids": completion,
        "per_token_logps": [-0.5] * len(completion),
        "loss_mask": [0] * len(prompt) + [1] * len(completion),
    }
