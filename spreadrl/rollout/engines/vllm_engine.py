"""The vLLM rollout engine: a colocated engine for GRPO, an engine of its own for eval
and serve, and its share of ``spreadrl plan``.

The policy itself is :mod:`spreadrl.rollout.engines.vllm` (token-in/token-out
sampling); how the trainer's weights reach it is
:mod:`spreadrl.rollout.engines.vllm_sync`. vLLM is imported when an engine is
built, never here. Its functions are called through their module, so a test (or
the CPU CI's shim) that replaces ``require_vllm_gpu`` there replaces it here too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, MutableMapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from spreadrl.errors import ConfigError
from spreadrl.rollout.engine import (
    EngineMemory,
    LoadSpec,
    MemoryQuery,
    PlanView,
    RolloutEngine,
    TrainingSetup,
    WeightFeed,
    require_model,
)
from spreadrl.rollout.engines import vllm as vllm_policy
from spreadrl.rollout.engines.hf import HFEngine, HFPolicy, stop_token_ids
from spreadrl.rollout.engines.vllm_sync import ColocatedRollouts, FilesReload, FilesSync

if TYPE_CHECKING:
    from torch import nn
    from transformers import PreTrainedTokenizerBase

    from spreadrl.rollout.engines.vllm import VLLMPolicy
    from spreadrl.rollout.policy import Policy


GIB = 2**30
VLLM_WORKING_GIB = 1.5  # vLLM's activations at its profiling batch, CUDA graphs, sampler
VLLM_ASLEEP_GIB = 0.5  # what a level-2 sleeping engine keeps (not weights, not KV)


class VLLMEngine:
    """A colocated vLLM engine: a copy of its own on the trainer's GPU.

    Sized from the recipe (``max_model_len`` = prompt budget + response budget,
    ``rollout.vllm_gpu_memory_utilization``), it sleeps during the update and is
    fed the current weights before each rollout phase through
    ``rollout.weight_sync``, resolved once here (:mod:`.vllm_sync`). Under torchrun
    every rank builds its own engine, pinned to the rank's GPU (a fraction of that
    GPU), seeded per rank, fed the rank's gathered weights (docs/vllm.md). Eval and
    serve load an engine of their own that owns the GPU (:meth:`load`)."""

    colocated = True

    def __init__(self, setup: TrainingSetup) -> None:
        """Refuse what cannot run here, in one line, before any model is loaded: a
        recipe that asks for vLLM and got the hf engine instead would run for hours at
        a fraction of the speed, or run out of memory far from the cause."""
        if setup.max_prompt_tokens <= 0:
            raise ConfigError(
                "rollout.backend=vllm needs data.max_prompt_tokens > 0: the engine's KV cache is "
                "sized for data.max_prompt_tokens + rollout.max_response_tokens"
            )
        vllm_policy.require_vllm_gpu()  # under torchrun each rank gets its own engine on its own GPU
        self.weight_sync = vllm_policy.resolve_weight_sync(setup.rollout.weight_sync)
        if setup.asynchronous and self.weight_sync != "files":
            raise ConfigError(
                f"rollout.max_staleness={setup.rollout.max_staleness} with rollout.backend=vllm "
                f"needs rollout.weight_sync=files (got {self.weight_sync}): the ipc sync is not "
                "wired for a producer thread yet"
            )
        self.setup = setup
        self._policy: VLLMPolicy | None = None  # built by start()
        self._cycle: ColocatedRollouts | None = None

    @property
    def policy(self) -> VLLMPolicy:
        if self._policy is None:
            raise RuntimeError("the vllm engine samples once start() has built it")
        return self._policy

    @classmethod
    def for_training(cls, setup: TrainingSetup) -> RolloutEngine:
        return cls(setup)

    @classmethod
    def load(cls, spec: LoadSpec) -> tuple[Policy, PreTrainedTokenizerBase | None]:
        path = require_model("vllm", spec)
        vllm_policy.require_vllm_gpu()  # before loading anything: one clear line, no fallback
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
        engine = vllm_policy.VLLMPolicy(
            path,
            dtype=spec.dtype,
            max_model_len=spec.max_model_len,
            stop_token_ids=stop_token_ids(tokenizer),
        )
        return engine, tokenizer

    @classmethod
    def plan(cls, query: MemoryQuery) -> EngineMemory:
        """``rollout.vllm_gpu_memory_utilization`` x GPU memory beside the trainer: the
        engine's weights, its working memory, the rest KV tokens; asleep during the
        passes and the update."""
        util = query.rollout.vllm_gpu_memory_utilization
        share = util * query.device_bytes
        free = share - query.engine_weights - VLLM_WORKING_GIB * GIB
        kv_tokens = max(0, int(free // query.kv_bytes_per_token))
        return EngineMemory(
            generation=query.resident,
            share=share,
            asleep=VLLM_ASLEEP_GIB * GIB,  # the engine's process, not the trainer's
            kv_tokens=kv_tokens,
            rows=[("vLLM share", share, f"{kv_tokens:,} KV tokens at {util:g}")],
        )

    @classmethod
    def plan_report(
        cls, query: MemoryQuery, plan: PlanView
    ) -> tuple[list[str] | None, list[tuple[str, str, str]]]:
        """What does not fit of the engine's share, each naming the setting to change;
        the plan's line of KV tokens."""
        util = query.rollout.vllm_gpu_memory_utilization
        gib = query.device_bytes / GIB
        floor = query.engine_weights + VLLM_WORKING_GIB * GIB
        least = (floor + plan.max_model_len * query.kv_bytes_per_token) / query.device_bytes
        most = plan.largest_utilization
        problems = []
        if least > most:
            problems.append(
                f"the trainer holds {query.resident_peak / GIB:.1f} GiB per GPU during "
                f"generation, leaving {most:.2f} of {gib:g} GiB for vLLM beside a "
                f"{plan.margin_gib:g} GiB margin, below the {least:.2f} its weights and one "
                f"{plan.max_model_len}-token sequence need: use more GPUs (--gpus) or "
                "model.lora.enabled=true"
            )
        elif plan.spare("generation") < plan.margin_gib:
            problems.append(
                f"generation needs {plan.phases['generation']:.1f} GiB of {gib:g} and a "
                f"{plan.margin_gib:g} GiB margin: set rollout.vllm_gpu_memory_utilization to at "
                f"most {most - 0.005:.2f} (now {util:g})"
            )
        elif plan.kv_tokens < plan.max_model_len:
            problems.append(
                f"vLLM's KV cache holds {plan.kv_tokens:,} tokens, less than one "
                f"{plan.max_model_len}-token sequence: set rollout.vllm_gpu_memory_utilization "
                f"to at least {least + 0.005:.2f} (now {util:g})"
            )
        line = (
            "vLLM KV tokens",
            f"{plan.kv_tokens:,}",
            f"{plan.kv_tokens / max(1, plan.max_model_len):.1f} sequences of "
            f"{plan.max_model_len}; vllm_gpu_memory_utilization fits up to "
            f"{plan.largest_utilization:.2f}",
        )
        return problems, [line]

    @classmethod
    def allows_expandable_segments(cls, environ: MutableMapping[str, str]) -> bool:
        """False when the engine would run inside the trainer's process
        (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): vLLM's sleep-mode allocator refuses
        expandable segments in the process that holds it."""
        return environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") != "0"

    def start(self, model: nn.Module, tokenizer: PreTrainedTokenizerBase) -> list[str]:
        """Build the engine from the model's files; its KV-cache capacity line."""
        s, rollout = self.setup, self.setup.rollout
        max_model_len = s.max_prompt_tokens + rollout.max_response_tokens
        self._policy = vllm_policy.VLLMPolicy(
            s.model_path,
            max_model_len=max_model_len,
            gpu_memory_utilization=rollout.vllm_gpu_memory_utilization,
            enable_sleep_mode=True,
            seed=s.seed + s.rank,
            dtype="bfloat16" if s.model_dtype == "auto" else s.model_dtype,
            weight_transfer=self.weight_sync,
            # under torchrun: one engine per rank, in its own process on the rank's GPU
            local_rank=s.local_rank,
            stop_token_ids=stop_token_ids(tokenizer),
        )
        self._cycle = ColocatedRollouts(self._policy, sync=self.weight_sync)
        kv = engine_kv_tokens(self._policy.llm)
        return [engine_capacity_line(kv, max_model_len, rollout.vllm_gpu_memory_utilization)]

    def sync(self, model: nn.Module) -> None:
        """Wake the engine's weights, load the trainer's, then wake its KV cache."""
        self._started().before_rollouts(model)

    def sleep(self) -> None:
        self._started().after_rollouts()

    def _started(self) -> ColocatedRollouts:
        if self._cycle is None:
            raise RuntimeError("the vllm engine syncs and sleeps once start() has built it")
        return self._cycle

    def eval_engine(self, model: nn.Module, tokenizer: PreTrainedTokenizerBase) -> RolloutEngine:
        """The trainer's own model through transformers: asynchronous mode gives this
        engine to the producer alone."""
        rollout = self.setup.rollout
        batch = rollout.group_size * rollout.prompts_per_step
        return HFEngine(rollout, HFPolicy(model, tokenizer, max_batch_size=batch))

    def producer(
        self,
        model: nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        context: Callable[[nn.Module], AbstractContextManager[object]],
    ) -> WeightFeed:
        """The engine's own processes sample, never put to sleep between steps; the
        trainer writes its weights as safetensors shards to shared memory (the files
        sync) and the producer reloads them in place between two engine steps, so
        requests still running continue under the new weights."""
        reload = FilesReload(self.policy, FilesSync(self.policy))
        return WeightFeed(
            policy=self.policy,
            export=reload.write,
            load=reload,
            context=contextlib.nullcontext,
            discard=reload.discard,
            send_first=True,  # the engine loaded the model's files: the trainer's weights
        )


def engine_kv_tokens(llm: object) -> int | None:
    """The KV-cache capacity, in tokens, of a started ``vllm.LLM`` (None if it does not say)."""
    cache = getattr(
        getattr(getattr(llm, "llm_engine", None), "vllm_config", None), "cache_config", None
    )
    blocks = getattr(cache, "num_gpu_blocks", None)
    size = getattr(cache, "block_size", None)
    if isinstance(blocks, int) and isinstance(size, int) and blocks > 0:
        return blocks * size
    return None


def engine_capacity_line(kv_tokens: int | None, max_model_len: int, utilization: float) -> str:
    """The start-up line that says how many tokens the engine's KV cache holds."""
    if kv_tokens is None:
        return (
            f"vLLM engine at rollout.vllm_gpu_memory_utilization={utilization:g}: KV-cache size "
            "not reported by this vLLM"
        )
    return (
        f"vLLM engine at rollout.vllm_gpu_memory_utilization={utilization:g}: KV cache of "
        f"{kv_tokens:,} tokens ({kv_tokens / max(1, max_model_len):.1f} sequences of "
        f"{max_model_len} tokens); `spreadrl plan` sizes it before a run"
    )
