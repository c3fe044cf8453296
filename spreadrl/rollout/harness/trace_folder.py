"""Train on traces captured elsewhere: a folder of OpenEnv ``TrainingTrace``s as GRPO's episodes.

``rollout.traces`` names a folder that OpenEnv's capture proxy (``CaptureServer``) or
any producer of its trace format filled, one subfolder per group (the episodes of one
task, ``rollout.group_size`` of them)::

    traces/
      task-a/  e0.json  e1.json  ...  rewards.json
      task-b/  ...

Each episode file is a ``TrainingTrace`` (``{"schema_version": 1, "turns": [...]}``)
or the proxy's trace entries (``GET /sessions/<id>/trace_entries``: ``{"entries":
[...]}`` or the list itself). Its reward is the one the trace carries (an entry's
``reward``, which only an environment sets: the mirror of its ``verify()``), else
the verifier's, ``rewards.json`` in the group folder (``{"e0": 1.0, ...}``, by file
stem). An episode without a reward is unscored: an error, dropped with its group and
counted, never a zero reward (OpenEnv: ``None`` is unscored, never 0.0).

:class:`TraceEpisodes` has :func:`~spreadrl.rollout.runner.run_episodes`'s signature:
each step takes the next ``prompts_per_step`` groups in name order (and starts over
when all were used); the policy generates nothing, the ids and log-probs are the
trace's (joined by exact prefix, :func:`~spreadrl.rollout.harness.trace.samples_from_trace`),
so the traces must come from the model being trained (its tokenizer and, for the
importance weights, its weights at capture time).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spreadrl.errors import ConfigError
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.episode import EnvPoolLike, EpisodeJob
from spreadrl.rollout.harness.trace import SCHEMA_VERSION, TraceError, samples_from_trace
from spreadrl.rollout.policy import Policy
from spreadrl.rollout.runner import RolloutBatch
from spreadrl.rollout.types import EndReason, RunValues, Trajectory

REWARDS = "rewards.json"
"""The verifier's rewards of a group's episodes, by file stem."""


@dataclass
class TraceEpisodes:
    """Episodes read from a folder of traces (an episode runner in place of ``run_episodes``)."""

    folder: Path
    groups: list[Path] = field(default_factory=list)
    _next: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def of(cls, folder: str) -> TraceEpisodes:
        """The folder's groups; a folder without any is a :class:`ConfigError`."""
        root = Path(folder).expanduser()
        if not root.is_dir():
            raise ConfigError(f"rollout.traces: no folder {root}")
        groups = sorted(p for p in root.iterdir() if p.is_dir() and _episode_files(p))
        if not groups:
            raise ConfigError(
                f"rollout.traces: {root} has no group folders of trace files (*.json); "
                "see docs/harness.md"
            )
        return cls(root, groups)

    def __call__(
        self,
        policy: Policy,
        pool: EnvPoolLike,
        jobs: Sequence[EpisodeJob],
        cfg: RolloutConfig,
        chat: EpisodeChat | None = None,
        *,
        run: RunValues | None = None,
        on_episode_done: Callable[[Trajectory], None] | None = None,
    ) -> RolloutBatch:
        """One trajectory per job, group by group from the folder (``policy``, ``pool``
        and the jobs' tasks are unused: the traces were sampled already)."""
        size = cfg.group_size
        trajs: list[Trajectory] = []
        for start in range(0, len(jobs), size):
            group = self._take()
            files = _episode_files(group)
            if len(files) != size:
                raise ConfigError(
                    f"rollout.traces: {group} has {len(files)} episodes, "
                    f"rollout.group_size is {size}"
                )
            rewards = _rewards(group)
            for job, path in zip(jobs[start : start + size], files, strict=True):
                trajs.append(_trajectory(path, job, rewards.get(path.stem)))
        for traj in trajs:
            if on_episode_done is not None:
                on_episode_done(traj)
        timings = {
            "harness_prefix_breaks": float(
                sum(t.metadata.get("harness_prefix_breaks", 0) for t in trajs)
            ),
            "harness_errors": float(sum(t.crashed for t in trajs)),
        }
        return RolloutBatch(trajs, timings)

    def _take(self) -> Path:
        with self._lock:
            group = self.groups[self._next % len(self.groups)]
            self._next += 1
        return group


def _episode_files(group: Path) -> list[Path]:
    return sorted(p for p in group.glob("*.json") if p.name != REWARDS)


def _rewards(group: Path) -> dict[str, float | None]:
    path = group / REWARDS
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"rollout.traces: {path} is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"rollout.traces: {path} must map episode file names to rewards")
    return {str(k): None if v is None else float(v) for k, v in data.items()}


def read_trace(path: Path) -> tuple[dict[str, Any], float | None]:
    """A trace file as a ``TrainingTrace`` dict, and the reward its entries carry (None
    when none does)."""
    data = json.loads(path.read_text())
    if isinstance(data, dict) and "turns" in data:
        turns = data["turns"]
    else:
        turns = data.get("entries") if isinstance(data, dict) else data
        if not isinstance(turns, list):
            raise TraceError("neither a TrainingTrace (turns) nor trace entries (entries)")
        data = {"schema_version": SCHEMA_VERSION, "turns": turns}
    carried = [t.get("reward") for t in turns if isinstance(t, dict)]
    scored = [r for r in carried if r is not None]
    return data, float(scored[-1]) if scored else None


def _trajectory(path: Path, job: EpisodeJob, verified: float | None) -> Trajectory:
    traj = Trajectory(
        task_id=path.parent.name,
        case=job.case,
        sample=job.sample,
        messages=[],
        metadata={"family": "traces", "trace": str(path)},
    )
    try:
        trace, carried = read_trace(path)
        samples, breaks = samples_from_trace(trace)
    except (OSError, ValueError, TraceError) as exc:
        return _error(traj, f"trace {path.name}: {exc}")
    reward = carried if carried is not None else verified
    if reward is None:
        return _error(traj, f"trace {path.name}: no reward (the trace and {REWARDS} carry none)")
    if not samples:
        return _error(traj, f"trace {path.name}: no turns")
    first = samples[0]
    traj.prompt_ids, traj.response_ids = first.prompt_ids, first.response_ids
    traj.response_mask, traj.rollout_logprobs = first.response_mask, first.logprobs
    traj.turns = len(trace["turns"])
    traj.generated_tokens = sum(len(t["completion_token_ids"]) for t in trace["turns"])
    traj.metadata["harness_samples"] = [s.to_json() for s in samples[1:]]
    traj.metadata["harness_prefix_breaks"] = breaks
    traj.env_reward = traj.reward = reward
    traj.passed = reward > 0
    traj.stop_reason = EndReason.ANSWERED
    return traj


def _error(traj: Trajectory, why: str) -> Trajectory:
    traj.stop_reason = EndReason.ERROR
    traj.error = why
    traj.env_reward = traj.reward = 0.0
    traj.passed = False
    return traj
