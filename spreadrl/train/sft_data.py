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
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from spreadrl.errors import SpreadrlError
from spreadrl.rollout.chat import ChatFormat, chat_format, render_prompt_ids, tool_response_ids
from spreadrl.rollout.types import Trajectory
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


def load_sft_dataset(path: Path, tokenizer: PreTrainedTokenizerBase, max_length: int) -> SFTDataset:
    """Encode every row of ``path``; rows over ``max_length`` are dropped and counted, never cut."""
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
        if len(sample.ids) > max_length:
            dropped += 1
            continue
        samples.append(sample)
    if not samples:
        raise SpreadrlError(
            f"{path}: no usable rows (all {dropped} exceed max_length={max_length})"
        )
    return SFTDataset(samples, dropped, str(path))


def _numbered(path: Path, rows: list[dict[str, Any]]) -> Iterable[tuple[int, dict[str, Any]]]:
    """Rows with their line numbers in ``path`` (blank lines are skipped by read_jsonl)."""
    numbers = [n for n, line in enumerate(path.read_text().splitlines(), start=1) if line.strip()]
    return zip(numbers, rows, strict=True)


def trajectories_to_sft_rows(
    trajectories: Iterable[Trajectory], *, dedup: bool = True
) -> list[dict[str, Any]]:
    """Keep reward-1 episodes as SFT rows ({messages, tools, task_id}), deduplicated by content."""
    rows, seen = [], set()
    for t in trajectories:
        if not t.passed:
            continue
        key = json.dumps(t.messages, sort_keys=True)
        if dedup and key in seen:
            continue
        seen.add(key)
        rows.append(
            {"messages": t.messages, "tools": t.tools, "task_id": t.task_id, "case": t.case}
        )
    return rows
