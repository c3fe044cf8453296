"""Stopping a run on SIGINT / SIGTERM in one process: the flag, the whole-step stop and
resume of SFT, checkpoints that survive a kill mid-save, tool workers that outlive Ctrl-C.

The torchrun cases (two ranks, a signal to one rank or to the launcher) are in
test_stop_signals_torchrun.py.
"""

from __future__ import annotations

import os
import signal

import pytest
import torch

from spreadrl.errors import RunStopped
from spreadrl.train.checkpoint import checkpoint_folder, latest_checkpoint, save_checkpoint
from spreadrl.train.distributed import DistInfo
from spreadrl.train.sft import train_sft
from spreadrl.train.signals import StopSignals
from tests.train.test_checkpoint import _setup
from tests.train.test_sft_e2e import _cfg, _losses, _rows, _write
from tests.train.test_sft_on_step import _weights


def test_a_signal_sets_the_flag_and_a_second_one_is_ignored(capfd):
    # whatever the handlers were (a shell's background job starts with SIGINT ignored)
    before = signal.getsignal(signal.SIGTERM)
    before_int = signal.getsignal(signal.SIGINT)
    signals = StopSignals()
    signals.install()
    try:
        assert signals.requested(DistInfo()) is None
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before kill returns here
        assert signals.requested(DistInfo()) == "SIGTERM"
        os.kill(os.getpid(), signal.SIGINT)  # no KeyboardInterrupt: already stopping
        assert signals.requested(DistInfo()) == "SIGTERM"  # the first signal is the one named
    finally:
        signals.restore()
    assert signal.getsignal(signal.SIGTERM) is before
    assert signal.getsignal(signal.SIGINT) is before_int
    err = capfd.readouterr().err
    assert "SIGTERM: stopping after the step under way" in err
    assert "SIGINT again: already stopping" in err


def test_sft_stops_after_the_signalled_step_and_resumes_exactly(tiny_model_dir, tmp_path):
    data = _write(tmp_path / "sft.jsonl", _rows(6))
    straight = train_sft(_cfg(tiny_model_dir, data, tmp_path / "straight", 5))

    out = tmp_path / "stopped"

    def sigterm_in_step_2(step, model, tokenizer):
        if step == 1:  # lands between steps 1 and 2, so step 2 runs whole before the stop
            os.kill(os.getpid(), signal.SIGTERM)
        return False

    with pytest.raises(RunStopped) as stopped:
        train_sft(_cfg(tiny_model_dir, data, out, 5), on_step=sigterm_in_step_2)
    assert stopped.value.step == 2
    assert stopped.value.checkpoint == str(checkpoint_folder(out / "checkpoints", 2))
    assert "stopped by SIGTERM after step 2/5" in stopped.value.message
    assert latest_checkpoint(out / "checkpoints").name == "step-000002"
    assert not (out / "final").exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers given back

    resumed = train_sft(_cfg(tiny_model_dir, data, out, 5))
    assert _losses(out) == pytest.approx(_losses(tmp_path / "straight"), abs=1e-6)
    a, b = _weights(resumed), _weights(straight)
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_a_save_killed_midway_keeps_the_previous_checkpoint(tmp_path):
    model, opt, sched = _setup()
    save_checkpoint(tmp_path, 1, model, None, opt, sched)
    torn = tmp_path / ".tmp-step-000002"  # what a SIGKILL during step 2's save leaves
    torn.mkdir()
    (torn / "model.pt").write_bytes(b"half")
    assert latest_checkpoint(tmp_path).name == "step-000001"
    save_checkpoint(tmp_path, 3, model, None, opt, sched)
    assert not torn.exists()  # the next save clears it
    assert latest_checkpoint(tmp_path).name == "step-000003"


def test_latest_falls_back_to_the_newest_complete_checkpoint(tmp_path):
    model, opt, sched = _setup()
    for step in (1, 2):
        save_checkpoint(tmp_path, step, model, None, opt, sched)
    save_checkpoint(tmp_path, 2, model, None, opt, sched)  # the same step saved again
    assert latest_checkpoint(tmp_path).name == "step-000002"
    assert not list(tmp_path.glob(".old-*")) and not list(tmp_path.glob(".tmp-*"))
    # a kill between the two renames of a re-save: `latest` names a folder that is gone
    (tmp_path / "step-000002").rename(tmp_path / ".old-step-000002")
    assert latest_checkpoint(tmp_path).name == "step-000001"


class _Echo:
    def reset(self, task, case=1):
        return os.getpid()

    def step(self, call):
        return call

    def finish(self, **kw):
        return None

    def close(self):
        pass


def test_tool_workers_leave_the_trainers_process_group_and_ignore_ctrl_c_and_sigterm():
    from spreadrl.env.pool import EnvPool

    with EnvPool(_Echo, num_workers=1) as pool:
        pid = pool.reset("e", None).result(timeout=60)
        assert os.getpgid(pid) != os.getpgid(0)  # torchrun's killpg and a tty's ^C miss it
        os.kill(pid, signal.SIGINT)  # pending before the next request reaches the worker
        # a cluster scheduler's preemption signals every process of the job directly
        os.kill(pid, signal.SIGTERM)
        assert pool.step("e", "still here").result(timeout=60) == "still here"
        pool.finish("e").result(timeout=60)
    assert not _alive(pid)  # closing the pool still ends the worker


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie not yet reaped counts as gone
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_the_resume_command_is_the_same_command_under_the_same_launcher(monkeypatch):
    from pathlib import Path

    from spreadrl.cli.resume import resume_command

    for key in ("TORCHELASTIC_RUN_ID", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    overrides = ["steps=60", "output_dir=runs/my run"]
    assert resume_command("grpo", Path("c.yaml"), overrides) == (
        "spreadrl grpo --config c.yaml steps=60 'output_dir=runs/my run'"
    )
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert resume_command("sft", None, ["steps=5"]) == (
        "torchrun --nproc-per-node 4 -m spreadrl sft steps=5"
    )
    monkeypatch.setenv("WORLD_SIZE", "8")  # two nodes: their launch flags are the user's
    assert resume_command("sft", None, []).startswith("torchrun <the same launch flags> -m")


def test_the_cli_exits_0_with_the_message_when_a_run_stopped(monkeypatch, capsys):
    import spreadrl.cli.main as cli

    def stopped_run() -> None:
        raise RunStopped("stopped by SIGTERM after step 3/9", "ckpt", 3, announce=True)

    monkeypatch.setattr(cli, "app", stopped_run)  # e.g. `spreadrl demo` stopped in its SFT
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code == 0
    assert "stopped by SIGTERM after step 3/9" in capsys.readouterr().err
