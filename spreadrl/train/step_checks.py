"""Checks between a GRPO step's rollouts and its update that stop a run gone wrong.

Crashed episodes (a tool, worker, environment or engine failed) are never trained
on: their groups are dropped (:func:`spreadrl.train.rollouts.collect_rollouts`).
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

from spreadrl.errors import RunHalted
from spreadrl.rollout.types import Trajectory
from spreadrl.train.config import DynamicSamplingConfig
from spreadrl.train.distributed import all_reduce_sums

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
