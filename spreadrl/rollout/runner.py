"""The multi-turn agent loop shared by eval, RL and serving.

Each round, every active episode gets one assistant turn from the policy (one
batched generation call), its tool calls run in the environment pool (in
parallel, in worker processes), and the observations are appended. For
token-level policies the loop keeps the exact sampled ids: assistant tokens
get loss mask 1, everything the environment or the template adds gets 0, and
observations are tokenized once, on their own, and appended — decoded model
text is only ever parsed, never re-encoded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Protocol

from spreadrl.env.openenv_pool import session_cap
from spreadrl.env.types import EpisodeResult
from spreadrl.errors import ConfigError
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.config import DEFAULT_SYSTEM_PROMPT, RolloutConfig  # noqa: F401
from spreadrl.rollout.episode import (  # noqa: F401  (re-exported: the loop's public records)
    EnvPoolLike,
    EpisodeJob,
    EpisodeState,
    apply_result,
    clip_turn,
    episode_room,
    finish_episode,
    start_episodes,
    take_observations,
    take_turn,
    turn_budget,
    user_message,
)
from spreadrl.rollout.policy import (
    Policy,
    StreamingPolicy,
    TokenPolicy,
    is_streaming,
    is_token_level,
)
from spreadrl.rollout.streaming import run_streaming
from spreadrl.rollout.types import (  # noqa: F401  (RunValues re-exported)
    PolicyTurn,
    RunValues,
    Trajectory,
    derive_seed,
    sampling_params,
)

log = logging.getLogger(__name__)


@dataclass
class RolloutBatch:
    """Finished trajectories plus where the time went."""

    trajectories: list[Trajectory]
    timings: dict[str, float]


class EpisodeRunner(Protocol):
    """What runs a set of episodes: :func:`run_episodes`, or a harness's runner
    (:class:`spreadrl.rollout.harness.episodes.HarnessEpisodes`)."""

    def __call__(
        self,
        policy: Policy,
        pool: EnvPoolLike,
        jobs: Sequence[EpisodeJob],
        cfg: RolloutConfig,
        chat: EpisodeChat | None = None,
        *,
        run: RunValues | None = None,
        on_episode_done: Callable[[Trajectory], None] | None = None,
    ) -> RolloutBatch: ...


def _in_groups(
    policy: Policy,
    pool: EnvPoolLike,
    jobs: Sequence[EpisodeJob],
    cfg: RolloutConfig,
    chat: EpisodeChat | None,
    run: RunValues,
    on_episode_done: Callable[[Trajectory], None] | None,
    size: int,
) -> RolloutBatch:
    """``jobs`` run ``size`` at a time (an environment server's session cap), in order."""
    batches = [
        run_episodes(policy, pool, jobs[i : i + size], cfg, chat, run=run,
                     on_episode_done=on_episode_done)
        for i in range(0, len(jobs), size)
    ]  # fmt: skip
    timings = {key: sum(b.timings.get(key, 0.0) for b in batches) for key in batches[0].timings}
    return RolloutBatch([t for b in batches for t in b.trajectories], timings)


def run_episodes(
    policy: Policy,
    pool: EnvPoolLike,
    jobs: Sequence[EpisodeJob],
    cfg: RolloutConfig,
    chat: EpisodeChat | None = None,
    *,
    run: RunValues | None = None,
    on_episode_done: Callable[[Trajectory], None] | None = None,
) -> RolloutBatch:
    """Run ``jobs`` to completion with ``policy`` acting in ``pool``'s environments.

    ``cfg`` is the recipe's ``rollout`` section, read as it is; ``run`` holds
    this call's values that are no setting (seed, prompt and context limits,
    where workbooks are kept); ``chat`` (the tokenizer and its chat format,
    built once by whoever starts the episodes) is needed by token-level
    policies and unused by message-level ones."""
    run = run or RunValues()
    if not is_token_level(policy):
        chat = None  # a message-level policy's text is parsed in the fallback format
    elif chat is None:
        raise ValueError("a token-level policy needs the tokenizer's EpisodeChat")
    elif not run.max_context_tokens:
        run = replace(run, max_context_tokens=context_limit(policy))
    cap = session_cap(pool)
    if cap is not None and len(jobs) > cap:  # a server that holds fewer sessions at once
        return _in_groups(policy, pool, jobs, cfg, chat, run, on_episode_done, cap)
    ids = [job.episode_id for job in jobs]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(
            f"episode {dup} is scheduled twice in one batch; give each a sample number"
        )
    timings = {"reset_s": 0.0, "generate_s": 0.0, "tools_s": 0.0, "finish_s": 0.0}
    t0 = time.perf_counter()
    states = start_episodes(pool, jobs, cfg, run, chat)
    timings["reset_s"] = time.perf_counter() - t0
    finishing: list[tuple[EpisodeState, Future[EpisodeResult]]] = []

    active = [s for s in states if not s.done]
    for s in states:
        if s.done:
            finishing.append((s, finish_episode(pool, s, run)))
    engine = _episode_scheduled(policy, cfg) if active else None
    if engine is not None:
        assert chat is not None  # the episode scheduler runs token-level policies only
        run_streaming(engine, pool, active, cfg, run, chat, timings, finishing)
        active = []
    while active:
        t0 = time.perf_counter()
        turns = _generate(policy, active, cfg, run)
        timings["generate_s"] += time.perf_counter() - t0

        t0 = time.perf_counter()
        pending = [
            (state, take_turn(state, turn, pool, cfg, chat))
            for state, turn in zip(active, turns, strict=True)
        ]
        for state, items in pending:
            if not state.done:
                take_observations(state, items, cfg, run, chat)
        timings["tools_s"] += time.perf_counter() - t0

        still = []
        for state in active:
            if state.done:
                finishing.append((state, finish_episode(pool, state, run)))
            else:
                still.append(state)
        active = still

    t0 = time.perf_counter()
    for state, future in finishing:
        apply_result(state, future)
        if on_episode_done is not None:
            on_episode_done(state.traj)
    timings["finish_s"] = time.perf_counter() - t0
    return RolloutBatch([s.traj for s in states], timings)


def context_limit(policy: TokenPolicy) -> int:
    """The policy's declared context length in tokens (0 = not declared, no limit).

    Budgets are clipped to it so no turn generates past the positions the model has."""
    return max(policy.max_context_tokens, 0)


def _episode_scheduled(policy: Policy, cfg: RolloutConfig) -> StreamingPolicy | None:
    """The policy when the episode scheduler drives it (``cfg.scheduler`` "episode", or
    "auto" and it streams); None: the turn scheduler."""
    if cfg.scheduler == "turn":
        return None
    if is_streaming(policy):
        return policy
    if cfg.scheduler == "episode":
        raise ConfigError(
            "scheduler 'episode' needs a token-level policy with submit/poll "
            f"(the vllm backend); {type(policy).__name__} generates turn by turn"
        )
    return None


def _generate(
    policy: Policy,
    active: list[EpisodeState],
    cfg: RolloutConfig,
    run: RunValues,
) -> list[PolicyTurn]:
    for state in active:  # an episode's wall clock starts with its first scheduled turn
        state.start_clock()
    if policy.token_level is False:
        params = sampling_params(cfg, seed=run.seed)
        return policy.act_messages(active, params)
    budget = max(turn_budget(s, cfg, run) for s in active)  # one call, one budget
    if run.max_context_tokens:  # the batch is as long as its longest context
        longest = max(len(s.context_ids) for s in active)
        budget = max(1, min(budget, run.max_context_tokens - longest))
    contexts = [s.context_ids for s in active]
    params = sampling_params(cfg, seed=run.seed, max_new_tokens=budget)
    seeds = None
    if policy.seeds_per_context:
        # keyed like the episode scheduler's requests: an episode's samples do not
        # depend on which episodes share the batch (or the rank, under torchrun)
        keys = [f"{s.job.episode_id}#{s.turns_taken}" for s in active]
        seeds = [derive_seed(params.seed, k) for k in keys]
    turns = policy.act(contexts, params, seeds=seeds)
    rooms = [episode_room(s, cfg, run) for s in active]
    return [clip_turn(turn, room) for turn, room in zip(turns, rooms, strict=True)]
