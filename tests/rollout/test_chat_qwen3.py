"""Token-in/token-out against Qwen3's real tokenizer and template, and a thinking-model template.

What is compared, and why: the runner builds an episode's ids by appending
(rendered prompt, sampled ids, tool-response ids, ...). These tests check that
at every turn the context equals the template's rendering of the conversation
so far (``add_generation_prompt=True``), and at the end that
``prompt_ids + response_ids`` equals the rendering of the whole conversation,
minus the ``\\n`` the template writes after the last ``<|im_end|>`` (the model
samples ``<|im_end|>`` and stops). The conversation given to the template is
written independently of the runner, OpenAI style: structured ``tool_calls``
with arguments as objects, ``reasoning_content``, ``role: "tool"`` results.

Qwen3's template drops the reasoning of assistant turns before the last *user*
message and gives a final assistant turn without reasoning an empty
``<think>\\n\\n</think>\\n\\n``. An agent episode has one user message (tool
results are ``tool`` messages, which do not count as queries), and every turn
here thinks, as Qwen3 does by default, so the template keeps every sampled
token and the comparison is exact, not "up to reasoning".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spreadrl.env.types import StepResult
from spreadrl.models.qwen3 import load_qwen3_tokenizer
from spreadrl.rollout.chat import (
    FALLBACK,
    EpisodeChat,
    chat_format,
    hermes_tool_call,
    tool_response_ids,
)
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.parsing import parse_assistant_turn
from spreadrl.rollout.runner import EpisodeJob, run_episodes
from spreadrl.rollout.types import PolicyTurn
from spreadrl.train.sft_data import encode_conversation
from tests.rollout.fakes import SCHEMAS, FakePool, done, make_task

THINKING_TEMPLATE = Path(__file__).parent / "fixtures" / "qwen3_thinking.jinja"
IM_START, IM_END, THINK, TOOL_CALL = 151644, 151645, 151667, 151657

# (reasoning, text before the calls, calls) per turn; the last turn answers.
SCRIPT = [
    ("The task wants 42 in A1. Read A1 first.", "", [("write_range", {"range": "A1"})]),
    (
        "The write failed: values missing.\nWrite it, then a note.",
        "Retrying.",
        [
            ("write_range", {"range": "A1", "values": 42}),
            ("write_range", {"range": "B1", "values": "ok ✓"}),
        ],
    ),
    ("Both writes went through.", "A1 now holds 42.", []),
]
OBSERVATIONS = {"A1": "Error: values missing\n  C3: 4\n", "B1": '{"ok": true, "written": 1}'}


class Pool(FakePool):
    """FakePool whose observations vary (multi-line, JSON, trailing spaces)."""

    def step(self, episode_id, call):
        self.calls[episode_id].append(call)
        ok = "values" in call.arguments
        text = (
            "wrote A1"
            if ok and call.arguments["range"] == "A1"
            else OBSERVATIONS[call.arguments["range"]]
        )
        return done(StepResult(text, ok))


class ScriptedSampler:
    """A token-level policy 'sampling' scripted texts under a chat format; records each context."""

    token_level = True
    streaming = False
    seeds_per_context = False
    max_context_tokens = 0

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts, self.contexts = tokenizer, texts, []

    def act(self, contexts, params, *, seeds=None):
        (context,) = contexts
        self.contexts.append(list(context))
        text = self.texts[len(self.contexts) - 1]
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [IM_END]
        return [PolicyTurn(text, ids, [-0.25] * len(ids), "stop")]


def sampled_texts(fmt):
    """What the model writes each turn: reasoning, text and Hermes calls, under ``fmt``."""
    texts = []
    for reasoning, before, calls in SCRIPT:
        body = "\n".join([before] * bool(before) + [hermes_tool_call(n, a) for n, a in calls])
        texts.append(fmt.assistant_text(body, reasoning))
    return texts


def conversation(prompt_messages, upto: int):
    """The first ``upto`` turns as OpenAI-style messages (structured tool calls, tool results)."""
    messages = list(prompt_messages)
    for reasoning, before, calls in SCRIPT[:upto]:
        message = {"role": "assistant", "content": before, "reasoning_content": reasoning}
        if calls:
            message["tool_calls"] = [
                {"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls
            ]
        messages.append(message)
        for _name, args in calls:
            ok = "values" in args
            text = "wrote A1" if ok and args["range"] == "A1" else OBSERVATIONS[args["range"]]
            messages.append({"role": "tool", "content": text})
    return messages


def render_ids(tok, messages, tools, generation_prompt):
    text = tok.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=generation_prompt
    )
    return tok.encode(text, add_special_tokens=False)


def run_script(tok):
    fmt = chat_format(tok)
    policy = ScriptedSampler(tok, sampled_texts(fmt))
    settings = RolloutConfig(max_calls_per_turn=2, max_response_tokens=4096)
    out = run_episodes(policy, Pool(), [EpisodeJob(make_task())], settings, EpisodeChat.of(tok))
    return policy, out.trajectories[0]


@pytest.fixture(scope="module")
def thinking_tokenizer():
    tok = load_qwen3_tokenizer()
    tok.chat_template = THINKING_TEMPLATE.read_text()
    return tok


def test_format_is_read_off_the_real_template(qwen3_tokenizer):
    tok = qwen3_tokenizer
    fmt = chat_format(tok)
    assert fmt.source == "template" and fmt.stop_ids == (IM_END,)
    assert fmt.generation_prompt == "<|im_start|>assistant\n" and not fmt.opens_thinking
    # the wrapper is exactly what the template writes after an assistant turn's stop token
    prompt = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    tools = [{"role": "tool", "content": "x"}, {"role": "tool", "content": "y"}]
    rendered = tok.apply_chat_template(prompt + tools, tokenize=False, add_generation_prompt=True)
    assert rendered.endswith("a" + fmt.stop_text + fmt.tool_response_text(["x", "y"]))
    ids = tool_response_ids(tok, ["x"], chat_format(tok))
    assert ids[1] == IM_START and ids[-3] == IM_START  # user turn, then the assistant prompt
    assert (fmt.think_open, fmt.think_close) == ("<think>", "</think>")
    assert (fmt.tool_call_open, fmt.tool_call_close) == ("<tool_call>", "</tool_call>")


def test_runner_ids_equal_the_real_template_rendering(qwen3_tokenizer):
    tok = qwen3_tokenizer
    policy, t = run_script(tok)
    assert t.turns == 3 and t.tool_calls == 3 and t.passed and t.parse_errors == 0
    prompt = conversation([m for m in t.messages[:2]], 0)
    # turn by turn: the context the model saw is the template's rendering of the conversation so far
    for turn, context in enumerate(policy.contexts):
        assert context == render_ids(tok, conversation(prompt, turn), t.tools, True), turn
    # the whole episode: the appended ids are the rendering, token for token
    full = t.prompt_ids + t.response_ids
    whole = render_ids(tok, conversation(prompt, len(SCRIPT)), t.tools, False)
    assert whole[-1] == tok.encode("\n", add_special_tokens=False)[0]
    assert full == whole[:-1]
    # real ids and counts: system, user, then a user turn of results + an assistant turn per call turn
    assert full.count(IM_START) == 3 + 2 * (len(SCRIPT) - 1)
    assert full.count(THINK) == len(SCRIPT) and t.response_ids.count(TOOL_CALL) == 3
    assert t.prompt_ids.count(IM_END) == 2 and tok.decode(t.prompt_ids[:1]) == "<|im_start|>"
    # the runner's own messages render back to the same ids (reasoning kept apart)
    assert render_ids(tok, t.messages, t.tools, False)[:-1] == full
    assert [m.get("reasoning_content") for m in t.messages if m["role"] == "assistant"] == [
        r for r, _, _ in SCRIPT
    ]


def test_thinking_template_opens_every_turn_with_think(thinking_tokenizer):
    tok = thinking_tokenizer
    fmt = chat_format(tok)
    assert fmt.generation_prompt == "<|im_start|>assistant\n<think>\n" and fmt.opens_thinking
    assert fmt.tool_response_text(["x"]).endswith("<|im_start|>assistant\n<think>\n")
    texts = sampled_texts(fmt)
    assert not texts[0].startswith("<think>") and "\n</think>\n\n" in texts[0]
    policy, t = run_script(tok)
    assert t.turns == 3 and t.tool_calls == 3 and t.passed and t.parse_errors == 0
    prompt = conversation(t.messages[:2], 0)
    for turn, context in enumerate(policy.contexts):
        assert context == render_ids(tok, conversation(prompt, turn), t.tools, True), turn
        assert context[-2:] == [THINK, tok.encode("\n", add_special_tokens=False)[0]]
    full = t.prompt_ids + t.response_ids
    assert full == render_ids(tok, conversation(prompt, len(SCRIPT)), t.tools, False)[:-1]
    # the thinking text is trained: every sampled token, reasoning included, has mask 1
    first = tok.encode(texts[0], add_special_tokens=False) + [IM_END]
    assert t.response_ids[: len(first)] == first
    assert t.response_mask[: len(first)] == [1] * len(first)
    assert tok.decode(first).startswith(SCRIPT[0][0] + "\n</think>\n\n<tool_call>")
    # and shown as reasoning_content; the calls after </think> ran
    assistant = [m for m in t.messages if m["role"] == "assistant"]
    assert [m["reasoning_content"] for m in assistant] == [r for r, _, _ in SCRIPT]
    assert all("</think>" not in m["content"] for m in assistant)
    assert assistant[-1]["content"] == "A1 now holds 42."
    # SFT on the saved messages trains the same tokens, reasoning included
    sample = encode_conversation(tok, t.messages, t.tools)
    assert sample.ids == full
    trained = [i for i, m in zip(sample.ids, sample.mask, strict=True) if m]
    sampled = [i for i, m in zip(t.response_ids, t.response_mask, strict=True) if m]
    assert trained == sampled


def test_thinking_parse_cut_mid_thought_runs_no_call(thinking_tokenizer):
    fmt = chat_format(thinking_tokenizer)
    cut = "I will call " + hermes_tool_call("write_range", {"range": "A1", "values": 42})
    parsed = parse_assistant_turn(cut, ["write_range"], fmt=fmt)
    assert parsed.tool_calls == [] and parsed.reasoning and parsed.is_final
    closed = parse_assistant_turn(
        "Think.\n</think>\n\n" + hermes_tool_call("write_range", {}), fmt=fmt
    )
    assert closed.reasoning == "Think." and [c.name for c in closed.tool_calls] == ["write_range"]


def test_sft_encoding_matches_the_runner_on_the_real_template(qwen3_tokenizer):
    _, t = run_script(qwen3_tokenizer)
    sample = encode_conversation(qwen3_tokenizer, t.messages, t.tools)
    assert sample.ids == t.prompt_ids + t.response_ids
    assert sample.mask == [0] * len(t.prompt_ids) + t.response_mask


def test_fallback_is_used_only_without_a_template(qwen3_tokenizer):
    tok = load_qwen3_tokenizer()
    tok.chat_template = None
    fmt = chat_format(tok)
    assert fmt.source == "fallback" and fmt.stop_ids == (IM_END,)
    derived = chat_format(qwen3_tokenizer)
    # the real template and the fallback agree on everything a rollout appends
    for field in ("generation_prompt", "stop_text", "tool_prefix", "tool_separator", "tool_suffix"):
        assert getattr(derived, field) == getattr(FALLBACK, field), field
    assert json.loads(hermes_tool_call("f", {"a": 1}).split("\n")[1]) == {
        "name": "f",
        "arguments": {"a": 1},
    }


def test_irregular_reasoning_stays_verbatim(qwen3_tokenizer, thinking_tokenizer):
    for tok in (qwen3_tokenizer, thinking_tokenizer):
        fmt = chat_format(tok)
        regular = fmt.assistant_text("Answer.", "Plan.")
        assert fmt.assistant_message(regular) == {
            "role": "assistant",
            "content": "Answer.",
            "reasoning_content": "Plan.",
        }
        # saved fields always give back the sampled text; the parser still finds the reasoning
        for text in ("<think>Plan.</think>Answer.", "Plan, cut mid-thought"):
            message = fmt.assistant_message(text)
            assert fmt.assistant_text(message["content"], message.get("reasoning_content")) in (
                text,
                fmt.assistant_text(text),
            )
        odd = fmt.assistant_message("<think>Plan.</think>Answer.")
        assert odd == {"role": "assistant", "content": "<think>Plan.</think>Answer."}
        assert parse_assistant_turn(odd["content"], fmt=fmt).reasoning == "Plan."


def test_serve_splits_a_thinking_models_reply(thinking_tokenizer):
    from spreadrl.serve.agent import complete
    from spreadrl.serve.schemas import ChatCompletionRequest

    tok = thinking_tokenizer
    fmt = chat_format(tok)
    reply = fmt.assistant_text(
        hermes_tool_call("write_range", {"range": "A1", "values": 42}), "Plan."
    )
    policy = ScriptedSampler(tok, [reply])
    request = ChatCompletionRequest(
        messages=[{"role": "user", "content": "Put 42 in A1."}], tools=SCHEMAS
    )
    done_ = complete(policy, EpisodeChat(tok, fmt), request, max_tokens=64)
    (prompt,) = policy.contexts
    assert prompt[-2:] == [THINK, tok.encode("\n", add_special_tokens=False)[0]]
    assert done_.reasoning == "Plan." and done_.finish_reason == "tool_calls"
    assert [c["function"]["name"] for c in done_.tool_calls] == ["write_range"]
    assert json.loads(done_.tool_calls[0]["function"]["arguments"]) == {"range": "A1", "values": 42}


def test_each_turn_is_kept_as_read_with_the_templates_markers(thinking_tokenizer):
    """Viewers show ``metadata.assistant_turns``: under a thinking template the sampled text
    has no opening <think> (the prompt opened it), so only the template's markers split it."""
    from spreadrl.rollout.types import Trajectory
    from spreadrl.serve.tasks import steps_of

    _, t = run_script(thinking_tokenizer)
    assistant = [i for i, m in enumerate(t.messages) if m["role"] == "assistant"]
    turns = t.metadata["assistant_turns"]
    assert sorted(turns, key=int) == [str(i) for i in assistant]
    read = [turns[str(i)] for i in assistant]
    assert [
        (
            r["reasoning_content"],
            r["content"],
            [(c["name"], c["arguments"]) for c in r["tool_calls"]],
        )
        for r in read
    ] == SCRIPT
    assert all(r["errors"] == [] for r in read)
    # the saved file keeps them, and the serve page's steps are read from them
    saved = Trajectory.from_json(json.loads(json.dumps(t.to_json(with_tokens=False))))
    assert saved.metadata["assistant_turns"] == turns
    steps = steps_of(t.messages, turns)
    assert [s["reasoning"] for s in steps] == [r for r, _, _ in SCRIPT]
    assert [s["text"] for s in steps] == [b for _, b, _ in SCRIPT]
