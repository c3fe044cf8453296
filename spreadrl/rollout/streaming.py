"""Episode-level scheduling: no barrier between the turns of different episodes.

The turn scheduler in :mod:`spreadrl.rollout.runner` generates one turn for
every active episode, then waits for every tool call, then generates again:
the engine idles while the slowest tool runs, and the fastest episodes wait
for the longest generation. Multi-turn agents spend much of an episode in
tools (a recalculation, a sandboxed script), so here each episode moves on
its own: as soon as its tools return, its next turn is queued in the engine,
which keeps decoding whatever is running. The policy only has to accept
requests one at a time and hand back finished ones (``submit``/``poll``,
which is how vLLM's engine works with continuous batching: the
:class:`~spreadrl.rollout.policy.StreamingPolicy` protocol).

Trajectories are the same as under the turn scheduler for a policy whose
output depends only on the context; what changes is the interleaving.

An episode's wall clock starts when the engine first serves its first turn (an
engine that reports it: ``take_started`` gives a list), else when that turn is submitted; a
hundred episodes submitted at once to an engine whose KV cache holds a few are
not timed while they wait. Nothing waits forever, and nothing spins: a request
still unfinished when its episode's wall time (``episode_wall_time_s``) runs out is aborted in the engine
(``abort``) and its episode ends as ``wall_time``; a
turn the engine itself aborted ends its episode as ``aborted``; a request the
engine no longer holds (``has_unfinished()`` is False while the scheduler still
awaits it) ends its episode as ``lost_request`` at once, not at the wall clock.
Each reason is written in ``traj.error``, and none is mistaken for a turn cut by
its token budget. An engine's ``poll`` blocks on its own step while it has work
(vLLM's ``step()``); for a policy that cannot say whether it holds work
(``has_unfinished()`` gives None), a poll
that brings nothing is followed by a short wait (on the running tools, when
there are any) that grows while nothing happens, so the loop never spins.

Limit: a request lost while the engine still runs others is noticed only once
the engine has drained them (vLLM says whether it holds any request, not which).
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field

from spreadrl.env.types import EndReason, EpisodeResult, StepResult
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.episode import (
    EnvPoolLike,
    EpisodeState,
    clip_turn,
    episode_room,
    finish_episode,
    take_observations,
    take_turn,
    turn_budget,
)
from spreadrl.rollout.policy import StreamingPolicy
from spreadrl.rollout.types import RunValues, derive_seed, sampling_params

IDLE_WAIT_S = (0.001, 0.05)  # first and longest wait after a poll that brought nothing


InTools = list[tuple[EpisodeState, list[Future[StepResult] | str]]]


def run_streaming(
    policy: StreamingPolicy,
    pool: EnvPoolLike,
    active: list[EpisodeState],
    cfg: RolloutConfig,
    run: RunValues,
    chat: EpisodeChat,
    timings: dict[str, float],
    finishing: list[tuple[EpisodeState, Future[EpisodeResult]]],
) -> None:
    """Run ``active`` episodes to their end; finished ones are appended to ``finishing``."""
    batch = uuid.uuid4().hex[:8]  # engines keep request ids unique across calls too
    # an engine that says when it schedules a request starts the episode's clock there;
    # for any other policy the clock starts when the first turn is submitted. Asking
    # once here also drops names left from an earlier batch (none is this batch's).
    engine_starts_clocks = policy.take_started() is not None
    loop = _Scheduler(policy, pool, cfg, run, chat, timings, finishing, batch, engine_starts_clocks)
    idle = _IdleWait()
    for state in active:
        loop.queue_turn(state)
    while loop.generating or loop.in_tools:
        progressed = loop.take_generated() if loop.generating else False
        progressed = loop.abort_late() or progressed
        progressed = loop.take_tools() or progressed
        if progressed or not loop.generating:
            idle.reset()
        else:
            idle.wait(loop.in_tools, _seconds_to_deadline(loop.generating, cfg))


@dataclass
class _Scheduler:
    """The state of :func:`run_streaming`'s loop: the requests in the engine
    (``generating``: request id -> episode, its token room) and the episodes in their
    tools, with the steps that move an episode from one to the other or to its end."""

    policy: StreamingPolicy
    pool: EnvPoolLike
    cfg: RolloutConfig
    run: RunValues
    chat: EpisodeChat
    timings: dict[str, float]
    finishing: list[tuple[EpisodeState, Future[EpisodeResult]]]
    batch: str
    engine_starts_clocks: bool
    generating: dict[str, tuple[EpisodeState, int]] = field(default_factory=dict)
    in_tools: InTools = field(default_factory=list)

    def queue_turn(self, state: EpisodeState) -> None:
        """Submit the episode's next turn to the engine."""
        cfg, run = self.cfg, self.run
        key = f"{state.job.episode_id}#{state.turns_taken}"
        seed = derive_seed(run.seed, key)
        params = sampling_params(cfg, seed=seed, max_new_tokens=turn_budget(state, cfg, run))
        request_id = f"{key}@{self.batch}"
        if not self.engine_starts_clocks:
            state.start_clock()
        self.policy.submit(request_id, state.context_ids, params)
        self.generating[request_id] = (state, episode_room(state, cfg, run))

    def end(self, state: EpisodeState, reason: EndReason | None = None, error: str = "") -> None:
        """End the episode (as ``reason``, when the scheduler ends it) and start its finish."""
        if reason is not None:
            state.traj.error = error
            state.end(reason)
        self.finishing.append((state, finish_episode(self.pool, state, self.run)))

    def take_generated(self) -> bool:
        """Poll the engine: finished turns go to their tools (or end their episode),
        aborted and lost requests end theirs. Whether anything moved (an engine that
        blocks in its own poll counts as moving: no wait of ours)."""
        policy, generating = self.policy, self.generating
        progressed = False
        t0 = time.perf_counter()
        finished = policy.poll()
        self.timings["generate_s"] += time.perf_counter() - t0
        for request_id in policy.take_started() or ():
            if request_id in generating:
                generating[request_id][0].start_clock()
        for request_id, turn in finished:
            if request_id not in generating:  # given up on at its deadline
                continue
            progressed = True
            state, room = generating.pop(request_id)
            if turn.finish_reason == "abort":
                error = f"the engine aborted generation request {request_id}"
                self.end(state, EndReason.ABORTED, error)
                continue
            items = take_turn(state, clip_turn(turn, room), self.pool, self.cfg, self.chat)
            if state.done:
                self.end(state)
            else:
                self.in_tools.append((state, items))
        holds = policy.has_unfinished() if generating else None
        if not finished and holds is False:  # awaited, yet the engine has none of them
            for request_id in list(generating):
                state, _ = generating.pop(request_id)
                error = f"the engine lost generation request {request_id} (it no longer holds it)"
                self.end(state, EndReason.LOST_REQUEST, error)
            progressed = True
        if holds:  # an engine with work blocks in its own poll: no wait of ours
            progressed = True
        return progressed

    def abort_late(self) -> bool:
        """Abort the requests whose episode ran out of wall time; whether there were any."""
        late = _past_deadline(self.generating, self.cfg)
        if not late:
            return False
        self.policy.abort(late)
        for request_id in late:
            state, _ = self.generating.pop(request_id)
            error = (
                f"generation request {request_id} had no result within the episode's "
                f"wall time ({self.cfg.episode_wall_time_s:g} s)"
            )
            self.end(state, EndReason.WALL_TIME, error)
        return True

    def take_tools(self) -> bool:
        """Episodes whose tools all returned queue their next turn (or end); whether any did.
        Blocks on the tools when nothing is generating."""
        if not self.in_tools:
            return False
        t0 = time.perf_counter()
        self.in_tools, moved = _collect_tools(
            self.in_tools, not self.generating, self.cfg, self.run, self.chat
        )
        for state in moved:
            if state.done:
                self.end(state)
            else:
                self.queue_turn(state)
        self.timings["tools_s"] += time.perf_counter() - t0
        return bool(moved)


