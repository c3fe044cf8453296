"""GRPO's episode side: what a run samples from, and a step's rollouts and held-out eval.

:class:`EpisodeSide` holds the tasks and their prompt order, the rollout engine
(built by name in the start-up checks, before any model loads:
:func:`spreadrl.train.checks.training_engine`), the environments and the chat format.

- A step's rollouts (:meth:`EpisodeSide.collect`, :func:`collect_rollouts`):
  ``rollout.prompts_per_step`` groups of ``rollout.group_size`` episodes, each
  episode's reward shaped (``reward``), group-relative advantages, and under dynamic
  sampling (``sampling``) the groups whose rewards are all equal marked or refilled.
  A group with a crashed episode (:attr:`~spreadrl.rollout.types.Trajectory.crashed`:
  a tool, worker or engine failed) is never kept, whatever the sampling mode: its
  reward measured the failure, and the advantages of its other episodes were taken
  against it. :func:`to_samples` turns the kept groups into training samples, token
  ids exactly as sampled.
- The held-out eval (:meth:`EpisodeSide.held_out`), every ``eval.every_steps`` steps:
  as nanochat's RL script does, the policy is scored on tasks it does not train on
  while it trains, so a run shows whether the training reward carries over. Episodes
  are sampled at ``eval.temperature`` (the training temperature when unset; pass@1 as
  the demo measures it) through the same environments and budgets as the rollouts;
  the figures go to ``metrics.jsonl`` as ``eval/*``. Kept small on purpose
  (``eval.max_cases``): a full evaluation is ``spreadrl eval``'s job.
- :func:`generating` is where a rollout phase runs: an engine with weights of its own
  (``colocated``) gets the trainer's current weights and sleeps again afterwards, so
  the update has the GPU; an engine that samples with the trainer's own model gets it
  gathered (FSDP) and in the compute dtype. Nothing here asks which engine it is.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from spreadrl.data.sources import resolve_tasks
from spreadrl.data.task import TaskSet
from spreadrl.env.config import EnvConfig
from spreadrl.env.factory import make_env_pool
from spreadrl.eval.config import EvalConfig, eval_rollout
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engine import RolloutEngine
from spreadrl.rollout.harness import episode_runner
from spreadrl.rollout.policy import Policy
from spreadrl.rollout.runner import (
    EnvPoolLike,
    EpisodeJob,
    EpisodeRunner,
    run_episodes,
)
from spreadrl.rollout.types import EndReason, RunValues, Trajectory
from spreadrl.train.batching import Sample
from spreadrl.train.config import DataConfig, DynamicSamplingConfig, RewardConfig
from spreadrl.train.distributed import DistInfo, all_reduce, gathered_params, rank_slice
from spreadrl.train.logprobs import compute_context
from spreadrl.train.rewards import (
    StepRollouts,
    group_advantages,
    nonconstant_groups,
    shape_reward,
)
from spreadrl.train.sampler import EpochShuffle, prompt_order
from spreadrl.train.setup import Run

log = logging.getLogger(__name__)


def score_groups(
    trajs: list[Trajectory], group_size: int, reward: RewardConfig, max_response_tokens: int
) -> tuple[torch.Tensor, list[dict[str, float]]]:
    """Shaped rewards as a [num_groups, G] tensor, plus each trajectory's breakdown."""
    values, breakdowns = [], []
    for t in trajs:
        value, terms = shape_reward(
            reward,
            t.passed,
            t.tool_calls,
            len(t.response_ids),
            max_length=max_response_tokens,
            env_reward=t.env_reward,
        )
        t.reward = value
        values.append(value)
        breakdowns.append(terms)
    return torch.tensor(values, dtype=torch.float32).view(-1, group_size), breakdowns


