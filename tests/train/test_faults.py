"""The faults a long run meets, walked on the tiny model through the command line.

- SIGKILL in the middle of a save (a lost node, the OOM killer), then the same command
  rerun: it resumes from the last complete checkpoint and ends bit-identical to a run
  that was never interrupted (SFT and GRPO).
- A checkpoint folder cut short (a file missing or truncated): skipped with one line
  naming it, the previous one used; none complete: refused with one line.
- ENOSPC during a save: the previous checkpoint stays whole, the run stops with one
  line, and the rerun after space is freed resumes.
- A finished run rerun: the same ``steps`` is "already done", a larger one with
  ``--resume`` continues from the end state, a smaller one is refused.

The kill is placed, not timed: ``tests/train/killed_spreadrl.py`` SIGKILLs the process
after the model's weights are in the temporary folder of the chosen step's checkpoint.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import spreadrl.train.checkpoint as checkpoint
from spreadrl.cli.main import main
from spreadrl.train.checkpoint import checkpoint_problem, latest_checkpoint
from tests.full_disk import FillsUp, safetensors_fills_the_disk
from tests.train.killed_spreadrl import use_fake_gym
from tests.train.test_grpo_e2e import tiny_overrides
from tests.train.test_sft_e2e import _rows, _write

ROOT = Path(__file__).resolve().parents[2]
TIMING = ("_s", "per_s", "memory", "mem_", "_gb", "time")  # what differs between two equal runs


def _spreadrl(monkeypatch, capsys, args: list[str]) -> tuple[int, str]:
    """``spreadrl ARGS`` in this process: its exit code and what it printed (out + err)."""
    monkeypatch.setenv("COLUMNS", "1000")  # rich's width off a terminal: a line stays whole
    monkeypatch.setattr(sys, "argv", ["spreadrl", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    captured = capsys.readouterr()
    return exited.value.code or 0, captured.out + captured.err


def _killed(args: list[str], step: int, fake_gym: bool = False) -> None:
    """``spreadrl ARGS`` in a subprocess, SIGKILLed in the middle of saving ``step``."""
    env = {**os.environ, "SPREADRL_TEST_KILL": str(step), "PYTHONPATH": str(ROOT)}
    if fake_gym:
        env["SPREADRL_TEST_FAKE_GYM"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.train.killed_spreadrl", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]


def _rows_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _computed(row: dict) -> dict:
    """A metrics row without its timings and memory gauges."""
    return {k: v for k, v in row.items() if not any(t in k for t in TIMING)}


def _assert_same_run(out: Path, straight: Path) -> None:
    """Bit-identical final weights, and the same metrics, step for step."""
    a, b = (
        load_file(out / "final" / "model.safetensors"),
        load_file(straight / "final" / "model.safetensors"),
    )
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), "final weights differ"
    got, want = _rows_of(out), _rows_of(straight)
    assert [r["step"] for r in got] == [r["step"] for r in want]  # every step once
    assert [_computed(r) for r in got] == [_computed(r) for r in want]


def _sft_args(model: Path, data: Path, out: Path, steps: int = 5) -> list[str]:
    return [
        "sft",
        f"model.name_or_path={model}",
        f"data.path={data}",
        f"output_dir={out}",
        f"steps={steps}",
        "batch_size=4",
        "optim.lr=3e-3",
        "optim.weight_decay=0.0",
        "micro_batch_tokens=2000",
        "device=cpu",
        "checkpoint.every_steps=2",
    ]


@pytest.fixture(scope="module")
def sft_straight(tiny_model_dir, tmp_path_factory):
    """A 5-step SFT run never interrupted (checkpoints at steps 4 and 5), and its data."""
    root = tmp_path_factory.mktemp("sft")
    data = _write(root / "sft.jsonl", _rows(6))
    out = root / "straight"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", ["spreadrl", *_sft_args(tiny_model_dir, data, out)])
        with pytest.raises(SystemExit) as exited:
            main()
    assert not exited.value.code
    return data, out


def test_sft_killed_mid_save_resumes_and_ends_bit_identical(
    tiny_model_dir, sft_straight, tmp_path, monkeypatch, capsys
):
    data, straight = sft_straight
    out = tmp_path / "run"
    args = _sft_args(tiny_model_dir, data, out)
    _killed(args, step=4)
    ckpts = out / "checkpoints"
    assert (ckpts / ".tmp-step-000004").is_dir()  # the save the kill cut short
    assert latest_checkpoint(ckpts).name == "step-000002"

    code, printed = _spreadrl(monkeypatch, capsys, args)  # the same command, again
    assert code == 0, printed
    assert "resuming from" in printed and "step-000002 at step 2" in printed
    _assert_same_run(out, straight)


def _grpo_args(model: Path, out: Path, steps: int, every: int = 1) -> list[str]:
    """test_grpo_e2e's tiny run as a command, with a checkpoint every ``every`` steps."""
    return ["grpo", *tiny_overrides(model, out, steps), f"checkpoint.every_steps={every}"]


