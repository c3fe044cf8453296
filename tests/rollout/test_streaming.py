"""The episode scheduler: same trajectories as the turn scheduler, without its barrier."""

import threading
from concurrent.futures import Future

import pytest

from spreadrl.env.types import EndReason, StepResult
from spreadrl.errors import ConfigError
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engines.scripted import format_tool_call
from spreadrl.rollout.runner import EpisodeJob, run_episodes
from spreadrl.rollout.types import PolicyTurn, RunValues
from tests.rollout.fakes import FakePool, done, make_task


class ContextPolicy:
    """Deterministic: what it 'samples' depends only on the context it is given.

    The n-th assistant turn of an episode calls write_range with n (42 on the
    last tool turn), then answers. ``submit``/``poll`` decode one token per poll
    for every running request, like an engine with continuous batching; it does not
    say when it starts serving a request (``take_started`` gives None)."""

    token_level = True
    streaming = True
    seeds_per_context = False
    max_context_tokens = 0

    def __init__(self, tokenizer, tool_turns=2):
        self.tok = tokenizer
        self.tool_turns = tool_turns
        self.start = tokenizer.convert_tokens_to_ids("<|im_start|>")
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.running = {}
        self.events = []
        self.polls = 0

    def _sample(self, context, params):
        # system, user, this turn's header; each earlier round added an assistant + a tool turn
        index = (context.count(self.start) - 3) // 2
        if index < self.tool_turns:
            value = 42 if index == self.tool_turns - 1 else index
            text = format_tool_call("write_range", {"range": "A1", "values": value})
        else:
            text = "Done."
        ids = self.tok.encode(text, add_special_tokens=False) + [self.end]
        ids = ids[: params.max_new_tokens]
        finish = "stop" if ids[-1] == self.end else "length"
        lps = [-0.01 * ((len(context) + i) % 7) for i in range(len(ids))]
        return PolicyTurn(text, ids, lps, finish)

    def act(self, contexts, params, *, seeds=None):
        self.events.append(("act", len(contexts)))
        return [self._sample(list(c), params) for c in contexts]

    def submit(self, request_id, context, params):
        self.events.append(("submit", request_id))
        self.running[request_id] = [self._sample(list(context), params), 0]

    def has_unfinished(self):
        return bool(self.running)

    def take_started(self):
        return None

    def abort(self, request_ids):
        for rid in request_ids:
            self.running.pop(rid, None)

    def poll(self):
        self.polls += 1
        finished = []
        for rid, entry in list(self.running.items()):
            entry[1] += 1
            if entry[1] >= len(entry[0].token_ids):
                finished.append((rid, entry[0]))
                del self.running[rid]
        return finished


class TurnOnlyPolicy(ContextPolicy):
    """Has submit/poll but does not declare itself streaming: driven turn by turn."""

    streaming = False

    def __init__(self, tokenizer, tool_turns=2):
        super().__init__(tokenizer, tool_turns)
        del self.running


def _comparable(t):
    return (
        t.key,
        t.prompt_ids,
        t.response_ids,
        t.response_mask,
        t.rollout_logprobs,
        t.turns,
        t.tool_calls,
        t.stop_reason,
        t.passed,
        t.reward,
    )


def test_episode_and_turn_schedulers_give_identical_trajectories(tiny_model):
    _, tok = tiny_model
    jobs = [EpisodeJob(make_task(), 1, s) for s in range(3)]
    results = {}
    for scheduler in ("turn", "episode"):
        policy = ContextPolicy(tok, tool_turns=2)
        settings = RolloutConfig(scheduler=scheduler, max_response_tokens=400)
        out = run_episodes(policy, FakePool(), jobs, settings, EpisodeChat.of(tok))
        results[scheduler] = [_comparable(t) for t in out.trajectories]
        kinds = {kind for kind, _ in policy.events}
        assert kinds == ({"act"} if scheduler == "turn" else {"submit"})
    assert results["turn"] == results["episode"]
    assert all(r[8] for r in results["episode"])  # passed: wrote 42 then answered
    assert [r[5] for r in results["episode"]] == [3, 3, 3]


