"""Colocated vLLM rollouts: the trainer's weights reach the engine before each step.

Two ways, ``rollout.weight_sync``:

- ``ipc`` (:class:`IPCSync`, colocated on one CUDA GPU): vLLM's own API for RL
  trainers, ``vllm.distributed.weight_transfer`` with its ``ipc`` backend: the
  trainer exports each tensor as a CUDA IPC handle and the engine's worker maps it
  and loads it in place. The engine is created with
  ``weight_transfer_config={"backend": "ipc"}`` and
  ``VLLM_ALLOW_INSECURE_SERIALIZATION=1``, without which vLLM's msgpack refuses the
  handles (:func:`spreadrl.rollout.engines.vllm.allow_ipc_handles`).
- ``files`` (:class:`FilesSync`, any device, the path CI runs on vLLM's CPU build):
  the weights are written as safetensors shards to a fresh folder in shared memory
  (``/dev/shm``), then every worker reloads them in place
  (``collective_rpc("reload_weights", kwargs={"weights_path": folder})``, vLLM's
  worker method; only a path crosses the process boundary) and the folder is
  removed. Tensors cannot go through ``collective_rpc`` on the multiprocess
  executor ("cannot pickle memoryview objects"), and ``model.load_weights`` on a
  live CPU engine fails on its prepacked weights; the in-place reload does neither.

Both send what :func:`export_weights` yields: full tensors in the base model's
names, cast to the engine's dtype, tied weights under each name, a LoRA adapter
merged out of place.

Per GRPO step the trainer calls ``before_rollouts(model)`` and
``after_rollouts()`` around generation:

1. wake the engine's weights only (``tags=["weights"]``), send the trainer's
   current weights, then wake the KV cache: waking in two stages avoids holding
   the KV cache while new weights arrive (vLLM's sleep-mode documentation for RL);
2. generate;
3. sleep at level 2 (weights and KV cache dropped: the weights are replaced
   before the next generation anyway) so the update has the GPU memory. vLLM's
   CPU build has no sleep mode: there the engine stays awake.

Under FSDP each full tensor is gathered when it is sent; vLLM serves the merged
function the trainer computes and never sees a LoRA adapter.

Under torchrun every rank has its own engine, in its own process, on the rank's
GPU (:class:`spreadrl.rollout.engines.vllm.VLLMPolicy` ``local_rank``), and
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

import functools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # vLLM is the gpu extra: imported when a sync is built, never here
    from vllm import LLM
    from vllm.distributed.weight_transfer.base import (
        ParamMeta,
        TrainerWeightTransferEngine,
        WeightSource,
    )

    from spreadrl.rollout.engines.vllm import VLLMPolicy

SHARD_BYTES = 1 << 30
"""FilesSync writes shards of about this size, each moved to the CPU on its own, so
the export holds one shard beside the model rather than a second copy of it."""


def export_weights(
    model: torch.nn.Module, dtype: torch.dtype | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, full tensor) pairs in the base model's naming, as vLLM's loader expects.

    ``dtype`` is the engine's (its copy is always in its own dtype, whatever the
    trainer keeps: float32 master weights are cast here, once per sync). A weight
    tied to another (Qwen3's ``lm_head`` = ``embed_tokens``) is sent under both
    names: vLLM's in-place reload (layerwise, vllm/model_executor/model_loader/
    reload/layerwise.py) rebuilds each layer's tensors on its own, which unties the
    engine's head, and only a ``lm_head.weight`` of its own refills it. Sending the
    embedding alone left the CPU build's head at the old weights (log-probs off by
    2.2 nats after a change, tests/vllm/test_grpo.py). A LoRA adapter is merged out of place, ``W + scale * B @ A`` computed in
    float32 into a new tensor: the trainer's modules and weights are never touched
    (``merge_adapter``/``unmerge_adapter`` would round the base weights through
    their own dtype twice per sync, a drift in bf16)."""
    peft = _is_peft(model)
    deltas = _lora_layers(model) if peft else {}
    for name, tensor in _exported_state(model, peft):
        value = _full(tensor).detach()
        layer = deltas.get(name)
        if layer is not None:
            value = value.float() + _lora_delta(layer)
        if dtype is not None and value.dtype != dtype:
            value = value.to(dtype)
        yield _base_name(name), value


def export_metadata(
    model: torch.nn.Module, dtype: torch.dtype | None = None
) -> list[tuple[str, torch.dtype, tuple[int, ...]]]:
    """(name, dtype, full shape) of what :func:`export_weights` yields, without
    gathering or merging anything (a DTensor reports its global shape)."""
    return [
        (_base_name(n), dtype if dtype is not None else t.dtype, tuple(t.shape))
        for n, t in _exported_state(model, _is_peft(model))
    ]


def _full(tensor: torch.Tensor) -> torch.Tensor:
    full = getattr(tensor, "full_tensor", None)  # an FSDP2 shard: gathered here
    return full() if full is not None else tensor


