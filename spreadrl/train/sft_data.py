"""Agent trajectories (chat messages with tool calls) to SFT samples.

A conversation is encoded piece by piece exactly as a rollout builds it:
the rendered prompt, then each assistant message's tokens plus the
end-of-turn token (trained), then the tool responses through the same
``tool_response_ids`` the rollout loop appends (not trained). So the model
learns precisely the token structure it will later sample in, and SFT and RL
agree on what an episode looks like. An assistant message's text is what the
model samples under the tokenizer's chat format, its reasoning
(``reasoning_content``, or an inline ``<think>`` block) included and trained.

A message without reasoning (``sft-build``'s oracle rows; rows from a server
whose reasoning parser kept it apart) has *empty* reasoning: under a template
that opens every turn in ``<think>`` (Qwen3-4B-Thinking-2507) it is trained as
``\n</think>\n\n`` then its content, the text the template renders
(``<think>\n\n</think>\n\n...``), never with its calls inside the reasoning.
At that seam the ids are the rollout's, not those of the rendered text
tokenized whole: the prompt keeps the generation prompt's own ``<think>``,
``\n`` and the model's ``\n`` before ``</think>`` is a token of its own, where
tokenizing ``<think>\n\n</think>`` in one piece merges the two newlines into
one token, a context the model never samples from.

Build SFT data from tasks: roll out a policy through the gym, keep what passed.

With the ``oracle`` policy this turns synthesized tasks' reference solutions
into full agent conversations, with the real observations the gym returns;
with a model policy it is rejection sampling (keep reward-1 episodes only).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from spreadrl.data.task import TaskSet
from spreadrl.errors import SpreadrlError
from spreadrl.rollout.chat import (
    ChatFormat,
    EpisodeChat,
    chat_format,
    render_prompt_ids,
    tool_response_ids,
)
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.policy import Policy
from spreadrl.rollout.runner import EnvPoolLike, EpisodeJob, RunValues, run_episodes
from spreadrl.rollout.types import Trajectory
from spreadrl.run_folder import appending, cut_back_jsonl
from spreadrl.train.batching import Sample


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file; errors name the file and the line."""
    if not path.exists():
        raise SpreadrlError(
            f"{path}: SFT data file not found (build one with `spreadrl data sft-build`)"
        )
    if path.is_dir():
        raise SpreadrlError(f"{path}: a folder; data.path names the SFT data file (.jsonl)")
    try:
        text = path.read_text()
    except UnicodeDecodeError as exc:
        raise SpreadrlError(f"{path}: not a JSONL file (binary)") from exc
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise SpreadrlError(f"{path}:{number}: not valid JSON ({exc.msg})") from exc
    return rows


def encode_conversation(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None,
    fmt: ChatFormat | None = None,
) -> Sample:
    """Token ids and loss mask of one conversation (system/user first, then the agent's turns).

    ``fmt``: the tokenizer's chat format, derived once by a caller encoding many
    conversations (derived here when not given)."""
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), None)
    if first is None:
        raise SpreadrlError("conversation has no assistant message to train on")
    ids = list(render_prompt_ids(tokenizer, list(messages[:first]), list(tools or []) or None))
    mask = [0] * len(ids)
    fmt = fmt or chat_format(tokenizer)
    end_ids = list(fmt.stop_ids[:1])
    pending_tools: list[str] = []
    for message in messages[first:]:
        role = message["role"]
        if role == "assistant":
            if pending_tools:
                segment = tool_response_ids(tokenizer, pending_tools, fmt)
                ids += segment
                mask += [0] * len(segment)
                pending_tools = []
            text = fmt.assistant_text(message["content"], message.get("reasoning_content"))
            tokens = tokenizer.encode(text, add_special_tokens=False) + end_ids
            ids += tokens
            mask += [1] * len(tokens)
        elif role == "tool":
            pending_tools.append(message["content"])
        else:
            raise SpreadrlError(f"unexpected {role!r} message after the first assistant turn")
    return Sample(ids=ids, mask=mask)


@dataclass
class SFTDataset:
    samples: list[Sample]
    dropped_too_long: int
    source: str
    dropped_line: str | None = None  # what SFT says of the rows it left out (never cut)


ROLES = ("system", "user", "assistant", "tool")


