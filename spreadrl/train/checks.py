"""What a GRPO run refuses at start-up, each in one line, before any model is loaded.

There is no silent fallback: a recipe that cannot run as written (a prompt count
the ranks cannot share, an asynchronous setup that is not wired) stops here,
naming the key to change, rather than hours later or running something other
than what it says. What an engine cannot run here (vLLM without a GPU) the engine
refuses as it is set up, also before any model is loaded.
"""

from __future__ import annotations

from spreadrl.errors import ConfigError
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engine import RolloutEngine
from spreadrl.train.config import GRPOConfig
from spreadrl.train.distributed import DistInfo
from spreadrl.train.rollout_backend import training_engine


def check_grpo(cfg: GRPOConfig, info: DistInfo) -> RolloutEngine:
    """Every start-up refusal of a GRPO run, in the order a user would fix them; the last
    is the rollout engine's, which returns it set up for the run."""
    check_world_size(cfg.rollout, info)
    if cfg.rollout.max_staleness:
        check_async(cfg.rollout, info)
    return training_engine(
        cfg.rollout, cfg.model, info, max_prompt_tokens=cfg.data.max_prompt_tokens, seed=cfg.seed
    )


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
