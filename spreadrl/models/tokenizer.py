"""A byte-level BPE tokenizer trained locally, with Qwen3's special tokens and chat format.

No weights or tokenizers can be downloaded here, so the tiny models get a
tokenizer of their own: the same kind Qwen3 uses (byte-level BPE after
Qwen2's pre-tokenizer regex, NFC normalisation), trained in seconds with the
``tokenizers`` library on text that looks like what an agent reads and writes
(instructions, tool schemas, tool calls, JSON, cell references, numbers). The
control tokens are Qwen3's, as single added tokens at the end of the
vocabulary, and the chat template is Qwen3's conventions
(:mod:`spreadrl.models.chat_template`). Any code that works on it works on a
real Qwen3 tokenizer.
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    normalizers,
    pre_tokenizers,
    trainers,
)
from tokenizers.models import BPE
from transformers import PreTrainedTokenizerFast

from spreadrl.data.task import load_tasks
from spreadrl.errors import ConfigError
from spreadrl.models.chat_template import QWEN3_STYLE_CHAT_TEMPLATE

log = logging.getLogger(__name__)

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
# Control tokens: special (skipped by decode(skip_special_tokens=True)), as in Qwen3.
CONTROL_TOKENS = (PAD_TOKEN, IM_START, IM_END)
# Markup tokens: single added tokens but not "special", so decoded text keeps them (Qwen3 too).
MARKUP_TOKENS = (
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)
# Qwen2/Qwen3's pre-tokenizer split: digits one at a time, letters in runs, newlines apart.
QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_BYTE_ALPHABET = 256


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = 512, *, min_frequency: int = 2
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on ``texts``; return a ``PreTrainedTokenizerFast`` with the chat template.

    ``vocab_size`` counts everything: the 256 byte tokens, the learned merges and
    the 9 Qwen3 control/markup tokens (so ``len(tokenizer) <= vocab_size``; fewer
    when the corpus has too few pairs seen ``min_frequency`` times). Every byte
    is in the base alphabet, so any text round-trips through encode/decode.
    """
    n_added = len(CONTROL_TOKENS) + len(MARKUP_TOKENS)
    if vocab_size < _BYTE_ALPHABET + n_added:
        raise ConfigError(
            f"vocab_size={vocab_size} is too small: a byte-level BPE needs at least "
            f"{_BYTE_ALPHABET + n_added} (256 bytes + {n_added} special tokens)"
        )
    tok = Tokenizer(BPE(byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - n_added,
        min_frequency=min_frequency,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
        special_tokens=[],
    )
    tok.train_from_iterator(_strip_markup(texts), trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in CONTROL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKUP_TOKENS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        additional_special_tokens=list(CONTROL_TOKENS[1:]),
        model_max_length=32768,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = QWEN3_STYLE_CHAT_TEMPLATE
    log.info("trained a byte-level BPE with %d tokens", len(tokenizer))
    return tokenizer


def _strip_markup(texts: Iterable[str]) -> Iterable[str]:
    """Split texts at control/markup tokens, as encoding does: BPE should not learn their pieces."""
    pattern = re.compile("|".join(re.escape(t) for t in CONTROL_TOKENS + MARKUP_TOKENS))
    for text in texts:
        for piece in pattern.split(text):
            if piece:
                yield piece


_INSTRUCTIONS = [
    "Write the sum of {col}{r1}:{col}{r2} into cell {col}{r3}.",
    "Put the average of {col}{r1}:{col}{r2} in {col}{r3}.",
    "In cell {col}{r3}, compute the maximum of the values in {col}{r1} to {col}{r2}.",
    "Count the non-empty cells of column {col} from row {r1} to row {r2} and write it in {col}{r3}.",
    "Fill column {col2} with the product of columns {col} and {col3} for rows {r1} to {r2}.",
    "Delete the rows where column {col} is empty.",
    "Highlight the cells in {col}{r1}:{col}{r2} that are greater than {num}.",
    "Sort the table on Sheet1 by column {col} in descending order.",
    "Add a new sheet named Summary and copy the totals of each region there.",
    "Replace every occurrence of 'N/A' in column {col} with 0.",
    "Calculate the total sales per region and write the results next to the table.",
    "Find the row whose {header} is the largest and copy its name into {col}{r3}.",
]
_HEADERS = ["Name", "Region", "Sales", "Price", "Quantity", "Total", "Date", "Amount", "Score"]
_WORDS = ["North", "South", "East", "West", "Apple", "Banana", "Cherry", "Alice", "Bob", "Carol"]
_FORMULAS = ["SUM", "AVERAGE", "MAX", "MIN", "COUNT", "COUNTA", "SUMIF", "IF", "ROUND", "VLOOKUP"]
_TOOL_NAMES = [
    ("list_sheets", "List the sheets of the workbook with their used ranges.", {}),
    (
        "inspect_range",
        "Read cells (values and formulas) of one or more ranges.",
        {
            "ranges": {"type": "array", "items": {"type": "string"}},
            "mode": {"type": "string", "enum": ["cells", "summary"]},
        },
    ),
    (
        "write_range",
        "Write values or formulas into a range.",
        {"range": {"type": "string"}, "values": {"description": "a scalar, a row or rows"}},
    ),
    (
        "find_cells",
        "Find cells whose text matches a query.",
        {"query": {"type": "string"}, "regex": {"type": "boolean"}},
    ),
    (
        "fill_formula",
        "Fill a formula from a source cell into a target range.",
        {"source": {"type": "string"}, "target": {"type": "string"}},
    ),
    ("clear_range", "Clear the values of a range.", {"range": {"type": "string"}}),
    (
        "recalculate_and_read",
        "Recalculate and return computed values.",
        {"ranges": {"type": "array", "items": {"type": "string"}}},
    ),
    ("code_interpreter", "Run Python code in the episode folder.", {"code": {"type": "string"}}),
]


def tool_schema(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI-style function schema, the form tools take in the system turn."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": list(properties),
            },
        },
    }