def check_row(row: object) -> None:
    """Raise a one-line SpreadrlError unless ``row`` is ``{"messages": [...], "tools": [...]}``.

    Checked before encoding so that a malformed row (``"messages": "oops"``, a
    message with no ``role``) reads as what is wrong with it, not as a
    TypeError or KeyError from deep inside the tokenizer's template.
    """
    if not isinstance(row, dict):
        raise SpreadrlError(f"a row must be a JSON object, got {type(row).__name__}")
    messages = row.get("messages")
    if not isinstance(messages, list):
        got = "none" if messages is None else type(messages).__name__
        raise SpreadrlError(f"a row needs a 'messages' list, got {got}")
    tools = row.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise SpreadrlError(f"'tools' must be a list of tool schemas, got {type(tools).__name__}")
    for index, message in enumerate(messages, start=1):
        if not isinstance(message, dict):
            raise SpreadrlError(f"message {index} must be an object, got {type(message).__name__}")
        role = message.get("role")
        if role not in ROLES:
            shown = "no 'role'" if role is None else f"role {role!r}"
            raise SpreadrlError(f"message {index} has {shown}; expected one of {', '.join(ROLES)}")
        if role in ("assistant", "tool") and not isinstance(message.get("content"), str):
            raise SpreadrlError(f"message {index} ({role}) needs a 'content' string")


def load_sft_dataset(
    path: Path, tokenizer: PreTrainedTokenizerBase, max_length: int, context: int | None = None
) -> SFTDataset:
    """Encode every row of ``path``; rows over ``max_length`` or the model's ``context``
    (its positions: a longer row cannot be trained on) are dropped and counted, never cut."""
    limit = min(max_length, context or max_length)
    why = f"the model's {limit}-token context" if limit < max_length else "max_length"
    samples, dropped = [], 0
    rows = read_jsonl(path)
    if not rows:
        raise SpreadrlError(
            f"{path}: the SFT data file has no rows (build one with `spreadrl data sft-build`)"
        )
    fmt = chat_format(tokenizer)  # one derivation for the whole file
    for number, row in _numbered(path, rows):
        try:
            check_row(row)
            sample = encode_conversation(tokenizer, row["messages"], row.get("tools"), fmt)
        except SpreadrlError as exc:
            raise SpreadrlError(f"{path}:{number}: {exc}") from exc
        if len(sample.ids) > limit:
            dropped += 1
            continue
        samples.append(sample)
    if not samples:
        raise SpreadrlError(f"{path}: no usable rows (all {dropped} exceed {limit} tokens, {why})")
    line = f"dropped {dropped} conversations longer than {limit} tokens ({why}; never cut)"
    return SFTDataset(samples, dropped, str(path), line if dropped else None)


def _numbered(path: Path, rows: list[dict[str, Any]]) -> Iterable[tuple[int, dict[str, Any]]]:
    """Rows with their line numbers in ``path`` (blank lines are skipped by read_jsonl)."""
    numbers = [n for n, line in enumerate(path.read_text().splitlines(), start=1) if line.strip()]
    return zip(numbers, rows, strict=True)


def trajectories_to_sft_rows(
    trajectories: Iterable[Trajectory], *, dedup: bool = True
) -> list[dict[str, Any]]:
    """Keep reward-1 episodes as SFT rows ({messages, tools, task_id}), deduplicated by content."""
    rows = [
        {"messages": t.messages, "tools": t.tools, "task_id": t.task_id, "case": t.case}
        for t in trajectories
        if t.passed
    ]
    return unique_conversations(rows) if dedup else rows


