"""The vllm backend against the real engine (vLLM's CPU build): token ids in and out,
log-probs the trainer agrees with, deadlines and aborts. One engine for the module.

Tolerance for the log-probs: engine and trainer both run float32 and differ only in
kernels (vLLM's CPU attention and GEMMs against torch's), so each log-prob differs
by float32 rounding accumulated through 4 layers and a 151,936-way log-softmax
(measured 2.9e-6 on 2026-11-24). ``TOL = 1e-3`` is far above that and still tight
enough for what it guards: truncated importance sampling weighs a token by
exp(trainer - engine), so |diff| <= 1e-3 keeps every ratio within 0.1% of 1 before
any update. Raw instead of processed log-probs (the temperature left out) differ
from the trainer's by 0.10 nats on average, 0.35 at most, at temperature 0.7 on
this model (computed with transformers), failing it by far.
"""

from __future__ import annotations

import math
import time

import pytest

from spreadrl.rollout.types import SamplingParams
from tests.vllm.conftest import close_engine

pytestmark = pytest.mark.vllm

TOL = 1e-3


@pytest.fixture(scope="module")
def engine(qwen3_tiny):
    from transformers import AutoTokenizer

    from spreadrl.rollout.engines.hf import stop_token_ids
    from spreadrl.rollout.engines.vllm import VLLMPolicy

    tokenizer = AutoTokenizer.from_pretrained(qwen3_tiny)
    policy = VLLMPolicy(
        str(qwen3_tiny),
        dtype="float32",
        max_model_len=2048,
        seed=0,
        stop_token_ids=stop_token_ids(tokenizer),
    )
    yield policy, tokenizer
    close_engine(policy)


@pytest.fixture(scope="module")
def trainer(qwen3_tiny):
    from spreadrl.models.init import load_model_and_tokenizer

    model, _ = load_model_and_tokenizer(str(qwen3_tiny))
    return model.eval()


def _trainer_logprobs(model, contexts, turns, temperature):
    import torch

    from spreadrl.train.batching import Sample, collate
    from spreadrl.train.logprobs import LogprobSettings, sequence_logprobs

    samples = [
        Sample(list(c) + t.token_ids, [0] * len(c) + [1] * len(t.token_ids))
        for c, t in zip(contexts, turns, strict=True)
    ]
    batch = collate(samples, pad_id=0)
    with torch.no_grad():
        logp, _ = sequence_logprobs(model, batch, LogprobSettings(temperature=temperature))
    mask = batch["loss_mask"] > 0
    return [logp[i][mask[i]].tolist() for i in range(len(samples))]


def test_the_engine_runs_on_the_cpu_build(engine):
    from spreadrl.rollout.engines.vllm import vllm_cpu_build

    policy, _ = engine
    assert vllm_cpu_build()
    assert policy.engine_args["enforce_eager"] and not policy.can_sleep


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_engine_logprobs_match_the_trainers(engine, trainer, temperature):
    """processed_logprobs: the log-probs of the distribution sampled from (after
    temperature), what the trainer recomputes; TIS's ratio is ~1 before any update."""
    policy, tokenizer = engine
    contexts = [tokenizer.encode(t) for t in ("Put 42 in A1.", "Sum column B", "x")] * 2
    params = SamplingParams(temperature=temperature, top_p=1.0, top_k=0, max_new_tokens=24, seed=5)
    turns = policy.act(contexts, params)
    assert all(len(t.token_ids) == len(t.logprobs) > 0 for t in turns)
    assert len({tuple(t.token_ids) for t in turns}) == len(turns)  # a seed per row
    ours = _trainer_logprobs(trainer, contexts, turns, temperature)
    worst = max(
        abs(a - b)
        for t, row in zip(turns, ours, strict=True)
        for a, b in zip(t.logprobs, row, strict=True)
    )
    assert worst <= TOL, worst
    ratios = [
        math.exp(b - a)
        for t, row in zip(turns, ours, strict=True)
        for a, b in zip(t.logprobs, row, strict=True)
    ]
    assert max(abs(r - 1) for r in ratios) <= math.expm1(TOL)
    print(f"temperature {temperature}: max |engine - trainer| log-prob {worst:.2e}")


