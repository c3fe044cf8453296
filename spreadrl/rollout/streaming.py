"""Episode-level scheduling: no barrier between the turns of different episodes.

The turn scheduler in :mod:`spreadrl.rollout.runner` generates one turn for
every active episode, then waits for every tool call, then generates again:
the engine idles while the slowest tool runs, and the fastest episodes wait
for the longest generation. Multi-turn agents spend much of an episode in
tools (a recalculation, a sandboxed script), so here each episode moves on
its own: as soon as its tools return, its next turn is queued in the engine,
which keeps decoding whatever is running. The policy only has to accept
requests one at a time and hand back finished ones (``submit``/``poll``,
which is how vLLM's engine works with continuous batching).

Trajectories are the same as under the turn scheduler for a policy whose
output depends only on the context; what changes is the interleaving.

Nothing waits forever: a request still unfinished when its episode's wall
time (``episode_wall_time_s``) runs out is aborted in the engine (``abort``,
when the policy has one) and its episode ends as ``wall_time``; a turn the
engine itself aborted ends its episode as ``aborted``, with the reason in
``traj.error``; neither is mistaken for a turn cut by its token budget.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import replace
from typing import Any, Protocol

from spreadrl.env.types import EpisodeResult, StepResult
from spreadrl.rollout.episode import (
    EnvPoolLike,
    EpisodeState,
    RolloutSettings,
    clip_turn,
    episode_room,
    finish_episode,
    take_observations,
    take_turn,
    turn_budget,
)
from spreadrl.rollout.types import PolicyTurn, SamplingParams, derive_seed


class StreamingPolicy(Protocol):
    """A token-level policy that takes requests one by one and returns them when done."""

    token_level: bool

    def submit(self, request_id: str, context: Sequence[int], params: SamplingParams) -> None: ...

    def poll(self) -> list[tuple[str, PolicyTurn]]:
        """Advance generation a little; return the turns that finished meanwhile.

        A turn whose ``finish_reason`` is "abort" never finished (the engine dropped it)."""
        ...


def run_streaming(
    policy: StreamingPolicy,
    pool: EnvPoolLike,
    active: list[EpisodeState],
    settings: RolloutSettings,
    tokenizer: Any,
    timings: dict[str, float],
    finishing: list[tuple[EpisodeState, Future[EpisodeResult]]],
) -> None:
    """Run ``active`` episodes to their end; finished ones are appended to ``finishing``."""
    batch = uuid.uuid4().hex[:8]  # engines keep request ids unique across calls too
    generating: dict[str, tuple[EpisodeState, int]] = {}
    abort = getattr(policy, "abort", None)
    in_tools: list[tuple[EpisodeState, list[Future[StepResult] | str]]] = []

    def queue_turn(state: EpisodeState) -> None:
        key = f"{state.job.episode_id}#{state.turns_taken}"
        seed = derive_seed(settings.sampling.seed, key)
        params = replace(settings.sampling, max_new_tokens=turn_budget(state, settings), seed=seed)
        request_id = f"{key}@{batch}"
        policy.submit(request_id, state.context_ids, params)
        generating[request_id] = (state, episode_room(state, settings))

    def end(state: EpisodeState) -> None:
        finishing.append((state, finish_episode(pool, state, settings)))

    for state in active:
        queue_turn(state)
    while generating or in_tools:
        if generating:
            t0 = time.perf_counter()
            finished = policy.poll()
            timings["generate_s"] += time.perf_counter() - t0
            for request_id, turn in finished:
                if request_id not in generating:  # given up on at its deadline
                    continue
                state, room = generating.pop(request_id)
                if turn.finish_reason == "abort":
                    state.traj.error = f"the engine aborted generation request {request_id}"
                    state.end("aborted")
                    end(state)
                    continue
                items = take_turn(state, clip_turn(turn, room), pool, settings, True, tokenizer)
                if state.done:
                    end(state)
                else:
                    in_tools.append((state, items))
        late = _past_deadline(generating, settings)
        if late:
            if abort is not None:
                abort(late)
            for request_id in late:
                state, _ = generating.pop(request_id)
                state.traj.error = (
                    f"generation request {request_id} had no result within the episode's "
                    f"wall time ({settings.episode_wall_time_s:g} s)"
                )
                state.end("wall_time")
                end(state)
        if not in_tools:
            continue
        t0 = time.perf_counter()
        if not generating:  # nothing to decode: block until some tool returns
            futures = [i for _, items in in_tools for i in items if isinstance(i, Future)]
            if futures:
                wait(futures, return_when=FIRST_COMPLETED)
        waiting = []
        for state, items in in_tools:
            if any(isinstance(i, Future) and not i.done() for i in items):
                waiting.append((state, items))
                continue
            take_observations(state, items, settings, True, tokenizer)
            if state.done:
                end(state)
            else:
                queue_turn(state)
        in_tools = waiting
        timings["tools_s"] += time.perf_counter() - t0


def _past_deadline(
    generating: dict[str, tuple[EpisodeState, int]], settings: RolloutSettings
) -> list[str]:
    """Requests whose episode has used up its wall time while they were generating."""
    now = time.monotonic()
    return [
        request_id
        for request_id, (state, _) in generating.items()
        if now - state.started > settings.episode_wall_time_s
    ]