def _is_peft(model: torch.nn.Module) -> bool:
    return hasattr(model, "merge_adapter") and hasattr(model, "unmerge_adapter")


def _exported_state(model: torch.nn.Module, peft: bool) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor of ``state_dict`` under its base-model name, tied ones under each
    of their names (see :func:`export_weights`), LoRA's own tensors left out."""
    for name, tensor in model.state_dict().items():
        if peft and ("lora_" in name or "modules_to_save" in name):
            continue
        yield name, tensor


def _lora_layers(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """``<module>.base_layer.weight`` -> the LoRA layer that adds to it, for layers
    with an active, unmerged adapter."""
    layers = {}
    for name, module in model.named_modules():
        lora_a = getattr(module, "lora_A", None)
        if lora_a is None or not hasattr(module, "base_layer") or module.merged:
            continue
        if getattr(module, "lora_embedding_A", None):
            raise NotImplementedError(f"exporting a LoRA embedding adapter ({name}) to vLLM")
        if any(a in lora_a for a in module.active_adapters):
            layers[f"{name}.base_layer.weight"] = module
    return layers


def _lora_delta(layer: torch.nn.Module) -> torch.Tensor:
    """``scale * B @ A`` of every active adapter of a LoRA linear layer, in float32
    (:func:`_lora_layers` keeps only layers with at least one).

    Raises:
        NotImplementedError: for adapter variants this does not compute (DoRA).
    """
    delta = None
    for adapter in layer.active_adapters:
        if adapter not in layer.lora_A:
            continue
        if getattr(layer, "use_dora", {}).get(adapter):
            raise NotImplementedError(f"exporting a DoRA adapter ({adapter}) to vLLM")
        a = _full(layer.lora_A[adapter].weight).detach().float()
        b = _full(layer.lora_B[adapter].weight).detach().float()
        d = (b @ a) * layer.scaling[adapter]
        if getattr(layer, "fan_in_fan_out", False):
            d = d.T
        delta = d if delta is None else delta + d
    return delta


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

    def __init__(self, llm: LLM) -> None:
        self.llm = llm

    def init_weight_transfer_engine(self, init_info: dict[str, object]) -> None:
        self.llm.init_weight_transfer_engine(request={"init_info": init_info})

    def start_weight_update(self) -> None:
        self.llm.start_weight_update()

    def update_weights(self, update_info: dict[str, object]) -> None:
        self.llm.update_weights(request={"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.llm.finish_weight_update(weight_version=weight_version)


def weight_source(model: torch.nn.Module, dtype: torch.dtype | None = None) -> WeightSource:
    """A ``vllm.distributed.weight_transfer.WeightSource`` over the trainer's model:
    what :func:`export_weights` yields. vLLM 0.33 asks a source for ``metadata`` (a
    cached property) and ``iter_full()``; 0.32 for ``metadata()`` and iteration."""
    from vllm.distributed.weight_transfer import WeightSource

    if "iter_full" in vars(WeightSource):
        return _source(model, dtype)
    return _source_032(model, dtype)


def _metas(module: torch.nn.Module, dtype: torch.dtype | None) -> list[ParamMeta]:
    from vllm.distributed.weight_transfer import ParamMeta

    return [ParamMeta(name=n, dtype=d, shape=s) for n, d, s in export_metadata(module, dtype)]


def _source(model: torch.nn.Module, dtype: torch.dtype | None) -> WeightSource:
    """vLLM 0.33's source (each class is defined only where its vLLM is installed:
    0.33 checks at subclassing that ``metadata`` is a cached property)."""
    from vllm.distributed.weight_transfer import WeightSource

    class PolicySource(WeightSource):
        def __init__(self, module: torch.nn.Module) -> None:
            self.module = module

        @functools.cached_property
        def metadata(self) -> list[ParamMeta]:
            return _metas(self.module, dtype)

        def iter_full(self) -> Iterator[tuple[str, torch.Tensor]]:
            return export_weights(self.module, dtype)

    return PolicySource(model)


def _source_032(model: torch.nn.Module, dtype: torch.dtype | None) -> WeightSource:
    """vLLM 0.32's source: ``metadata()`` a method, the tensors by iteration."""
    from vllm.distributed.weight_transfer import WeightSource

    class PolicySource(WeightSource):
        def __init__(self, module: torch.nn.Module) -> None:
            self.module = module

        def metadata(self) -> list[ParamMeta]:
            return _metas(self.module, dtype)

        def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
            return export_weights(self.module, dtype)

    return PolicySource(model)


def engine_dtype(policy: VLLMPolicy) -> torch.dtype | None:
    """The torch dtype the engine was built with, or None for "auto" (no cast)."""
    name = policy.dtype
    return None if name in (None, "auto") else getattr(torch, name)


class IPCSync:
    """Weights through vLLM's weight-transfer engine, ``ipc`` backend (one CUDA GPU)."""

    def __init__(self, policy: VLLMPolicy, *, packed: bool = True) -> None:
        self.policy = policy
        self.packed = packed  # stream through a bounded buffer, not one copy of every tensor
        self.sender: TrainerWeightTransferEngine | None = None

    def _connect(self, model: torch.nn.Module) -> TrainerWeightTransferEngine:
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
        source = weight_source(model, engine_dtype(self.policy))
        return WeightTransferTrainerFactory.trainer_init(
            info, client=EngineClient(self.policy.llm), source=source
        )

    def send(self, model: torch.nn.Module) -> None:
        if self.sender is None:
            self.sender = self._connect(model)
        self.sender.send_weights()


def shared_memory_root() -> str:
    """Where FilesSync writes: ``/dev/shm`` (RAM, no disk) when it is there and
    writable, else the temporary folder."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return shm
    return tempfile.gettempdir()


class FilesSync:
    """Weights as safetensors shards in a shared-memory folder, reloaded in place by
    every worker of the engine (vLLM's ``reload_weights``); runs wherever vLLM runs."""

    def __init__(
        self, policy: VLLMPolicy, *, root: str | None = None, shard_bytes: int = SHARD_BYTES
    ) -> None:
        self.policy = policy
        self.root = root or shared_memory_root()
        self.shard_bytes = shard_bytes

    def write(self, model: torch.nn.Module, folder: Path) -> list[Path]:
        """The export as shards ``model-00001.safetensors``...; vLLM's loader reads every
        ``*.safetensors`` of a folder that has no index."""
        from safetensors.torch import save_file

        shards: list[Path] = []
        pending: dict[str, torch.Tensor] = {}
        size = 0

        def flush() -> None:
            nonlocal pending, size
            if pending:
                path = folder / f"model-{len(shards) + 1:05d}.safetensors"
                save_file(pending, str(path))
                shards.append(path)
            pending, size = {}, 0

        for name, tensor in export_weights(model, engine_dtype(self.policy)):
            value = tensor.contiguous().cpu()
            if any(value.data_ptr() == t.data_ptr() for t in pending.values()):
                flush()  # a tied weight: safetensors refuses shared memory within a file
            pending[name] = value
            size += tensor.numel() * tensor.element_size()
            if size >= self.shard_bytes:
                flush()
        flush()
        return shards

    def send(self, model: torch.nn.Module) -> None:
        folder = Path(tempfile.mkdtemp(prefix="spreadrl-weights-", dir=self.root))
        try:
            self.write(model, folder)
            self.policy.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(folder)})
        finally:
            shutil.rmtree(folder, ignore_errors=True)


SYNCS = {"ipc": IPCSync, "files": FilesSync}


class ColocatedRollouts:
    """Drives a VLLMPolicy's sleep/wake cycle and weight sync around each step's rollouts."""

    def __init__(
        self, policy: VLLMPolicy, *, sleep_level: int = 2, packed: bool = True, sync: str = "ipc"
    ) -> None:
        self.policy = policy
        self.sleep_level = sleep_level
        if sync not in SYNCS:
            raise ValueError(f"weight sync must be one of {sorted(SYNCS)}, got {sync!r}")
        self.sync: IPCSync | FilesSync = (
            IPCSync(policy, packed=packed) if sync == "ipc" else FilesSync(policy)
        )
        self.syncs = 0

    def before_rollouts(self, model: torch.nn.Module) -> None:
        """Load the trainer's current weights into the engine and wake it for generation."""
        asleep = self.policy.sleeping
        if asleep:
            self.policy.wake_up(tags=["weights"])
        self.sync.send(model)
        self.syncs += 1
        if asleep:
            self.policy.wake_up(tags=["kv_cache"])
        else:  # an awake engine may hold KV computed with the previous weights
            self.policy.reset_prefix_cache()

    def after_rollouts(self) -> None:
        """Give the GPU memory back to the trainer for the update (an engine without
        sleep mode, as on vLLM's CPU build, keeps it)."""
        if self.policy.can_sleep:
            self.policy.sleep(level=self.sleep_level)


class FilesReload:
    """The vLLM producer's weight sync: the trainer writes a folder (:meth:`write`, its
    thread, at a step boundary), the producer reloads it between engine steps
    (:meth:`__call__`, its thread) and removes it."""

    def __init__(self, policy: VLLMPolicy, files: FilesSync) -> None:
        self.policy = policy
        self.files = files

    def write(self, model: torch.nn.Module) -> str:
        folder = Path(tempfile.mkdtemp(prefix="spreadrl-async-", dir=self.files.root))
        self.files.write(model, folder)
        return str(folder)

    def __call__(self, payload: object) -> None:
        try:
            self.policy.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(payload)})
        finally:
            self.discard(payload)

    @staticmethod
    def discard(payload: object) -> None:
        shutil.rmtree(str(payload), ignore_errors=True)
