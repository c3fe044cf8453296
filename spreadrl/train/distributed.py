"""Data parallel training with torchrun + FSDP2; a no-op in a single process.

Launch the same recipe with ``torchrun --nproc-per-node N -m spreadrl grpo ...``
(multi-node: add torchrun's ``--nnodes/--node-rank/--rdzv-endpoint`` flags).
Each rank rolls out its own share of the prompts (whole GRPO groups, so
advantages stay local), and the update is sharded with
``torch.distributed.fsdp.fully_shard``: one FSDP unit per decoder layer plus
the root, bf16 compute over fp32 master weights with fp32 reduction when
``model.dtype`` asks for bf16 (:mod:`spreadrl.train.precision`).

FSDP issues collectives in every forward and backward, so all ranks must run
the same number of them. Generation and log-prob passes therefore run with
the parameters gathered once (``gathered_params``), free of collectives, and
the update pads every rank to the same number of micro-batches with
zero-weight ones.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn
from torch.optim import Optimizer

from spreadrl.errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: str = "cpu"
    # started by torchrun: FSDP2 and the process group are used even with one process
    # (``torchrun --nproc-per-node 1`` measures the sharded path on one GPU)
    launched: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1 or self.launched


def init_distributed(device: str, *, timeout_s: float | None = None) -> DistInfo:
    """Join the torchrun process group when launched by torchrun; else single process.

    ``timeout_s``: how long one collective may wait for the slowest rank before the
    group aborts it (:func:`spreadrl.train.timeouts.collective_timeout_s` sizes it
    from the recipe); None keeps torch's default (10 minutes under NCCL).
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    launched = "TORCHELASTIC_RUN_ID" in os.environ  # set by torchrun for its workers
    if world <= 1 and not launched:
        return DistInfo(device=device)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    else:
        device = "cpu"
    if not dist.is_initialized():
        kwargs: dict[str, Any] = {}
        if timeout_s is not None:
            from datetime import timedelta

            kwargs["timeout"] = timedelta(seconds=timeout_s)
        dist.init_process_group("nccl" if use_cuda else "gloo", **kwargs)
    return DistInfo(dist.get_rank(), dist.get_world_size(), local_rank, device, launched)


def shard_model(
    model: nn.Module, info: DistInfo, *, compute_dtype: str = "float32", cpu_offload: bool = False
) -> nn.Module:
    """FSDP2-shard ``model`` in place: each decoder layer, then the root.

    ``compute_dtype`` other than float32 becomes FSDP2's mixed-precision policy:
    shards stay in their own dtype (float32 master weights), units are gathered in
    ``compute_dtype`` for forward and backward, and gradients are reduce-scattered
    in float32 (:mod:`spreadrl.train.precision`). ``cpu_offload`` is FSDP2's
    ``CPUOffloadPolicy``: the shards, their gradients and so the optimizer state
    live in CPU memory, so it needs the FSDP2 path (torchrun, one process or more).
    """
    if cpu_offload and not info.enabled:
        raise ConfigError(
            "model.cpu_offload works through FSDP2: launch with torchrun "
            "(`torchrun --nproc-per-node N -m spreadrl ...`, N = 1 on one GPU)"
        )
    if not info.enabled:
        return model
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    kwargs: dict[str, Any] = {}
    if compute_dtype != "float32":
        kwargs["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=getattr(torch, compute_dtype), reduce_dtype=torch.float32
        )
    if cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks of a (possibly peft-wrapped) causal LM."""
    inner = model
    for attr in ("base_model", "model"):
        while hasattr(inner, attr) and not hasattr(inner, "layers"):
            inner = getattr(inner, attr)
    return list(getattr(inner, "layers", []))


@contextlib.contextmanager
def gathered_params(model: nn.Module, *, enabled: bool = True) -> Iterator[None]:
    """Keep FSDP parameters unsharded so ranks can run different numbers of forwards.

    ``enabled=False`` leaves them sharded: a colocated engine generates with its
    own copy, and a gathered full copy would only take its memory.
    """
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch without FSDP2
        yield
        return
    if not enabled:
        yield
        return
    modules = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for m in modules:
        m.unshard()
        m.set_reshard_after_forward(False)
    try:
        yield
    finally:
        for m in modules:
            m.reshard()
            m.set_reshard_after_forward(True)


def reshard(model: nn.Module) -> None:
    """Free every FSDP unit's gathered parameters, keeping only this rank's shards.

    After a no-grad forward the root unit keeps its parameters gathered (FSDP2
    leaves the root unsharded after forward by default); before a colocated engine
    wakes, nothing but the shards may stay.
    """
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch without FSDP2
        return
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.reshard()


def release_for_generation(model: nn.Module, optimizer: Optimizer, device: str) -> None:
    """Hand the memory the update used back before a rollout engine wakes on the same GPU.

    Gradients are freed (``zero_grad(set_to_none=True)``: a full fine-tune's fp32
    gradients are as large as its master weights), FSDP units drop any gathered
    parameters (only this rank's shards stay), and on CUDA the caching allocator
    returns its free blocks to the driver, where vLLM's allocator can take them
    (vLLM allocates outside torch's cache and cannot reuse its blocks).
    """
    optimizer.zero_grad(set_to_none=True)
    reshard(model)
    if str(device).startswith("cuda"):
        torch.cuda.empty_cache()


def is_fsdp(model: nn.Module) -> bool:
    """Whether FSDP2 shards ``model`` (or any module inside it)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch without FSDP2
        return False
    return any(isinstance(m, FSDPModule) for m in model.modules())


def all_reduce(value: float, op: str = "sum") -> float:
    """Sum or max of a number over ranks (the number itself in a single process)."""
    return all_reduce_values([value], op)[0]


def all_reduce_sums(values: Sequence[float]) -> list[float]:
    """Each number summed over ranks, in one collective (the numbers themselves in a single
    process): a step's counts cost one synchronisation, not one each."""
    return [float(v) for v in all_reduce_values(values)]


def all_reduce_values(values: Sequence[float], op: str = "sum") -> list[float]:
    """Each number's sum (or max) over ranks, all in one collective; in a single process the
    numbers themselves, unchanged."""
    if not (dist.is_available() and dist.is_initialized()):
        return list(values)
    tensor = torch.tensor([float(v) for v in values], dtype=torch.float64)
    if dist.get_backend() == "nccl":
        tensor = tensor.cuda()
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return [float(v) for v in tensor.tolist()]


def rank_slice(items: Sequence[T], info: DistInfo) -> list[T]:
    """This rank's share of a list that every rank computed identically."""
    return list(items[info.rank :: info.world_size])


def cleanup() -> None:
    """Leave the process group cleanly: wait for every rank, then destroy it.

    The barrier keeps a rank from tearing its connections down while a peer is
    still in a collective (saving the final model gathers weights). Without an
    explicit destroy, the backend's worker threads outlive the interpreter's
    shutdown, where gloo's have been seen to abort the process ("terminate
    called without an active exception") after a run that succeeded.
    Call it on every rank, at the same point, and only on the normal path
    (a rank that failed would leave the others waiting in the barrier).
    """
    if dist.is_available() and dist.is_initialized():
        if dist.get_backend() == "nccl":  # name the GPU (set in init_distributed): no warning
            dist.barrier(device_ids=[torch.cuda.current_device()])
        else:
            dist.barrier()
        dist.destroy_process_group()