def default_corpus(extra: Iterable[str] = (), *, size: int = 600, seed: int = 0) -> list[str]:
    """Texts an agent reads and writes, plus ``extra`` (task instructions, rendered trajectories).

    Deterministic for a given ``seed``; ``size`` synthetic samples of each kind.
    """
    rng = random.Random(seed)
    cols = "ABCDEFGHIJ"
    texts: list[str] = []
    schemas = [tool_schema(*t) for t in _TOOL_NAMES]
    texts.append("\n".join(json.dumps(s, ensure_ascii=False) for s in schemas))
    texts.append(QWEN3_STYLE_CHAT_TEMPLATE)
    for _ in range(size):
        col, col2, col3 = rng.sample(cols, 3)
        r1 = rng.randint(1, 30)
        r2 = r1 + rng.randint(1, 40)
        fields = dict(
            col=col,
            col2=col2,
            col3=col3,
            r1=r1,
            r2=r2,
            r3=r2 + 2,
            num=rng.randint(1, 5000),
            header=rng.choice(_HEADERS),
        )
        texts.append(rng.choice(_INSTRUCTIONS).format(**fields))
        rng_range = f"{col}{r1}:{col}{r2}"
        call = rng.choice(
            [
                {
                    "name": "write_range",
                    "arguments": {
                        "range": f"{col}{r2 + 2}",
                        "values": f"={rng.choice(_FORMULAS)}({rng_range})",
                    },
                },
                {"name": "inspect_range", "arguments": {"ranges": [f"Sheet1!{rng_range}"]}},
                {
                    "name": "fill_formula",
                    "arguments": {"source": f"{col2}{r1}", "target": f"{col2}{r1}:{col2}{r2}"},
                },
                {"name": "list_sheets", "arguments": {}},
                {"name": "find_cells", "arguments": {"query": rng.choice(_WORDS)}},
            ]
        )
        texts.append(f"<tool_call>\n{json.dumps(call, ensure_ascii=False)}\n</tool_call>")
        rows = [
            {
                "cell": f"{col}{r}",
                "value": rng.choice(
                    [rng.randint(-999, 99999), round(rng.uniform(0, 1000), 2), rng.choice(_WORDS)]
                ),
            }
            for r in range(r1, min(r2, r1 + 4) + 1)
        ]
        texts.append(json.dumps({"sheet": "Sheet1", "cells": rows}, ensure_ascii=False))
        header = rng.sample(_HEADERS, 3)
        table = [" | ".join(header)] + [
            f"{rng.choice(_WORDS)} | {rng.randint(0, 500)} | {rng.uniform(0, 99):.2f}"
            for _ in range(3)
        ]
        texts.append("\n".join(table))
    texts.append("Done. The task is complete.")
    texts.append("Error: unknown tool. Valid tools are: " + ", ".join(t[0] for t in _TOOL_NAMES))
    texts.extend(extra)
    return texts


def task_corpus(root: str | Path) -> list[str]:
    """Texts of a task set in the native layout: instructions, and reference calls as ``<tool_call>`` text."""
    texts: list[str] = []
    for task in load_tasks(root, validate=False):
        texts.append(task.instruction)
        for case in task.cases:
            for call in case.load_solution() or []:
                payload = {"name": call.get("name"), "arguments": call.get("arguments", {})}
                texts.append(
                    f"<tool_call>\n{json.dumps(payload, ensure_ascii=False)}\n</tool_call>"
                )
    return texts