def test_per_episode_token_budget_holds_under_the_episode_scheduler(tiny_model):
    _, tok = tiny_model
    settings = RolloutConfig(scheduler="episode", max_response_tokens=30)
    out = run_episodes(
        ContextPolicy(tok), FakePool(), [EpisodeJob(make_task())], settings, EpisodeChat.of(tok)
    )
    t = out.trajectories[0]
    assert t.stop_reason == "max_response_tokens"
    assert sum(t.response_mask) <= 30


class SlowToolPool(FakePool):
    """Tools of episode sample 0 take ``delay`` seconds; everyone else's return at once."""

    def __init__(self, delay):
        super().__init__()
        self.delay = delay
        self.log = []
        self.lock = threading.Lock()

    def _note(self, what):
        with self.lock:
            self.log.append(what)

    def step(self, episode_id, call):
        self.calls[episode_id].append(call)
        result = StepResult("wrote", True)
        if not episode_id.endswith("/0"):
            return done(result)
        future = Future()

        def later():
            self._note(("tool_done", episode_id))
            future.set_result(result)

        threading.Timer(self.delay, later).start()
        return future

    def finish(self, episode_id, **kwargs):
        self._note(("finish", episode_id))
        return super().finish(episode_id, **kwargs)


@pytest.mark.parametrize("scheduler", ["turn", "episode"])
def test_a_slow_tool_holds_back_only_its_own_episode_under_the_episode_scheduler(
    tiny_model, scheduler
):
    _, tok = tiny_model
    pool = SlowToolPool(delay=0.3)
    jobs = [EpisodeJob(make_task(), 1, s) for s in range(2)]
    settings = RolloutConfig(scheduler=scheduler, max_response_tokens=400)
    out = run_episodes(ContextPolicy(tok, tool_turns=3), pool, jobs, settings, EpisodeChat.of(tok))
    assert all(t.passed for t in out.trajectories)
    fast_done = pool.log.index(("finish", "t1/1/1"))
    first_slow_tool = pool.log.index(("tool_done", "t1/1/0"))
    if scheduler == "episode":
        # the fast episode ran all four of its turns while the slow one's first tool ran
        assert fast_done < first_slow_tool
    else:
        # the turn scheduler makes it wait for the slow tool every round
        assert fast_done > first_slow_tool


def test_auto_picks_the_episode_scheduler_only_for_streaming_policies(tiny_model):
    _, tok = tiny_model
    streaming, turn_only = ContextPolicy(tok), TurnOnlyPolicy(tok)
    run_episodes(
        streaming, FakePool(), [EpisodeJob(make_task())], RolloutConfig(), EpisodeChat.of(tok)
    )
    run_episodes(
        turn_only, FakePool(), [EpisodeJob(make_task())], RolloutConfig(), EpisodeChat.of(tok)
    )
    assert streaming.events[0][0] == "submit" and turn_only.events[0][0] == "act"
    with pytest.raises(ConfigError, match="submit/poll"):
        run_episodes(
            turn_only,
            FakePool(),
            [EpisodeJob(make_task())],
            RolloutConfig(scheduler="episode"),
            EpisodeChat.of(tok),
        )
    with pytest.raises(ConfigError, match="unknown rollout.scheduler 'async'"):
        RolloutConfig(scheduler="async")


def test_a_crashed_tool_fails_only_its_episode_under_the_episode_scheduler(tiny_model):
    _, tok = tiny_model
    jobs = [EpisodeJob(make_task(), 1, s) for s in range(2)]
    pool = FakePool(crash="t1/1/0")
    out = run_episodes(
        ContextPolicy(tok), pool, jobs, RolloutConfig(scheduler="episode"), EpisodeChat.of(tok)
    )
    crashed, fine = out.trajectories
    assert crashed.stop_reason == "error" and "worker died" in crashed.error
    assert fine.passed and fine.stop_reason == "answered"


def test_sampling_params_budget_is_per_episode(tiny_model):
    _, tok = tiny_model
    seen = []

    class Recording(ContextPolicy):
        def submit(self, request_id, context, params):
            seen.append(params.max_new_tokens)
            super().submit(request_id, context, params)

    settings = RolloutConfig(
        scheduler="episode", max_new_tokens_per_turn=64, max_response_tokens=100
    )
    run_episodes(
        Recording(tok), FakePool(), [EpisodeJob(make_task())], settings, EpisodeChat.of(tok)
    )
    assert seen[0] == 64 and all(b <= 64 for b in seen)
    assert seen[-1] < 64  # the last turn only gets what is left of the 100-token budget


