"""What a GRPO step reports: its metrics, reduced over ranks, logged, and its console line.

A few sampled trajectories per training step, for looking at what the policy does.

Reward curves say that something changed; the trajectories say what: reward
hacking, a broken tool, a format the parser misses. Each GRPO step appends
``logging.trajectories_per_step`` of its rollouts to ``RUN/trajectories.jsonl``
(the eval's format plus ``step`` and ``reward_parts``: the episode's reward terms,
outcome, tcr, overlong, under the file's key), spread over the step's
reward range so passing and failing episodes both show. ``spreadrl view`` reads
the file. Token ids are left out; the text, tool calls, observations and the
cells each call changed (``metadata.cell_changes``) are kept.

A harness run's episodes in the standard format (``logging.harness_traces``): every
step's harness episodes as OpenEnv ``TrainingTrace``s under ``RUN/traces/step-NNNNNN/``,
one folder per group with its ``rewards.json``, the layout ``rollout.traces`` trains on
(:func:`save_harness_traces`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import torch

from spreadrl.rollout.harness.trace import SCHEMA_VERSION, TRAINING_TRACE
from spreadrl.rollout.harness.trace_folder import REWARDS
from spreadrl.rollout.types import EndReason, Trajectory
from spreadrl.run_folder import appending
from spreadrl.train.config import LoggingConfig
from spreadrl.train.distributed import all_reduce
from spreadrl.train.memory import MEMORY_KEYS
from spreadrl.train.rewards import StepRollouts
from spreadrl.train.setup import TRACES, Run


def step_metrics(
    trajs: list[Trajectory], reward_terms: list[dict[str, float]], keep: torch.Tensor
) -> dict[str, float]:
    """Means over the step's trajectories, reward terms included, and the groups kept."""
    n = max(len(trajs), 1)
    out = {
        "reward_mean": sum(t.reward for t in trajs) / n,
        "pass_rate": sum(t.passed for t in trajs) / n,
        "response_tokens": sum(len(t.response_ids) for t in trajs) / n,
        "generated_tokens": sum(t.generated_tokens for t in trajs) / n,
        "tool_calls": sum(t.tool_calls for t in trajs) / n,
        "parse_errors": sum(t.parse_errors for t in trajs) / n,
        "prompt_too_long": float(sum(t.stop_reason == EndReason.PROMPT_TOO_LONG for t in trajs)),
        "episode_errors": float(sum(t.crashed for t in trajs)),  # their groups are dropped
        # episodes the environment ended scored 0: a refused workbook, a worker limit
        "workbook_refused": float(sum(t.stop_reason == EndReason.WORKBOOK_REFUSED for t in trajs)),
        "env_limit": float(sum(t.stop_reason == EndReason.ENV_LIMIT for t in trajs)),
        "groups_kept": float(keep.sum()),
        "groups": float(len(keep)),
    }
    for key in {k for p in reward_terms for k in p}:
        out[f"reward/{key}"] = sum(p.get(key, 0.0) for p in reward_terms) / n
    return out


# step metrics that are means over the step's trajectories, counts that add up over
# ranks, and means over the update's micro-batches (present on ranks that trained)
_PER_TRAJECTORY = (
    "reward_mean",
    "pass_rate",
    "response_tokens",
    "generated_tokens",
    "tool_calls",
    "parse_errors",
)
_COUNTS = (
    "groups",
    "groups_kept",
    "trained_sequences",
    "prompt_too_long",
    "episode_errors",
    "workbook_refused",
    "env_limit",
    "tokens_per_s",
)
_UPDATE = (
    "loss",
    "kl",
    "entropy",
    "clip_frac_low",
    "clip_frac_high",
    "approx_kl",
    "ratio_mean",
    "tis_weight_mean",
)


def reduce_over_ranks(metrics: dict[str, float], trajectories: int) -> dict[str, float]:
    """The step's metrics over all ranks, so rank 0 logs the whole step, not its share.

    Trajectory means are weighted by each rank's trajectory count (refill rounds can
    differ between ranks), counts are summed, the update's figures are averaged over
    the ranks that trained (a mean of micro-batch means, not the single-process
    figure), refill rounds and peak memory are the most of any rank; grad_norm is
    already global under FSDP and timings stay rank 0's. Every rank reduces the same
    keys in the same order (a key missing on one rank must not hang the others)."""
    out = dict(metrics)
    reward_keys = sorted(k for k in metrics if k.startswith("reward/"))
    total = all_reduce(float(trajectories))
    for key in (*_PER_TRAJECTORY, *reward_keys):
        out[key] = all_reduce(metrics.get(key, 0.0) * trajectories) / max(total, 1.0)
    for key in _COUNTS:
        out[key] = all_reduce(metrics.get(key, 0.0))
    for key in _UPDATE:
        count = all_reduce(float(key in metrics))
        value = all_reduce(metrics.get(key, 0.0))
        if count:
            out[key] = value / count
    for key in ("refill_rounds", *MEMORY_KEYS):  # set on every rank (on CUDA, for the GiB)
        if key in metrics:
            out[key] = all_reduce(metrics[key], op="max")
    return out


LINE_WIDTH = 80
"""The step line fits a terminal of this width: the fields that do not fit are left out."""


