"""The GRPO(-TCR) recipe, readable top to bottom.

One step: sample prompts -> G rollouts each through the policy and the gym ->
shape rewards (outcome, tool-call reward, overlong) -> group advantages ->
drop or refill constant groups (and every group with a crashed episode) ->
reference / proximal log-probs -> PPO-style update (clip-higher, dual clip,
token-mean, optional k3 KL, TIS) -> log, checkpoint. :func:`train_grpo` builds
its parts in view, one builder per line: the :class:`~spreadrl.train.setup.Run`
(process group, run folder, checkpoints), the trained side (policy, reference,
shards, log-prob settings, optimizer, schedule, trainer state: the
:class:`~spreadrl.train.update.Learner`), the rollout side (tasks, prompt order,
rollout engine, environments, chat format, held-out set, collector) and the
rollout source, sampled in the loop or ahead of it (asynchronous mode: built by
:func:`open_rollout_source`); then :func:`train_steps` runs the loop over them.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from transformers import PreTrainedTokenizerBase

from spreadrl.data.sources import resolve_tasks
from spreadrl.data.task import TaskSet
from spreadrl.env.factory import make_env_pool
from spreadrl.errors import ConfigError, RunHalted
from spreadrl.reporting import LogReporter, Reporter
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engine import RolloutEngine
from spreadrl.rollout.harness.episodes import HarnessEpisodes
from spreadrl.rollout.runner import EnvPoolLike, run_episodes
from spreadrl.train.checkpoint import TrainerState, resume_trainer_state
from spreadrl.train.checks import StepChecks, check_grpo
from spreadrl.train.config import GRPOConfig
from spreadrl.train.distributed import release_for_generation, shard_model
from spreadrl.train.episodes import Collector, HeldOut, held_out_tasks, to_samples
from spreadrl.train.memory import PeakMemory
from spreadrl.train.optimizer import build_optimizer, build_scheduler, updates_per_step
from spreadrl.train.sampler import EpochShuffle, prompt_order
from spreadrl.train.scoring import LogprobSettings, Scorer
from spreadrl.train.setup import Checkpointed, Run
from spreadrl.train.signals import StopSignals
from spreadrl.train.sources import AsyncSteps, StepSource, SyncRollouts
from spreadrl.train.step_metrics import report_step, save_crashes
from spreadrl.train.trained_model import build_policy, build_reference
from spreadrl.train.update import Learner

log = logging.getLogger(__name__)


def train_grpo(
    cfg: GRPOConfig,
    *,
    reporter: Reporter | None = None,
    pool: EnvPoolLike | None = None,
    tasks: TaskSet | None = None,
    eval_tasks: TaskSet | None = None,
) -> Path:
    """Run GRPO per ``cfg``; return the final model folder (a finished run: at once).

    ``pool`` and ``tasks`` default to what the config names (pass them to reuse a pool
    or to train on tasks built in code); ``eval_tasks`` the held-out set of
    ``eval.every_steps`` (default: ``eval.tasks``); ``reporter`` gets the step lines
    (default: logged). Raises RunStopped (SIGINT or SIGTERM on any rank: saved after a
    whole step, resumed by the same command) and RunHalted (too many crashed episodes,
    or steps that kept no group)."""
    run = Run.start(cfg, reporter or LogReporter(), seed_per_rank=True)
    info, compute_dtype = run.info, run.precision.compute_dtype
    try:
        engine = check_grpo(cfg, info)  # the rollout engine, set up: it refuses here too
    except ConfigError:
        run.close()  # every rank refuses alike: leave the process group together
        raise
    model, tokenizer, start_model = build_policy(
        cfg.model, cfg.loss, run.precision, info.device, resume_from=run.resume_from
    )
    reference = build_reference(start_model, cfg.loss, dtype=compute_dtype)
    separate = [reference.model] if reference is not None and reference.separate else []
    for module in (model, *separate):  # a reference model of its own is sharded alike
        shard_model(module, info, compute_dtype=compute_dtype, cpu_offload=cfg.model.cpu_offload)
    per_step = updates_per_step(cfg.rollout, cfg.optim)
    optimizer = build_optimizer(model, cfg.optim)
    scheduler = build_scheduler(optimizer, cfg.optim, cfg.steps * per_step)
    resumed = resume_trainer_state(run.resume_from, model, optimizer, scheduler, info)
    if run.already_done(resumed, cfg.steps):  # a finished run rerun: nothing to train
        return run.finish(model, tokenizer, keep_existing=True)
    # asynchronous: tokens sampled by older weights than the ones updated are weighted
    # by min(pi_prox / pi_behav, cap) whatever loss.tis says (docs/async.md)
    loss = replace(cfg.loss, tis=True) if cfg.rollout.max_staleness else cfg.loss
    memory = PeakMemory(info.device)  # the rollout's peak, then the passes' and update's
    logprob_settings = LogprobSettings.for_run(cfg.rollout, cfg.optim, compute_dtype)
    scorer = Scorer(
        model=model,
        reference=reference,
        optim=cfg.optim,
        logprob_settings=logprob_settings,
        per_step=per_step,
        pad_id=tokenizer.pad_token_id or 0,
        memory=memory,
    )
    learner = Learner(
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        logprob_settings=logprob_settings,
        loss=loss,
        optim=cfg.optim,
        info=info,
        seed=cfg.seed,
        per_step=per_step,
        pad_id=tokenizer.pad_token_id or 0,
        memory=memory,
    )
    with ExitStack() as owned:  # what the run opens, closed last-opened first
        source = open_rollout_source(
            cfg,
            run,
            learner,
            engine,
            tokenizer,
            owned,
            pool=pool,
            tasks=tasks,
            eval_tasks=eval_tasks,
            resumed=resumed,
        )
        parts = Checkpointed(model, tokenizer, optimizer, scheduler)
        start = resumed["step"] if resumed else 0
        train_steps(cfg, run, scorer, learner, source, parts, start=start)
        return run.finish(model, tokenizer)


def open_rollout_source(
    cfg: GRPOConfig,
    run: Run,
    learner: Learner,
    engine: RolloutEngine,
    tokenizer: PreTrainedTokenizerBase,
    owned: ExitStack,
    *,
    pool: EnvPoolLike | None,
    tasks: TaskSet | None,
    eval_tasks: TaskSet | None,
    resumed: TrainerState | None,
) -> StepSource:
    """The rollout side, built in order: held-out tasks, tasks, prompt order, the rollout
    engine started, environments (a pool built here is ``owned``), chat format, held-out
    set, collector, and the source, sync or async (``owned`` closes it). The sources get
    the learner's model, optimizer and memory gauge, never the learner itself."""
    info, rollout, model = run.info, cfg.rollout, learner.model
    compute_dtype = run.precision.compute_dtype
    eval_tasks = held_out_tasks(cfg.eval, given=eval_tasks)
    tasks = tasks if tasks is not None else resolve_tasks(cfg.data.train_tasks)
    sampler = prompt_order(
        tasks.episode_keys(), seed=cfg.seed, state=resumed and resumed["extra"]["sampler"]
    )
    for line in engine.start(model, tokenizer):  # its policy, built around the trained model
        log.info(line)  # e.g. the engine's KV-cache capacity
        if info.is_main:
            run.reporter.line(line)
    if pool is None:
        pool = owned.enter_context(make_env_pool(cfg.env, workers=rollout.concurrency))
    chat = EpisodeChat.of(tokenizer)  # the format read off the chat template once
    held_out = HeldOut(
        eval_tasks,
        pool,
        chat,
        cfg.eval,
        rollout,
        steps=cfg.steps,
        seed=cfg.seed,
        max_prompt_tokens=cfg.data.max_prompt_tokens,
        compute_dtype=compute_dtype,
        model=model,
        info=info,
    )
    collect = Collector(
        pool,
        chat,
        tasks,
        sampler,
        rollout,
        cfg.sampling,
        cfg.reward,
        max_prompt_tokens=cfg.data.max_prompt_tokens,
        seed=cfg.seed,
        info=info,
        episodes=HarnessEpisodes.of(rollout.harness, cfg.env) if rollout.harness else run_episodes,
    )
    source = start_rollout_source(
        rollout,
        collect,
        sampler,
        engine,
        held_out,
        learner,
        tokenizer,
        device=info.device,
        compute_dtype=compute_dtype,
        steps=cfg.steps,
        start=resumed["step"] if resumed else 0,
        tis_cap=cfg.loss.tis_cap,
    )
    owned.callback(source.close)
    return source


