"""Run a policy on every case of a task set, K samples each, and write a report.

Results are appended to ``trajectories.jsonl`` as each batch finishes, so a
rerun into the same folder resumes where it stopped and Ctrl-C leaves a
consistent partial report.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from spreadrl.config import config_to_dict
from spreadrl.data.task import TaskSet
from spreadrl.env.config import EnvConfig
from spreadrl.eval.report import build_report
from spreadrl.reporting import LogReporter, Reporter
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.policy import Policy
from spreadrl.rollout.runner import EnvPoolLike, EpisodeJob, EpisodeRunner, run_episodes
from spreadrl.rollout.types import RunValues, Trajectory
from spreadrl.run_folder import appending, cut_back_jsonl

TRAJECTORIES = "trajectories.jsonl"
REPORT = "report.json"
CONFIG = "config.yaml"


def engine_context_tokens(max_prompt_tokens: int, rollout: RolloutConfig) -> int | None:
    """The context a vLLM engine needs for this eval: prompt budget + response budget.

    Sizing the engine from the recipe keeps its KV cache to what an episode can
    use; with no prompt budget (``data.max_prompt_tokens: 0``) there is no bound to
    give, and the engine takes the model's own limit.
    """
    if max_prompt_tokens <= 0:
        return None
    return max_prompt_tokens + rollout.max_response_tokens


def save_eval_config(
    out_dir: Path,
    *,
    rollout: RolloutConfig,
    env: EnvConfig,
    max_prompt_tokens: int,
    recipe: Path | None,
    run: dict[str, Any],
) -> Path:
    """Write the resolved settings of this eval as ``out_dir/config.yaml``.

    Only the sections an episode reads (``rollout``, ``env``, the prompt budget):
    the recipe's trainer settings do not change an eval's result.
    """
    import yaml

    out_dir.mkdir(parents=True, exist_ok=True)
    data = {
        "recipe": str(recipe) if recipe is not None else None,
        "eval": run,
        "rollout": config_to_dict(rollout),
        "env": config_to_dict(env),
        "data": {"max_prompt_tokens": max_prompt_tokens},
    }
    path = out_dir / CONFIG
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def read_trajectories(path: Path) -> list[Trajectory]:
    """Trajectories of a run folder (or a .jsonl file), one per episode; a torn last line is ignored.

    An episode recorded twice (it failed with an error and a rerun retried it)
    counts once, as its latest record.
    """
    file = path / TRAJECTORIES if path.is_dir() else path
    if not file.exists():
        return []
    latest: dict[str, Trajectory] = {}
    for line in file.read_text().splitlines():
        try:
            traj = Trajectory.from_json(json.loads(line))
        except (json.JSONDecodeError, TypeError):
            continue  # a line cut by an interrupted write
        latest[traj.key] = traj
    return list(latest.values())


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)


def _earlier_time(out_dir: Path) -> tuple[list[float], dict[str, float]]:
    """The wall time of each earlier session of the eval in ``out_dir``, and their timings.

    From its ``report.json`` (none yet: nothing); a report written before sessions
    were recorded counts as one session of its ``wall_s``.
    """
    try:
        earlier = json.loads((out_dir / REPORT).read_text())
    except (OSError, ValueError):
        return [], {}
    if not isinstance(earlier, dict):
        return [], {}
    sessions = earlier.get("wall_s_sessions") or [earlier.get("wall_s") or 0.0]
    timings = earlier.get("timings") or {}
    return [float(s) for s in sessions], {k: float(v) for k, v in timings.items()}


def batches_to_run(
    planned: list[EpisodeJob], batch_size: int, done: set[str]
) -> list[tuple[int, list[EpisodeJob]]]:
    """The whole eval's batches, each with its start in ``planned`` (its seed's offset),
    less the episodes ``done``: a resumed episode samples from the seed it would have
    had in one uninterrupted run, and a batch with nothing left is skipped."""
    batches = []
    for index in range(0, len(planned), batch_size):
        left = [job for job in planned[index : index + batch_size] if job.episode_id not in done]
        if left:
            batches.append((index, left))
    return batches


def run_eval(
    tasks: TaskSet,
    policy: Policy,
    pool: EnvPoolLike,
    cfg: RolloutConfig,
    out_dir: Path,
    *,
    run: RunValues | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    samples: int = 1,
    k_values: Sequence[int] = (1,),
    batch_size: int = 64,
    reporter: Reporter | None = None,
    meta: dict[str, Any] | None = None,
    episodes: EpisodeRunner = run_episodes,
) -> dict[str, Any]:
    """Evaluate and return the report (also written to ``out_dir/report.json``).

    ``episodes`` plays them: the built-in loop, or a harness's episodes
    (``rollout.harness``: the agent evaluated is the user's own, through the capturing
    endpoint, scored by the same checker).

    ``cfg`` is the recipe's ``rollout`` section; ``run`` the seed and prompt
    budget (the workbooks are kept under ``out_dir/outputs``). The tokenizer's
    chat format is read once here, for every batch of the evaluation. ``reporter``
    shows the progress (the CLI: a bar with the pass rate so far; default: none)."""
    reporter = reporter or LogReporter()
    out_dir.mkdir(parents=True, exist_ok=True)
    run = replace(run or RunValues(), keep_outputs_dir=str(out_dir / "outputs"))
    chat = EpisodeChat.of(tokenizer) if tokenizer is not None else None
    # a rerun into the same folder resumes: finished episodes are kept, and episodes that
    # failed with an error (a task that did not load, a crashed worker) are run again
    cut_back_jsonl(out_dir / TRAJECTORIES)  # a killed eval's half-written last line
    done = {t.key for t in read_trajectories(out_dir) if not t.error}
    planned = [
        EpisodeJob(task, case, sample)
        for task, case in tasks.episodes()
        for sample in range(samples)
    ]
    batches = batches_to_run(planned, batch_size, done)
    started = time.perf_counter()
    # a resumed eval adds its time to the earlier sessions', which ran the episodes it keeps
    sessions, timings = _earlier_time(out_dir) if done else ([], {})
    passed = finished = 0
    with (
        reporter.progress("eval", sum(len(c) for _, c in batches), status="pass -") as bar,
        appending(out_dir / TRAJECTORIES) as sink,
    ):
        try:
            for index, chunk in batches:
                batch_run = run if run.seed is None else replace(run, seed=run.seed + index)
                result = episodes(policy, pool, chunk, cfg, chat, run=batch_run)
                for traj in result.trajectories:
                    sink.write(json.dumps(traj.to_json(with_tokens=False), default=str) + "\n")
                    passed += traj.passed
                sink.flush()
                for k, v in result.timings.items():
                    timings[k] = timings.get(k, 0.0) + v
                finished += len(chunk)
                bar.advance(len(chunk), status=f"pass {100 * passed / finished:.1f}%")
        finally:
            sink.flush()
            sessions.append(time.perf_counter() - started)
            recorded = read_trajectories(out_dir)
            report = build_report(
                recorded,
                k_values,
                extra={
                    # a Ctrl-C leaves a report of the episodes finished so far: it says so
                    "episodes_planned": len(planned),
                    "complete": len(recorded) == len(planned),
                    "wall_s": sum(sessions),
                    "wall_s_sessions": sessions,
                    "timings": timings,
                    **(meta or {}),
                },
            )
            write_json(out_dir / REPORT, report)
    return report
