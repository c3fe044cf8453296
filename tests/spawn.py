"""Local processes for tests: servers on a free port, and spawned gloo ranks.

:func:`serving` starts a server and yields its URL once ``/health`` answers. A spawned
rank joins a local gloo group with torchrun's environment (:func:`join_group`) and leaves
it with :func:`leave_process_group`; :func:`spawn_ranks` starts the ranks with a
deadline, so a collective that hangs fails its test instead of stalling the suite, and
forks them from a server that has imported torch, transformers and the trainer once;
:func:`rank_results` reads what each rank wrote. :func:`ctrl_c_when` stops a command as
a user's Ctrl-C would, at the moment a test picks.
"""

from __future__ import annotations

import json
import multiprocessing.forkserver
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import torch
import torch.multiprocessing as mp

SPAWN_TIMEOUT_S = 240  # a generous bound: two ranks of a tiny model take seconds
RANK_PRELOAD = ["pytest", "torch", "torch.distributed.fsdp", "spreadrl.train.grpo"]
"""What the rank server imports once. A spawned rank imported these afresh (``import
spreadrl.train.trained_model`` alone measured 10 s of CPU on a loaded 2-core machine,
torch 3.4 s of it: most of a two-rank test's time); a rank forked from the server starts
with them loaded. The recipe (``spreadrl.train.grpo``, which imports the trained model),
because the dynamic-sampling ranks run it whole. The server runs no test code and no tensor op before it forks; each
rank sets its own thread count and joins its group after the fork (:func:`join_group`)."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serving(
    command: list[str],
    port: int,
    *,
    log: Path,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float = 120.0,
) -> Iterator[str]:
    """Run ``command`` (a server told to listen on ``port``); yield its URL once
    ``/health`` answers, and stop it after the block. Its output goes to ``log`` (an
    unread pipe would fill and block it); a server that exits first, or has not answered
    within ``timeout_s``, fails the test with that output."""
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                output = log.read_text(errors="replace")
                pytest.fail(f"{command[:4]} exited with {process.returncode}:\n{output}")
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                output = log.read_text(errors="replace")
                pytest.fail(f"{command[:4]} did not answer /health in {timeout_s:.0f} s:\n{output}")
            time.sleep(0.3)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def join_group(rank: int, world: int, port: int) -> None:
    """Start a spawned rank: torchrun's environment for a local gloo group, one thread."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
    )
    torch.set_num_threads(1)


def leave_process_group() -> None:
    """End a spawned rank: leave the process group together, then exit at once.

    ``os._exit`` skips the interpreter's teardown, where gloo's threads have aborted a
    rank that had finished its work ("terminate called without an active exception",
    about one run in tens on a loaded 2-core machine); the test checks what the ranks
    computed, and the result file is written and closed before this point.
    """
    from spreadrl.train.distributed import cleanup

    cleanup()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def spawn_ranks(
    worker: Callable[..., None], *args: object, world: int = 2, timeout_s: float = SPAWN_TIMEOUT_S
) -> None:
    """Run ``worker(rank, world, port, *args)`` on ``world`` spawned ranks; a rank that
    has not finished within ``timeout_s`` fails the test (all ranks are killed)."""
    multiprocessing.forkserver.set_forkserver_preload(RANK_PRELOAD)  # read at its first start
    ctx = mp.start_processes(
        worker,
        args=(world, free_port(), *args),
        nprocs=world,
        join=False,
        start_method="forkserver",
    )
    deadline = time.monotonic() + timeout_s
    while not ctx.join(timeout=max(0.0, deadline - time.monotonic())):
        if time.monotonic() >= deadline:
            for process in ctx.processes:
                if process.is_alive():
                    process.kill()
            pytest.fail(
                f"the {world} ranks did not finish within {timeout_s} s (a collective hung)"
            )


def rank_results(folder: Path, world: int = 2) -> list[dict]:
    """What each rank wrote as ``rank{r}.json`` in ``folder``, in rank order."""
    return [json.loads((Path(folder) / f"rank{r}.json").read_text()) for r in range(world)]


def ctrl_c_when(
    argv: list[str], ready: Callable[[], bool], timeout_s: float = 120
) -> tuple[int, str]:
    """Run ``argv``, send it SIGINT once ``ready()`` holds (polled), and return its exit code
    and stderr. The test fails if the command ends first or is not ready in ``timeout_s``."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + timeout_s
        while not ready():
            assert proc.poll() is None, "the command ended before the moment to stop it"
            assert time.monotonic() < deadline, f"the command was not ready in {timeout_s} s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, err
