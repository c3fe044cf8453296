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
    generating: dict[str, tuple[EpisodeState, int]] = {}
    # an engine that says when it schedules a request starts the episode's clock there;
    # for any other policy the clock starts when the first turn is submitted. Asking
    # once here also drops names left from an earlier batch (none is this batch's).
    engine_starts_clocks = policy.take_started() is not None
    in_tools: list[tuple[EpisodeState, list[Future[StepResult] | str]]] = []
    idle = _IdleWait()

    def queue_turn(state: EpisodeState) -> None:
        key = f"{state.job.episode_id}#{state.turns_taken}"
        seed = derive_seed(run.seed, key)
        params = sampling_params(cfg, seed=seed, max_new_tokens=turn_budget(state, cfg, run))
        request_id = f"{key}@{batch}"
        if not engine_starts_clocks:
            state.start_clock()
        policy.submit(request_id, state.context_ids, params)
        generating[request_id] = (state, episode_room(state, cfg, run))

    def end(state: EpisodeState, reason: EndReason | None = None, error: str = "") -> None:
        if reason is not None:
            state.traj.error = error
            state.end(reason)
        finishing.append((state, finish_episode(pool, state, run)))

    for state in active:
        queue_turn(state)
    while generating or in_tools:
        progressed = False
        if generating:
            t0 = time.perf_counter()
            finished = policy.poll()
            timings["generate_s"] += time.perf_counter() - t0
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
                    end(state, EndReason.ABORTED, error)
                    continue
                items = take_turn(state, clip_turn(turn, room), pool, cfg, chat)
                if state.done:
                    end(state)
                else:
                    in_tools.append((state, items))
            holds = policy.has_unfinished() if generating else None
            if not finished and holds is False:  # awaited, yet the engine has none of them
                for request_id in list(generating):
                    state, _ = generating.pop(request_id)
                    error = (
                        f"the engine lost generation request {request_id} (it no longer holds it)"
                    )
                    end(state, EndReason.LOST_REQUEST, error)
                progressed = True
            if holds:  # an engine with work blocks in its own poll: no wait of ours
                progressed = True
        late = _past_deadline(generating, cfg)
        if late:
            policy.abort(late)
            for request_id in late:
                state, _ = generating.pop(request_id)
                error = (
                    f"generation request {request_id} had no result within the episode's "
                    f"wall time ({cfg.episode_wall_time_s:g} s)"
                )
                end(state, EndReason.WALL_TIME, error)
            progressed = True
        if in_tools:
            t0 = time.perf_counter()
            in_tools, moved = _collect_tools(in_tools, not generating, cfg, run, chat)
            for state in moved:
                if state.done:
                    end(state)
                else:
                    queue_turn(state)
            progressed = progressed or bool(moved)
            timings["tools_s"] += time.perf_counter() - t0
        if progressed or not generating:
            idle.reset()
        else:
            idle.wait(in_tools, _seconds_to_deadline(generating, cfg))


def _collect_tools(
    in_tools: list[tuple[EpisodeState, list[Future[StepResult] | str]]],
    block: bool,
    cfg: RolloutConfig,
    run: RunValues,
    chat: EpisodeChat,
) -> tuple[list[tuple[EpisodeState, list[Future[StepResult] | str]]], list[EpisodeState]]:
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

    def wait(
        self, in_tools: list[tuple[EpisodeState, list[Future[StepResult] | str]]], cap_s: float
    ) -> None:
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
