"""A few sampled trajectories per training step, for looking at what the policy does.

Reward curves say that something changed; the trajectories say what: reward
hacking, a broken tool, a format the parser misses. Each GRPO step appends
``logging.trajectories_per_step`` of its rollouts to ``RUN/trajectories.jsonl``
(the eval's format plus ``step`` and ``reward_parts``: the episode's reward terms,
outcome, tcr, overlong, under the file's key), spread over the step's
reward range so passing and failing episodes both show. ``spreadrl view`` reads
the file. Token ids are left out; the text, tool calls, observations and the
cells each call changed (``metadata.cell_changes``) are kept.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from spreadrl.rollout.types import Trajectory

TRAJECTORIES = "trajectories.jsonl"
CRASHES = "crashes"
"""The run folder's subfolder of crashed episodes' tracebacks, one file per step (and rank)."""


def save_crashes(out: Path, step: int, trajectories: Sequence[Trajectory], rank: int | None) -> str:
    """Write the whole traceback of each crashed episode of the step to
    ``out/crashes/step-NNNNNN.log`` (``-rankR`` under torchrun); return that path relative
    to ``out``, the name the step line gives, or "" when none crashed.

    A crash is a bug in spreadrl's tools or workers, not the model's doing: the counts
    in metrics.jsonl say that it happened, this file says what happened. A step run
    again after a resume writes its file anew."""
    crashed = [t for t in trajectories if t.crashed]
    if not crashed:
        return ""
    name = f"{CRASHES}/step-{step:06d}" + (f"-rank{rank}" if rank is not None else "") + ".log"
    (out / CRASHES).mkdir(parents=True, exist_ok=True)
    text = "".join(
        f"=== episode {t.key} (task {t.task_id}): {t.error}\n{t.traceback or t.error}\n"
        for t in crashed
    )
    (out / name).write_text(text)
    return name


def pick_spread(rewards: Sequence[float], count: int) -> list[int]:
    """Indices of ``count`` items evenly spread over the rewards' order (lowest and highest
    included), returned in their original order."""
    n = len(rewards)
    if count <= 0 or n == 0:
        return []
    if count >= n:
        return list(range(n))
    order = sorted(range(n), key=lambda i: (rewards[i], i))
    if count == 1:
        return [order[-1]]
    chosen = {order[round(j * (n - 1) / (count - 1))] for j in range(count)}
    return sorted(chosen)


def save_step_trajectories(
    out: Path,
    step: int,
    trajectories: Sequence[Trajectory],
    reward_terms: Sequence[dict[str, float]],
    count: int,
) -> int:
    """Append ``count`` of this step's trajectories to ``out/trajectories.jsonl``; return how many."""
    chosen = pick_spread([t.reward for t in trajectories], count)
    if not chosen:
        return 0
    out.mkdir(parents=True, exist_ok=True)
    with (out / TRAJECTORIES).open("a") as fh:
        for i in chosen:
            row = {"step": step, **trajectories[i].to_json(with_tokens=False)}
            row["reward_parts"] = reward_terms[i] if i < len(reward_terms) else {}
            fh.write(json.dumps(row, default=str) + "\n")
    return len(chosen)