def step_line(step: int, total: int, m: dict[str, float], crashes: str = "") -> str:
    """The step's console line, at most :data:`LINE_WIDTH` columns but for a crash.

    Fields in order of importance; from the first that would run past the width on,
    they are left out (every figure is in metrics.jsonl). A step that kept no group says
    ``untrained``. One with crashed episodes says how many, right after the groups, and
    names the file of their tracebacks (``crashes``, relative to the run folder): that
    field is never left out, however long the line."""
    kept, groups = int(m["groups_kept"]), int(m["groups"])
    fields = [
        f"step {step:>{len(str(total))}}/{total}",
        f"reward {m['reward_mean']:+.3f}",
        f"pass {100 * m['pass_rate']:5.1f}%",
        f"groups {kept}/{groups}" + (" untrained" if not kept else ""),
    ]
    must = len(fields)
    if m.get("episode_errors"):
        fields.append(f"crashed {int(m['episode_errors'])}" + (f" ({crashes})" if crashes else ""))
        must += 1
    fields += [
        f"len {m['response_tokens']:.0f}",
        f"gnorm {m.get('grad_norm', 0):.3f}",
        f"{m.get('step_s', 0):.1f}s",
    ]
    if "kl" in m:
        fields.append(f"kl {m['kl']:.4f}")
    if "entropy" in m:
        fields.append(f"ent {m['entropy']:.3f}")
    line = "  ".join(fields[:must])
    for field in fields[must:]:
        if len(line) + 2 + len(field) > LINE_WIDTH:
            break  # the rest too: the fields keep their places from step to step
        line += "  " + field
    return line


def report_step(
    run: Run,
    step: int,
    total: int,
    rollouts: StepRollouts,
    metrics: dict[str, float],
    logging: LoggingConfig,
    crashes: str = "",
) -> None:
    """The step's figures (:func:`step_metrics` of its ``rollouts``, then ``metrics``: the
    phases' own) reduced over ranks; on rank 0 logged, a spread of its trajectories kept
    and its line printed (every ``logging.every_steps`` steps and the last), naming
    ``crashes``, the file of its crashed episodes' tracebacks."""
    trajs, terms = rollouts.trajectories, rollouts.reward_terms
    metrics = {**step_metrics(trajs, terms, rollouts.keep), **metrics}
    if run.info.enabled:  # a collective: every rank reduces
        metrics = reduce_over_ranks(metrics, len(trajs))
    if not run.info.is_main:
        return
    line = step_line(step, total, metrics, crashes)
    run.metrics.log(step, metrics)
    save_step_trajectories(run.out, step, trajs, terms, logging.trajectories_per_step)
    if step % max(1, logging.every_steps) == 0 or step == total:
        run.reporter.line(line)
    if "eval/pass@1" in metrics:
        run.reporter.line(
            f"eval step {step:>4}: held-out pass@1 {100 * metrics['eval/pass@1']:.1f}% "
            f"over {int(metrics['eval/episodes'])} episodes ({metrics['eval_s']:.1f} s)"
        )


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
    with appending(out / TRAJECTORIES) as fh:
        for i in chosen:
            row = {"step": step, **trajectories[i].to_json(with_tokens=False)}
            row["reward_parts"] = reward_terms[i] if i < len(reward_terms) else {}
            fh.write(json.dumps(row, default=str) + "\n")
    return len(chosen)


def save_harness_traces(
    out: Path, step: int, trajectories: Sequence[Trajectory], group_size: int, rank: int | None
) -> int:
    """Write the step's harness episodes to ``out/traces/step-NNNNNN/``, the layout
    ``rollout.traces`` reads; return how many groups were written.

    A folder per group, ``NNN-<task>-c<case>`` (the group's place in the step, then its
    task id with every character but letters, digits, ``.``, ``_`` and ``-`` made ``_``;
    ``rR-`` in front under torchrun, where each rank writes its own groups), holding
    ``e<i>.json`` per episode: its ``TrainingTrace``, taken out of the trajectory's
    metadata (so trajectories.jsonl stays without it), and ``rewards.json``: each
    episode's reward as the step trained on it (the shaped reward, reward parts
    included). A crashed episode is written with the calls it made (perhaps none) and
    no reward: unscored, so its group is dropped when trained on again, as it was here."""
    folder = out / TRACES / f"step-{step:06d}"
    groups = 0
    for start in range(0, len(trajectories), group_size):
        group = trajectories[start : start + group_size]
        path = folder / _group_name(start // group_size, group[0], rank)
        path.mkdir(parents=True, exist_ok=True)
        rewards: dict[str, float] = {}
        for i, traj in enumerate(group):
            trace = traj.metadata.pop(TRAINING_TRACE, None)
            trace = trace or {"schema_version": SCHEMA_VERSION, "turns": []}
            (path / f"e{i}.json").write_text(json.dumps(trace))
            if not traj.crashed:
                rewards[f"e{i}"] = float(traj.reward)
        (path / REWARDS).write_text(json.dumps(rewards, indent=1) + "\n")
        groups += 1
    return groups


def _group_name(index: int, first: Trajectory, rank: int | None) -> str:
    """A group's folder name: safe on any filesystem whatever its task id holds."""
    task = re.sub(r"[^A-Za-z0-9._-]", "_", first.task_id)[:80]
    return (f"r{rank}-" if rank is not None else "") + f"{index:03d}-{task}-c{first.case}"
