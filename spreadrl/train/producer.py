"""Asynchronous GRPO: the rollouts of the next steps are sampled while the trainer updates.

With ``rollout.max_staleness`` = k >= 1 a producer thread rolls out the prompts
of step s while the trainer is still updating earlier steps, by weights at most
k versions older than those step s trains (version v = the weights after v
updates; step s trains version s - 1). The trainer publishes its weights at
each step boundary; the producer's policy picks them up between turns (hf) or
between engine steps (vLLM), so an episode still running at a sync goes on under
the new weights while the tokens it already has keep their versions (partial
rollouts). ``max_staleness`` = 0 never builds any of this: the synchronous loop
runs as it always did.

Why a thread and not a process: the hf producer samples with its own copy of the
model in the trainer's process (loaded from the trainer's weights at each sync),
and the vLLM engine already lives in processes of its own; torch releases the
GIL in its kernels, so sampling and the update overlap on the cores.

The bound holds by construction: the producer starts step s only once version
s - 1 - k is published, and a token is never sampled by weights older than the
ones applied when its step started; :func:`staleness` checks it anyway.

The correction is decoupled PPO (AReaL; verl's ``fully_async_policy``): the
ratio is taken against the proximal policy, the trainer's weights at the start
of the update (``Sample.old_logprobs``), and each token is weighted by
``min(pi_prox / pi_behav, cap)`` with the behaviour log-probs recorded when it
was sampled (``loss.tis``'s weights, :func:`spreadrl.train.losses.tis_weights`).
docs/async.md says why it is always on in asynchronous mode.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from spreadrl.rollout.policy import (
    Contexts,
    Seeds,
    StreamingPolicy,
    TokenPolicy,
    is_streaming,
)
from spreadrl.rollout.types import PolicyTurn, SamplingParams, Trajectory
from spreadrl.train.batching import Sample

T = TypeVar("T")


class ProducerStopped(Exception):
    """Raised inside the producer's policy when the trainer stops it: ends the step's
    rollouts where they are (the in-flight episodes are discarded)."""


class VersionedPolicy:
    """The producer's policy: applies published weights between turns and stamps every
    turn with the version of the weights that sampled it.

    ``apply(payload)`` loads one published payload into the policy's own weights
    (a state dict for hf, a folder for vLLM's reload); it runs in the producer's
    thread, between generation calls, so no forward ever sees half-loaded weights.
    What the loop reads of a policy (:class:`~spreadrl.rollout.policy.TokenPolicy`)
    is the wrapped policy's.
    """

    token_level: Literal[True] = True
    streaming = False

    def __init__(
        self, inner: TokenPolicy, apply: Callable[[object], None], version: int = 0
    ) -> None:
        self.inner = inner
        self.apply = apply
        self.version = version
        self._lock = threading.Lock()
        self._pending: tuple[int, object] | None = None
        self._stop = threading.Event()
        self.syncs = 0
        # frees a payload that is never applied (replaced by a newer one, or left at stop)
        self.discard: Callable[[object], None] | None = None

    @property
    def seeds_per_context(self) -> bool:
        return self.inner.seeds_per_context

    @property
    def max_context_tokens(self) -> int:
        return self.inner.max_context_tokens

    def publish(self, version: int, payload: object) -> None:
        """Hand over the weights of ``version`` (trainer's thread); applied before the next
        generation call. A newer payload replaces one not yet applied."""
        with self._lock:
            replaced, self._pending = self._pending, (version, payload)
        if replaced is not None and self.discard is not None:
            self.discard(replaced[1])

    def stop(self) -> None:
        """Make the producer's next generation call raise :class:`ProducerStopped`."""
        self._stop.set()

    def drop_pending(self) -> None:
        """Free the payload not yet applied (after the producer stopped)."""
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is not None and self.discard is not None:
            self.discard(pending[1])

    def refresh(self) -> int:
        """Apply the newest published weights, if any; return the version now sampling."""
        if self._stop.is_set():
            raise ProducerStopped
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is not None:
            version, payload = pending
            self.apply(payload)
            self.version = version
            self.syncs += 1
        return self.version

    def act(
        self, contexts: Contexts, params: SamplingParams, *, seeds: Seeds | None = None
    ) -> list[PolicyTurn]:
        """The wrapped policy's turns, after the newest weights, stamped with their version."""
        version = self.refresh()
        turns = self.inner.act(contexts, params, seeds=seeds)
        for turn in turns:
            turn.version = version
        return turns


class VersionedStreamingPolicy(VersionedPolicy):
    """:class:`VersionedPolicy` for an engine that takes requests one by one (vLLM).

    Weights are applied between engine steps (before ``submit`` and ``poll``): a
    request already running continues under the new weights. Its turn is stamped
    with the version current when it was submitted, the oldest that can have
    sampled any of its tokens, so a sample's staleness is never understated (its
    behaviour log-probs are the engine's own per token, so the correction is exact
    whatever the stamp)."""

    streaming: Literal[True] = True

    def __init__(
        self, inner: StreamingPolicy, apply: Callable[[object], None], version: int = 0
    ) -> None:
        super().__init__(inner, apply, version)
        self.engine = inner
        self._submitted: dict[str, int] = {}

    def refresh(self) -> int:
        """As :meth:`VersionedPolicy.refresh`; on stop, the engine's requests are aborted."""
        try:
            return super().refresh()
        except ProducerStopped:
            self.abort(list(self._submitted))
            raise

    def submit(self, request_id: str, context: Sequence[int], params: SamplingParams) -> None:
        self._submitted[request_id] = self.refresh()
        self.engine.submit(request_id, context, params)

    def poll(self) -> list[tuple[str, PolicyTurn]]:
        self.refresh()
        finished = self.engine.poll()
        for request_id, turn in finished:
            turn.version = self._submitted.pop(request_id, self.version)
        return finished

    def abort(self, request_ids: Sequence[str]) -> None:
        for request_id in request_ids:
            self._submitted.pop(request_id, None)
        if request_ids:
            self.engine.abort(list(request_ids))

    def has_unfinished(self) -> bool:
        """The engine's answer; for one that cannot say, whether any request is awaited."""
        held = self.engine.has_unfinished()
        return bool(self._submitted) if held is None else held

    def take_started(self) -> list[str] | None:
        return self.engine.take_started()


def versioned(
    inner: TokenPolicy, apply: Callable[[object], None], version: int = 0
) -> VersionedPolicy:
    """The versioned wrapper that fits ``inner``: streaming when it streams."""
    if is_streaming(inner):
        return VersionedStreamingPolicy(inner, apply, version)
    return VersionedPolicy(inner, apply, version)


def finish_versions(traj: Trajectory) -> None:
    """Pad ``response_versions`` with -1 to the response's length (the tool responses and
    template tokens after the last sampled turn)."""
    missing = len(traj.response_ids) - len(traj.response_versions)
    if traj.response_versions and missing > 0:
        traj.response_versions.extend([-1] * missing)


def oldest_version(traj: Trajectory) -> int | None:
    """The oldest policy version among the trajectory's sampled tokens (None: none sampled)."""
    sampled = [v for v in traj.response_versions if v >= 0]
    return min(sampled) if sampled else None


def staleness(trainer_version: int, trajs: Sequence[Trajectory], bound: int) -> list[int]:
    """Per trajectory with sampled tokens: ``trainer_version`` - its oldest token version.

    Raises:
        RuntimeError: a sample older than ``bound`` (the producer broke its contract).
    """
    out = []
    for traj in trajs:
        oldest = oldest_version(traj)
        if oldest is None:
            continue
        lag = trainer_version - oldest
        if not 0 <= lag <= bound:
            raise RuntimeError(
                f"episode {traj.key} was sampled by policy version {oldest}, {lag} steps from "
                f"the trained version {trainer_version}; rollout.max_staleness is {bound}"
            )
        out.append(lag)
    return out


def stamp_samples(samples: Sequence[Sample], trajs: Sequence[Trajectory]) -> None:
    """``Sample.version`` from the trajectory each sample was built from (same token ids)."""
    by_ids: dict[tuple[int, ...], int] = {}
    for t in trajs:
        oldest = oldest_version(t)
        key = tuple(t.prompt_ids + t.response_ids)
        if oldest is not None:  # two identical episodes: the older version counts
            by_ids[key] = min(oldest, by_ids.get(key, oldest))
    for sample in samples:
        sample.version = by_ids.get(tuple(sample.ids))


def behaviour_weight_metrics(samples: Sequence[Sample], cap: float) -> dict[str, float]:
    """Mean of the decoupled-PPO behaviour weights min(pi_prox / pi_behav, cap) over the
    trained tokens, and the share that hit the cap (needs ``old_logprobs``)."""
    total = capped = 0
    weight_sum = 0.0
    for s in samples:
        if s.old_logprobs is None or s.rollout_logprobs is None:
            continue
        for i, trained in enumerate(s.mask[1:]):
            if trained:
                w = math.exp(s.old_logprobs[i] - s.rollout_logprobs[i])
                weight_sum += min(w, cap)
                capped += w >= cap
                total += 1
    if not total:
        return {}
    return {"behaviour_weight_mean": weight_sum / total, "behaviour_weight_capped": capped / total}


@dataclass
class Produced(Generic[T]):
    """One step's rollouts as the producer made them."""

    step: int
    value: T  # what the produce function returned (the step's rollouts)
    sampler_state: dict[str, object]  # the prompt sampler after this step's draws
    started_version: int  # the policy version when the step's rollouts started
    seconds: float  # wall time of the step's rollouts


@dataclass
class _Busy:
    """When the producer was rolling out: closed intervals plus the open one."""

    closed: list[tuple[float, float]] = field(default_factory=list)
    since: float | None = None

    def overlap(self, start: float, end: float) -> float:
        spans = list(self.closed)
        if self.since is not None:
            spans.append((self.since, end))
        return sum(max(0.0, min(b, end) - max(a, start)) for a, b in spans)


class AsyncRollouts(Generic[T]):
    """The producer thread: rolls out steps ``first..last`` in order, at most
    ``max_staleness`` versions ahead of the trainer.

    ``produce(step)`` runs in the thread and returns the step's rollouts (it draws
    its prompts from ``sampler_state``'s sampler and samples with ``policy``);
    ``sampler_state()`` is read right after, so a checkpoint of step s saves the
    sampler as it was after step s's prompts, and a resumed run draws the prompts of
    the discarded in-flight steps again.
    """

    def __init__(
        self,
        produce: Callable[[int], T],
        sampler_state: Callable[[], dict[str, object]],
        policy: VersionedPolicy,
        *,
        first: int,
        last: int,
        max_staleness: int,
    ) -> None:
        if max_staleness < 1:
            raise ValueError("AsyncRollouts needs max_staleness >= 1 (0 is the synchronous loop)")
        self.produce, self.sampler_state, self.policy = produce, sampler_state, policy
        self.first, self.last, self.max_staleness = first, last, max_staleness
        self.published = first - 1  # the trainer's version: the weights after `first - 1` steps
        self._cond = threading.Condition()
        self._ready: dict[int, Produced[T]] = {}
        self._error: BaseException | None = None
        self._stopping = False
        self._busy = _Busy()
        self._thread = threading.Thread(target=self._run, name="spreadrl-rollouts", daemon=True)

    def start(self) -> AsyncRollouts[T]:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            for step in range(self.first, self.last + 1):
                with self._cond:
                    # step s trains version s - 1: start once version s - 1 - k is out
                    while not self._stopping and self.published < step - 1 - self.max_staleness:
                        self._cond.wait()
                    if self._stopping:
                        return
                    self._busy.since = time.perf_counter()
                version = self.policy.refresh()
                t0 = time.perf_counter()
                value = self.produce(step)
                produced = Produced(
                    step, value, self.sampler_state(), version, time.perf_counter() - t0
                )
                with self._cond:
                    self._busy.closed.append((self._busy.since or t0, time.perf_counter()))
                    self._busy.since = None
                    self._ready[step] = produced
                    self._cond.notify_all()
        except ProducerStopped:
            pass
        except BaseException as exc:  # handed to the trainer's thread by take()
            with self._cond:
                self._error = exc
                self._cond.notify_all()
        finally:
            with self._cond:
                if self._busy.since is not None:
                    self._busy.closed.append((self._busy.since, time.perf_counter()))
                    self._busy.since = None

    def take(self, step: int) -> Produced[T]:
        """Step ``step``'s rollouts, waiting for them; the producer's error, if it failed."""
        with self._cond:
            while step not in self._ready and self._error is None:
                self._cond.wait()
            if step in self._ready:
                return self._ready.pop(step)
            raise RuntimeError(f"the rollout producer failed: {self._error}") from self._error

    def publish(self, version: int, payload: object) -> None:
        """The trainer's weights after ``version`` steps: the producer's policy loads them
        before its next generation call, and steps up to ``version + 1 + k`` may start."""
        self.policy.publish(version, payload)
        with self._cond:
            self.published = version
            self._cond.notify_all()

    def overlap_s(self, start: float, end: float) -> float:
        """Seconds of [start, end] (perf_counter) during which the producer was rolling out."""
        with self._cond:
            return self._busy.overlap(start, end)

    def stop(self, timeout: float | None = None) -> None:
        """Stop the producer: its current generation call ends its rollouts (vLLM requests
        are aborted), the steps not yet taken are discarded."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self.policy.stop()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._ready.clear()
        self.policy.drop_pending()
