"""Which engine samples a GRPO run's episodes, and how it shares the GPU with the trainer.

The hf backend samples with the trainer's own model (FSDP parameters gathered,
forwards in the compute dtype); the vLLM backend is a colocated engine with its
own copy, woken and fed the current weights before each rollout phase and put to
sleep after it (:class:`spreadrl.rollout.colocate.ColocatedRollouts`).
:func:`generating` is the one place the two differ during the loop.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from torch import nn
from transformers import PreTrainedTokenizerBase

from spreadrl.reporting import Reporter
from spreadrl.rollout.colocate import ColocatedRollouts
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.hf_policy import HFPolicy, stop_token_ids
from spreadrl.rollout.policy import Policy
from spreadrl.train.config import ModelConfig
from spreadrl.train.distributed import DistInfo, gathered_params
from spreadrl.train.logprobs import compute_context
from spreadrl.train.plan import engine_capacity_line, engine_kv_tokens

log = logging.getLogger(__name__)


def build_rollout_policy(
    rollout: RolloutConfig,
    model_cfg: ModelConfig,
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    info: DistInfo,
    reporter: Reporter,
    *,
    max_prompt_tokens: int,
    seed: int,
) -> tuple[Policy, ColocatedRollouts | None]:
    """The trainer's own model through transformers, or a colocated vLLM engine.

    The vLLM engine is sized from the recipe (``max_model_len`` = prompt budget +
    response budget, ``rollout.vllm_gpu_memory_utilization``), sleeps during the
    update and receives new weights through vLLM's weight-transfer API. Under
    torchrun every rank builds its own engine, pinned to the rank's GPU (a fraction
    of that GPU), seeded per rank, fed the rank's gathered weights (docs/vllm.md).

    Why this is not :func:`spreadrl.rollout.backends.load_policy` (which eval and
    serve use): the two take different inputs and must build different things, so
    one function would change one side's behaviour or hide a branch per caller.
    Here the hf policy wraps the very module being trained (FSDP- or LoRA-wrapped,
    so each step samples the updated weights) where ``load_policy`` loads a
    checkpoint from a path; the batch is ``group_size * prompts_per_step``, not
    eval's ``--batch-size``; and the vLLM engine shares the GPU with the trainer
    (a memory fraction, sleep mode, ipc weight transfer, a seed per rank, a KV
    cache bounded by the recipe's budgets) where eval's owns the GPU and serves
    fixed weights. openai, oracle and noop exist only for eval. What both share,
    the stop ids and :class:`~spreadrl.rollout.vllm_policy.VLLMPolicy` itself, is
    already shared.
    """
    batch = rollout.group_size * rollout.prompts_per_step
    if rollout.backend == "vllm":
        # vllm is an optional, GPU-only dependency: imported only when asked for
        from spreadrl.rollout.vllm_policy import VLLMPolicy, resolve_weight_sync

        sync = resolve_weight_sync(rollout.weight_sync)
        max_model_len = max_prompt_tokens + rollout.max_response_tokens
        engine = VLLMPolicy(
            model_cfg.name_or_path,
            max_model_len=max_model_len,
            gpu_memory_utilization=rollout.vllm_gpu_memory_utilization,
            enable_sleep_mode=True,
            seed=seed + info.rank,
            dtype="bfloat16" if model_cfg.dtype == "auto" else model_cfg.dtype,
            weight_transfer=sync,
            # under torchrun: one engine per rank, in its own process on the rank's GPU
            local_rank=info.local_rank if info.enabled else None,
            stop_token_ids=stop_token_ids(tokenizer),
        )
        line = engine_capacity_line(
            engine_kv_tokens(engine.llm), max_model_len, rollout.vllm_gpu_memory_utilization
        )
        log.info(line)
        if info.is_main:
            reporter.line(line)
        return engine, ColocatedRollouts(engine, sync=sync)
    policy = HFPolicy(model, tokenizer, max_batch_size=batch, static_cache=rollout.hf_static_cache)
    return policy, None


@contextlib.contextmanager
def generating(
    model: nn.Module, colocated: ColocatedRollouts | None, compute_dtype: str
) -> Iterator[None]:
    """Where a rollout phase runs: the engine awake with the current weights, or the
    trainer's model gathered and in its compute dtype.

    The hf backend samples with the trainer's model (gathered: ranks run different
    numbers of forwards); a colocated engine has its own copy, so nothing is
    gathered, and it sleeps again afterwards to give the GPU back to the update.
    """
    if colocated is not None:
        colocated.before_rollouts(model)
    own = colocated is None
    with (
        gathered_params(model, enabled=own),
        compute_context(model, compute_dtype if own else "float32"),
    ):
        yield
    if colocated is not None:
        colocated.after_rollouts()