def test_each_request_gets_its_own_reproducible_seed(tiny_model):
    """vLLM seeds each request from its SamplingParams: a shared seed would make the G
    rollouts of a group sample the same tokens."""
    _, tok = tiny_model

    class Recording(ContextPolicy):
        def __init__(self, tokenizer):
            super().__init__(tokenizer)
            self.seeds = []

        def submit(self, request_id, context, params):
            self.seeds.append((request_id.split("@")[0], params.seed))
            super().submit(request_id, context, params)

    runs = []
    for _ in range(2):
        policy = Recording(tok)
        settings = RolloutConfig(scheduler="episode")
        jobs = [EpisodeJob(make_task(), 1, s) for s in range(4)]
        run_episodes(policy, FakePool(), jobs, settings, EpisodeChat.of(tok), run=RunValues(seed=7))
        runs.append(sorted(policy.seeds))
    assert runs[0] == runs[1]  # reproducible
    values = [seed for _, seed in runs[0]]
    assert len(values) == 4 * 3 and len(set(values)) == len(values)  # 4 episodes x 3 turns


class StuckEngine(ContextPolicy):
    """Requests of sample 0 never come back unless aborted, and the policy cannot say
    whether it still holds them (``has_unfinished`` gives None); its poll returns at
    once. Other requests finish at their first poll."""

    def __init__(self, tokenizer):
        super().__init__(tokenizer)
        self.aborted = []

    def submit(self, request_id, context, params):
        super().submit(request_id, context, params)
        entry = self.running[request_id]
        entry[1] = -(10**9) if "/0#" in request_id else len(entry[0].token_ids) - 1

    def has_unfinished(self):
        return None

    def abort(self, request_ids):
        self.aborted.extend(request_ids)
        super().abort(request_ids)


def test_a_request_that_never_returns_ends_its_episode_at_the_wall_time(tiny_model):
    _, tok = tiny_model
    policy = StuckEngine(tok)
    jobs = [EpisodeJob(make_task(), 1, s) for s in range(2)]
    settings = RolloutConfig(scheduler="episode", episode_wall_time_s=0.3)
    stuck, fine = run_episodes(policy, FakePool(), jobs, settings, EpisodeChat.of(tok)).trajectories
    assert stuck.stop_reason == "wall_time" and "no result" in stuck.error
    assert policy.aborted == ["t1/1/0#0@" + policy.aborted[0].split("@")[1]]
    assert fine.passed and fine.stop_reason == "answered"
    # it waited instead of spinning: the waits double from 1 ms to 50 ms, so 0.3 s holds
    # about a dozen polls after the fine episode is done (a tight loop makes thousands)
    assert policy.polls < 100, policy.polls


def test_a_request_the_engine_lost_ends_its_episode_at_once(tiny_model, monkeypatch):
    """The fake vLLM engine drops sample 0's first request without a trace: the
    scheduler must end that episode as lost_request when the engine holds nothing,
    not poll an empty engine until the wall time runs out."""
    from spreadrl.env.types import EndReason
    from spreadrl.rollout.engines.vllm import VLLMPolicy
    from tests.rollout import fake_vllm

    _, tok = tiny_model
    fake_vllm.install(monkeypatch)

    class Engine(fake_vllm.FakeLLM):
        def complete(self, prompt_ids, params):  # answers at once: "Done." + <|im_end|>
            ids = tok.encode("Done.", add_special_tokens=False)
            ids.append(tok.convert_tokens_to_ids("<|im_end|>"))
            return fake_vllm.finish_like_vllm(ids, [-0.5] * len(ids), params, eos=ids[-1])

    policy = VLLMPolicy("m", llm=Engine("m"))
    engine = policy.llm.llm_engine
    original = engine.add_request

    def add_request(request_id, prompt, params):
        if "/0#" in request_id:
            engine.lose.add(request_id)
        return original(request_id=request_id, prompt=prompt, params=params)

    engine.add_request = add_request
    jobs = [EpisodeJob(make_task(), 1, s) for s in range(2)]
    # a wall time long enough that ending there would be a failure, short enough that
    # the old spinning scheduler fails this test in seconds rather than hanging
    settings = RolloutConfig(scheduler="episode", episode_wall_time_s=5.0)
    lost, fine = run_episodes(policy, FakePool(), jobs, settings, EpisodeChat.of(tok)).trajectories
    assert lost.stop_reason == EndReason.LOST_REQUEST
    assert "lost generation request t1/1/0#0@" in lost.error
    assert lost.response_ids == []
    assert fine.stop_reason == "answered"
    # the fine request streams a token per engine step and the lost one vanishes at the
    # first: one step per answer token; each poll asks the engine once and the scheduler
    # once more: nothing like a loop until the wall time
    answer = len(tok.encode("Done.", add_special_tokens=False)) + 1
    assert engine.calls["step"] <= answer + 1, engine.calls
    assert engine.calls["has_unfinished_requests"] <= 2 * answer + 4, engine.calls
    assert engine.aborted == []


