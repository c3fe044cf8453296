"""What a thinking model sees at turn 2, on every path of ``docs/thinking.md`` (one test a row).

Each path is driven through its own entry point under Qwen3's real tokenizer
and the Qwen3-4B-Thinking-2507 fixture template, and every context its model
was given is compared, id for id, with the context a plain token-level rollout
of the same sampled turns gave it. The token-level paths (GRPO, the held-out
eval, ``eval`` hf/vllm, serve's ``/v1/tasks``) append sampled ids;
``tests/rollout/test_chat_qwen3.py`` pins that to the template's rendering.
The message-level paths hand messages to a template instead: an SFT row, an
OpenAI-compatible server (``eval --backend openai``), ``spreadrl serve``'s
chat endpoint; they match only when the reasoning reaches the template.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from spreadrl.data.task import TaskSet
from spreadrl.models.qwen3 import load_qwen3_tokenizer
from spreadrl.rollout.chat import EpisodeChat, chat_format, hermes_tool_call
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engines.openai import OpenAIPolicy
from spreadrl.rollout.parsing import parse_assistant_turn
from spreadrl.rollout.runner import EpisodeJob, run_episodes
from spreadrl.rollout.types import PolicyTurn, Trajectory
from spreadrl.train.sft_data import encode_conversation
from tests.rollout.fakes import make_task
from tests.rollout.test_chat_qwen3 import (
    IM_END,
    IM_START,
    OBSERVATIONS,
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


def bodies(script=SCRIPT):
    """Each scripted turn's text after the reasoning: words, then Hermes calls."""
    return [
        "\n".join([before] * bool(before) + [hermes_tool_call(n, a) for n, a in calls])
        for _, before, calls in script
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


class TemplateServer(BaseHTTPRequestHandler):
    """An OpenAI-compatible server rendering every request with the tokenizer's chat template.

    It answers with the scripted turns, split as vLLM's reasoning and Hermes tool
    parsers split them (``mode``: ``reasoning_content`` or ``reasoning`` for the
    field the reasoning comes back in, ``inline`` for a server without a
    reasoning parser), streamed or not, and keeps the prompt ids of each request.
    Messages reach the template with every field they were sent with, as vLLM
    and ``spreadrl serve`` pass them."""

    tok = None
    texts: list = []
    mode = "reasoning_content"
    prompts: list = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = type(self)
        text = cls.tok.apply_chat_template(
            body["messages"], tools=body.get("tools"), tokenize=False, add_generation_prompt=True
        )
        cls.prompts.append(cls.tok.encode(text, add_special_tokens=False))
        turn = sum(m["role"] == "assistant" for m in body["messages"])
        message = self.split(cls.texts[turn])
        if body.get("stream"):
            payload, kind = self.events(message), "text/event-stream"
        else:
            choice = {"message": {"role": "assistant", **message}, "finish_reason": "stop"}
            payload, kind = json.dumps({"choices": [choice]}), "application/json"
        data = payload.encode()
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def split(self, text):
        if self.mode == "inline":
            return {"content": text}
        reasoning, _, content = text.partition("</think>")
        message = {self.mode: reasoning.split("<think>")[-1], "content": content}
        if "<tool_call>" in content:
            message["content"], *blocks = content.split("<tool_call>")
            calls = [json.loads(b.split("</tool_call>")[0]) for b in blocks]
            message["tool_calls"] = [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
                }
                for i, c in enumerate(calls)
            ]
        if not message["content"].strip():
            message["content"] = None
        return message

    def events(self, message):
        deltas = [{"role": "assistant", "content": ""}]
        for key in ("reasoning_content", "reasoning", "content"):
            value = message.get(key) or ""
            deltas += [{key: value[i : i + 5]} for i in range(0, len(value), 5)]
        for index, call in enumerate(message.get("tool_calls") or []):
            fn = call["function"]
            deltas.append(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "function": {"name": fn["name"], "arguments": ""},
                        }
                    ]
                }
            )
            args = fn["arguments"]
            deltas += [
                {"tool_calls": [{"index": index, "function": {"arguments": args[i : i + 4]}}]}
                for i in range(0, len(args), 4)
            ]
        chunks = [{"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
        chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


@pytest.fixture()
def template_server(thinking_tokenizer):
    server = ThreadingHTTPServer(("127.0.0.1", 0), TemplateServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    TemplateServer.tok, TemplateServer.prompts = thinking_tokenizer, []
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("mode", "stream"),
    [
        ("reasoning_content", False),
        ("reasoning", True),
        ("reasoning_content", True),
        ("inline", False),
    ],
)
def test_openai_backend_gives_the_model_the_rollouts_context(
    thinking_tokenizer, template_server, mode, stream
):
    """``eval --backend openai`` against a server with a reasoning parser: the reasoning
    read from the reply (either name, streamed or not) is saved and sent back, so the
    server renders, at turn 2 and after, the very ids a token-level rollout appended."""
    tok = thinking_tokenizer
    fmt = chat_format(tok)
    texts = [fmt.assistant_text(body, r) for body, (r, _, _) in zip(bodies(), SCRIPT, strict=True)]
    sampler, reference = rollout(tok, texts)
    TemplateServer.texts, TemplateServer.mode = texts, mode
    policy = OpenAIPolicy("m", base_url=template_server, stream=stream)
    settings = RolloutConfig(max_calls_per_turn=2, max_response_tokens=4096)
    out = run_episodes(policy, Pool(), [EpisodeJob(make_task())], settings)
    policy.close()
    (t,) = out.trajectories
    assert t.passed and t.turns == len(SCRIPT) and t.tool_calls == 3 and t.parse_errors == 0
    assert len(TemplateServer.prompts) == len(SCRIPT)
    for turn, ids in enumerate(TemplateServer.prompts):
        assert ids == sampler.contexts[turn], turn
    assert THINK_CLOSE in TemplateServer.prompts[1]
    # the saved trajectory keeps the reasoning, as the token-level rollout saved it
    saved = Trajectory.from_json(json.loads(json.dumps(t.to_json(with_tokens=False))))
    if mode != "inline":
        assistant = [m for m in saved.messages if m["role"] == "assistant"]
        assert [m["reasoning_content"] for m in assistant] == [r for r, _, _ in SCRIPT]
    steps = [
        saved.metadata["assistant_turns"][k]["reasoning_content"]
        for k in sorted(saved.metadata["assistant_turns"], key=int)
    ]
    assert steps == [r for r, _, _ in SCRIPT]
    assert len(reference.messages) == len(saved.messages)


def run_openai(tok, server, texts, mode="reasoning_content"):
    """An openai-backend episode against ``server`` rendering with ``tok``; the prompts it got."""
    TemplateServer.tok, TemplateServer.texts, TemplateServer.mode = tok, texts, mode
    policy = OpenAIPolicy("m", base_url=server)
    settings = RolloutConfig(max_calls_per_turn=2, max_response_tokens=4096)
    run_episodes(policy, Pool(), [EpisodeJob(make_task())], settings)
    policy.close()
    return TemplateServer.prompts


def test_openai_backend_under_qwen3s_own_template(qwen3_tokenizer, template_server):
    """The same under Qwen3's own (hybrid) template, where the model writes <think> itself."""
    fmt = chat_format(qwen3_tokenizer)
    texts = [fmt.assistant_text(body, r) for body, (r, _, _) in zip(bodies(), SCRIPT, strict=True)]
    assert texts[0].startswith("<think>\n")
    sampler, _ = rollout(qwen3_tokenizer, texts)
    assert run_openai(qwen3_tokenizer, template_server, texts) == sampler.contexts


def test_openai_backend_empty_reasoning_differs_only_at_the_newline_seam(
    thinking_tokenizer, template_server
):
    """Why not every turn matches on a re-rendering path: a turn with empty reasoning was
    sampled after the prompt's "<think>", "\n" as "\n", "</think>"; the template renders
    it "<think>\n\n</think>" and the tokenizer merges the two newlines into one token."""
    tok = thinking_tokenizer
    fmt = chat_format(tok)
    reasonings = ["", *[r for r, _, _ in SCRIPT[1:]]]
    texts = [fmt.assistant_text(b, r) for b, r in zip(bodies(), reasonings, strict=True)]
    sampler, _ = rollout(tok, texts)
    prompts = run_openai(tok, template_server, texts)
    assert prompts[0] == sampler.contexts[0]
    for turn in (1, 2):
        sampled, rendered = sampler.contexts[turn], prompts[turn]
        assert rendered != sampled
        at = next(
            i for i in range(len(sampled)) if sampled[i : i + 3] == [NEWLINE, NEWLINE, THINK_CLOSE]
        )
        assert rendered == sampled[:at] + [TWO_NEWLINES] + sampled[at + 2 :]


def observation(arguments):
    """What the test pool answers a write (the client's own tool run, in the chat tests)."""
    ok = "values" in arguments
    return "wrote A1" if ok and arguments["range"] == "A1" else OBSERVATIONS[arguments["range"]]


def chat_client_episode(client, messages, tools, echo):
    """A client's agent loop over serve's chat endpoint until a turn calls no tool.

    ``echo``: the name the client sends each turn's reasoning back under,
    ``inline`` for a ``<think>`` block in front of the content, or None for a
    client that drops it."""
    messages = list(messages)
    while True:
        body = {"messages": messages, "tools": tools, "max_tokens": 512, "temperature": 0}
        response = client.post("/v1/chat/completions", json=body)
        assert response.status_code == 200, response.text
        message = response.json()["choices"][0]["message"]
        reasoning = message.pop("reasoning_content", None)
        if echo == "inline":
            message["content"] = f"<think>\n{reasoning}\n</think>\n\n{message['content'] or ''}"
        elif echo is not None:
            message[echo] = reasoning
        messages.append(message)
        for call in message.get("tool_calls") or []:
            content = observation(json.loads(call["function"]["arguments"]))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
        if not message.get("tool_calls"):
            return messages


@pytest.mark.parametrize("echo", ["reasoning_content", "reasoning", "inline", None])
def test_serve_chat_renders_echoed_reasoning_as_the_rollout(thinking_tokenizer, tmp_path, echo):
    """A multi-turn chat with ``spreadrl serve``: a client that echoes each turn's
    reasoning (under either name) gets, at every turn, the prompt ids a token-level
    rollout gave the model; one that drops it gets empty <think> blocks from turn 2 on."""
    from fastapi.testclient import TestClient

    from spreadrl.serve.app import create_app
    from spreadrl.serve.schemas import ServeSettings

    tok = thinking_tokenizer
    fmt = chat_format(tok)
    texts = [fmt.assistant_text(body, r) for body, (r, _, _) in zip(bodies(), SCRIPT, strict=True)]
    reference, t = rollout(tok, texts)
    second = fmt.assistant_text("B2 is empty.", "A new question; answer it.")
    policy = ScriptedSampler(tok, [*texts, second])
    app = create_app(ServeSettings(model_name="m"), policy, tok, work_dir=tmp_path)
    with TestClient(app) as client:
        messages = chat_client_episode(client, t.messages[:2], t.tools, echo)
        assert len(policy.contexts) == len(SCRIPT)
        if echo is not None:
            assert policy.contexts == reference.contexts
        else:
            assert policy.contexts[0] == reference.contexts[0]
            assert policy.contexts[1] != reference.contexts[1]
            shown = tok.decode(policy.contexts[1])
            assert SCRIPT[0][0] not in shown and "<think>\n\n</think>\n\n<tool_call>" in shown
        # a second user query: the template drops the earlier rounds' reasoning, echoed
        # or not, so the context is no longer the previous one extended (never trained on)
        messages.append({"role": "user", "content": "Is B2 empty?"})
        chat_client_episode(client, messages, t.tools, echo)
    previous, latest = policy.contexts[-2], policy.contexts[-1]
    assert latest[: len(previous)] != previous
    shown = tok.decode(latest)
    assert not any(reasoning in shown for reasoning, _, _ in SCRIPT)
    assert shown.count("<think>") == 1 and shown.endswith("<|im_start|>assistant\n<think>\n")


# --- one test per token-level path of docs/thinking.md: each runs its own entry point
# (not run_episodes directly) on a 2-turn episode, a call then the answer, and compares
# every context its policy was given with a plain token-level rollout's

TWO_TURNS = [SCRIPT[0], SCRIPT[-1]]


class TurnSampler:
    """A token-level policy for any number of episodes: each context gets the scripted
    turn its position says (the count of turns already in it); every context is kept."""

    token_level = True
    streaming = False
    seeds_per_context = False
    max_context_tokens = 0

    def __init__(self, tok, texts):
        self.tok, self.texts, self.contexts, self.pending = tok, texts, [], []

    def act(self, contexts, params, *, seeds=None):
        return [self._turn(context) for context in contexts]

    def _turn(self, context):
        self.contexts.append(list(context))
        text = self.texts[turn_of(context)]
        ids = self.tok.encode(text, add_special_tokens=False) + [IM_END]
        return PolicyTurn(text, ids, [-0.25] * len(ids), "stop")


class StreamingSampler(TurnSampler):
    """:class:`TurnSampler` with vLLM's submit/poll, so the episode scheduler drives it
    (an engine that cannot say whether it holds work, nor when it starts a request)."""

    streaming = True

    def submit(self, request_id, context, params):
        self.pending.append((request_id, list(context)))

    def poll(self):
        done, self.pending = self.pending, []
        return [(request_id, self._turn(context)) for request_id, context in done]

    def abort(self, request_ids):
        self.pending = [p for p in self.pending if p[0] not in request_ids]

    def has_unfinished(self):
        return None

    def take_started(self):
        return None


def turn_of(context):
    """The assistant turn a context prompts: system, user, then a tool turn per earlier turn."""
    return (context.count(IM_START) - 3) // 2


@pytest.fixture(scope="module")
def two_turns(thinking_tokenizer):
    """The scripted texts and each turn's context in a plain token-level rollout."""
    tok = thinking_tokenizer
    fmt = chat_format(tok)
    texts = [
        fmt.assistant_text(b, r) for b, (r, _, _) in zip(bodies(TWO_TURNS), TWO_TURNS, strict=True)
    ]
    policy = TurnSampler(tok, texts)
    run_episodes(policy, Pool(), [EpisodeJob(make_task())], RolloutConfig(), EpisodeChat.of(tok))
    assert [turn_of(c) for c in policy.contexts] == [0, 1]
    assert tok.decode(policy.contexts[1]).count(TWO_TURNS[0][0]) == 1  # turn 1's reasoning
    return texts, policy.contexts


def assert_contexts(policy, reference, episodes=1):
    assert sorted(turn_of(c) for c in policy.contexts) == [0] * episodes + [1] * episodes
    for context in policy.contexts:
        assert context == reference[turn_of(context)]


def task_set():
    return TaskSet(Path("."), [make_task()])


def test_grpo_rollouts_give_turn_2_the_rollouts_ids(thinking_tokenizer, two_turns):
    from spreadrl.train.config import DynamicSamplingConfig, RewardConfig
    from spreadrl.train.episodes import collect_rollouts
    from spreadrl.train.sampler import EpochShuffle

    texts, reference = two_turns
    policy = TurnSampler(thinking_tokenizer, texts)
    cfg = RolloutConfig(group_size=2, prompts_per_step=1)
    collect_rollouts(
        policy,
        Pool(),
        EpisodeChat.of(thinking_tokenizer),
        task_set(),
        EpochShuffle([("t1", 1)], seed=0),
        cfg,
        DynamicSamplingConfig(mode="off"),
        RewardConfig(),
        max_prompt_tokens=0,
        seed=0,
    )
    assert_contexts(policy, reference, episodes=2)


def test_held_out_eval_gives_turn_2_the_rollouts_ids(thinking_tokenizer, two_turns):
    import torch

    from spreadrl.eval.config import EvalConfig
    from spreadrl.rollout.engines.hf import HFEngine
    from spreadrl.train.distributed import DistInfo
    from spreadrl.train.episodes import EpisodeSide

    texts, reference = two_turns
    policy = TurnSampler(thinking_tokenizer, texts)
    rollout = RolloutConfig()
    side = EpisodeSide(
        tasks=task_set(),
        sampler=None,
        engine=HFEngine(rollout, policy),
        pool=Pool(),
        chat=EpisodeChat.of(thinking_tokenizer),
        rollout=rollout,
        sampling=None,
        reward=None,
        evaluation=EvalConfig(),
        eval_tasks=task_set(),
        steps=1,
        seed=0,
        max_prompt_tokens=0,
        info=DistInfo(),
    )
    metrics = side.run_held_out(side.tasks, 1, side.engine, torch.nn.Linear(1, 1), "float32")
    assert metrics
    assert_contexts(policy, reference)


@pytest.mark.parametrize(
    ("sampler", "scheduler"), [(TurnSampler, "turn"), (StreamingSampler, "episode")]
)
def test_eval_gives_turn_2_the_rollouts_ids(
    thinking_tokenizer, two_turns, tmp_path, sampler, scheduler
):
    """``spreadrl eval`` with hf (turn by turn) and with vllm (the episode scheduler, its default)."""
    from spreadrl.eval.runner import run_eval

    texts, reference = two_turns
    policy = sampler(thinking_tokenizer, texts)
    cfg = RolloutConfig(scheduler=scheduler)
    run_eval(task_set(), policy, Pool(), cfg, tmp_path, tokenizer=thinking_tokenizer)
    assert_contexts(policy, reference)
    (row,) = [
        json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()
    ]
    assistant = [m for m in row["messages"] if m["role"] == "assistant"]
    assert [m["reasoning_content"] for m in assistant] == [r for r, _, _ in TWO_TURNS]


def test_serve_task_gives_turn_2_the_rollouts_ids(thinking_tokenizer, two_turns, tmp_path):
    """``POST /v1/tasks``: the served task runs the same loop with the server's chat format."""
    from contextlib import contextmanager

    from fastapi.testclient import TestClient

    from spreadrl.serve.app import create_app
    from spreadrl.serve.schemas import ServeSettings
    from tests.serve.conftest import xlsx_bytes

    @contextmanager
    def pools(preset):
        yield Pool()

    texts, reference = two_turns
    policy = TurnSampler(thinking_tokenizer, texts)
    app = create_app(
        ServeSettings(model_name="m", env_workers=0),
        policy,
        thinking_tokenizer,
        pool_factory=pools,
        work_dir=tmp_path,
    )
    with TestClient(app) as client:
        response = client.post(
            "/v1/tasks",
            files={"file": ("book.xlsx", xlsx_bytes(), "application/octet-stream")},
            data={"instruction": "Put 42 in A1.", "max_turns": "4"},
        )
    assert response.status_code == 200, response.text
    assert response.json()["turns"] == 2
    assert_contexts(policy, reference)
