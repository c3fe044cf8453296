"""`torchrun --nproc-per-node 2` (gloo, CPU) of `spreadrl grpo` and `spreadrl sft` stopped
by a signal: both ranks stop after the same step, save it together, exit cleanly, and
the same command resumes to what an uninterrupted run of the same length gives.

GRPO, two cases: SIGTERM to one rank only (the other rank learns of it through the
step-boundary all_reduce), and SIGINT to the torchrun launcher (which forwards it to
every worker's process group, as a terminal's Ctrl-C does); SFT: SIGTERM to one rank.
The uninterrupted run is the same torchrun command left alone. GRPO's signal is sent
once rank 0 has logged step 1 (a file, not a sleep); the stop then comes after
whichever step was under way (its steps take seconds), and the test reads which from
the run. SFT's steps take milliseconds: rank 1 is held after a chosen step while the
test signals it (tests/train/paced_spreadrl.py), so the stop step is known.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from tests.train.test_grpo_options_cli import (
    COMPARED,
    REPO,
    _env,
    _metrics,
    _overrides,
    torchrun_command,
)
from tests.train.test_grpo_options_torchrun import GLOBAL

# minutes of torchrun launches (eight, of two workers each): the heavy leg (make test-heavy)
pytestmark = pytest.mark.heavy

STEPS = 4
SEED = ["seed=2"]  # as in test_grpo_options_torchrun.py: step 1 moves the weights


@pytest.fixture(scope="module")
def straight(tiny_model_dir, tmp_path_factory):
    """The uninterrupted run: the same torchrun command, never signalled."""
    out = tmp_path_factory.mktemp("straight")
    done = subprocess.run(
        _torchrun(tiny_model_dir, out),
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def _torchrun(model_dir, out):
    return torchrun_command(
        "grpo",
        *_overrides(model_dir, out, STEPS),
        *SEED,
    )


def _rank_pid(launcher: int, rank: int) -> int:
    """The pid of the worker torchrun started for ``rank`` (read from /proc)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            environ = (proc / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == launcher and f"RANK={rank}".encode() in environ:
            return int(proc.name)
    raise AssertionError(f"no rank {rank} worker under torchrun pid {launcher}")


def _run_and_signal(cmd, out, send):
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 300
    while not _metrics(out) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[0][-3000:]  # still running
    send(proc)
    return proc, proc.communicate(timeout=300)[0]


def _check_stopped_then_resume(model_dir, out, output, signal_name, straight):
    done = len(_metrics(out))
    assert 1 <= done < STEPS, output[-3000:]
    assert f"stopped by {signal_name} after step {done}/{STEPS} on all 2 ranks" in output, output
    assert "resume: torchrun --nproc-per-node 2 -m spreadrl grpo" in output, output
    ckpt = out / "checkpoints" / f"step-{done:06d}"
    assert (out / "checkpoints" / "latest").read_text().strip() == ckpt.name
    # every rank took part in saving that same step: its RNG and its optimizer shard
    assert (ckpt / "rng-0.pt").exists() and (ckpt / "rng-1.pt").exists()
    assert len(list((ckpt / "optim").glob("*.distcp"))) == 2
    assert not (out / "final").exists()

    resumed = subprocess.run(
        _torchrun(model_dir, out), cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert f"at step {done}" in resumed.stdout
    got, want = _metrics(out), _metrics(straight)
    assert [m["step"] for m in got] == list(range(1, STEPS + 1))
    assert want[0]["grad_norm"] > 0  # step 1 moved the weights that later steps sample from
    for a, b in zip(got, want, strict=True):
        for key in {*COMPARED, *GLOBAL}:
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), (a["step"], key)

    _same_weights(out / "final", straight / "final")


def _same_weights(got_dir, want_dir):
    from transformers import AutoModelForCausalLM

    want = AutoModelForCausalLM.from_pretrained(want_dir, dtype=torch.float32)
    got = dict(
        AutoModelForCausalLM.from_pretrained(got_dir, dtype=torch.float32).named_parameters()
    )
    for name, value in want.named_parameters():
        assert torch.allclose(got[name], value, atol=1e-5, rtol=1e-4), name


@pytest.mark.slow
def test_sigterm_to_one_rank_stops_both_after_the_same_step(tiny_model_dir, tmp_path, straight):
    out = tmp_path / "run"
    proc, output = _run_and_signal(
        _torchrun(tiny_model_dir, out),
        out,
        lambda proc: os.kill(_rank_pid(proc.pid, 1), signal.SIGTERM),
    )
    assert "[rank 1] SIGTERM: stopping after the step under way" in output, output
    assert "[rank 0] SIGTERM" not in output  # rank 0 learnt of it at the step boundary
    assert proc.returncode == 0, output[-3000:]  # both workers exited 0, so torchrun did
    _check_stopped_then_resume(tiny_model_dir, out, output, "SIGTERM", straight)


@pytest.mark.slow
def test_sigint_to_torchrun_stops_both_after_the_same_step(tiny_model_dir, tmp_path, straight):
    out = tmp_path / "run"
    proc, output = _run_and_signal(
        _torchrun(tiny_model_dir, out), out, lambda proc: proc.send_signal(signal.SIGINT)
    )
    assert "[rank 0] SIGINT: stopping" in output and "[rank 1] SIGINT: stopping" in output
    _check_stopped_then_resume(tiny_model_dir, out, output, "SIGINT", straight)


SFT_STEPS = 8
# SFT steps take a few ms, so a signal sent "soon" may land after the last one: rank 1
# is held after this step (tests/train/paced_spreadrl.py) while the test signals it,
# and the run stops after the next step, wherever it runs
SFT_PAUSE = 3


def _sft_torchrun(model_dir, data, out, module="spreadrl"):
    return torchrun_command(
        "sft",
        f"model.name_or_path={model_dir}",
        f"data.path={data}",
        f"output_dir={out}",
        f"steps={SFT_STEPS}",
        "batch_size=4",
        "optim.lr=3e-3",
        "optim.weight_decay=0.0",
        "device=cpu",
        module=module,
    )


def _sft(model_dir, data, out):
    return subprocess.run(
        _sft_torchrun(model_dir, data, out),
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_sft_sigterm_to_one_rank_stops_both_and_resumes_exactly(tiny_model_dir, tmp_path):
    from tests.train.test_sft_e2e import _rows, _write

    data = _write(tmp_path / "sft.jsonl", _rows(8))
    straight = tmp_path / "straight"
    plain = _sft(tiny_model_dir, data, straight)
    assert plain.returncode == 0, plain.stdout[-3000:] + plain.stderr[-3000:]

    out, hold = tmp_path / "run", tmp_path / "hold"
    hold.mkdir()
    proc = subprocess.Popen(
        _sft_torchrun(tiny_model_dir, data, out, module="tests.train.paced_spreadrl"),
        cwd=REPO,
        env={**_env(), "SPREADRL_TEST_PAUSE": f"1:{SFT_PAUSE}:{hold}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not (hold / "paused").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[0][-3000:]  # held, not finished
    os.kill(_rank_pid(proc.pid, 1), signal.SIGTERM)
    (hold / "go").touch()
    output = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, output[-3000:]
    done = len(_metrics(out))
    assert done == SFT_PAUSE + 1, output[-3000:]  # the first stop check after the signal
    assert f"stopped by SIGTERM after step {done}/{SFT_STEPS} on all 2 ranks" in output, output
    assert "resume: torchrun --nproc-per-node 2 -m spreadrl sft" in output, output
    ckpt = out / "checkpoints" / f"step-{done:06d}"
    assert (ckpt / "rng-0.pt").exists() and (ckpt / "rng-1.pt").exists()

    resumed = _sft(tiny_model_dir, data, out)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert f"at step {done}" in resumed.stdout
    got, want = _metrics(out), _metrics(straight)
    assert [m["step"] for m in got] == list(range(1, SFT_STEPS + 1))
    for a, b in zip(got, want, strict=True):
        for key in ("loss", "grad_norm", "lr"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), (a["step"], key)
    _same_weights(out / "final", straight / "final")
