"""The GRPO(-TCR) recipe, readable top to bottom.

One step: sample prompts -> G rollouts each through the policy and the gym ->
shape rewards (outcome, tool-call reward, overlong) -> group advantages ->
drop or refill constant groups -> PPO-style update (clip-higher, dual clip,
token-mean, optional k3 KL, TIS) -> log, checkpoint. ``train_grpo`` is the
whole loop over three parts built once: the :class:`~spreadrl.train.setup.Run`
(process group, run folder, checkpoints), the
:class:`~spreadrl.train.learner.Learner` (what is trained, and the update) and the
rollout source (:func:`~spreadrl.train.rollout_sources.open_rollouts`: sampled in
the loop, or ahead of it in asynchronous mode).
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console

from spreadrl.data.task import TaskSet
from spreadrl.errors import ConfigError
from spreadrl.rollout.runner import EnvPoolLike
from spreadrl.train.checks import check_grpo
from spreadrl.train.config import GRPOConfig
from spreadrl.train.learner import Learner
from spreadrl.train.rollout_sources import open_rollouts
from spreadrl.train.rollouts import to_samples
from spreadrl.train.setup import Run
from spreadrl.train.signals import StopSignals
from spreadrl.train.step_checks import StepChecks
from spreadrl.train.step_metrics import report_step, step_metrics


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
            (see :class:`spreadrl.train.signals.StopSignals`).
    """
    console = console or Console()
    run = Run.start(cfg, console, seed_per_rank=True)
    info = run.info
    try:
        check_grpo(cfg, info)
    except ConfigError:
        run.close()  # every rank refuses alike: leave the process group together
        raise
    learner = Learner.build(cfg, run)
    rollouts = open_rollouts(cfg, learner, console, pool=pool, tasks=tasks, eval_tasks=eval_tasks)
    # SIGINT / SIGTERM: every rank stops after the same step, then saves it
    signals = StopSignals(info.rank if info.enabled else None)
    signals.install()
    checks = StepChecks(cfg.sampling)
    try:
        for step in range(learner.start + 1, cfg.steps + 1):
            t_step = time.perf_counter()
            (trajs, advantages, keep, rewards, timings), sampler_state = rollouts.next(step)
            checks.crashes(step, trajs)  # too many: stop before training on the step
            samples = to_samples(trajs, advantages, keep, cfg.rollout.group_size)
            update, train_timings = learner.train(step, trajs, samples, rollouts)
            metrics = {
                **step_metrics(trajs, rewards, keep),
                **update,
                **timings,
                **train_timings,
                "step_s": time.perf_counter() - t_step,
                "lr": learner.scheduler.get_last_lr()[0],
                "trained_sequences": len(samples),
                "trained_tokens": sum(len(s.ids) for s in samples),
            }
            metrics["tokens_per_s"] = sum(len(t.response_ids) for t in trajs) / max(
                metrics["step_s"], 1e-9
            )
            metrics.update(rollouts.held_out(step))
            report_step(run, step, cfg.steps, metrics, trajs, rewards, cfg.logging)
            checks.kept(step, keep)  # after the step's line, which says it trained nothing
            extra: dict[str, object] = {"sampler": sampler_state}
            saved = run.maybe_save(step, learner.checkpointed, extra)
            if step < cfg.steps and (signal_name := signals.requested(info)):
                rollouts.stop()  # its requests aborted, its rollouts discarded
                raise run.stop(signal_name, step, cfg.steps, saved, learner.checkpointed, extra)
        final = run.finish(learner.model, learner.tokenizer)
    finally:
        rollouts.close()
        signals.restore()
    return final
