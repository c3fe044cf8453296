"""The GRPO(-TCR) recipe, readable top to bottom.

One step: sample prompts -> G rollouts each through the policy and the gym ->
shape rewards (outcome, tool-call reward, overlong) -> group advantages ->
drop or refill constant groups (and every group with a crashed episode) ->
reference / proximal log-probs -> PPO-style update (clip-higher, dual clip,
token-mean, optional k3 KL, TIS) -> log, checkpoint. :func:`train_grpo` builds
the run in view, in one place: the :class:`~spreadrl.train.setup.Run` (process
group, run folder, checkpoints), the rollout engine (refused before any model
loads), the trained side (:class:`~spreadrl.train.trained_model.TrainedSide`:
policy, reference, shards, optimizer, schedule, the log-prob passes and the
update), the episode side (:class:`~spreadrl.train.episodes.EpisodeSide`: tasks,
prompt order, engine, environments, chat format, rollouts, held-out eval) and
the step source that holds the two, sampled in the loop or ahead of it
(:mod:`spreadrl.train.sources`); then :func:`train_steps` runs the loop over them.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from pathlib import Path

from spreadrl.config import config_record
from spreadrl.data.task import TaskSet
from spreadrl.errors import ConfigError, RunHalted
from spreadrl.reporting import LogReporter, Reporter
from spreadrl.rollout.runner import EnvPoolLike
from spreadrl.train.checks import StepChecks, check_grpo
from spreadrl.train.config import DynamicSamplingConfig, GRPOConfig, LoggingConfig
from spreadrl.train.distributed import release_for_generation
from spreadrl.train.episodes import EpisodeSide, to_samples
from spreadrl.train.setup import Checkpointed, Run
from spreadrl.train.signals import StopSignals
from spreadrl.train.sources import StepSource, open_source
from spreadrl.train.step_metrics import report_step, save_crashes, save_harness_traces
from spreadrl.train.timeouts import rollout_wait_s
from spreadrl.train.trained_model import TrainedSide

log = logging.getLogger(__name__)


def train_grpo(
    cfg: GRPOConfig,
    *,
    reporter: Reporter | None = None,
    pool: EnvPoolLike | None = None,
    tasks: TaskSet | None = None,
    eval_tasks: TaskSet | None = None,
    save_end: bool = True,
) -> Path:
    """Run GRPO per ``cfg``; return the final model folder (a finished run: at once).

    ``pool`` and ``tasks`` default to what the config names (pass them to reuse a pool
    or to train on tasks built in code); ``eval_tasks`` the held-out set of
    ``eval.every_steps`` (default: ``eval.tasks``); ``reporter`` gets the step lines
    (default: logged). Raises RunStopped (SIGINT or SIGTERM on any rank: saved after a
    whole step, resumed by the same command) and RunHalted (too many crashed episodes,
    or steps that kept no group). ``save_end=False`` (a benchmark measuring steps) writes
    neither the end-state checkpoint nor the final model, and returns the run folder."""
    wait_s = rollout_wait_s(cfg.rollout, cfg.sampling, cfg.eval)  # sizes the collectives' timeout
    run = Run.start(
        cfg,
        config_record(cfg),  # the whole config as data, once: run.json, config.yaml, trackers
        reporter or LogReporter(),
        seed_per_rank=True,
        rollout_wait_s=wait_s,
        save_end=save_end,
    )
    try:  # the rollout engine, set up: it refuses here too, before any model loads
        engine = check_grpo(cfg.rollout, cfg.model, cfg.data, run.info, seed=cfg.seed)
    except ConfigError:
        run.close()  # every rank refuses alike: leave the process group together
        raise
    trained = TrainedSide.build(
        cfg.model, cfg.loss, cfg.optim, cfg.rollout, run, steps=cfg.steps, seed=cfg.seed
    )
    resumed = trained.resumed
    if run.already_done(resumed, cfg.steps):  # a finished run rerun: nothing to train
        return run.finish(trained.model, trained.tokenizer, keep_existing=True)
    start = resumed["step"] if resumed else 0
    with ExitStack() as owned:  # what the run opens, closed last-opened first
        episodes = EpisodeSide.build(
            engine,
            trained.model,
            trained.tokenizer,
            owned,
            data=cfg.data,
            env=cfg.env,
            rollout=cfg.rollout,
            sampling=cfg.sampling,
            reward=cfg.reward,
            evaluation=cfg.eval,
            steps=cfg.steps,
            seed=cfg.seed,
            run=run,
            sampler_state=resumed and resumed["extra"]["sampler"],
            pool=pool,
            tasks=tasks,
            eval_tasks=eval_tasks,
            keep_traces=cfg.logging.harness_traces,
        )
        source = open_source(trained, episodes, start=start)
        owned.callback(source.close)
        train_steps(
            run,
            trained,
            source,
            start=start,
            steps=cfg.steps,
            group_size=cfg.rollout.group_size,
            sampling=cfg.sampling,
            logging=cfg.logging,
        )
        return run.finish(trained.model, trained.tokenizer)


def train_steps(
    run: Run,
    trained: TrainedSide,
    source: StepSource,
    *,
    start: int,
    steps: int,
    group_size: int,
    sampling: DynamicSamplingConfig,
    logging: LoggingConfig,
) -> None:
    """Steps ``start + 1 .. steps``, each calling the parts in order: the source's
    rollouts -> samples -> reference / proximal log-probs -> the source's bookkeeping
    -> the update -> the source told of it -> memory released for generation ->
    metrics, report, save; after the last step the end state is saved. SIGINT / SIGTERM:
    every rank stops after the same step, then saves it."""
    info = run.info
    signals = StopSignals(info.rank if info.enabled else None)
    signals.install()
    checks = StepChecks(sampling)
    parts = Checkpointed(trained.model, trained.tokenizer, trained.optimizer, trained.scheduler)
    try:
        for step in range(start + 1, steps + 1):
            t_step = time.perf_counter()
            rollouts, sampler_state = source.next(step)
            trajs = rollouts.trajectories
            crashes = save_crashes(run.out, step, trajs, info.rank if info.enabled else None)
            if logging.harness_traces:  # before the checks: a step that stops has its traces
                save_harness_traces(
                    run.out, step, trajs, group_size, info.rank if info.enabled else None
                )
            checks.check(step, trajs, rollouts.keep, crashes)  # stops before training on it
            samples = to_samples(trajs, rollouts.advantages, rollouts.keep, group_size)
            metrics = dict(rollouts.metrics)  # phase times, refill rounds
            t_train = time.perf_counter()
            metrics.update(trained.logprob_passes(samples))
            metrics.update(source.bookkeeping(step, trajs, samples))
            metrics.update(trained.update(step, samples))
            metrics.update(source.updated(step, t_train))
            # the held-out eval may wake the engine before the next step does
            release_for_generation(trained.model, trained.optimizer, info.device)
            metrics["step_s"] = time.perf_counter() - t_step
            metrics["lr"] = trained.scheduler.get_last_lr()[0]
            metrics["trained_sequences"] = len(samples)
            metrics["trained_tokens"] = sum(len(s.ids) for s in samples)
            generated = sum(len(t.response_ids) for t in trajs)
            metrics["tokens_per_s"] = generated / max(metrics["step_s"], 1e-9)
            metrics.update(source.held_out(step))
            report_step(run, step, steps, rollouts, metrics, logging, crashes)
            extra: dict[str, object] = {"sampler": sampler_state}
            saved = run.maybe_save(step, parts, extra)
            if step < steps and (signal_name := signals.requested(info)):
                source.stop()  # its requests aborted, its rollouts discarded
                raise run.stop(signal_name, step, steps, saved, parts, extra)
        run.end(steps, steps, saved, parts, extra)  # a rerun resumes from, or is done at, it
    except RunHalted:
        run.metrics.close()  # what was logged stays; every rank leaves the group together
        run.close()
        raise
    finally:
        signals.restore()