def _collect_tools(
    in_tools: InTools,
    block: bool,
    cfg: RolloutConfig,
    run: RunValues,
    chat: EpisodeChat,
) -> tuple[InTools, list[EpisodeState]]:
    """Append the observations of episodes whose tools all returned; return (still in
    tools, moved on). ``block``: nothing is generating, so wait until some tool returns."""
    if block:
        futures = [i for _, items in in_tools for i in items if isinstance(i, Future)]
        if futures:
            wait(futures, return_when=FIRST_COMPLETED)
    waiting, moved = [], []
    for state, items in in_tools:
        if any(isinstance(i, Future) and not i.done() for i in items):
            waiting.append((state, items))
            continue
        take_observations(state, items, cfg, run, chat)
        moved.append(state)
    return waiting, moved


class _IdleWait:
    """A wait that doubles from IDLE_WAIT_S[0] to IDLE_WAIT_S[1] while nothing happens."""

    def __init__(self) -> None:
        self.next_s = IDLE_WAIT_S[0]

    def reset(self) -> None:
        self.next_s = IDLE_WAIT_S[0]

    def wait(self, in_tools: InTools, cap_s: float) -> None:
        timeout = max(0.0, min(self.next_s, cap_s))
        self.next_s = min(self.next_s * 2, IDLE_WAIT_S[1])
        futures = [i for _, items in in_tools for i in items if isinstance(i, Future)]
        if futures:  # a returning tool ends the wait early
            wait(futures, timeout=timeout, return_when=FIRST_COMPLETED)
        else:
            time.sleep(timeout)


def _seconds_to_deadline(
    generating: dict[str, tuple[EpisodeState, int]], cfg: RolloutConfig
) -> float:
    """Seconds until the first generating episode runs out of wall time."""
    return cfg.episode_wall_time_s - max(state.elapsed_s() for state, _ in generating.values())


def _past_deadline(
    generating: dict[str, tuple[EpisodeState, int]], cfg: RolloutConfig
) -> list[str]:
    """Requests whose episode has used up its wall time while they were generating."""
    return [
        request_id
        for request_id, (state, _) in generating.items()
        if state.elapsed_s() > cfg.episode_wall_time_s
    ]