def test_an_engine_abort_is_reported_as_aborted_not_as_length(tiny_model, monkeypatch):
    from spreadrl.rollout.engines.vllm import VLLMPolicy
    from tests.rollout import fake_vllm

    _, tok = tiny_model
    fake_vllm.install(monkeypatch)

    class Engine(fake_vllm.FakeLLM):
        def complete(self, prompt_ids, params):  # answers at once: "Done." + <|im_end|>
            ids = tok.encode("Done.", add_special_tokens=False)
            ids.append(tok.convert_tokens_to_ids("<|im_end|>"))
            return fake_vllm.finish_like_vllm(ids, [-0.5] * len(ids), params, eos=ids[-1])

    policy = VLLMPolicy("m", llm=Engine("m"))
    original = policy.llm.llm_engine.add_request

    def add_request(request_id, prompt, params):
        if "/0#" in request_id:
            policy.llm.llm_engine.drop.add(request_id)
        return original(request_id=request_id, prompt=prompt, params=params)

    policy.llm.llm_engine.add_request = add_request
    jobs = [EpisodeJob(make_task(), 1, s) for s in range(2)]
    settings = RolloutConfig(scheduler="episode")
    dropped, fine = run_episodes(
        policy, FakePool(), jobs, settings, EpisodeChat.of(tok)
    ).trajectories
    assert dropped.stop_reason == "aborted" and "aborted" in dropped.error
    assert isinstance(dropped.stop_reason, EndReason)
    assert dropped.response_ids == []  # nothing of the aborted turn is trained on
    assert fine.stop_reason == "answered"


def test_an_episode_queued_behind_a_full_engine_is_not_timed_until_served(tiny_model, monkeypatch):
    """Issue 26: all episodes are submitted at once, but the engine serves two at a time
    (as a KV cache that holds two sequences). The wall clock must start when the
    engine first serves an episode, not at submission, or the last ones end as
    ``wall_time`` having only waited. The clock here is the engine's step count."""
    import types

    from spreadrl.rollout import episode as episode_module
    from spreadrl.rollout.engines.vllm import VLLMPolicy
    from tests.rollout import fake_vllm

    _, tok = tiny_model
    fake_vllm.install(monkeypatch)
    answer = tok.encode("Done.", add_special_tokens=False) + [
        tok.convert_tokens_to_ids("<|im_end|>")
    ]

    class Engine(fake_vllm.FakeLLM):
        def complete(self, prompt_ids, params):
            return fake_vllm.finish_like_vllm(answer, [-0.5] * len(answer), params, eos=answer[-1])

    policy = VLLMPolicy("m", llm=Engine("m"))
    engine = policy.llm.llm_engine
    engine.max_running = 2
    monkeypatch.setattr(
        episode_module, "time", types.SimpleNamespace(monotonic=lambda: engine.steps)
    )
    jobs = [EpisodeJob(make_task(), 1, s) for s in range(6)]
    # an episode takes len(answer) engine steps once served; the last pair waits for two
    # pairs before it, so from submission it would need 3 x len(answer) steps
    settings = RolloutConfig(scheduler="episode", episode_wall_time_s=len(answer) + 0.5)
    trajs = run_episodes(policy, FakePool(), jobs, settings, EpisodeChat.of(tok)).trajectories
    assert max(engine.served_at.values()) > len(answer) + 0.5  # some waited past the budget
    assert [t.stop_reason for t in trajs] == ["answered"] * 6, [t.error for t in trajs]