def test_token_in_token_out_across_turns(engine):
    """Turn 2's context is turn 1's context + its sampled ids + a tool message's ids,
    all as token ids: the engine must see exactly those ids (no re-tokenization),
    and the streaming path (add_request/step) must sample what generate() samples."""
    policy, tokenizer = engine
    chat = [{"role": "user", "content": "Put 42 in A1."}]
    text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    first = tokenizer.encode(text, add_special_tokens=False)
    params = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=12, seed=11)
    (turn1,) = policy.act([first], params)
    tool = tokenizer.encode(
        "<|im_end|>\n<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    second = [*first, *turn1.token_ids, *tool]
    (outputs,) = policy.llm.generate(
        [{"prompt_token_ids": second}],
        sampling_params=[policy._sampling(params, 11)],
        use_tqdm=False,
    )
    assert list(outputs.prompt_token_ids) == second
    policy.submit(
        "turn2",
        second,
        SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=12, seed=11),
    )
    done = []
    while policy.has_unfinished():
        done.extend(policy.poll())
    ((rid, streamed),) = done
    assert rid == "turn2"
    assert streamed.token_ids == list(outputs.outputs[0].token_ids)
    assert streamed.logprobs == pytest.approx(
        [
            lp[t].logprob
            for lp, t in zip(outputs.outputs[0].logprobs, streamed.token_ids, strict=True)
        ]
    )


def test_the_engine_says_when_it_first_serves_a_request(engine):
    """The episode scheduler starts an episode's wall clock when the engine first
    serves it (issue 26): the streamed outputs (RequestOutputKind.DELTA) must name
    every request once, no later than the poll that finishes it, and their deltas
    add up to the turn that generate() samples with the same seed."""
    policy, tokenizer = engine
    ctx = tokenizer.encode("Put 42 in A1.")
    params = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=9, seed=5)
    policy.take_started()  # what earlier tests on this engine left untaken
    policy.submit("first", ctx, params)
    policy.submit(
        "second", ctx, SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=4, seed=6)
    )
    started: list[str] = []
    finished: dict[str, object] = {}
    while policy.has_unfinished():
        done = policy.poll()
        started += policy.take_started()
        for rid, turn in done:
            assert rid in started, (rid, started)
            finished[rid] = turn
    assert sorted(started) == ["first", "second"]
    (direct,) = policy.llm.generate(
        [{"prompt_token_ids": ctx}], sampling_params=[policy._sampling(params, 5)], use_tqdm=False
    )
    assert finished["first"].token_ids == list(direct.outputs[0].token_ids)
    assert finished["first"].logprobs == pytest.approx(
        [
            lp[t].logprob
            for lp, t in zip(direct.outputs[0].logprobs, finished["first"].token_ids, strict=True)
        ]
    )
    assert len(finished["second"].token_ids) == 4 and finished["second"].finish_reason == "length"


def test_max_tokens_and_stop_ids_are_honoured(engine):
    policy, tokenizer = engine
    ctx = tokenizer.encode("Sum column B")
    (turn,) = policy.act(
        [ctx], SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=5, seed=3)
    )
    assert len(turn.token_ids) == 5 and turn.finish_reason == "length"
    # the random model's 3rd token as a stop id: the turn ends right there, as "stop"
    from spreadrl.rollout.engines.vllm import VLLMPolicy

    stopper = VLLMPolicy("unused", llm=policy.llm, stop_token_ids=[turn.token_ids[2]])
    (cut,) = stopper.act(
        [ctx], SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=5, seed=3)
    )
    assert cut.token_ids == turn.token_ids[:3] and cut.finish_reason == "stop"


def test_abort_stops_a_running_request(engine):
    policy, tokenizer = engine
    ctx = tokenizer.encode("Put 42 in A1.")
    policy.submit(
        "long",
        ctx,
        SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=1500, seed=1),
    )
    policy.submit(
        "short", ctx, SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=3, seed=2)
    )
    finished = []
    while not finished:
        finished = policy.poll()
    assert [rid for rid, _ in finished] == ["short"]
    assert policy.has_unfinished()  # "long" is still decoding
    policy.abort(["long"])
    deadline = time.monotonic() + 30
    while policy.has_unfinished() and time.monotonic() < deadline:
        policy.poll()
    assert not policy.has_unfinished()