def collect_rollouts(
    policy: Policy,
    pool: EnvPoolLike,
    chat: EpisodeChat,
    tasks: TaskSet,
    sampler: EpochShuffle[tuple[str, int]],
    rollout: RolloutConfig,
    sampling: DynamicSamplingConfig,
    reward: RewardConfig,
    *,
    max_prompt_tokens: int,
    seed: int,
    info: DistInfo | None = None,
    episodes: EpisodeRunner = run_episodes,
) -> StepRollouts:
    """Roll out prompts_per_step groups; with dynamic sampling "refill", keep sampling
    until enough groups carry signal (or the refill rounds run out).

    Under data parallelism every rank draws the same prompts and rolls out its
    own slice, whole groups at a time, so advantages need no communication.
    Refill rounds stop on a per-rank count, which keeps ranks independent."""
    G = rollout.group_size
    info = info or DistInfo()
    want = rollout.prompts_per_step // info.world_size  # divisible: check_world_size
    trajs: list[Trajectory] = []
    rewards_list: list[torch.Tensor] = []
    crashed_list: list[torch.Tensor] = []
    terms: list[dict[str, float]] = []
    metrics: dict[str, float] = {}
    rounds = 0
    while True:
        count = want if rounds == 0 else want - _useful(rewards_list, crashed_list)
        prompts = rank_slice(sampler.next(count * info.world_size), info)
        # a step may draw the same task twice (small sets, epoch boundaries): sample
        # numbers stay unique so every episode has its own id in the pool. They count
        # prompts over all ranks (rank_slice is strided), so an episode keeps its id,
        # and with it its sampling seed, whatever the world size.
        jobs = [
            EpisodeJob(tasks.get(tid), case, (i * info.world_size + info.rank) * G + g)
            for i, (tid, case) in enumerate(prompts)
            for g in range(G)
        ]
        run = RunValues(seed=seed * 1000 + rounds, max_prompt_tokens=max_prompt_tokens)
        batch = episodes(policy, pool, jobs, rollout, chat, run=run)
        for k, v in batch.timings.items():
            metrics[k] = metrics.get(k, 0.0) + v
        rewards, batch_terms = score_groups(
            batch.trajectories, G, reward, rollout.max_response_tokens
        )
        trajs += batch.trajectories
        rewards_list.append(rewards)
        crashed_list.append(crashed_groups(batch.trajectories, G))
        terms += batch_terms
        rounds += 1
        if (
            sampling.mode != "refill"
            or _useful(rewards_list, crashed_list) >= want
            or rounds > sampling.max_refill_rounds
        ):
            break
    all_rewards = torch.cat(rewards_list)
    keep = (
        nonconstant_groups(all_rewards)
        if sampling.mode in ("drop", "refill")
        else torch.ones(len(all_rewards), dtype=torch.bool)
    ) & ~torch.cat(crashed_list)
    advantages = group_advantages(all_rewards)
    metrics["refill_rounds"] = float(rounds - 1)  # extra rollout rounds
    return StepRollouts(trajs, advantages, keep, terms, metrics)


def crashed_groups(trajs: list[Trajectory], group_size: int) -> torch.Tensor:
    """bool [groups]: the groups holding a crashed episode (never trained on)."""
    crashed = torch.tensor([t.crashed for t in trajs], dtype=torch.bool)
    return crashed.view(-1, group_size).any(dim=1)


def _useful(rewards_list: list[torch.Tensor], crashed_list: list[torch.Tensor]) -> int:
    """Groups so far that carry signal and did not crash (what refilling counts)."""
    return int(
        sum(
            int((nonconstant_groups(r) & ~c).sum())
            for r, c in zip(rewards_list, crashed_list, strict=True)
        )
    )


