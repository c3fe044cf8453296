"""What a thinking model sees at turn 2 on the paths that rebuild its context from messages.

The token-level paths (GRPO, the held-out eval, ``eval`` hf/vllm, serve's
``/v1/tasks``) append the sampled ids; ``tests/rollout/test_chat_qwen3.py``
pins that their context equals the template's rendering. The paths here hand
messages to a template instead: an SFT row, an OpenAI-compatible server
(``eval --backend openai``), ``spreadrl serve``'s chat endpoint. Each is run
under Qwen3's real tokenizer and the Qwen3-4B-Thinking-2507 fixture template
and compared, id for id, with the context a token-level rollout of the same
sampled turns gave the model (``docs/thinking.md`` has the table).
"""

from __future__ import annotations

import pytest

from spreadrl.models.qwen3 import load_qwen3_tokenizer
from spreadrl.rollout.chat import EpisodeChat, chat_format, hermes_tool_call
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.parsing import parse_assistant_turn
from spreadrl.rollout.runner import EpisodeJob, run_episodes
from spreadrl.train.sft_data import encode_conversation
from tests.rollout.fakes import make_task
from tests.rollout.test_chat_qwen3 import (
    IM_END,
    SCRIPT,
    THINKING_TEMPLATE,
    Pool,
    ScriptedSampler,
)

NEWLINE, TWO_NEWLINES, THINK_CLOSE = 198, 271, 151668


@pytest.fixture(scope="module")
def thinking_tokenizer():
    tok = load_qwen3_tokenizer()
    tok.chat_template = THINKING_TEMPLATE.read_text()
    return tok


def bodies():
    """Each scripted turn's text after the reasoning: words, then Hermes calls."""
    return [
        "\n".join([before] * bool(before) + [hermes_tool_call(n, a) for n, a in calls])
        for _, before, calls in SCRIPT
    ]


def rollout(tok, texts):
    """A token-level rollout sampling ``texts``; the policy (with each turn's context) and trajectory."""
    policy = ScriptedSampler(tok, texts)
    settings = RolloutConfig(max_calls_per_turn=2, max_response_tokens=4096)
    out = run_episodes(policy, Pool(), [EpisodeJob(make_task())], settings, EpisodeChat.of(tok))
    return policy, out.trajectories[0]


def test_sft_row_without_reasoning_is_trained_as_empty_reasoning(thinking_tokenizer):
    """sft-build's oracle rows carry no reasoning: under a template that opens every turn
    in <think>, the row is trained as the template renders it (an empty block, then the
    calls), which is what a rollout samples, never as calls inside the reasoning."""
    tok = thinking_tokenizer
    fmt = chat_format(tok)
    texts = [fmt.assistant_text(body, "") for body in bodies()]
    assert texts[0].startswith("\n</think>\n\n<tool_call>")
    _, t = rollout(tok, texts)
    assert t.passed and t.turns == len(SCRIPT) and t.parse_errors == 0
    # the row as the oracle writes it: no reasoning field at all
    row = [{k: v for k, v in m.items() if k != "reasoning_content"} for m in t.messages]
    sample = encode_conversation(tok, row, t.tools)
    # the ids a rollout appended (the generation prompt's "<think>\n", then the sampled "\n")
    assert sample.ids == t.prompt_ids + t.response_ids
    trained = [i for i, m in zip(sample.ids, sample.mask, strict=True) if m]
    sampled = [i for i, m in zip(t.response_ids, t.response_mask, strict=True) if m]
    assert trained == sampled
    # its text is the template's rendering of the row (less the "\n" after the last <|im_end|>)
    rendered = tok.apply_chat_template(row, tools=t.tools, tokenize=False)
    assert tok.decode(sample.ids) == rendered[:-1]
    assert rendered.count("<think>\n\n</think>\n\n") == len(SCRIPT)
    assert "<think>\n\n</think>\n\n<tool_call>" in rendered
    # the seam: tokenized whole, the template's "<think>\n\n</think>" merges the two newlines
    # into one token; a rollout never sees that (its prompt ends in "<think>", "\n"), so the
    # row keeps the prompt's "\n" and trains the sampled "\n" before </think>
    whole = tok.encode(rendered, add_special_tokens=False)[:-1]
    seam = [NEWLINE, NEWLINE, THINK_CLOSE]
    assert _count(sample.ids, seam) == len(SCRIPT) and _count(whole, seam) == 0
    assert len(whole) == len(sample.ids) - len(SCRIPT)
    # and RL's parser (calls_in_reasoning: error, the 4B preset) accepts what SFT teaches
    first = tok.decode(trained[: trained.index(IM_END)])
    parsed = parse_assistant_turn(first, ["write_range"], fmt=fmt, calls_in_reasoning="error")
    assert parsed.errors == [] and [c.name for c in parsed.tool_calls] == ["write_range"]
    assert parsed.reasoning == ""


def _count(ids, pattern):
    return sum(ids[i : i + len(pattern)] == pattern for i in range(len(ids)))
