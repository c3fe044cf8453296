"""The GRPO(-TCR) recipe, readable top to bottom.

One step: sample prompts -> G rollouts each through the policy and the gym ->
shape rewards (outcome, tool-call reward, overlong) -> group advantages ->
drop or refill constant groups -> PPO-style update (clip-higher, dual clip,
token-mean, optional k3 KL, TIS) -> log, checkpoint. ``train_grpo`` is the
whole loop; everything it calls is a small function of its own.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spreadrl.data.task import TaskSet
from spreadrl.errors import ConfigError
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.hf_policy import HFPolicy
from spreadrl.rollout.policy import Policy
from spreadrl.rollout.runner import EnvPoolLike, EpisodeJob, RunValues, run_episodes
from spreadrl.rollout.types import Trajectory
from spreadrl.train.async_steps import AsyncSteps, check_async, decoupled, start_async
from spreadrl.train.batching import MIN_SHARED_PREFIX, Sample
from spreadrl.train.config import GRPOConfig, RewardConfig
from spreadrl.train.distributed import (
    DistInfo,
    all_reduce,
    check_world_size,
    gathered_params,
    rank_slice,
)
from spreadrl.train.held_out import eval_due, held_out_eval
from spreadrl.train.memory import PeakMemory, release_for_generation
from spreadrl.train.reference import Reference, build_reference
from spreadrl.train.sampler import EpochShuffle
from spreadrl.train.trajectory_log import save_step_trajectories
from spreadrl.train.update import UpdateSettings, compute_logprobs, policy_update

if TYPE_CHECKING:
    import torch
    from rich.console import Console

log = logging.getLogger(__name__)


def rollout_run(cfg: GRPOConfig, seed: int) -> RunValues:
    """What a rollout round runs with beside ``cfg.rollout``: its seed and the prompt budget."""
    return RunValues(seed=seed, max_prompt_tokens=cfg.data.max_prompt_tokens)


def update_settings(cfg: GRPOConfig, compute_dtype: str = "float32") -> UpdateSettings:
    """The update's settings; ``compute_dtype`` from :func:`spreadrl.train.precision.compute_dtype`."""
    loss, optim = cfg.loss, cfg.optim
    return UpdateSettings(
        clip_low=loss.clip_low,
        clip_high=loss.clip_high,
        dual_clip_c=loss.dual_clip_c,
        aggregation=loss.aggregation,
        kl_coef=loss.kl_coef,
        kl_estimator=loss.kl_estimator,
        kl_clamp=loss.kl_clamp,
        tis=loss.tis,
        tis_cap=loss.tis_cap,
        entropy_coef=loss.entropy_coef,
        temperature=cfg.rollout.temperature if cfg.rollout.temperature > 0 else 1.0,
        top_k=cfg.rollout.top_k if cfg.rollout.temperature > 0 else 0,
        top_p=cfg.rollout.top_p if cfg.rollout.temperature > 0 else 1.0,
        micro_batch_tokens=optim.micro_batch_tokens,
        mini_batch_size=optim.mini_batch_size,
        shared_prefix_min=MIN_SHARED_PREFIX if optim.shared_prefix else 0,
        ppo_epochs=optim.ppo_epochs,
        grad_clip=optim.grad_clip,
        compute_dtype=compute_dtype,
    )


def score_groups(
    trajs: list[Trajectory], group_size: int, reward_cfg: RewardConfig
) -> tuple[Any, list[dict[str, float]]]:
    """Shaped rewards as a [num_groups, G] tensor, plus each trajectory's breakdown."""
    import torch

    from spreadrl.train.rewards import shape_reward

    values, breakdowns = [], []
    for t in trajs:
        reward, parts = shape_reward(reward_cfg, t.passed, t.tool_calls, len(t.response_ids))
        t.reward = reward
        values.append(reward)
        breakdowns.append(parts)
    return torch.tensor(values, dtype=torch.float32).view(-1, group_size), breakdowns


