"""A GRPO step's rollouts: draw prompts, roll out groups, score them, keep the useful ones.

``collect_rollouts`` runs ``rollout.prompts_per_step`` groups of
``rollout.group_size`` episodes, shapes each episode's reward (``reward``),
computes group-relative advantages and, under dynamic sampling (``sampling``),
marks or refills the groups whose rewards are all equal. A group with a crashed
episode (:attr:`~spreadrl.rollout.types.Trajectory.crashed`: a tool, worker or
engine failed) is never kept, whatever the sampling mode: its reward measured
the failure, and the advantages of its other episodes were taken against it.
``to_samples`` turns the kept groups into training samples, token ids exactly
as sampled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from spreadrl.data.task import TaskSet
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.policy import Policy
from spreadrl.rollout.runner import (
    EnvPoolLike,
    EpisodeJob,
    EpisodeRunner,
    RunValues,
    run_episodes,
)
from spreadrl.rollout.types import EndReason, Trajectory
from spreadrl.train.advantages import group_advantages, nonconstant_groups
from spreadrl.train.batching import Sample
from spreadrl.train.config import DynamicSamplingConfig, RewardConfig
from spreadrl.train.distributed import DistInfo, rank_slice
from spreadrl.train.rewards import shape_reward
from spreadrl.train.sampler import EpochShuffle
from spreadrl.train.step_source import StepRollouts


def score_groups(
    trajs: list[Trajectory], group_size: int, reward: RewardConfig, max_response_tokens: int
) -> tuple[torch.Tensor, list[dict[str, float]]]:
    """Shaped rewards as a [num_groups, G] tensor, plus each trajectory's breakdown."""
    values, breakdowns = [], []
    for t in trajs:
        value, terms = shape_reward(
            reward, t.passed, t.tool_calls, len(t.response_ids), max_length=max_response_tokens
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


@dataclass(frozen=True)
class Collector:
    """:func:`collect_rollouts` bound to a run's prompts, environments and sections: what a
    rollout source calls once per step (in the producer's thread in asynchronous mode)."""

    pool: EnvPoolLike
    chat: EpisodeChat  # built once per run: every step's episode sets share it
    tasks: TaskSet
    sampler: EpochShuffle[tuple[str, int]]
    rollout: RolloutConfig
    sampling: DynamicSamplingConfig
    reward: RewardConfig
    max_prompt_tokens: int
    seed: int
    info: DistInfo
    # the episode runner: the built-in loop, or a harness's (spreadrl.rollout.harness)
    episodes: EpisodeRunner = field(default=run_episodes)

    def __call__(self, policy: Policy, step: int) -> StepRollouts:
        """Step ``step``'s rollouts by ``policy`` (its episodes seeded from ``seed + step``)."""
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
            episodes=self.episodes,
        )


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
