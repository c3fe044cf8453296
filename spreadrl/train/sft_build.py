"""Build SFT data from tasks: roll out a policy through the gym, keep what passed.

With the ``oracle`` policy this turns synthesized tasks' reference solutions
into full agent conversations, with the real observations the gym returns;
with a model policy it is rejection sampling (keep reward-1 episodes only).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from transformers import PreTrainedTokenizerBase

from spreadrl.data.task import TaskSet
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.policy import Policy
from spreadrl.rollout.runner import EnvPoolLike, EpisodeJob, RunValues, run_episodes
from spreadrl.train.sft_data import trajectories_to_sft_rows


@dataclass
class SFTBuildReport:
    episodes: int
    passed: int
    rows: int
    dropped_too_long: int
    path: Path


def build_sft_data(
    tasks: TaskSet,
    policy: Policy,
    pool: EnvPoolLike,
    cfg: RolloutConfig,
    out: Path,
    *,
    run: RunValues | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    samples: int = 1,
    max_chars: int | None = None,
    batch_size: int = 64,
) -> SFTBuildReport:
    """Write ``out`` (JSONL of {messages, tools, task_id, case}); return what was kept."""
    jobs = [EpisodeJob(t, c, s) for t, c in tasks.episodes() for s in range(samples)]
    chat = EpisodeChat.of(tokenizer) if tokenizer is not None else None
    trajectories = []
    for start in range(0, len(jobs), batch_size):
        chunk = jobs[start : start + batch_size]
        batch = run_episodes(policy, pool, chunk, cfg, chat, run=run)
        trajectories.extend(batch.trajectories)
    rows = trajectories_to_sft_rows(trajectories)
    dropped = 0
    if max_chars is not None:
        kept = [r for r in rows if sum(len(m["content"]) for m in r["messages"]) <= max_chars]
        dropped, rows = len(rows) - len(kept), kept
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    with tmp.open("w") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(out)
    return SFTBuildReport(
        len(trajectories), sum(t.passed for t in trajectories), len(rows), dropped, out
    )