def test_grpo_killed_mid_save_resumes_and_ends_bit_identical(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    use_fake_gym(monkeypatch.setattr)
    straight = tmp_path / "straight"
    code, printed = _spreadrl(monkeypatch, capsys, _grpo_args(tiny_model_dir, straight, 3))
    assert code == 0, printed

    out = tmp_path / "run"
    args = _grpo_args(tiny_model_dir, out, 3)
    _killed(args, step=2, fake_gym=True)
    assert latest_checkpoint(out / "checkpoints").name == "step-000001"

    code, printed = _spreadrl(monkeypatch, capsys, args)
    assert code == 0, printed
    assert "step-000001 at step 1" in printed
    _assert_same_run(out, straight)
    assert any(abs(r["loss"]) > 0 for r in _rows_of(out))  # the steps trained something

    # a finished run: the same command again is done, and trains nothing
    code, printed = _spreadrl(monkeypatch, capsys, args)
    assert code == 0 and "already done: step 3/3" in printed, printed
    assert [r["step"] for r in _rows_of(out)] == [1, 2, 3]
    # a larger steps with --resume continues from the end state, step 4 only
    longer = [*_grpo_args(tiny_model_dir, out, 4), "--resume"]
    code, printed = _spreadrl(monkeypatch, capsys, longer)
    assert code == 0 and "step-000003 at step 3" in printed, printed
    assert [r["step"] for r in _rows_of(out)] == [1, 2, 3, 4]


def _copy_run(straight: Path, to: Path) -> Path:
    shutil.copytree(straight, to)
    return to


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize(
    "damage",
    ["model.safetensors truncated", "optim/.metadata missing", "trainer_state.pt truncated"],
)
def test_a_checkpoint_cut_short_is_skipped_with_one_line_and_the_previous_one_used(
    tiny_model_dir, sft_straight, tmp_path, monkeypatch, capsys, damage
):
    data, straight = sft_straight
    out = _copy_run(straight, tmp_path / "run")
    shutil.rmtree(out / "final")  # what a node lost before the end leaves
    name, how = damage.split(" ")
    newest = out / "checkpoints" / "step-000005"
    if how == "missing":
        (newest / name).unlink()
    else:
        _truncate(newest / name)
    assert checkpoint_problem(newest) is not None

    code, printed = _spreadrl(monkeypatch, capsys, _sft_args(tiny_model_dir, data, out))
    assert code == 0, printed
    skipped = [line for line in printed.splitlines() if "step-000005" in line]
    assert len(skipped) == 1 and "incomplete" in skipped[0] and name in skipped[0], printed
    assert "step-000004 at step 4" in printed
    _assert_same_run(out, straight)


def test_no_complete_checkpoint_is_refused_with_one_line(
    tiny_model_dir, sft_straight, tmp_path, monkeypatch, capsys
):
    data, straight = sft_straight
    out = _copy_run(straight, tmp_path / "run")
    for folder in (out / "checkpoints").glob("step-*"):
        _truncate(folder / "model.safetensors")
    rows = (out / "metrics.jsonl").read_text()
    code, printed = _spreadrl(monkeypatch, capsys, _sft_args(tiny_model_dir, data, out))
    assert code != 0
    assert "no complete checkpoint in" in printed and "Traceback" not in printed
    assert len([line for line in printed.splitlines() if line.strip()]) == 1, printed
    assert (out / "metrics.jsonl").read_text() == rows  # nothing started over


def _rng_file_fills_the_disk(monkeypatch):
    """torch.save of step 4's RNG state meets a full disk: an OSError naming the file."""
    real_save = torch.save

    def disk_full_at_step_4(obj, f, *a, **kw):
        path = Path(f) if isinstance(f, str | os.PathLike) else Path()
        if path.parent.name == ".tmp-step-000004" and path.name.startswith("rng-"):
            path.write_bytes(b"\0" * 10)  # what fitted
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_save(obj, f, *a, **kw)

    monkeypatch.setattr(checkpoint.torch, "save", disk_full_at_step_4)


def _weights_fill_the_disk(monkeypatch):
    """safetensors' writer (under save_pretrained) meets a full disk writing step 4's
    weights: its Rust error is no OSError, only text naming one (as on a real full disk)."""
    safetensors_fills_the_disk(monkeypatch, lambda path: path.parent.name == ".tmp-step-000004")


def _short_write(obj, f, *a, **kw):
    """torch.save's zip writer on a full disk: a short write, reported as no OSError."""
    Path(f).write_bytes(b"\0" * 10)  # what fitted
    raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")


def _state_write_comes_up_short(monkeypatch, free=0):
    """torch.save of step 4's RNG state comes up short, with ``free`` bytes left on disk."""
    real_save, real_usage = torch.save, shutil.disk_usage

    def disk_full_at_step_4(obj, f, *a, **kw):
        path = Path(f) if isinstance(f, str | os.PathLike) else Path()
        if path.parent.name == ".tmp-step-000004" and path.name.startswith("rng-"):
            _short_write(obj, f)
        return real_save(obj, f, *a, **kw)

    def usage(path):
        total, used, _ = real_usage(path)
        return type(real_usage(path))(total, used, free)

    monkeypatch.setattr(checkpoint.torch, "save", disk_full_at_step_4)
    monkeypatch.setattr(checkpoint.shutil, "disk_usage", usage)


@pytest.mark.parametrize(
    "fills", [_rng_file_fills_the_disk, _weights_fill_the_disk, _state_write_comes_up_short]
)
def test_enospc_during_a_save_keeps_the_previous_checkpoint_and_a_rerun_resumes(
    tiny_model_dir, sft_straight, tmp_path, monkeypatch, capsys, fills
):
    data, straight = sft_straight
    out = tmp_path / "run"
    args = _sft_args(tiny_model_dir, data, out)
    with monkeypatch.context() as disk:
        fills(disk)
        code, printed = _spreadrl(monkeypatch, capsys, args)
    assert code != 0
    lines = [line for line in printed.splitlines() if line.strip()]
    assert "no space left on device" in lines[-1] and "step-000002 is kept" in lines[-1]
    assert "Traceback" not in printed
    ckpts = out / "checkpoints"
    assert not list(ckpts.glob(".tmp-*"))  # what the failed save wrote is freed
    kept = latest_checkpoint(ckpts)
    assert kept.name == "step-000002" and checkpoint_problem(kept) is None
    assert torch.load(kept / "trainer_state.pt", weights_only=False)["step"] == 2

    code, printed = _spreadrl(monkeypatch, capsys, args)  # space freed
    assert code == 0, printed
    assert "step-000002 at step 2" in printed
    _assert_same_run(out, straight)


def test_a_short_write_with_room_on_disk_is_a_bug_and_keeps_its_traceback(
    tiny_model_dir, sft_straight, tmp_path, monkeypatch
):
    """The rule that reads torch.save's short write as a full disk looks at the disk: with
    room left, the same error is not the disk's, and is raised as it is."""
    data, _ = sft_straight
    args = _sft_args(tiny_model_dir, data, tmp_path / "run")
    _state_write_comes_up_short(monkeypatch, free=10 * 2**30)
    monkeypatch.setattr(sys, "argv", ["spreadrl", *args])
    with pytest.raises(RuntimeError, match="unexpected pos 704 vs 598"):
        main()


def test_a_full_disk_under_the_final_models_weights_is_one_line_and_a_rerun_writes_it(
    tiny_model_dir, sft_straight, tmp_path, monkeypatch, capsys
):
    """The final model's weights go through safetensors too (``save_pretrained``): its
    Rust error used to end the run with a traceback, the end checkpoint already saved."""
    data, straight = sft_straight
    out = tmp_path / "run"
    args = _sft_args(tiny_model_dir, data, out)
    over_quota = "Error while serializing: I/O error: Disk quota exceeded (os error 122)"
    with monkeypatch.context() as disk:
        safetensors_fills_the_disk(disk, lambda path: path.parent.name == ".tmp-final", over_quota)
        code, printed = _spreadrl(monkeypatch, capsys, args)
    last = [line for line in printed.splitlines() if line.strip()][-1]
    assert code == 1 and "Traceback" not in printed, printed
    assert (
        f"could not write the final model to {out / 'final'}: disk quota exceeded" in last.lower()
    )
    assert "the run's end checkpoint is kept" in last
    assert not (out / "final").exists() and not (out / ".tmp-final").exists()

    code, printed = _spreadrl(monkeypatch, capsys, args)  # room again: the same command
    assert code == 0 and "already done: step 5/5" in printed, printed
    _assert_same_run(out, straight)


def test_a_full_disk_between_checkpoints_stops_in_one_line_and_a_rerun_resumes(
    tiny_model_dir, sft_straight, tmp_path, monkeypatch, capsys
):
    """metrics.jsonl is appended every step, between checkpoints: a full disk there used
    to end the run with a traceback. Now one line names the file and the checkpoint a
    rerun resumes from, and the rerun ends as the straight run did."""
    data, straight = sft_straight
    out = tmp_path / "run"
    args = _sft_args(tiny_model_dir, data, out)
    real_open, appends = Path.open, []

    def full_at_the_third_metrics_row(path, mode="r", *a, **kw):
        fh = real_open(path, mode, *a, **kw)
        if path.name == "metrics.jsonl" and mode == "a":
            appends.append(path)
            if len(appends) == 3:
                return FillsUp(fh)
        return fh

    monkeypatch.setattr(Path, "open", full_at_the_third_metrics_row)
    code, printed = _spreadrl(monkeypatch, capsys, args)
    monkeypatch.setattr(Path, "open", real_open)  # space freed
    assert code == 1 and "Traceback" not in printed, printed
    last = [line for line in printed.splitlines() if line.strip()][-1]
    assert f"no space left on device writing {out / 'metrics.jsonl'}" in last, last
    assert f"the last checkpoint {out / 'checkpoints' / 'step-000002'} is kept" in last, last
    assert "the same command resumes from it once the disk has room" in last

    code, printed = _spreadrl(monkeypatch, capsys, args)
    assert code == 0, printed
    assert "step-000002 at step 2" in printed
    _assert_same_run(out, straight)  # the torn row is gone, every step logged once


def test_a_finished_sft_run_is_done_continues_with_more_steps_and_refuses_fewer(
    tiny_model_dir, sft_straight, tmp_path, monkeypatch, capsys
):
    data, straight = sft_straight
    out = _copy_run(straight, tmp_path / "run")
    final = load_file(out / "final" / "model.safetensors")
    code, printed = _spreadrl(monkeypatch, capsys, _sft_args(tiny_model_dir, data, out))
    assert code == 0 and "already done: step 5/5" in printed, printed
    assert [r["step"] for r in _rows_of(out)] == [1, 2, 3, 4, 5]
    again = load_file(out / "final" / "model.safetensors")
    assert all(torch.equal(final[k], again[k]) for k in final)

    longer = [*_sft_args(tiny_model_dir, data, out, steps=7), "--resume"]
    code, printed = _spreadrl(monkeypatch, capsys, longer)
    assert code == 0 and "step-000005 at step 5" in printed, printed
    rows = _rows_of(out)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6, 7]
    assert rows[:5] == _rows_of(straight)  # the finished steps are kept as they were

    shorter = [*_sft_args(tiny_model_dir, data, out, steps=3), "--resume"]
    code, printed = _spreadrl(monkeypatch, capsys, shorter)
    assert code != 0 and "already trained 7 steps" in printed, printed
    assert len(_rows_of(out)) == 7


def test_enospc_inside_the_sharded_optimizer_save_is_the_same_one_line(tmp_path, monkeypatch):
    # torch.distributed.checkpoint reports a rank's write error wrapped in its own
    # CheckpointException (a BaseException): the save still frees its folder and says why
    import io

    from spreadrl.train.checkpoint import CheckpointSaveError, save_checkpoint
    from tests.train.test_checkpoint import _setup

    model, opt, sched = _setup()
    save_checkpoint(tmp_path, 1, model, None, opt, sched)
    real_save = torch.save

    def disk_full_in_dcp(obj, f, *a, **kw):
        if isinstance(f, io.BytesIO):  # how dcp serialises the optimizer's non-tensor items
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(obj, f, *a, **kw)

    monkeypatch.setattr(torch, "save", disk_full_in_dcp)
    with pytest.raises(CheckpointSaveError) as failed:
        save_checkpoint(tmp_path, 2, model, None, opt, sched)
    message = str(failed.value)
    assert "\n" not in message and "no space left on device" in message
    assert "step-000001 is kept" in message
    assert not list(tmp_path.glob(".tmp-*")) and not (tmp_path / "step-000002").exists()
    assert latest_checkpoint(tmp_path).name == "step-000001"
