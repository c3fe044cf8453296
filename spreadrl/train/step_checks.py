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
from spreadrl.train.distributed import all_reduce

log = logging.getLogger(__name__)


@dataclass
class StepChecks:
    """The run's two stop rules; ``untrained`` counts the kept-nothing steps in a row."""

    sampling: DynamicSamplingConfig
    untrained: int = 0

    def check(self, step: int, trajs: list[Trajectory], keep: torch.Tensor) -> None:
        """Both rules on the step's rollouts, before its update (every rank alike)."""
        self.crashes(step, trajs)
        self.kept(step, keep)

    def crashes(self, step: int, trajs: list[Trajectory]) -> int:
        """The step's crashed episodes over all ranks; raise when they are too many.

        The first crash's whole traceback goes to the log before the one-line stop."""
        crashed = [t for t in trajs if t.crashed]
        count = int(all_reduce(float(len(crashed))))
        episodes = int(all_reduce(float(len(trajs))))
        limit = self.sampling.max_crashed_fraction
        if count and count > limit * episodes:
            first = crashed[0] if crashed else None
            if first is not None:
                log.error("episode %s crashed:\n%s", first.key, first.traceback or first.error)
            where = f"; first: {first.key}: {_first_line(first.error)}" if first else ""
            raise RunHalted(
                f"step {step}: {count} of {episodes} episodes crashed, above "
                f"sampling.max_crashed_fraction={limit:g}{where}"
            )
        return count

    def kept(self, step: int, keep: torch.Tensor) -> None:
        """Count a step that kept no group (over all ranks); raise at the limit in a row."""
        kept = all_reduce(float(keep.sum()))
        self.untrained = 0 if kept else self.untrained + 1
        limit = self.sampling.max_untrained_steps
        if limit and self.untrained >= limit:
            raise RunHalted(
                f"step {step}: no group kept for {self.untrained} steps in a row, at "
                f"sampling.max_untrained_steps={limit} (each group's rewards were all equal, "
                "or it held a crashed episode)"
            )


def _first_line(text: str | None) -> str:
    return (text or "").splitlines()[0] if text else "unknown error"
