"""What a GRPO run refuses at start-up, each in one line, before any model is loaded.

There is no silent fallback: a recipe that cannot run as written (a prompt count
the ranks cannot share, an asynchronous setup that is not wired) stops here,
naming the key to change, rather than hours later or running something other
than what it says. What an engine cannot run here (vLLM without a GPU) the engine
refuses as it is set up, also before any model is loaded.

Checks between a GRPO step's rollouts and its update that stop a run gone wrong.

Crashed episodes (a tool, worker, environment or engine failed) are never trained
on: their groups are dropped (:func:`spreadrl.train.episodes.collect_rollouts`).
A few are noise; many mean the run is measuring spreadrl's failures, not the
model, so above ``sampling.max_crashed_fraction`` of a step's episodes the run
stops before that step's update. A step that keeps no group trains nothing;
``sampling.max_untrained_steps`` of them in a row stop the run too (the last of
them is not trained: the lines of those before it said ``untrained``). Both stop
with :class:`~spreadrl.errors.RunHalted` (one line, the CLI's ``error:``), on
every rank alike: the counts are summed over ranks first.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from spreadrl.errors import ConfigError, RunHalted
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engine import RolloutEngine, TrainingSetup, engine_class
from spreadrl.rollout.types import Trajectory
from spreadrl.train.config import DataConfig, DynamicSamplingConfig, ModelConfig
from spreadrl.train.distributed import DistInfo, all_reduce_sums


def check_grpo(
    rollout: RolloutConfig, model: ModelConfig, data: DataConfig, info: DistInfo, *, seed: int
) -> RolloutEngine:
    """Every start-up refusal of a GRPO run, in the order a user would fix them; the last
    is the rollout engine's, which returns it set up for the run."""
    check_world_size(rollout, info)
    if rollout.max_staleness:
        check_async(rollout, info)
    return training_engine(
        rollout, model, info, max_prompt_tokens=data.max_prompt_tokens, seed=seed
    )


def training_engine(
    rollout: RolloutConfig,
    model_cfg: ModelConfig,
    info: DistInfo,
    *,
    max_prompt_tokens: int,
    seed: int,
) -> RolloutEngine:
    """The engine ``rollout.backend`` names (:mod:`spreadrl.rollout.engine`), set up for this
    run: it refuses a setup that cannot run here, in one line, before any model is loaded."""
    setup = TrainingSetup(
        rollout=rollout,
        model_path=model_cfg.name_or_path,
        model_dtype=model_cfg.dtype,
        max_prompt_tokens=max_prompt_tokens,
        seed=seed,
        rank=info.rank,
        local_rank=info.local_rank if info.enabled else None,
        asynchronous=bool(rollout.max_staleness),
    )
    return engine_class(rollout.backend).for_training(setup)


def check_world_size(rollout: RolloutConfig, info: DistInfo) -> None:
    """Refuse a prompt count that the ranks cannot share equally.

    Every rank rolls out whole groups of its own share of the step's prompts; a
    share rounded down (or up to one) would silently train a different number of
    prompts per step than the recipe says, changing with the number of GPUs.
    """
    prompts, world = rollout.prompts_per_step, info.world_size
    if prompts % world:
        lower = prompts - prompts % world
        options = f"{lower} or {lower + world}" if lower else f"{world}"
        raise ConfigError(
            f"rollout.prompts_per_step={prompts} does not divide over {world} ranks "
            f"({prompts} % {world} = {prompts % world}); set rollout.prompts_per_step to a "
            f"multiple of {world} (e.g. {options}) or run on a number of GPUs that divides {prompts}"
        )


def check_async(rollout: RolloutConfig, info: DistInfo) -> None:
    """Refuse the asynchronous setups this does not run (``rollout.max_staleness`` > 0);
    what an engine cannot run asynchronously it refuses itself
    (:meth:`~spreadrl.rollout.engine.RolloutEngine.for_training`)."""
    k = rollout.max_staleness
    if info.enabled and info.world_size > 1:
        raise ConfigError(
            f"rollout.max_staleness={k} runs in one process only for now; under torchrun "
            f"(world size {info.world_size}) set rollout.max_staleness=0"
        )


log = logging.getLogger(__name__)


@dataclass
class StepChecks:
    """The run's two stop rules; ``untrained`` counts the kept-nothing steps in a row."""

    sampling: DynamicSamplingConfig
    untrained: int = 0

    def check(
        self, step: int, trajs: list[Trajectory], keep: torch.Tensor, crashes: str = ""
    ) -> None:
        """Both rules on the step's rollouts, before its update (every rank alike).

        The counts (crashed episodes, episodes, kept groups) are summed over ranks in one
        collective. The first crash's whole traceback goes to the log before the one-line
        stop; ``crashes`` names the file of this rank's tracebacks."""
        crashed = [t for t in trajs if t.crashed]
        count, episodes, kept = (
            int(n) for n in all_reduce_sums([len(crashed), len(trajs), float(keep.sum())])
        )
        limit = self.sampling.max_crashed_fraction
        if count and count > limit * episodes:
            where = ""  # another rank's crashes: this rank has none to name
            if crashed:
                first = crashed[0]
                log.error("episode %s crashed:\n%s", first.key, first.traceback or first.error)
                error = (first.error or "").splitlines()
                where = f"; first: {first.key}: {error[0] if error else 'unknown error'}"
                where += f"; tracebacks in {crashes}" if crashes else ""
            raise RunHalted(
                f"step {step}: {count} of {episodes} episodes crashed, above "
                f"sampling.max_crashed_fraction={limit:g}{where}"
            )
        self.untrained = 0 if kept else self.untrained + 1
        most = self.sampling.max_untrained_steps
        if most and self.untrained >= most:
            raise RunHalted(
                f"step {step}: no group kept for {self.untrained} steps in a row, at "
                f"sampling.max_untrained_steps={most} (each group's rewards were all equal, "
                "or it held a crashed episode)"
            )