def unique_conversations(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` less those whose messages an earlier row already holds."""
    kept, seen = [], set()
    for row in rows:
        key = json.dumps(row["messages"], sort_keys=True)
        if key not in seen:
            seen.add(key)
            kept.append(row)
    return kept


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


def partial_path(out: Path) -> Path:
    """Where a build into ``out`` keeps its finished batches until it writes ``out``."""
    return out.with_name(out.name + ".partial")


@dataclass
class BuildProgress:
    """The finished batches of a build, kept in ``OUT.partial`` until ``OUT`` is written.

    A rejection-sampling build runs for hours; a Ctrl-C, a crash or a lost machine keeps
    what is done. The first line is the build's settings, then one line a batch (its
    start, episodes, passed, the rows of its passed episodes). The same command opens
    it again and runs only the missing batches: a batch's episodes depend on the batch
    alone, so the result is the uninterrupted build's."""

    path: Path
    settings: dict[str, Any]
    batches: dict[int, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def open(cls, out: Path, settings: dict[str, Any]) -> BuildProgress:
        """The progress of a stopped build into ``out`` with these ``settings``, or a new one;
        refuses one with other settings (mixing two builds' episodes would be neither)."""
        settings = json.loads(json.dumps(settings, default=str))
        path = partial_path(out)
        kept = cls.read(out)
        if kept is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"settings": settings}) + "\n")
            tmp.replace(path)  # whole or absent: a torn first line would read as foreign
            return cls(path, settings)
        cut_back_jsonl(path)  # a line torn by a kill is a batch to run again
        if kept.settings != settings:
            was = kept.settings
            other = sorted(k for k in {*was, *settings} if was.get(k) != settings.get(k))
            raise SpreadrlError(
                f"{path} holds a stopped build with other settings ({', '.join(other)}): "
                "the command that started it finishes it; --overwrite starts again"
            )
        return kept

    @classmethod
    def read(cls, out: Path) -> BuildProgress | None:
        """What ``OUT.partial`` holds (None: there is none); a torn last line is left out.

        A file of that name that a build did not write is refused, not read, cut back or
        deleted: it is someone's data."""
        path = partial_path(out)
        if not path.exists():
            return None
        lines = path.read_text(errors="replace").splitlines() if path.is_file() else []
        rows = []
        for i, line in enumerate(lines):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                if i == len(lines) - 1 and i > 0:
                    break  # only the last batch can be torn: appends are whole lines
                rows = []
                break
        settings = rows[0].get("settings") if rows and isinstance(rows[0], dict) else None
        batch = (isinstance(r, dict) and isinstance(r.get("start"), int) for r in rows[1:])
        if not isinstance(settings, dict) or not all(batch):
            raise SpreadrlError(
                f"{path} is not a stopped sft-build's file (no build's settings and batches "
                "in it); move it away or pick another --out"
            )
        return cls(path, settings, {row["start"]: row for row in rows[1:]})

    def add(self, start: int, trajectories: Sequence[Trajectory]) -> None:
        """Keep a finished batch (on disk before the next one starts)."""
        row = {
            "start": start,
            "episodes": len(trajectories),
            "passed": sum(t.passed for t in trajectories),
            "rows": trajectories_to_sft_rows(trajectories, dedup=False),
        }
        with appending(self.path) as fh:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self.batches[start] = row

    def total(self, key: str) -> int:
        """The batches' sum of ``key`` ("episodes" or "passed")."""
        return sum(b[key] for b in self.batches.values())

    def rows(self) -> list[dict[str, Any]]:
        """Every batch's rows in batch order, deduplicated by content as one build's are."""
        return unique_conversations(
            row for start in sorted(self.batches) for row in self.batches[start]["rows"]
        )


def progress_line(out: Path) -> str:
    """What a stopped build left: the CLI's line after a Ctrl-C."""
    try:
        progress = BuildProgress.read(out)
    except SpreadrlError:  # stopped before the build opened (and refused) someone's file
        progress = None
    done = progress.total("episodes") if progress is not None else 0
    if not done:
        return f"stopped: no batch had finished; {out} was not written"
    return (
        f"stopped: {done} episodes are kept in {partial_path(out)}; the same command goes on "
        "from there (--overwrite starts again)"
    )


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
    source: dict[str, Any] | None = None,
    restart: bool = False,
) -> SFTBuildReport:
    """Write ``out`` (JSONL of {messages, tools, task_id, case}); return what was kept.

    ``context``: drop (and count) rows longer than that model's context; when every
    passed row is too long, raise instead of writing an empty file. Finished batches
    are kept in ``OUT.partial`` (:class:`BuildProgress`) until ``out`` is written, so the
    same call after a stop runs only the rest; ``source`` names what else decides the
    episodes (the policy, the environment), so a changed one is refused, not mixed in;
    ``restart`` drops a stopped build's batches first.
    """
    jobs = [EpisodeJob(t, c, s) for t, c in tasks.episodes() for s in range(samples)]
    chat = EpisodeChat.of(tokenizer) if tokenizer is not None else None
    keys = json.dumps([job.episode_id for job in jobs])
    settings = {
        "jobs": hashlib.sha256(keys.encode()).hexdigest(),
        "episodes": len(jobs),
        "rollout": asdict(cfg),
        "seed": run.seed if run is not None else None,
        "batch_size": batch_size,
        **(source or {}),
    }
    if restart and BuildProgress.read(out) is not None:  # refuses a file it did not write
        partial_path(out).unlink()
    progress = BuildProgress.open(out, settings)
    for start in range(0, len(jobs), batch_size):
        if start not in progress.batches:
            chunk = jobs[start : start + batch_size]
            progress.add(start, run_episodes(policy, pool, chunk, cfg, chat, run=run).trajectories)
    rows = progress.rows()
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
    progress.path.unlink()
    return SFTBuildReport(
        progress.total("episodes"),
        progress.total("passed"),
        len(rows),
        dropped,
        out,
        over_context=over,
        context=context.tokens if context is not None else None,
    )
