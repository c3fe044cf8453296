"""How long a rank may wait for the others in one collective, sized from the recipe.

torch's NCCL watchdog aborts a collective after 10 minutes by default. Ranks of a
GRPO run legitimately drift further apart than that: each rolls out its own
episodes, and the slowest rank's episodes may run until ``episode_wall_time_s``
(15 minutes in the 4B presets) in every rollout round, while a faster rank
already waits in the step's first collective. Rank 0 also writes checkpoints
while the others wait in a barrier. So the process group is given

    base + episode_wall_time_s x rollout rounds + (one more wall time when the
    held-out eval runs) + checkpoint allowance

where the rounds are 1, plus ``sampling.max_refill_rounds`` under
``sampling.mode=refill``. The base is torch's own default (600 s), which covers
ordinary skew: a turn's tools finishing past the wall clock, scoring, the
log-prob passes and the update, which run in lockstep.

Not handled: a hang is noticed only after this long; that is the price of not
aborting a healthy run.
"""

from __future__ import annotations

from spreadrl.eval.config import EvalConfig
from spreadrl.rollout.config import RolloutConfig
from spreadrl.train.config import DynamicSamplingConfig

BASE_S = 600.0
# a 4B full fine-tune's checkpoint is ~45 GiB (fp32 weights 15 GiB, Adam 30 GiB): about
# 8 minutes at 100 MB/s, the slow end of a shared filesystem; doubled, then rounded up
CHECKPOINT_S = 1800.0


def rollout_rounds(sampling: DynamicSamplingConfig) -> int:
    """Rollout rounds a GRPO step can run: 1, or 1 + refill rounds under refill sampling."""
    if sampling.mode == "refill":
        return 1 + int(sampling.max_refill_rounds)
    return 1


def rollout_wait_s(
    rollout: RolloutConfig, sampling: DynamicSamplingConfig, evaluation: EvalConfig
) -> float:
    """How much longer one rank's episodes may keep it after a GRPO step's rollouts began
    than another's: ``episode_wall_time_s`` per rollout round, and one more when the
    held-out eval runs."""
    wall = float(rollout.episode_wall_time_s)
    total = wall * rollout_rounds(sampling)
    if evaluation.every_steps > 0:
        total += wall  # one batch of held-out episodes after some steps
    return total


def collective_timeout_s(rollout_wait: float = 0.0) -> float:
    """Seconds a collective may wait before the process group aborts it (see module doc):
    the base, the checkpoint allowance, and ``rollout_wait`` (:func:`rollout_wait_s`; a
    recipe without rollouts, SFT, has none)."""
    return BASE_S + CHECKPOINT_S + rollout_wait
