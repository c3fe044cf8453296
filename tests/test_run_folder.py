"""The one rule for run folders (spreadrl/run_folder.py): a folder holds one run.

A new run refuses a folder holding another run (naming it, each difference,
and the flag to pass) and never deletes on a refusal; the same run resumes;
``--resume`` accepts changes only to the settings declared safe, and records
them; the logs are cut back to the step a run resumes from.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spreadrl.errors import SpreadrlError
from spreadrl.run_folder import (
    RUN_FILE,
    RunIdentity,
    check_output_file,
    check_output_folder,
    claim_run_folder,
    cut_back_jsonl,
    remove_owned,
)

FILES = ("metrics.jsonl", "checkpoints")


def _identity(**changes: object) -> RunIdentity:
    settings = {"model": "runs/a", "optim.lr": 1e-3, "steps": 2, **changes}
    return RunIdentity("grpo", settings, files=FILES, safe=("steps",), summary={"model": "x"})


def _ran(folder: Path) -> None:
    (folder / "metrics.jsonl").write_text('{"step": 1}\n')


def test_a_new_folder_is_claimed_and_records_what_produced_it(tmp_path):
    out = tmp_path / "run"
    claim = claim_run_folder(out, _identity())
    assert not claim.resumed
    record = json.loads((out / RUN_FILE).read_text())
    assert record["command"] == "grpo"
    assert record["settings"]["optim.lr"] == 1e-3
    assert record["digest"] == _identity().digest
    assert "python" in record["versions"]


def test_the_same_run_resumes_and_another_is_refused_naming_each_difference(tmp_path):
    out = tmp_path / "run"
    claim_run_folder(out, _identity())
    _ran(out)
    assert claim_run_folder(out, _identity()).resumed
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(SpreadrlError) as refused:
        claim_run_folder(out, _identity(model="runs/b", **{"optim.lr": 0.5}))
    message = str(refused.value)
    assert "holds another grpo run" in message
    assert "model 'runs/a' -> 'runs/b'" in message and "optim.lr 0.001 -> 0.5" in message
    assert "output_dir" in message or "--out" in message
    assert sorted(p.name for p in out.iterdir()) == before  # a refusal changes nothing
    assert json.loads((out / RUN_FILE).read_text())["settings"]["model"] == "runs/a"


def test_resume_accepts_only_safe_changes_and_records_them(tmp_path):
    out = tmp_path / "run"
    claim_run_folder(out, _identity())
    _ran(out)
    with pytest.raises(SpreadrlError, match="pass --resume"):
        claim_run_folder(out, _identity(steps=5))  # safe, but not asked for
    with pytest.raises(SpreadrlError, match=r"differs in optim\.lr"):
        claim_run_folder(out, _identity(steps=5, **{"optim.lr": 0.5}), resume_changes=True)
    claim = claim_run_folder(out, _identity(steps=5), resume_changes=True)
    assert claim.resumed and claim.changes == {"steps": (2, 5)}
    record = json.loads((out / RUN_FILE).read_text())
    assert record["settings"]["steps"] == 5
    assert record["history"][0]["changes"] == {"steps": [2, 5]}
    assert claim_run_folder(out, _identity(steps=5)).resumed  # now the recorded settings


def test_resume_with_nothing_to_resume_is_an_error(tmp_path):
    with pytest.raises(SpreadrlError, match="holds no grpo run to resume"):
        claim_run_folder(tmp_path / "new", _identity(), resume_changes=True)
    assert not (tmp_path / "new").exists()


def test_another_commands_run_and_a_users_folder_are_refused(tmp_path):
    out = tmp_path / "run"
    claim_run_folder(out, _identity())
    _ran(out)
    eval_identity = RunIdentity("eval", {"model": "m"}, files=("trajectories.jsonl",))
    with pytest.raises(SpreadrlError, match="holds a grpo run .* an eval run needs its own"):
        claim_run_folder(out, eval_identity, elsewhere="--out NEW")
    mine = tmp_path / "mine"
    (mine / "my-experiment").mkdir(parents=True)
    (mine / "my-experiment" / "notes.txt").write_text("precious")
    with pytest.raises(SpreadrlError, match="not empty .*my-experiment/"):
        claim_run_folder(mine, _identity())
    assert (mine / "my-experiment" / "notes.txt").read_text() == "precious"
    assert not (mine / RUN_FILE).exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(SpreadrlError, match="is a file, not a folder"):
        claim_run_folder(tmp_path / "file", _identity())


def test_a_recorded_run_that_wrote_no_result_is_taken_over(tmp_path):
    out = tmp_path / "run"
    claim_run_folder(out, _identity())  # started, then failed before its first step
    assert not claim_run_folder(out, _identity(model="runs/b")).resumed
    assert json.loads((out / RUN_FILE).read_text())["settings"]["model"] == "runs/b"


def test_cut_back_keeps_the_rows_up_to_the_step(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [{"step": 1}, {"step": 2}, {"note": "no step"}, {"step": 3}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 4, "tor')
    assert cut_back_jsonl(path, 2) == 2  # step 3 and the torn line
    assert [json.loads(line) for line in path.read_text().splitlines()] == rows[:3]
    assert cut_back_jsonl(path, 0) == 2  # a run with no checkpoint starts its log over
    assert cut_back_jsonl(tmp_path / "missing.jsonl", 0) == 0
    # no step (an eval's trajectories): every readable row stays, the torn last one goes
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 4, "tor')
    assert cut_back_jsonl(path) == 1
    assert path.read_text() == "".join(json.dumps(r) + "\n" for r in rows)


def test_single_outputs_are_refused_unless_overwrite(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    with pytest.raises(SpreadrlError, match="not empty .*pass --overwrite"):
        check_output_folder(folder, overwrite=False)
    check_output_folder(folder, overwrite=True)
    with pytest.raises(SpreadrlError, match="is a file, not a folder"):
        check_output_folder(folder / "config.json", overwrite=True)
    with pytest.raises(SpreadrlError, match="exists; .*--overwrite"):
        check_output_file(folder / "config.json", overwrite=False)
    with pytest.raises(SpreadrlError, match="is a folder"):
        check_output_file(folder, overwrite=True)


def test_remove_owned_deletes_only_the_named_entries(tmp_path):
    (tmp_path / "grpo").mkdir()
    (tmp_path / "grpo" / "metrics.jsonl").write_text("{}")
    (tmp_path / "summary.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("mine")
    assert remove_owned(tmp_path, ("grpo", "summary.json", "sft")) == ["grpo", "summary.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_the_report_says_why_episodes_did_not_start():
    from spreadrl.env.types import EndReason
    from spreadrl.eval.report import build_report, no_episode_started, some_did_not_start
    from spreadrl.rollout.types import Trajectory

    def episode(sample: int, prompt: int | None) -> Trajectory:
        traj = Trajectory("t", 1, sample, [])
        if prompt is not None:
            traj.stop_reason = EndReason.PROMPT_TOO_LONG
            traj.metadata.update(prompt_tokens=prompt, prompt_limit={"the model's context": 4096})
        return traj

    none_ran = build_report([episode(0, 4855), episode(1, 5102)])
    reason = no_episode_started(none_ran)
    assert reason is not None and "4,855-5,102 tokens" in reason and "4,096" in reason
    assert some_did_not_start(none_ran) is None
    some_ran = build_report([episode(0, 5000), episode(1, None)])
    assert no_episode_started(some_ran) is None
    assert "1 of 2 episodes did not start" in some_did_not_start(some_ran)
    assert no_episode_started(build_report([episode(0, None)])) is None