def test_a_request_past_its_episode_deadline_is_aborted(engine, monkeypatch):
    """The episode scheduler against the real engine: a turn that cannot finish
    within the episode's wall time is aborted in the engine (abort_request) and the
    episode ends as wall_time; the engine holds nothing afterwards."""
    from spreadrl.rollout.chat import EpisodeChat
    from spreadrl.rollout.config import RolloutConfig
    from spreadrl.rollout.episode import EpisodeJob
    from spreadrl.rollout.runner import RunValues, run_episodes
    from tests.rollout.fakes import FakePool, make_task

    policy, tokenizer = engine
    cfg = RolloutConfig(
        temperature=1.0,
        max_new_tokens_per_turn=1500,
        scheduler="episode",
        episode_wall_time_s=2.0,
        max_response_tokens=1600,
    )
    aborted: list[str] = []  # the request ids the scheduler aborted in the engine
    real_abort = policy.abort

    def abort(request_ids):
        aborted.extend(request_ids)
        real_abort(request_ids)

    monkeypatch.setattr(policy, "abort", abort)
    jobs = [EpisodeJob(make_task(), 1, 0)]
    chat, run = EpisodeChat.of(tokenizer), RunValues(seed=0)
    (traj,) = run_episodes(policy, FakePool(), jobs, cfg, chat, run=run).trajectories
    assert traj.stop_reason == "wall_time", (traj.stop_reason, traj.error)
    # ended by aborting its first turn while it was still generating, not after its 1,500
    # tokens (a turn that finished late would end as wall_time too, with no abort, no error)
    assert len(aborted) == 1 and aborted[0].startswith(f"{jobs[0].episode_id}#0@"), aborted
    assert "had no result within the episode's wall time" in traj.error, traj.error
    assert not policy.has_unfinished()


class _ScriptedFirstTurn:
    """The real engine, except that each episode's first turn is a scripted tool call
    (a random model never makes one): turn 2 onwards is sampled by the engine from the
    episode's whole token context, tool response included."""

    token_level = True
    streaming = True
    seeds_per_context = False
    max_context_tokens = 0

    def __init__(self, policy, tokenizer):
        self.policy = policy
        call = '<tool_call>\n{"name": "write_range", "arguments": {"values": 42}}\n</tool_call>'
        self.call_ids = [*tokenizer.encode(call), tokenizer.convert_tokens_to_ids("<|im_end|>")]
        self.scripted: list[str] = []
        self.contexts: dict[str, list[int]] = {}

    def submit(self, request_id, context, params):
        if request_id.split("@")[0].endswith("#0"):
            self.scripted.append(request_id)
            return
        self.contexts[request_id] = list(context)
        self.policy.submit(request_id, context, params)

    def poll(self):
        from spreadrl.rollout.types import PolicyTurn

        done = [
            (r, PolicyTurn("", list(self.call_ids), [-1.0] * len(self.call_ids), "stop"))
            for r in self.scripted
        ]
        self.scripted = []
        return done + self.policy.poll()

    def has_unfinished(self):
        return bool(self.scripted) or self.policy.has_unfinished()

    def abort(self, request_ids):
        self.policy.abort(request_ids)

    def take_started(self):
        return None  # each episode's clock starts at its submission

    def act(self, contexts, params, *, seeds=None):
        return self.policy.act(contexts, params, seeds=seeds)


def test_a_multi_turn_episode_continues_from_token_ids(engine):
    """Episode scheduler, two turns: the engine's request for turn 2 is the episode's
    exact token context (prompt + turn 1's ids + the tool response's ids), and the
    trajectory keeps the engine's sampled ids and log-probs."""
    from spreadrl.rollout.chat import EpisodeChat
    from spreadrl.rollout.config import RolloutConfig
    from spreadrl.rollout.episode import EpisodeJob
    from spreadrl.rollout.runner import RunValues, run_episodes
    from tests.rollout.fakes import FakePool, make_task

    policy, tokenizer = engine
    scripted = _ScriptedFirstTurn(policy, tokenizer)
    cfg = RolloutConfig(
        temperature=1.0, max_new_tokens_per_turn=8, scheduler="episode", max_turns=2
    )
    jobs = [EpisodeJob(make_task(), 1, 0)]
    chat, run = EpisodeChat.of(tokenizer), RunValues(seed=4)
    (traj,) = run_episodes(scripted, FakePool(), jobs, cfg, chat, run=run).trajectories
    assert traj.turns == 2 and traj.tool_calls == 1 and traj.passed, (traj.stop_reason, traj.error)
    ((rid, context),) = scripted.contexts.items()
    assert rid.split("@")[0].endswith("#1")
    assert context == traj.prompt_ids + traj.response_ids[: len(context) - len(traj.prompt_ids)]
    assert traj.response_ids[len(context) - len(traj.prompt_ids) :][:1]  # turn 2's own ids follow
    turn2 = traj.rollout_logprobs[len(context) - len(traj.prompt_ids) :]
    assert turn2 and all(lp < 0 for lp in turn2[:8])  # the engine's log-probs, not 0.0