def to_samples(
    trajs: list[Trajectory], advantages: Any, keep_groups: Any, group_size: int
) -> list[Sample]:
    """Training samples of the kept groups, token ids exactly as sampled."""
    samples = []
    flat = advantages.view(-1).tolist()
    for i, t in enumerate(trajs):
        if (
            not bool(keep_groups[i // group_size])
            or not any(t.response_mask)
            or t.stop_reason == "prompt_too_long"
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
    return samples


def collect_rollouts(
    policy: Policy,
    pool: EnvPoolLike,
    tokenizer: Any,
    tasks: TaskSet,
    sampler: EpochShuffle[tuple[str, int]],
    cfg: GRPOConfig,
    seed: int,
    info: DistInfo | None = None,
) -> tuple[list[Trajectory], Any, Any, list[dict[str, float]], dict[str, float]]:
    """Roll out prompts_per_step groups; with dynamic sampling "refill", keep sampling
    until enough groups carry signal (or the refill rounds run out).

    Under data parallelism every rank draws the same prompts and rolls out its
    own slice, whole groups at a time, so advantages need no communication.
    Refill rounds stop on a per-rank count, which keeps ranks independent."""
    import torch

    from spreadrl.train.advantages import group_advantages, nonconstant_groups

    G = cfg.rollout.group_size
    chat = EpisodeChat.of(tokenizer)  # the step's episode sets share one chat format
    info = info or DistInfo()
    want = cfg.rollout.prompts_per_step // info.world_size  # divisible: check_world_size
    mode = cfg.sampling.mode
    trajs: list[Trajectory] = []
    rewards_list, parts_all = [], []
    reward_cfg = cfg.reward
    if reward_cfg.overlong and not reward_cfg.overlong_max_length:
        reward_cfg = replace(reward_cfg, overlong_max_length=cfg.rollout.max_response_tokens)
    timings: dict[str, float] = {}
    rounds = 0
    while True:
        count = want if rounds == 0 else want - _useful(rewards_list)
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
        run = rollout_run(cfg, seed * 1000 + rounds)
        batch = run_episodes(policy, pool, jobs, cfg.rollout, chat, run=run)
        for k, v in batch.timings.items():
            timings[k] = timings.get(k, 0.0) + v
        rewards, parts = score_groups(batch.trajectories, G, reward_cfg)
        trajs += batch.trajectories
        rewards_list.append(rewards)
        parts_all += parts
        rounds += 1
        if (
            mode != "refill"
            or _useful(rewards_list) >= want
            or rounds > cfg.sampling.max_refill_rounds
        ):
            break
    rewards = torch.cat(rewards_list)
    keep = (
        nonconstant_groups(rewards)
        if mode in ("drop", "refill")
        else torch.ones(len(rewards), dtype=torch.bool)
    )
    advantages = group_advantages(rewards)
    timings["refill_rounds"] = float(rounds - 1)  # extra rollout rounds (a metric, not a time)
    return trajs, advantages, keep, parts_all, timings


def _useful(rewards_list: list[Any]) -> int:
    from spreadrl.train.advantages import nonconstant_groups

    return int(sum(int(nonconstant_groups(r).sum()) for r in rewards_list))


def step_metrics(
    trajs: list[Trajectory], parts: list[dict[str, float]], keep: Any
) -> dict[str, float]:
    n = max(len(trajs), 1)
    out = {
        "reward_mean": sum(t.reward for t in trajs) / n,
        "pass_rate": sum(t.passed for t in trajs) / n,
        "response_tokens": sum(len(t.response_ids) for t in trajs) / n,
        "generated_tokens": sum(t.generated_tokens for t in trajs) / n,
        "tool_calls": sum(t.tool_calls for t in trajs) / n,
        "parse_errors": sum(t.parse_errors for t in trajs) / n,
        "prompt_too_long": float(sum(t.stop_reason == "prompt_too_long" for t in trajs)),
        "groups_kept": float(keep.sum()),
        "groups": float(len(keep)),
    }
    for key in {k for p in parts for k in p}:
        out[f"reward/{key}"] = sum(p.get(key, 0.0) for p in parts) / n
    return out


def reference_logprobs(
    ref: Reference, samples: list[Sample], pad_id: int, us: UpdateSettings
) -> list[list[float]]:
    with ref.active() as module:
        return compute_logprobs(
            module,
            samples,
            pad_id=pad_id,
            micro_batch_tokens=us.micro_batch_tokens,
            temperature=us.temperature,
            top_k=us.top_k,
            top_p=us.top_p,
            shared_prefix_min=us.shared_prefix_min,
            compute_dtype=us.compute_dtype,
        )


# step metrics that are means over the step's trajectories, counts that add up over
# ranks, and means over the update's micro-batches (present on ranks that trained)
_PER_TRAJECTORY = (
    "reward_mean",
    "pass_rate",
    "response_tokens",
    "generated_tokens",
    "tool_calls",
    "parse_errors",
)
_COUNTS = ("groups", "groups_kept", "trained_sequences", "prompt_too_long", "tokens_per_s")
_UPDATE = (
    "loss",
    "kl",
    "entropy",
    "clip_frac_low",
    "clip_frac_high",
    "approx_kl",
    "ratio_mean",
)


def reduce_over_ranks(metrics: dict[str, float], trajectories: int) -> dict[str, float]:
    """The step's metrics over all ranks, so rank 0 logs the whole step, not its share.

    Trajectory means are weighted by each rank's trajectory count (refill rounds can
    differ between ranks), counts are summed, the update's figures are averaged over
    the ranks that trained (a mean of micro-batch means, not the single-process
    figure), refill rounds and peak memory are the most of any rank; grad_norm is
    already global under FSDP and timings stay rank 0's. Every rank reduces the same
    keys in the same order (a key missing on one rank must not hang the others)."""
    out = dict(metrics)
    reward_keys = sorted(k for k in metrics if k.startswith("reward/"))
    total = all_reduce(float(trajectories))
    for key in (*_PER_TRAJECTORY, *reward_keys):
        out[key] = all_reduce(metrics.get(key, 0.0) * trajectories) / max(total, 1.0)
    for key in _COUNTS:
        out[key] = all_reduce(metrics.get(key, 0.0))
    for key in _UPDATE:
        count = all_reduce(float(key in metrics))
        value = all_reduce(metrics.get(key, 0.0))
        if count:
            out[key] = value / count
    for key in ("refill_rounds", "rollout_peak_gb", "train_peak_gb"):  # set on every rank
        if key in metrics:
            out[key] = all_reduce(metrics[key], op="max")
    return out


def train_grpo(
    cfg: GRPOConfig,
    *,
    console: Console | None = None,
    pool: EnvPoolLike | None = None,
    tasks: TaskSet | None = None,
    eval_tasks: TaskSet | None = None,
) -> Path:
    """Run GRPO per ``cfg`` (a spreadrl.train.config.GRPOConfig); return the final model folder.

    ``pool`` and ``tasks`` default to what the config names; pass them to reuse
    an environment pool or to train on tasks built in code; ``eval_tasks`` the
    held-out set of ``eval.every_steps`` (default: ``eval.tasks``).

    Raises:
        RunStopped: SIGINT or SIGTERM (on any rank) stopped the run after a whole
            step, saved as a checkpoint that the same command resumes from
            (see :class:`spreadrl.train.setup.StopSignals`).
    """
    from rich.console import Console

    from spreadrl.data.sources import resolve_tasks
    from spreadrl.env.factory import make_env_pool
    from spreadrl.train.distributed import shard_model
    from spreadrl.train.precision import compute_context, compute_dtype
    from spreadrl.train.setup import Run, StopSignals, build_optimizer, build_scheduler

    console = console or Console()
    run = Run(cfg, console, seed_per_rank=True)
    info = run.info
    try:
        check_world_size(cfg, info)
    except ConfigError:
        run.close()  # every rank refuses alike: leave the process group together
        raise
    check_rollout_backend(cfg, info)
    if cfg.rollout.max_staleness:
        check_async(cfg, info, _weight_sync(cfg))
    model, tokenizer = run.build_model()
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    compute = compute_dtype(cfg.model.dtype, info.device)  # fp32 master weights, bf16 compute
    ref = build_reference(run.reference_source(model), cfg, dtype=compute)
    shard_model(model, info, compute_dtype=compute)
    if ref is not None and ref.separate:
        shard_model(ref.model, info, compute_dtype=compute)
    optimizer = build_optimizer(model, cfg.optim)
    us = update_settings(cfg, compute)
    updates_per_step = us.ppo_epochs * max(1, _minibatches(cfg))
    scheduler = build_scheduler(optimizer, cfg.optim, cfg.steps * updates_per_step)
    tasks = tasks if tasks is not None else resolve_tasks(cfg.data.train_tasks)
    sampler = EpochShuffle([(t.id, c) for t, c in tasks.episodes()], seed=cfg.seed)
    state = run.resume(model, optimizer, scheduler)
    start = state["step"] if state else 0
    if state:
        sampler.load(state["extra"]["sampler"])
    policy, colocated = build_rollout_policy(cfg, model, tokenizer, info, console)
    ckpt_args = (model, tokenizer, optimizer, scheduler)
    own_pool = pool is None
    pool = pool or make_env_pool(cfg.env, workers=cfg.rollout.concurrency).__enter__()
    if cfg.eval.every_steps and eval_tasks is None:
        eval_tasks = resolve_tasks(cfg.eval.tasks)
    memory = PeakMemory(info.device)  # peak of the rollout, and of the log-prob passes + update
    # SIGINT / SIGTERM: every rank stops after the same step, then saves it
    signals = StopSignals(info.rank if info.enabled else None)
    signals.install()
    steps_async: AsyncSteps | None = None
    try:
        if cfg.rollout.max_staleness:  # rollouts of the next steps overlap the update
            steps_async = start_async(
                cfg,
                model,
                tokenizer,
                policy if colocated is not None else None,
                lambda p, s: collect_rollouts(
                    p, pool, tokenizer, tasks, sampler, cfg, cfg.seed + s
                ),
                sampler.state,
                start=start,
                compute=compute,
            )
            if colocated is not None:  # the engine is the producer's alone: the in-loop
                batch = cfg.rollout.group_size * cfg.rollout.prompts_per_step  # eval uses hf
                policy, colocated = HFPolicy(model, tokenizer, max_batch_size=batch), None
        for step in range(start + 1, cfg.steps + 1):
            t_step = time.perf_counter()
            sampler_state = None  # the synchronous loop saves the sampler itself
            if steps_async is None:
                # gradients freed, shards only, allocator cache emptied: then the engine wakes
                release_for_generation(model, optimizer, info.device)
                memory.reset()
                if colocated is not None:
                    colocated.before_rollouts(model)
                # the hf backend samples with the trainer's model (gathered: ranks run different
                # numbers of forwards); a colocated engine has its own copy, so nothing is gathered
                own = colocated is None
                with (
                    gathered_params(model, enabled=own),
                    compute_context(model, compute if own else "float32"),
                ):
                    trajs, advantages, keep, parts, timings = collect_rollouts(
                        policy, pool, tokenizer, tasks, sampler, cfg, cfg.seed + step, info
                    )
                if colocated is not None:
                    colocated.after_rollouts()
            else:
                t0 = time.perf_counter()
                produced = steps_async.take(step)
                trajs, advantages, keep, parts, timings = produced.value
                timings["wait_s"] = time.perf_counter() - t0  # the trainer idle, waiting
                timings["rollout_s"] = produced.seconds
                sampler_state = produced.sampler_state  # after this step's draws, not later
            samples = to_samples(trajs, advantages, keep, cfg.rollout.group_size)
            timings["rollout_peak_gb"] = memory.peak_gb() or 0.0
            memory.reset()
            t0 = t_train = time.perf_counter()
            with gathered_params(model):  # every rank enters: gathering is a collective
                # the proximal policy (decoupled PPO in asynchronous mode too): with one
                # epoch of one mini-batch it is the weights of the single update, whose
                # detached log-probs policy_update uses, so this pass would only repeat them
                if samples and (us.ppo_epochs > 1 or _minibatches(cfg) > 1):
                    old = compute_logprobs(
                        model,
                        samples,
                        pad_id=pad_id,
                        micro_batch_tokens=us.micro_batch_tokens,
                        temperature=us.temperature,
                        top_k=us.top_k,
                        top_p=us.top_p,
                        shared_prefix_min=us.shared_prefix_min,
                        compute_dtype=compute,
                    )
                    for sample, lp in zip(samples, old, strict=True):
                        sample.old_logprobs = lp
            # every rank enters the reference pass, even with no samples (dynamic sampling
            # can keep none on one rank): gathering a sharded reference is a collective
            if ref is not None:
                for sample, lp in zip(
                    samples, reference_logprobs(ref, samples, pad_id, us), strict=True
                ):
                    sample.ref_logprobs = lp
            timings["logprobs_s"] = time.perf_counter() - t0
            if steps_async is not None:
                timings.update(steps_async.bookkeeping(step, trajs, samples))
            t0 = time.perf_counter()
            update = policy_update(
                model,
                optimizer,
                samples,
                us if steps_async is None else decoupled(us),
                pad_id=pad_id,
                scheduler=scheduler,
                seed=cfg.seed + step,
                world_size=info.world_size,
            )
            catch_up_schedule(scheduler, step * updates_per_step)
            timings["update_s"] = time.perf_counter() - t0
            timings["train_peak_gb"] = memory.peak_gb() or 0.0
            if steps_async is not None:
                timings["overlap"] = steps_async.overlap(t_train, time.perf_counter())
                steps_async.publish(step, model)  # a step boundary: the producer's next sync
            # the held-out eval may wake the engine before the next step does
            release_for_generation(model, optimizer, info.device)
            metrics = {
                **step_metrics(trajs, parts, keep),
                **update,
                **timings,
                "step_s": time.perf_counter() - t_step,
                "lr": scheduler.get_last_lr()[0],
                "trained_sequences": len(samples),
                "trained_tokens": sum(len(s.ids) for s in samples),
            }
            metrics["tokens_per_s"] = sum(len(t.response_ids) for t in trajs) / max(
                metrics["step_s"], 1e-9
            )
            if eval_tasks is not None and eval_due(cfg, step):
                metrics.update(
                    held_out_eval(
                        policy,
                        pool,
                        tokenizer,
                        eval_tasks,
                        cfg,
                        step,
                        model=model,
                        colocated=colocated,
                        info=info,
                    )
                )
            if info.enabled:
                metrics = reduce_over_ranks(metrics, len(trajs))
            if info.is_main:
                run.metrics.log(step, metrics)
                save_step_trajectories(
                    run.out, step, trajs, parts, cfg.logging.trajectories_per_step
                )
                if step % max(1, cfg.logging.every_steps) == 0 or step == cfg.steps:
                    console.print(_step_line(step, cfg.steps, metrics))
                if "eval/pass@1" in metrics:
                    console.print(
                        f"eval step {step:>4}: held-out pass@1 {100 * metrics['eval/pass@1']:.1f}% "
                        f"over {int(metrics['eval/episodes'])} episodes ({metrics['eval_s']:.1f} s)"
                    )
            # asynchronous: the sampler as it was after this step's prompts, so a resumed
            # run draws the in-flight steps' prompts again (their rollouts are discarded)
            extra = {"sampler": sampler_state or sampler.state()}
            saved = run.maybe_save(step, *ckpt_args, extra)
            if step < cfg.steps and (signal_name := signals.requested(info)):
                if steps_async is not None:
                    steps_async.stop()  # its requests aborted, its rollouts discarded
                raise run.stop(signal_name, step, cfg.steps, saved, *ckpt_args, extra)
        final = run.finish(model, tokenizer)
    finally:
        if steps_async is not None:
            steps_async.stop()
        signals.restore()
        if own_pool:
            pool.__exit__(None, None, None)
    return final


def check_rollout_backend(cfg: GRPOConfig, info: DistInfo) -> None:
    """Stop at start-up, in one line, when the configured rollout backend cannot run here.

    There is no silent fallback: a recipe that asks for vLLM and gets the hf
    backend would run for hours at a fraction of the speed, or run out of memory
    far from the cause."""
    if cfg.rollout.backend != "vllm":
        return
    from spreadrl.rollout.vllm_policy import require_vllm_gpu

    if cfg.data.max_prompt_tokens <= 0:
        raise ConfigError(
            "rollout.backend=vllm needs data.max_prompt_tokens > 0: the engine's KV cache is "
            "sized for data.max_prompt_tokens + rollout.max_response_tokens"
        )
    # under torchrun each rank gets its own engine on its own GPU (build_rollout_policy)
    require_vllm_gpu()


def build_rollout_policy(
    cfg: GRPOConfig, model: torch.nn.Module, tokenizer: Any, info: DistInfo, console: Console
) -> tuple[Any, Any]:
    """The trainer's own model through transformers, or a colocated vLLM engine.

    The vLLM engine is sized from the recipe (``max_model_len`` = prompt budget +
    response budget, ``rollout.vllm_gpu_memory_utilization``), sleeps during the
    update and receives new weights through vLLM's weight-transfer API. Under
    torchrun every rank builds its own engine, pinned to the rank's GPU (a fraction
    of that GPU), seeded per rank, fed the rank's gathered weights (docs/vllm.md).

    Why this is not :func:`spreadrl.rollout.backends.load_policy` (which eval and
    serve use): the two take different inputs and must build different things, so
    one function would change one side's behaviour or hide a branch per caller.
    Here the hf policy wraps the very module being trained (FSDP- or LoRA-wrapped,
    so each step samples the updated weights) where ``load_policy`` loads a
    checkpoint from a path; the batch is ``group_size * prompts_per_step``, not
    eval's ``--batch-size``; and the vLLM engine shares the GPU with the trainer
    (a memory fraction, sleep mode, ipc weight transfer, a seed per rank, a KV
    cache bounded by the recipe's budgets) where eval's owns the GPU and serves
    fixed weights. openai, oracle and noop exist only for eval. What both share,
    the stop ids and :class:`~spreadrl.rollout.vllm_policy.VLLMPolicy` itself, is
    already shared.
    """
    from spreadrl.rollout.hf_policy import HFPolicy, stop_token_ids

    batch = cfg.rollout.group_size * cfg.rollout.prompts_per_step
    if cfg.rollout.backend == "vllm":
        from spreadrl.rollout.colocate import ColocatedRollouts
        from spreadrl.rollout.vllm_policy import VLLMPolicy, resolve_weight_sync

        sync = resolve_weight_sync(cfg.rollout.weight_sync)
        max_model_len = cfg.data.max_prompt_tokens + cfg.rollout.max_response_tokens
        engine = VLLMPolicy(
            cfg.model.name_or_path,
            max_model_len=max_model_len,
            gpu_memory_utilization=cfg.rollout.vllm_gpu_memory_utilization,
            enable_sleep_mode=True,
            seed=cfg.seed + info.rank,
            dtype="bfloat16" if cfg.model.dtype == "auto" else cfg.model.dtype,
            weight_transfer=sync,
            # under torchrun: one engine per rank, in its own process on the rank's GPU
            local_rank=info.local_rank if info.enabled else None,
            stop_token_ids=stop_token_ids(tokenizer),
        )
        from spreadrl.train.plan import engine_capacity_line, engine_kv_tokens

        line = engine_capacity_line(
            engine_kv_tokens(engine.llm),
            max_model_len,
            cfg.rollout.vllm_gpu_memory_utilization,
        )
        log.info(line)
        if info.is_main:
            console.print(line, highlight=False)
        return engine, ColocatedRollouts(engine, sync=sync)
    return HFPolicy(model, tokenizer, max_batch_size=batch), None


def _weight_sync(cfg: GRPOConfig) -> str:
    """``rollout.weight_sync`` resolved (the hf backend has none: "files" stands for it)."""
    if cfg.rollout.backend != "vllm":
        return "files"
    from spreadrl.rollout.vllm_policy import resolve_weight_sync

    return resolve_weight_sync(cfg.rollout.weight_sync)


def catch_up_schedule(scheduler: Any, planned: int) -> None:
    """Move the LR schedule to ``planned`` optimizer steps when fewer were taken.

    The schedule is laid out for ``steps x epochs x mini-batches`` updates, but a
    step can take fewer: dynamic sampling (``sampling.mode=drop``) trains fewer
    samples, so fewer mini-batches, or none when every group was dropped. Without
    this the decay would lag and never reach its end; with it, LR follows the
    run's step count whatever was dropped (the same on every rank).
    """
    import warnings

    with warnings.catch_warnings():  # "lr_scheduler.step() before optimizer.step()"
        warnings.simplefilter("ignore", UserWarning)
        while scheduler.last_epoch < planned:
            scheduler.step()


def _minibatches(cfg: GRPOConfig) -> int:
    total = cfg.rollout.prompts_per_step * cfg.rollout.group_size
    size = cfg.optim.mini_batch_size or total
    return max(1, -(-total // size))


def _step_line(step: int, total: int, m: dict[str, float]) -> str:
    return (
        f"step {step:>4}/{total}  reward {m['reward_mean']:+.3f}  pass {100 * m['pass_rate']:5.1f}%  "
        f"len {m['response_tokens']:6.1f}  calls {m['tool_calls']:.2f}  "
        f"clip {m.get('clip_frac_low', 0) + m.get('clip_frac_high', 0):.3f}  kl {m.get('kl', 0):.4f}  "
        f"ent {m.get('entropy', 0):.3f}  gnorm {m.get('grad_norm', 0):.3f}  "
        f"groups {int(m['groups_kept'])}/{int(m['groups'])}  "
        f"t gen {m.get('generate_s', 0):.1f}s tools {m.get('tools_s', 0):.1f}s "
        f"upd {m.get('update_s', 0):.1f}s"
    )
