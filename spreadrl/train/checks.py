"""What a GRPO run refuses at start-up, each in one line, before any model is loaded.

There is no silent fallback: a recipe that cannot run as written (a prompt count
the ranks cannot share, vLLM without a GPU, an asynchronous setup that is not
wired) stops here, naming the key to change, rather than hours later or running
something other than what it says.
"""

from __future__ import annotations

from spreadrl.errors import ConfigError
from spreadrl.rollout.config import RolloutConfig
from spreadrl.train.config import GRPOConfig
from spreadrl.train.distributed import DistInfo


def check_grpo(cfg: GRPOConfig, info: DistInfo) -> None:
    """Every start-up refusal of a GRPO run, in the order a user would fix them."""
    check_world_size(cfg.rollout, info)
    check_rollout_backend(cfg.rollout, cfg.data.max_prompt_tokens)
    if cfg.rollout.max_staleness:
        check_async(cfg.rollout, info, weight_sync(cfg.rollout))


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


def check_rollout_backend(rollout: RolloutConfig, max_prompt_tokens: int) -> None:
    """Refuse a rollout backend that cannot run here.

    A recipe that asks for vLLM and got the hf backend instead would run for hours
    at a fraction of the speed, or run out of memory far from the cause."""
    if rollout.backend != "vllm":
        return
    from spreadrl.rollout.vllm_policy import require_vllm_gpu

    if max_prompt_tokens <= 0:
        raise ConfigError(
            "rollout.backend=vllm needs data.max_prompt_tokens > 0: the engine's KV cache is "
            "sized for data.max_prompt_tokens + rollout.max_response_tokens"
        )
    # under torchrun each rank gets its own engine on its own GPU (build_rollout_policy)
    require_vllm_gpu()


def weight_sync(rollout: RolloutConfig) -> str:
    """``rollout.weight_sync`` resolved (the hf backend has none: "files" stands for it)."""
    if rollout.backend != "vllm":
        return "files"
    from spreadrl.rollout.vllm_policy import resolve_weight_sync

    return resolve_weight_sync(rollout.weight_sync)


def check_async(rollout: RolloutConfig, info: DistInfo, weight_sync: str) -> None:
    """Refuse the asynchronous setups this does not run (``rollout.max_staleness`` > 0).

    ``weight_sync``: the resolved ``rollout.weight_sync`` (ipc or files)."""
    k = rollout.max_staleness
    if info.enabled and info.world_size > 1:
        raise ConfigError(
            f"rollout.max_staleness={k} runs in one process only for now; under torchrun "
            f"(world size {info.world_size}) set rollout.max_staleness=0"
        )
    if rollout.backend == "vllm" and weight_sync != "files":
        raise ConfigError(
            f"rollout.max_staleness={k} with rollout.backend=vllm needs "
            f"rollout.weight_sync=files (got {weight_sync}): the ipc sync is not wired "
            "for a producer thread yet"
        )
