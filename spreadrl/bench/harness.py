"""The capturing endpoint's cost (`spreadrl bench rollout --against harness`).

The same episodes (the built-in demo tasks, the gym's ``write_range`` tools, one
tiny or given model, one seed) rolled out twice per repeat, alternated so both see
the same machine load: by the built-in loop, and by
:mod:`spreadrl.bench.harness_agent`, a harness doing the built-in loop's work
through the capturing endpoint (HTTP, a sandboxed process per episode, the relay,
the capture). The figure is the endpoint path's wall time over the built-in
loop's, per rollout (a GRPO step's rollout phase). The endpoint runs twice per
repeat: with the harness forked per episode from one sandbox that imported it
(``rollout.harness_fork``, the default: "endpoint") and with a fresh sandboxed
interpreter per episode ("endpoint, no fork"), so one run gives both ratios.

Both paths generate in a worker thread (the endpoint's engine thread; the built-in
loop is run in one): on a loaded CPU torch's main-thread OpenMP team ran the same
``act`` 10-40x slower than a worker thread's here, which would credit the endpoint
with a speed that is not its own. One turn per episode by default: the random model
rarely writes a well-formed call, and after a malformed one the built-in loop sends
its parse error back while a harness only sees text, so longer episodes would not be
the same work. ``same_tokens`` says whether both sampled the same tokens.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from spreadrl.bench.rollout import random_model

NO_FORK = "endpoint, no fork"


def against_harness(
    model: str | None = None,
    tasks: str = "builtin:demo-test",
    episodes: int = 16,
    max_new_tokens: int = 64,
    max_turns: int = 1,
    repeats: int = 3,
    device: str = "cpu",
    threads: int = 1,
) -> dict[str, Any]:
    """Wall seconds of each path per repeat, their medians and the overhead ratio.

    ``threads``: torch's CPU threads for both paths (0: its default). One by default:
    on a CPU shared with other work, two OpenMP threads per ``act`` ran the same call
    anywhere from 0.3 s to 11 s here (their barrier waits on a descheduled thread),
    noise that would swamp the comparison."""
    import torch

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        result = _measure(model, tasks, episodes, max_new_tokens, max_turns, repeats, device)
        return {**result, "threads": torch.get_num_threads()}
    finally:
        torch.set_num_threads(before)


def _measure(
    model: str | None,
    tasks: str,
    episodes: int,
    max_new_tokens: int,
    max_turns: int,
    repeats: int,
    device: str,
) -> dict[str, Any]:
    from spreadrl.data.sources import resolve_tasks
    from spreadrl.env.config import EnvConfig
    from spreadrl.env.factory import make_env_pool
    from spreadrl.models.init import load_model_and_tokenizer
    from spreadrl.rollout.chat import EpisodeChat
    from spreadrl.rollout.config import RolloutConfig
    from spreadrl.rollout.engines.hf import HFPolicy
    from spreadrl.rollout.harness.episodes import HarnessEpisodes
    from spreadrl.rollout.runner import EpisodeJob, RunValues, run_episodes

    with tempfile.TemporaryDirectory(prefix="spreadrl-bench-") as tmp:
        path = model or random_model(Path(tmp))
        lm, tok = load_model_and_tokenizer(path, device=device)
        pairs = resolve_tasks(tasks).episodes()
        jobs = [EpisodeJob(*pairs[i % len(pairs)], sample=i // len(pairs)) for i in range(episodes)]
        cfg = RolloutConfig(
            max_new_tokens_per_turn=max_new_tokens,
            max_turns=max_turns,
            max_response_tokens=max_new_tokens * max_turns + 256,
        )
        chat, policy = EpisodeChat.of(tok), HFPolicy(lm, tok)
        env = EnvConfig(tools="write_range")
        harness = HarnessEpisodes.of("spreadrl.bench.harness_agent:run", env)
        runners = {
            "built-in": (run_episodes, cfg),
            "endpoint": (harness, cfg),
            NO_FORK: (harness, replace(cfg, harness_fork=False)),
        }
        times: dict[str, list[float]] = {label: [] for label in runners}
        tokens: dict[str, int] = dict.fromkeys(runners, 0)
        ids: dict[str, list[list[int]]] = {label: [] for label in runners}
        generate: dict[str, list[float]] = {label: [] for label in runners}
        engine_calls: dict[str, list[float]] = {label: [] for label in runners}
        with make_env_pool(env, workers=0) as pool, ThreadPoolExecutor(1) as worker:
            for r in range(repeats + 1):  # the first round warms all up, untimed
                for label, (runner, rcfg) in runners.items():
                    start = time.perf_counter()
                    run = RunValues(seed=r)
                    out = worker.submit(runner, policy, pool, jobs, rcfg, chat, run=run).result()
                    if r:
                        times[label].append(time.perf_counter() - start)
                        tokens[label] += sum(t.generated_tokens for t in out.trajectories)
                        ids[label] += [t.response_ids for t in out.trajectories]
                        generate[label].append(out.timings.get("generate_s", 0.0))
                        calls = out.timings.get("harness_engine_calls")
                        engine_calls[label].append(calls if calls is not None else max_turns)
                    crashed = [t.error for t in out.trajectories if t.crashed]
                    if crashed:
                        raise RuntimeError(
                            f"{label}: {len(crashed)} episodes crashed: {crashed[0]}"
                        )
        harness.close()
    medians = {label: statistics.median(t) for label, t in times.items()}
    built = medians["built-in"]
    return {
        "episodes": episodes,
        "repeats": repeats,
        "model": model or "tiny random",
        "device": device,
        "seconds": times,
        "generated_tokens": tokens,
        "median_s": medians,
        # seconds inside policy.act, and how many act calls (the built-in loop: one a turn)
        "generate_s": generate,
        "engine_calls": engine_calls,
        "overhead": medians["endpoint"] / built - 1.0,
        "overhead_no_fork": medians[NO_FORK] / built - 1.0,
        "same_tokens": ids["built-in"] == ids["endpoint"],
    }