def start_rollout_source(
    rollout: RolloutConfig,
    collect: Collector,
    sampler: EpochShuffle[tuple[str, int]],
    engine: RolloutEngine,
    held_out: HeldOut,
    learner: Learner,
    tokenizer: PreTrainedTokenizerBase,
    *,
    device: str,
    compute_dtype: str,
    steps: int,
    start: int,
    tis_cap: float,
) -> StepSource:
    """The synchronous source, or with ``rollout.max_staleness`` > 0 the asynchronous one,
    its producer started for steps ``start + 1 .. steps`` (docs/async.md)."""
    model = learner.model
    if not rollout.max_staleness:  # sampled in the loop with the current weights
        return SyncRollouts(
            collect=collect,
            sampler=sampler,
            engine=engine,
            evaluation=held_out,
            model=model,
            optimizer=learner.optimizer,
            memory=learner.memory,
            device=device,
            compute_dtype=compute_dtype,
        )
    # the next steps' rollouts are sampled during the update, at most max_staleness ahead
    return AsyncSteps.start(
        rollout,
        model,
        tokenizer,
        engine,
        collect,
        sampler.state,
        held_out,
        steps=steps,
        start=start,
        compute_dtype=compute_dtype,
        tis_cap=tis_cap,
    )


def train_steps(
    cfg: GRPOConfig,
    run: Run,
    scorer: Scorer,
    learner: Learner,
    source: StepSource,
    parts: Checkpointed,
    *,
    start: int,
) -> None:
    """Steps ``start + 1 .. cfg.steps``, each calling the parts in order: the source's
    rollouts -> samples -> reference / proximal log-probs -> the source's bookkeeping
    -> the update -> the source told of it -> memory released for generation ->
    metrics, report, save; after the last step the end state is saved. SIGINT / SIGTERM:
    every rank stops after the same step, then saves it."""
    signals = StopSignals(run.info.rank if run.info.enabled else None)
    signals.install()
    checks = StepChecks(cfg.sampling)
    try:
        for step in range(start + 1, cfg.steps + 1):
            t_step = time.perf_counter()
            rollouts, sampler_state = source.next(step)
            trajs = rollouts.trajectories
            crashes = save_crashes(
                run.out, step, trajs, run.info.rank if run.info.enabled else None
            )
            checks.check(step, trajs, rollouts.keep, crashes)  # stops before training on it
            samples = to_samples(trajs, rollouts.advantages, rollouts.keep, cfg.rollout.group_size)
            metrics = dict(rollouts.metrics)  # phase times, refill rounds
            t_train = time.perf_counter()
            metrics.update(scorer.score(samples))
            metrics.update(source.bookkeeping(step, trajs, samples))
            metrics.update(learner.update(step, samples))
            metrics.update(source.updated(step, learner.model, t_train))
            # the held-out eval may wake the engine before the next step does
            release_for_generation(learner.model, learner.optimizer, run.info.device)
            metrics["step_s"] = time.perf_counter() - t_step
            metrics["lr"] = learner.scheduler.get_last_lr()[0]
            metrics["trained_sequences"] = len(samples)
            metrics["trained_tokens"] = sum(len(s.ids) for s in samples)
            generated = sum(len(t.response_ids) for t in trajs)
            metrics["tokens_per_s"] = generated / max(metrics["step_s"], 1e-9)
            metrics.update(source.held_out(step))
            report_step(run, step, cfg.steps, rollouts, metrics, cfg.logging, crashes)
            extra: dict[str, object] = {"sampler": sampler_state}
            saved = run.maybe_save(step, parts, extra)
            if step < cfg.steps and (signal_name := signals.requested(run.info)):
                source.stop()  # its requests aborted, its rollouts discarded
                raise run.stop(signal_name, step, cfg.steps, saved, parts, extra)
        run.end(
            cfg.steps, cfg.steps, saved, parts, extra
        )  # a rerun resumes from, or is done at, it
    except RunHalted:
        run.metrics.close()  # what was logged stays; every rank leaves the group together
        run.close()
        raise
    finally:
        signals.restore()
