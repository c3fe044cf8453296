"""`spreadrl grpo` as a user runs it, in a subprocess (issue 12, item 4): Ctrl-C mid-run
leaves a checkpoint the next run resumes from exactly, and two torchrun (gloo) ranks
report the metrics one process reports.

The runs use the built-in math/code problems (env.kind=code): the tiny random model
never calls a tool, so episodes cost no sandbox and no workbook, only generation.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spreadrl.config import load_config
from spreadrl.train.config import GRPOConfig
from spreadrl.train.grpo import train_grpo
from tests.cli.test_cli_mistakes import cli

REPO = Path(__file__).resolve().parents[2]
COMPARED = ("reward_mean", "pass_rate", "response_tokens", "loss", "grad_norm", "kl")


def _overrides(model_dir, out, steps):
    # overlong shaping on a 24-token budget makes rewards differ with response length, so
    # the random tiny model gets non-zero advantages and every step moves the weights
    return [
        f"model.name_or_path={model_dir}",
        f"output_dir={out}",
        f"steps={steps}",
        "device=cpu",
        "data.train_tasks=builtin-code:train",
        "env.kind=code",
        "env.tools=[code_interpreter]",
        "rollout.group_size=4",
        "rollout.prompts_per_step=2",
        "rollout.max_turns=1",
        "rollout.max_new_tokens_per_turn=12",
        "rollout.max_response_tokens=24",
        "reward.overlong=true",
        "reward.overlong_buffer=20",
        "sampling.mode=keep",
        "loss.kl_coef=0.1",
        "optim.lr=1e-2",
        "optim.weight_decay=0.0",
    ]


def _env():
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def torchrun_command(*spreadrl_args, nproc=2, module="spreadrl"):
    """``torchrun --standalone --nproc-per-node N -m MODULE ARGS`` with this Python.

    ``module``: ``tests.train.sgd_spreadrl`` for the equivalence runs (plain SGD).
    """
    head = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    return [*head, "--nproc-per-node", str(nproc), "-m", module, *spreadrl_args]


def _metrics(out):
    path = Path(out) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _same_metrics(got, want):
    assert [m["step"] for m in got] == [m["step"] for m in want]
    for a, b in zip(got, want, strict=True):
        for key in COMPARED:
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), (a["step"], key)


@pytest.mark.slow
def test_ctrl_c_saves_a_checkpoint_and_the_run_resumes_exactly(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    # seed 2: step 1 moves the weights, so a resume that got the KL reference or the
    # optimizer state wrong shows in the next step's metrics. One tool worker process, so
    # the Ctrl-C path runs with a pool (that the worker itself outlives a Ctrl-C is
    # checked in test_stop_signals.py: here a worker lost between episodes would be
    # restarted unnoticed)
    extra = ["seed=2", "rollout.concurrency=1"]
    straight = tmp_path / "straight"
    cfg = load_config(GRPOConfig, None, [*_overrides(tiny_model_dir, straight, 3), *extra])
    train_grpo(cfg)

    out = tmp_path / "interrupted"
    cmd = [sys.executable, "-m", "spreadrl", "grpo", *_overrides(tiny_model_dir, out, 3), *extra]
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a shell gives a foreground job
    )
    deadline = time.monotonic() + 300
    while not _metrics(out) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[0]  # still running, in step 2
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
    output = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, output  # a stop that saved is not a failure
    done = len(_metrics(out))
    assert 1 <= done < 3, output
    assert f"stopped by SIGINT after step {done}/3; checkpoint: " in output, output
    assert "resume: spreadrl grpo model.name_or_path=" in output, output
    latest = (out / "checkpoints" / "latest").read_text().strip()
    assert latest.endswith(f"step-{done:06d}"), latest

    # the same command again, in this process (the entry point `spreadrl` runs): it resumes
    code, stdout, stderr = cli(monkeypatch, capsys, *cmd[3:])
    assert code == 0, stdout + stderr
    assert f"at step {done}" in stdout
    _same_metrics(_metrics(out), _metrics(straight))
