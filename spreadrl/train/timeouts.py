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

from spreadrl.train.config import GRPOConfig, SFTConfig

BASE_S = 600.0
# a 4B full fine-tune's checkpoint is ~45 GiB (fp32 weights 15 GiB, Adam 30 GiB): about
# 8 minutes at 100 MB/s, the slow end of a shared filesystem; doubled, then rounded up
CHECKPOINT_S = 1800.0


def rollout_rounds(cfg: GRPOConfig) -> int:
    """Rollout rounds a GRPO step can run: 1, or 1 + refill rounds under refill sampling."""
    if cfg.sampling.mode == "refill":
        return 1 + int(cfg.sampling.max_refill_rounds)
    return 1


def collective_timeout_s(cfg: GRPOConfig | SFTConfig) -> float:
    """Seconds a collective may wait before the process group aborts it (see module doc).

    ``cfg`` is a GRPO or SFT config; a recipe without rollouts (SFT) gets the base
    plus the checkpoint allowance.
    """
    total = BASE_S + CHECKPOINT_S
    if not isinstance(cfg, GRPOConfig):
        return total
    wall = float(cfg.rollout.episode_wall_time_s)
    total += wall * rollout_rounds(cfg)
    if cfg.eval.every_steps > 0:
        total += wall  # one batch of held-out episodes after some steps
    return total
