"""Colocated vLLM rollouts: trainer and engine share the GPU, weights move in memory.

Weights travel through vLLM's own API for RL trainers,
``vllm.distributed.weight_transfer``, with its ``ipc`` backend: the trainer
exports each tensor as a CUDA IPC handle and the engine's worker maps it and
loads it in place. No callable goes through ``collective_rpc`` and no tensor is
pickled through a socket. The engine is created with
``weight_transfer_config={"backend": "ipc"}`` (see
:func:`spreadrl.rollout.vllm_policy.engine_kwargs`).

Per GRPO step the trainer calls ``before_rollouts(model)`` and
``after_rollouts()`` around generation:

1. wake the engine's weights only (``tags=["weights"]``), send the trainer's
   current weights (``start_weight_update``, ``update_weights``,
   ``finish_weight_update``), then wake the KV cache: waking in two stages
   avoids holding the KV cache while new weights arrive (vLLM's sleep-mode
   documentation for RL);
2. generate;
3. sleep at level 2 (weights and KV cache dropped: the weights are replaced
   before the next generation anyway) so the update has the GPU memory.

Under FSDP each full tensor is gathered when it is sent; a LoRA policy is
merged for the export and unmerged after, so vLLM serves the function the
trainer computes (vLLM never sees the adapter).

Under torchrun every rank has its own engine, in its own process, on the rank's
GPU (:class:`spreadrl.rollout.vllm_policy.EngineSettings` ``local_rank``), and
every rank is the sender to its own engine: vLLM's trainer-side ipc engine
all-gathers the handles of all ranks over the default process group and the
sender ships the merged ``{GPU UUID: handle}`` map
(vllm/distributed/weight_transfer/ipc_engine.py:339-376); each engine's worker
opens only the handle of its own physical GPU, by UUID, rebuilt on its own device
index (ipc_engine.py:220-237, packed_tensor.py:460-471). So rank r's engine maps
rank r's copy, on the GPU they share. Coded against vLLM 0.33.0's source, never
run on a GPU (docs/vllm.md).

Not handled: engines on other GPUs than the trainer (vLLM's ``nccl`` backend).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any


def export_weights(model: Any) -> Iterator[tuple[str, Any]]:
    """(name, full tensor) pairs in the base model's naming, as vLLM's loader expects."""
    peft = _is_peft(model)
    with _merged(model) if peft else contextlib.nullcontext():
        for name, tensor in _exported_state(model, peft):
            full = getattr(tensor, "full_tensor", None)
            value = full() if full is not None else tensor
            # merged values are restored in place on unmerge: hand out copies
            yield name, value.detach().clone() if peft else value.detach()


def export_metadata(model: Any) -> list[tuple[str, Any, tuple[int, ...]]]:
    """(name, dtype, full shape) of what :func:`export_weights` yields, without
    gathering or merging anything (a DTensor reports its global shape)."""
    return [(n, t.dtype, tuple(t.shape)) for n, t in _exported_state(model, _is_peft(model))]


def _is_peft(model: Any) -> bool:
    return hasattr(model, "merge_adapter") and hasattr(model, "unmerge_adapter")


def _exported_state(model: Any, peft: bool) -> Iterator[tuple[str, Any]]:
    for name, tensor in model.state_dict().items():
        if peft and ("lora_" in name or "modules_to_save" in name):
            continue
        yield _base_name(name), tensor


@contextlib.contextmanager
def _merged(model: Any) -> Iterator[None]:
    model.merge_adapter()
    try:
        yield
    finally:
        model.unmerge_adapter()


def _base_name(name: str) -> str:
    for prefix in ("base_model.model.",):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    return name.replace(".base_layer.", ".")


class EngineClient:
    """vLLM's ``VLLMWeightSyncClient`` protocol over an offline ``vllm.LLM``.

    A trainer-side transfer engine drives the update through these four calls;
    the offline ``LLM`` takes the same calls wrapped in request dicts
    (``RLOfflineMixin``) and fans them out to its workers by method name."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.llm.init_weight_transfer_engine(request={"init_info": init_info})

    def start_weight_update(self) -> None:
        self.llm.start_weight_update()

    def update_weights(self, update_info: Any) -> None:
        self.llm.update_weights(request={"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.llm.finish_weight_update(weight_version=weight_version)


def weight_source(model: Any) -> Any:
    """A ``vllm.distributed.weight_transfer.WeightSource`` over the trainer's model:
    full tensors (FSDP shards gathered, LoRA merged) under the base model's names."""
    from vllm.distributed.weight_transfer import ParamMeta, WeightSource

    class PolicySource(WeightSource):
        def __init__(self, module: Any) -> None:
            self.module = module

        @functools.cached_property
        def metadata(self) -> list[Any]:
            return [ParamMeta(name=n, dtype=d, shape=s) for n, d, s in export_metadata(self.module)]

        def iter_full(self) -> Iterator[tuple[str, Any]]:
            return export_weights(self.module)

    return PolicySource(model)


class ColocatedRollouts:
    """Drives a VLLMPolicy's sleep/wake cycle and weight sync around each step's rollouts."""

    def __init__(self, policy: Any, *, sleep_level: int = 2, packed: bool = True) -> None:
        self.policy = policy
        self.sleep_level = sleep_level
        self.packed = packed  # stream through a bounded buffer, not one copy of every tensor
        self.sender: Any = None
        self.syncs = 0

    def _connect(self, model: Any) -> Any:
        """The trainer-side ipc engine, built on first use: it records the CUDA device
        current at that moment, which is the trainer's once the model is placed."""
        from vllm.distributed.weight_transfer import WeightTransferTrainerFactory
        from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerInitInfo

        # TrainerInitInfo.rank 0 is the sender, the process that drives the engine's RPCs
        # (base.py:202-204). vLLM's design is N trainer ranks feeding one engine whose
        # workers span their GPUs; here each torchrun rank drives an engine of its own,
        # so every rank is rank 0 of its pair. All ranks still run the handle
        # all-gather and barriers in lockstep (ipc_engine.py:339-386): every rank calls
        # this on the same steps, with the same tensors in the same order.
        info = IPCTrainerInitInfo(rank=0, packed=self.packed)
        return WeightTransferTrainerFactory.trainer_init(
            info, client=EngineClient(self.policy.llm), source=weight_source(model)
        )

    def before_rollouts(self, model: Any) -> None:
        """Load the trainer's current weights into the engine and wake it for generation."""
        if self.sender is None:
            self.sender = self._connect(model)
        asleep = self.policy.sleeping
        if asleep:
            self.policy.wake_up(tags=["weights"])
        self.sender.send_weights()
        self.syncs += 1
        if asleep:
            self.policy.wake_up(tags=["kv_cache"])
        else:  # an awake engine may hold KV computed with the previous weights
            self.policy.reset_prefix_cache()

    def after_rollouts(self) -> None:
        """Give the GPU memory back to the trainer for the update."""
        self.policy.sleep(level=self.sleep_level)
