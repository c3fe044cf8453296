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
from spreadrl.errors import SpreadrlError
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.policy import Policy
from spreadrl.rollout.runner import EnvPoolLike, EpisodeJob, RunValues, run_episodes
from spreadrl.train.sft_data import encode_conversation, trajectories_to_sft_rows


@dataclass(frozen=True)
class ModelContext:
    """The model SFT rows are built for: its tokenizer and its context length in tokens."""

    tokenizer: PreTrainedTokenizerBase
    tokens: int
    name: str


@dataclass
class SFTBuildReport:
    episodes: int
    passed: int
    rows: int
    dropped_too_long: int
    path: Path
    over_context: int = 0
    context: int | None = None

    def summary(self) -> str:
        """One line: what was rolled out, kept and dropped, and where it went."""
        dropped = [f"{self.dropped_too_long} over --max-chars"] if self.dropped_too_long else []
        if self.context is not None:
            dropped.append(f"{self.over_context} over the model's {self.context}-token context")
        why = f"; dropped {', '.join(dropped)}" if dropped else ""
        return (
            f"{self.episodes} episodes, {self.passed} passed -> {self.rows} conversations "
            f"in {self.path}{why}"
        )


def model_context(model: str) -> ModelContext | None:
    """The tokenizer and context length of a local model folder; None for a remote name.

    SFT never cuts a conversation, so a row longer than the model's context is a row
    it cannot train on: sft-build drops it here and says how many, rather than SFT
    dropping it silently later (the README's rows were once 5k tokens for a 4k model).
    """
    folder = Path(model)
    if not (folder / "config.json").is_file():
        return None
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(folder)
    tokens = getattr(config, "max_position_embeddings", None)
    if not tokens:
        return None
    return ModelContext(AutoTokenizer.from_pretrained(folder), int(tokens), str(folder))


def _fit_context(rows: list[dict], context: ModelContext) -> list[dict]:
    """The rows whose encoded length fits the model's context."""
    return [
        row
        for row in rows
        if len(encode_conversation(context.tokenizer, row["messages"], row.get("tools")).ids)
        <= context.tokens
    ]


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
    context: ModelContext | None = None,
) -> SFTBuildReport:
    """Write ``out`` (JSONL of {messages, tools, task_id, case}); return what was kept.

    ``context``: drop (and count) rows longer than that model's context; when every
    passed row is too long, raise instead of writing an empty file."""
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
    over = 0
    if context is not None:
        fitting = _fit_context(rows, context)
        over, rows = len(rows) - len(fitting), fitting
        if over and not rows:
            raise SpreadrlError(
                f"every one of the {over} conversations is longer than {context.name}'s "
                f"{context.tokens}-token context; use a recipe with fewer tools or turns "
                "(--config), or a model with a longer context"
            )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    with tmp.open("w") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(out)
    return SFTBuildReport(
        len(trajectories),
        sum(t.passed for t in trajectories),
        len(rows),
        dropped,
        out,
        over_context=over,
        context=context.tokens if context is not None else None,
    )
