"""The GRPO(-TCR) recipe, readable top to bottom.

One step: sample prompts -> G rollouts each through the policy and the gym ->
shape rewards (outcome, tool-call reward, overlong) -> group advantages ->
drop or refill constant groups -> PPO-style update (clip-higher, dual clip,
token-mean, optional k3 KL, TIS) -> log, checkpoint. ``train_grpo`` is the
whole loop; each builder it calls takes the config section it uses.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console

from spreadrl.data.sources import resolve_tasks
from spreadrl.data.task import TaskSet
from spreadrl.env.factory import make_env_pool
from spreadrl.errors import ConfigError
from spreadrl.rollout.hf_policy import HFPolicy
from spreadrl.rollout.policy import Policy
from spreadrl.rollout.runner import EnvPoolLike
from spreadrl.train.async_steps import AsyncSteps, check_async, decoupled, start_async
from spreadrl.train.config import GRPOConfig
from spreadrl.train.distributed import check_world_size, gathered_params, shard_model
from spreadrl.train.held_out import eval_due, held_out_eval
from spreadrl.train.memory import PeakMemory, release_for_generation
from spreadrl.train.precision import compute_dtype
from spreadrl.train.reference import build_reference
from spreadrl.train.rollout_backend import (
    build_rollout_policy,
    check_rollout_backend,
    generating,
    weight_sync,
)
from spreadrl.train.rollouts import StepRollouts, collect_rollouts, to_samples
from spreadrl.train.sampler import EpochShuffle
from spreadrl.train.setup import Checkpointed, Run, StopSignals, build_optimizer, build_scheduler
from spreadrl.train.step_metrics import reduce_over_ranks, step_line, step_metrics
from spreadrl.train.trajectory_log import save_step_trajectories
from spreadrl.train.update import (
    Scoring,
    catch_up_schedule,
    compute_logprobs,
    policy_update,
    updates_per_step,
)


def train_grpo(
    cfg: GRPOConfig,
    *,
    console: Console | None = None,
    pool: EnvPoolLike | None = None,
    tasks: TaskSet | None = None,
    eval_tasks: TaskSet | None = None,
) -> Path:
    """Run GRPO per ``cfg``; return the final model folder.

    ``pool`` and ``tasks`` default to what the config names; pass them to reuse
    an environment pool or to train on tasks built in code; ``eval_tasks`` the
    held-out set of ``eval.every_steps`` (default: ``eval.tasks``).

    Raises:
        RunStopped: SIGINT or SIGTERM (on any rank) stopped the run after a whole
            step, saved as a checkpoint that the same command resumes from
            (see :class:`spreadrl.train.setup.StopSignals`).
    """
    console = console or Console()
    run = Run.start(cfg, console, seed_per_rank=True)
    info = run.info
    try:
        check_world_size(cfg.rollout, info)
    except ConfigError:
        run.close()  # every rank refuses alike: leave the process group together
        raise
    check_rollout_backend(cfg.rollout, cfg.data.max_prompt_tokens)
    if cfg.rollout.max_staleness:
        check_async(cfg, info, weight_sync(cfg.rollout))

    # the policy, its KL reference, the optimizer: fp32 master weights, compute in `compute`
    model, tokenizer = run.build_model(cfg.model)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    compute = compute_dtype(cfg.model.dtype, info.device)
    ref = build_reference(run.reference_source(model, cfg.model, cfg.loss), cfg.loss, dtype=compute)
    shard_model(model, info, compute_dtype=compute)
    if ref is not None and ref.separate:
        shard_model(ref.model, info, compute_dtype=compute)
    scoring = Scoring.for_run(cfg.rollout, cfg.optim, compute)
    optimizer = build_optimizer(model, cfg.optim)
    per_step = updates_per_step(cfg.rollout, cfg.optim)
    scheduler = build_scheduler(optimizer, cfg.optim, cfg.steps * per_step)
    parts = Checkpointed(model, tokenizer, optimizer, scheduler)

    # the tasks, in a resumable order; the rollout engine and the environments
    tasks = tasks if tasks is not None else resolve_tasks(cfg.data.train_tasks)
    sampler = EpochShuffle([(t.id, c) for t, c in tasks.episodes()], seed=cfg.seed)
    state = run.resume(model, optimizer, scheduler)
    start = state["step"] if state else 0
    if state:
        sampler.load(state["extra"]["sampler"])
    policy, colocated = build_rollout_policy(
        cfg.rollout,
        cfg.model,
        model,
        tokenizer,
        info,
        console,
        max_prompt_tokens=cfg.data.max_prompt_tokens,
        seed=cfg.seed,
    )
    own_pool = pool is None
    pool = pool or make_env_pool(cfg.env, workers=cfg.rollout.concurrency).__enter__()
    if cfg.eval.every_steps and eval_tasks is None:
        eval_tasks = resolve_tasks(cfg.eval.tasks)

    def collect(rollout_policy: Policy, step: int) -> StepRollouts:
        """One step's rollouts (run by the producer's thread in asynchronous mode)."""
        return collect_rollouts(
            rollout_policy,
            pool,
            tokenizer,
            tasks,
            sampler,
            cfg.rollout,
            cfg.sampling,
            cfg.reward,
            max_prompt_tokens=cfg.data.max_prompt_tokens,
            seed=cfg.seed + step,
            info=info,
        )

    memory = PeakMemory(info.device)  # peak of the rollout, and of the log-prob passes + update
    # SIGINT / SIGTERM: every rank stops after the same step, then saves it
    signals = StopSignals(info.rank if info.enabled else None)
    signals.install()
    steps_async: AsyncSteps | None = None
    try:
        if cfg.rollout.max_staleness:  # rollouts of the next steps overlap the update
            engine = policy if colocated is not None else None
            steps_async = start_async(
                cfg, model, tokenizer, engine, collect, sampler.state, start=start, compute=compute
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
                with generating(model, colocated, compute):
                    trajs, advantages, keep, rewards, timings = collect(policy, step)
            else:
                t0 = time.perf_counter()
                produced = steps_async.take(step)
                trajs, advantages, keep, rewards, timings = produced.value
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
                if samples and per_step > 1:
                    old = compute_logprobs(model, samples, cfg.optim, scoring, pad_id=pad_id)
                    for sample, lp in zip(samples, old, strict=True):
                        sample.old_logprobs = lp
            # every rank enters the reference pass, even with no samples (dynamic sampling
            # can keep none on one rank): gathering a sharded reference is a collective
            if ref is not None:
                lps = ref.logprobs(samples, cfg.optim, scoring, pad_id=pad_id)
                for sample, lp in zip(samples, lps, strict=True):
                    sample.ref_logprobs = lp
            timings["logprobs_s"] = time.perf_counter() - t0
            if steps_async is not None:
                timings.update(steps_async.bookkeeping(step, trajs, samples))
            t0 = time.perf_counter()
            update = policy_update(
                model,
                optimizer,
                samples,
                cfg.loss if steps_async is None else decoupled(cfg.loss),
                cfg.optim,
                scoring,
                pad_id=pad_id,
                scheduler=scheduler,
                seed=cfg.seed + step,
                world_size=info.world_size,
            )
            catch_up_schedule(scheduler, step * per_step)
            timings["update_s"] = time.perf_counter() - t0
            timings["train_peak_gb"] = memory.peak_gb() or 0.0
            if steps_async is not None:
                timings["overlap"] = steps_async.overlap(t_train, time.perf_counter())
                steps_async.publish(step, model)  # a step boundary: the producer's next sync
            # the held-out eval may wake the engine before the next step does
            release_for_generation(model, optimizer, info.device)

            metrics = {
                **step_metrics(trajs, rewards, keep),
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
                    run.out, step, trajs, rewards, cfg.logging.trajectories_per_step
                )
                if step % max(1, cfg.logging.every_steps) == 0 or step == cfg.steps:
                    console.print(step_line(step, cfg.steps, metrics))
                if "eval/pass@1" in metrics:
                    console.print(
                        f"eval step {step:>4}: held-out pass@1 {100 * metrics['eval/pass@1']:.1f}% "
                        f"over {int(metrics['eval/episodes'])} episodes ({metrics['eval_s']:.1f} s)"
                    )
            # asynchronous: the sampler as it was after this step's prompts, so a resumed
            # run draws the in-flight steps' prompts again (their rollouts are discarded)
            extra: dict[str, object] = {"sampler": sampler_state or sampler.state()}
            saved = run.maybe_save(step, parts, extra)
            if step < cfg.steps and (signal_name := signals.requested(info)):
                if steps_async is not None:
                    steps_async.stop()  # its requests aborted, its rollouts discarded
                raise run.stop(signal_name, step, cfg.steps, saved, parts, extra)
        final = run.finish(model, tokenizer)
    finally:
        if steps_async is not None:
            steps_async.stop()
        signals.restore()
        if own_pool:
            pool.__exit__(None, None, None)
    return final