def to_samples(
    trajs: list[Trajectory], advantages: torch.Tensor, keep_groups: torch.Tensor, group_size: int
) -> list[Sample]:
    """Training samples of the kept groups, token ids exactly as sampled."""
    samples = []
    flat = advantages.view(-1).tolist()
    for i, t in enumerate(trajs):
        if (
            not bool(keep_groups[i // group_size])
            or not any(t.response_mask)
            or t.stop_reason == EndReason.PROMPT_TOO_LONG
            or t.crashed  # its group is not kept either (collect_rollouts)
        ):
            continue
        ids = t.prompt_ids + t.response_ids
        mask = [0] * len(t.prompt_ids) + t.response_mask
        rollout_lp = [0.0] * (len(t.prompt_ids) - 1) + t.rollout_logprobs
        samples.append(
            Sample(
                ids=ids,
                mask=mask,
                advantage=flat[i],
                rollout_logprobs=rollout_lp,
                group=i // group_size,
            )
        )
        # a harness episode whose prompts broke the prefix: its other samples, same advantage
        for extra in t.metadata.get("harness_samples", ()):
            prompt = extra["prompt_ids"]
            samples.append(
                Sample(
                    ids=prompt + extra["response_ids"],
                    mask=[0] * len(prompt) + extra["response_mask"],
                    advantage=flat[i],
                    rollout_logprobs=[0.0] * (len(prompt) - 1) + extra["rollout_logprobs"],
                    group=i // group_size,
                )
            )
    return samples


def eval_due(evaluation: EvalConfig, step: int, last: int) -> bool:
    """Whether the held-out eval runs after ``step`` (every N steps, and after ``last``)."""
    every = evaluation.every_steps
    return every > 0 and (step % every == 0 or step == last)


def held_out_tasks(evaluation: EvalConfig, *, given: TaskSet | None) -> TaskSet | None:
    """The held-out set: ``given``, else ``eval.tasks`` when an eval is due at all."""
    if evaluation.every_steps and given is None:
        return resolve_tasks(evaluation.tasks)
    return given


def held_out_jobs(tasks: TaskSet, evaluation: EvalConfig) -> list[EpisodeJob]:
    """The first ``eval.max_cases`` cases of the held-out set, ``eval.samples`` each."""
    episodes = tasks.episodes()
    if evaluation.max_cases:
        episodes = episodes[: evaluation.max_cases]
    return [
        EpisodeJob(task, case, sample)
        for task, case in episodes
        for sample in range(evaluation.samples)
    ]


@contextlib.contextmanager
def generating(model: nn.Module, engine: RolloutEngine, compute_dtype: str) -> Iterator[None]:
    """Where a rollout phase runs: the engine awake with the current weights, or the
    trainer's model gathered and in its compute dtype.

    An engine that samples with the trainer's model needs it gathered (ranks run
    different numbers of forwards); a colocated engine has its own copy, so nothing
    is gathered, and it sleeps again afterwards to give the GPU back to the update.
    """
    engine.sync(model)
    own = not engine.colocated
    with (
        gathered_params(model, enabled=own),
        compute_context(model, compute_dtype if own else "float32"),
    ):
        yield
    engine.sleep()


@dataclass
class EpisodeSide:
    """What a GRPO run samples from and how: its tasks and prompt order, the rollout engine,
    the environments, the chat format, a step's rollouts (:meth:`collect`) and the held-out
    evaluation (:meth:`held_out`).

    The sections are those it reads: ``rollout`` (group size, prompts, budgets),
    ``sampling`` (dynamic sampling), ``reward`` (shaping), ``evaluation`` (the held-out
    set's cadence and sampling; ``eval_tasks`` None: no held-out eval). ``steps`` is the
    run's last step, after which an eval always runs; ``runner`` runs a set of episodes:
    the built-in loop, or a harness's (:mod:`spreadrl.rollout.harness`)."""

    tasks: TaskSet
    sampler: EpochShuffle[tuple[str, int]]
    engine: RolloutEngine
    pool: EnvPoolLike
    chat: EpisodeChat  # built once per run: every step's episode sets share it
    rollout: RolloutConfig
    sampling: DynamicSamplingConfig
    reward: RewardConfig
    evaluation: EvalConfig
    eval_tasks: TaskSet | None
    steps: int
    seed: int
    max_prompt_tokens: int
    info: DistInfo
    runner: EpisodeRunner = field(default=run_episodes)

    @classmethod
    def build(
        cls,
        engine: RolloutEngine,
        model: nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        owned: ExitStack,
        *,
        data: DataConfig,
        env: EnvConfig,
        rollout: RolloutConfig,
        sampling: DynamicSamplingConfig,
        reward: RewardConfig,
        evaluation: EvalConfig,
        steps: int,
        seed: int,
        run: Run,
        sampler_state: dict[str, object] | None,
        pool: EnvPoolLike | None,
        tasks: TaskSet | None,
        eval_tasks: TaskSet | None,
        keep_traces: bool = False,
    ) -> EpisodeSide:
        """Built in order: the held-out tasks, the tasks, the prompt order (from
        ``sampler_state`` when resuming), the engine started around ``model``, the
        environments (a pool built here is ``owned``), the chat format; ``keep_traces``
        (``logging.harness_traces``): a harness keeps each episode's TrainingTrace."""
        eval_tasks = held_out_tasks(evaluation, given=eval_tasks)
        tasks = tasks if tasks is not None else resolve_tasks(data.train_tasks)
        sampler = prompt_order(tasks.episode_keys(), seed=seed, state=sampler_state)
        for line in engine.start(model, tokenizer):  # its policy, built around the model
            log.info(line)  # e.g. the engine's KV-cache capacity
            if run.info.is_main:
                run.reporter.line(line)
        if pool is None:
            pool = owned.enter_context(make_env_pool(env, workers=rollout.concurrency))
        return cls(
            tasks=tasks,
            sampler=sampler,
            engine=engine,
            pool=pool,
            chat=EpisodeChat.of(tokenizer),  # the format read off the chat template once
            rollout=rollout,
            sampling=sampling,
            reward=reward,
            evaluation=evaluation,
            eval_tasks=eval_tasks,
            steps=steps,
            seed=seed,
            max_prompt_tokens=data.max_prompt_tokens,
            info=run.info,
            # traces, a harness, or the built-in loop
            runner=episode_runner(rollout, env, keep_traces=keep_traces),
        )

    def collect(self, policy: Policy, step: int) -> StepRollouts:
        """Step ``step``'s rollouts by ``policy`` (its episodes seeded from ``seed + step``);
        a source calls it once per step (in the producer's thread in asynchronous mode)."""
        return collect_rollouts(
            policy,
            self.pool,
            self.chat,
            self.tasks,
            self.sampler,
            self.rollout,
            self.sampling,
            self.reward,
            max_prompt_tokens=self.max_prompt_tokens,
            seed=self.seed + step,
            info=self.info,
            episodes=self.runner,
        )

    def generating(self, model: nn.Module, compute_dtype: str) -> AbstractContextManager[None]:
        """A rollout phase of the engine with ``model``'s weights (:func:`generating`)."""
        return generating(model, self.engine, compute_dtype)

    def held_out(
        self, step: int, engine: RolloutEngine, model: nn.Module, compute_dtype: str
    ) -> dict[str, float]:
        """:meth:`run_held_out` with ``engine`` after ``step`` when one is due, else nothing."""
        if self.eval_tasks is None or not eval_due(self.evaluation, step, self.steps):
            return {}
        return self.run_held_out(self.eval_tasks, step, engine, model, compute_dtype)

    def run_held_out(
        self,
        tasks: TaskSet,
        step: int,
        engine: RolloutEngine,
        model: nn.Module,
        compute_dtype: str,
    ) -> dict[str, float]:
        """Run the held-out episodes with ``model``'s current weights (in ``compute_dtype``
        when the engine samples with it); return ``eval/*`` metrics.

        Episodes run through the rollouts' pool, chat format, ``rollout`` budgets and
        prompt budget. Under data parallelism each rank runs its share and the sums are
        reduced, so every rank returns the same figures."""
        start = time.perf_counter()
        jobs = rank_slice(held_out_jobs(tasks, self.evaluation), self.info)
        run = RunValues(seed=self.seed * 7919 + step, max_prompt_tokens=self.max_prompt_tokens)
        # the engine gets the update's weights
        with generating(model, engine, compute_dtype):
            sampling = eval_rollout(self.evaluation, self.rollout)
            # a harness plays its held-out episodes too; traces have no episodes to play
            runner = run_episodes if self.rollout.traces else self.runner
            batch = runner(engine.policy, self.pool, jobs, sampling, self.chat, run=run)
        trajs = batch.trajectories
        sums = [
            float(len(trajs)),
            float(sum(t.passed for t in trajs)),
            float(sum(t.env_reward for t in trajs)),
            float(sum(t.generated_tokens for t in trajs)),
            float(sum(t.turns for t in trajs)),
        ]
        if self.info.enabled:
            sums = [all_reduce(value) for value in sums]
        n = max(sums[0], 1.0)
        return {
            "eval/episodes": sums[0],
            "eval/pass@1": sums[1] / n,
            "eval/env_reward": sums[2] / n,
            "eval/generated_tokens": sums[3] / n,
            "eval/turns": sums[4] / n,
            "eval_s": time.perf_counter() - start,
        }
