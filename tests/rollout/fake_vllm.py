"""A stand-in for the slice of vLLM that spreadrl uses (no GPU and no vLLM in the tests).

Every callable here declares exactly the parameters recorded for it in
``spreadrl/rollout/vllm_surface.py`` (no ``**kwargs``), and
``tests/rollout/test_vllm_surface.py`` checks that, so spreadrl code that passes
an argument vLLM would refuse fails here too. The fakes also keep the states
vLLM enforces: no generation while asleep, weights only between
``start_weight_update`` and ``finish_weight_update`` and only into awake
weights, weight transfer only when the engine was built with a transfer config.

Weights travel as vLLM's ipc backend ships them: each trainer rank contributes
``{GPU UUID: handle}`` (here the handle is a copy of the tensor), the ranks
all-gather them over the default process group, the sender (``rank == 0``) ships
the merged map, and the engine opens only the handle of its own GPU's UUID (and
fails, as vLLM does, when its GPU is not in the map). A fake engine's GPU is
``device_ids[0]`` (vLLM's logical GPU 0 when none is given); a fake trainer's is
CUDA's current device or, on CPU, ``LOCAL_RANK``: the GPU that
``spreadrl.train.distributed.init_distributed`` selects for a torchrun rank.

``install(monkeypatch, llm_cls)`` puts the fake package in ``sys.modules``.
"""

from __future__ import annotations

import collections
import enum
import functools
import os
import sys
import types
from dataclasses import dataclass, field
from typing import Any, ClassVar

from spreadrl.rollout.vllm_surface import SURFACE

# literal values vLLM accepts, as recorded (the contract check reads them from the wheel)
SLEEP_TAGS = frozenset(SURFACE["sleep_tags"].values)
TRANSFER_BACKENDS = SURFACE["WeightTransferConfig.backend"].values
LOGPROBS_MODES = ("raw_logprobs", *SURFACE["logprobs_mode"].values)  # raw_logprobs: the default
UPDATE_INFO_KEYS = {"names", "dtype_names", "shapes", "ipc_handles", "tensor_sizes"}


def gpu_uuid(index: int | str) -> str:
    """The fake physical UUID of a visible GPU index (or a UUID given as is)."""
    return index if isinstance(index, str) else f"GPU-fake-{index}"


def launcher_env() -> dict[str, str]:
    """torchrun's variables and VLLM_CACHE_ROOT as this process's environment has them:
    what an engine process spawned now would inherit."""
    return {
        k: v
        for k, v in os.environ.items()
        if k.startswith("TORCHELASTIC_")
        or k in {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
        or k == "VLLM_CACHE_ROOT"
    }


class RequestOutputKind(enum.Enum):
    FINAL_ONLY = 2


class SamplingParams:
    def __init__(
        self,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        max_tokens: int | None = 16,
        logprobs: int | None = None,
        seed: int | None = None,
        stop_token_ids: list[int] | None = None,
        skip_special_tokens: bool = True,
        output_kind: RequestOutputKind | None = None,
    ) -> None:
        if not isinstance(top_k, int) or top_k < -1:  # as vLLM 0.33 validates
            raise ValueError(f"top_k must be 0 (disable), or at least 1, got {top_k}.")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}.")
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.max_tokens = max_tokens
        self.logprobs = logprobs
        self.seed = seed
        self.stop_token_ids = stop_token_ids
        self.skip_special_tokens = skip_special_tokens
        self.output_kind = output_kind


@dataclass
class Logprob:
    logprob: float


@dataclass
class CompletionOutput:
    text: str
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None


class RequestOutput:
    def __init__(self, request_id: str, outputs: list[CompletionOutput], finished: bool) -> None:
        self.request_id = request_id
        self.outputs = outputs
        self.finished = finished


class LLMEngine:
    """add_request, then step() until has_unfinished_requests() is False; each step
    finishes the oldest request and reports the others as unfinished. Requests in
    ``hang`` never finish; requests in ``drop`` finish as aborted; requests in
    ``lose`` vanish at the next step without any output (a lost request id).
    ``calls`` counts the calls of each method."""

    def __init__(self, llm: FakeLLM) -> None:
        self.llm = llm
        self.queue: list[tuple[str, list[int], SamplingParams]] = []
        self.params: list[SamplingParams] = []
        self.hang: set[str] = set()
        self.drop: set[str] = set()
        self.lose: set[str] = set()
        self.aborted: list[str] = []
        self.calls: collections.Counter[str] = collections.Counter()

    def add_request(self, request_id: str, prompt: dict, params: SamplingParams) -> str:
        if not isinstance(request_id, str):
            raise TypeError(f"request_id must be a string, got {type(request_id)}")
        self.calls["add_request"] += 1
        self.llm.check_awake()
        self.llm.events.append(f"add:{request_id}")
        self.queue.append((request_id, list(prompt["prompt_token_ids"]), params))
        self.params.append(params)
        return request_id

    def has_unfinished_requests(self) -> bool:
        self.calls["has_unfinished_requests"] += 1
        return bool(self.queue)

    def step(self) -> list[RequestOutput]:
        self.calls["step"] += 1
        self.llm.check_awake()
        self.queue = [q for q in self.queue if q[0] not in self.lose]
        outs = []
        runnable = [q for q in self.queue if q[0] not in self.hang]
        for i, (rid, ctx, params) in enumerate(runnable):
            if i == 0:
                completion = self.llm.complete(ctx, params)
            else:  # still running: an unfinished output carries nothing final yet
                completion = CompletionOutput("", [], None, None)
            if rid in self.drop:
                completion.finish_reason = "abort"
            outs.append(RequestOutput(rid, [completion], finished=i == 0))
        if runnable:
            self.queue.remove(runnable[0])
        return outs

    def abort_request(self, request_ids: list[str]) -> None:
        self.calls["abort_request"] += 1
        self.aborted.extend(request_ids)
        self.queue = [q for q in self.queue if q[0] not in request_ids]


class FakeLLM:
    """``vllm.LLM``: generates ``[last prompt id + 1, 2]`` with log-prob -0.25 each."""

    instances: ClassVar[list[FakeLLM]] = []

    def __init__(
        self,
        model: str,
        *,
        tensor_parallel_size: int = 1,
        dtype: str = "auto",
        seed: int = 0,
        gpu_memory_utilization: float = 0.92,
        max_model_len: int | None = None,
        enable_sleep_mode: bool = False,
        logprobs_mode: str = "raw_logprobs",
        weight_transfer_config: dict | None = None,
        device_ids: list[int | str] | None = None,
    ) -> None:
        if device_ids:  # as EngineArgs._resolve_device_ids checks them
            if len(set(device_ids)) != len(device_ids):
                raise ValueError(f"--device-ids must not contain duplicates: {device_ids}")
            if len({isinstance(i, str) for i in device_ids}) > 1:
                raise ValueError("--device-ids must not mix integer IDs and UUIDs")
        if logprobs_mode not in LOGPROBS_MODES:
            raise ValueError(f"logprobs_mode {logprobs_mode!r} not in {LOGPROBS_MODES}")
        if weight_transfer_config is not None:
            if set(weight_transfer_config) != {"backend"}:
                raise ValueError(
                    f"WeightTransferConfig takes backend only: {weight_transfer_config}"
                )
            if weight_transfer_config["backend"] not in TRANSFER_BACKENDS:
                raise ValueError(f"unknown weight transfer backend {weight_transfer_config}")
        self.kwargs = {
            "model": model,
            "tensor_parallel_size": tensor_parallel_size,
            "dtype": dtype,
            "seed": seed,
            "gpu_memory_utilization": gpu_memory_utilization,
            "max_model_len": max_model_len,
            "enable_sleep_mode": enable_sleep_mode,
            "logprobs_mode": logprobs_mode,
            "weight_transfer_config": weight_transfer_config,
            "device_ids": device_ids,
        }
        # one GPU per engine here (tensor_parallel_size 1): logical GPU 0
        self.device: int | str = device_ids[0] if device_ids else 0
        self.spawn_env = launcher_env()  # what vLLM's engine process would inherit
        self.packed = False
        self.events: list[str] = []
        self.asleep: set[str] = set()
        self.transfer_ready = False
        self.updating = False
        self.weights: dict[str, Any] = {}
        self.sampling: list[SamplingParams] = []
        self.llm_engine = LLMEngine(self)
        FakeLLM.instances.append(self)

    # -- generation
    def complete(self, prompt_ids: list[int], params: SamplingParams) -> CompletionOutput:
        ids = [prompt_ids[-1] + 1, 2]
        return CompletionOutput("x", ids, [{t: Logprob(-0.25)} for t in ids], "stop")

    def check_awake(self) -> None:
        if self.asleep:
            raise RuntimeError(f"generation while {sorted(self.asleep)} asleep")

    def generate(
        self,
        prompts: list[dict],
        sampling_params: list[SamplingParams] | None = None,
        *,
        use_tqdm: bool = True,
    ) -> list[RequestOutput]:
        self.check_awake()
        self.events.append("generate")
        params = sampling_params or [SamplingParams()] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError("The lengths of prompts and sampling_params must be the same.")
        self.sampling = list(params)
        return [
            RequestOutput(str(i), [self.complete(list(p["prompt_token_ids"]), sp)], True)
            for i, (p, sp) in enumerate(zip(prompts, params, strict=True))
        ]

    # -- sleep mode
    def sleep(self, level: int = 1) -> None:
        if not self.kwargs["enable_sleep_mode"]:
            raise RuntimeError("Sleep mode is not enabled")
        self.events.append(f"sleep{level}")
        self.asleep = set(SLEEP_TAGS)

    def wake_up(self, tags: list[str] | None = None) -> bool:
        if tags is not None and not set(tags) <= SLEEP_TAGS:
            raise ValueError(f"wake_up tags must be in {sorted(SLEEP_TAGS)}, got {tags}")
        self.events.append(f"wake:{','.join(tags) if tags else 'all'}")
        self.asleep -= set(tags) if tags is not None else set(SLEEP_TAGS)
        return not self.asleep

    def reset_prefix_cache(self) -> bool:
        self.events.append("reset_cache")
        return True

    # -- weight transfer (RLOfflineMixin)
    def init_weight_transfer_engine(self, request: dict) -> None:
        if self.kwargs["weight_transfer_config"] is None:
            raise RuntimeError("Weight transfer not configured.")
        info = request["init_info"]
        if set(info) != {"packed"}:
            raise ValueError(f"Invalid init_info: {info}")
        self.packed = bool(info["packed"])
        self.transfer_ready = True

    def start_weight_update(self) -> None:
        if not self.transfer_ready or self.updating:
            raise RuntimeError("start_weight_update out of order")
        self.updating = True
        self.events.append("start_update")

    def update_weights(self, request: dict) -> None:
        info = request["update_info"]
        if not self.updating:
            raise RuntimeError("start_weight_update must be called before update_weights.")
        if "weights" in self.asleep:
            raise RuntimeError("update_weights into sleeping weights")
        if not set(info) <= UPDATE_INFO_KEYS or not {"names", "ipc_handles"} <= set(info):
            raise ValueError(f"Invalid update_info keys: {sorted(info)}")
        if not len(info["names"]) == len(info["dtype_names"]) == len(info["shapes"]):
            raise ValueError("names, dtype_names and shapes differ in length")
        mine = gpu_uuid(self.device)
        handles = info["ipc_handles"]
        if self.packed:  # one map for the chunk (packed_tensor.packed_ipc_consumer)
            if not isinstance(handles, dict) or info.get("tensor_sizes") is None:
                raise ValueError("`tensor_sizes` is required when packed=True")
            tensors = _own_handle(handles, mine)
        else:  # one map per parameter (IPCWeightTransferEngine.receive_weights)
            tensors = [_own_handle(h, mine) for h in handles]
        self.load_weights(list(zip(info["names"], tensors, strict=True)))
        self.events.append("update")

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        if not self.updating:
            raise RuntimeError("finish_weight_update called without a matching start")
        self.updating = False
        self.events.append("finish_update")

    def load_weights(self, weights: list[tuple[str, Any]]) -> None:
        self.weights.update(weights)


def _own_handle(handles: dict[str, Any], uuid: str) -> Any:
    if uuid not in handles:
        raise ValueError(
            f"IPC handle not found for GPU UUID {uuid}. Available UUIDs: {list(handles)}"
        )
    return handles[uuid]


# -- vllm.distributed.weight_transfer


@dataclass(frozen=True)
class ParamMeta:
    name: str
    dtype: Any
    shape: tuple[int, ...]


class WeightSource:
    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        metadata = cls.__dict__.get("metadata")
        if metadata is not None and not isinstance(metadata, functools.cached_property):
            raise TypeError(f"{cls.__name__}.metadata must be a functools.cached_property")

    @property
    def metadata(self) -> list[ParamMeta]:
        raise NotImplementedError

    def owned_names(self, rank: int) -> list[str]:
        return [m.name for m in self.metadata]

    def iter_full(self) -> Any:
        raise NotImplementedError


@dataclass
class TrainerInitInfo:
    backend: ClassVar[str]
    rank: int = field(kw_only=True)


@dataclass
class IPCTrainerInitInfo(TrainerInitInfo):
    backend: ClassVar[str] = "ipc"
    packed: bool = False


class IPCTrainer:
    """The trainer-side ipc engine (``IPCTrainerWeightTransferEngine``): "handles" are
    copies of the tensors, standing for the engine process mapping the trainer's
    memory, keyed by the trainer's GPU UUID and all-gathered over the default process
    group like vLLM's (every rank must call ``send_weights`` together)."""

    def __init__(self, client: Any, source: WeightSource, is_sender: bool, packed: bool) -> None:
        import torch

        self.client = client
        self.source = source
        self.is_sender = is_sender
        self.packed = packed
        on_gpu = torch.cuda.is_available()
        index = torch.cuda.current_device() if on_gpu else int(os.environ.get("LOCAL_RANK", "0"))
        self.gpu_uuid = gpu_uuid(index)

    def send_weights(self) -> None:
        if self.is_sender:
            self.client.start_weight_update()
        pairs = [(n, t.detach().clone()) for n, t in self.source.iter_full()]
        names = [n for n, _ in pairs]
        if names != [m.name for m in self.source.metadata]:
            raise ValueError("iter_full must yield exactly the metadata's names, in order")
        for (_, t), meta in zip(pairs, self.source.metadata, strict=True):
            if tuple(t.shape) != tuple(meta.shape):
                raise ValueError(f"{meta.name}: shape {tuple(t.shape)} != metadata {meta.shape}")
        info: dict[str, Any] = {
            "names": names,
            "dtype_names": [str(t.dtype).split(".")[-1] for _, t in pairs],
            "shapes": [list(t.shape) for _, t in pairs],
        }
        if self.packed:  # one buffer for the chunk
            (handle,) = self._all_gather_and_merge_handles([{self.gpu_uuid: [t for _, t in pairs]}])
            info["ipc_handles"] = handle
            info["tensor_sizes"] = [t.numel() * t.element_size() for _, t in pairs]
        else:
            info["ipc_handles"] = self._all_gather_and_merge_handles(
                [{self.gpu_uuid: t} for _, t in pairs]
            )
        if self.is_sender:
            self.client.update_weights(info)
            self.client.finish_weight_update()
        self._post_send_sync()

    def _all_gather_and_merge_handles(self, handles: list[dict[str, Any]]) -> list[dict[str, Any]]:
        import torch.distributed as dist

        if not dist.is_initialized() or dist.get_world_size() == 1:
            return handles
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, handles)
        dist.barrier()
        if not self.is_sender:
            return [{} for _ in handles]
        merged = []
        for i in range(len(handles)):
            one: dict[str, Any] = {}
            for rank_handles in gathered:
                one.update(rank_handles[i])
            merged.append(one)
        return merged

    @staticmethod
    def _post_send_sync() -> None:
        import torch.distributed as dist

        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.barrier()


class WeightTransferTrainerFactory:
    @classmethod
    def trainer_init(
        cls, init_info: TrainerInitInfo, *, client: Any, source: WeightSource | None = None
    ) -> IPCTrainer:
        if not isinstance(init_info, IPCTrainerInitInfo):
            raise ValueError(f"Invalid weight transfer backend: {init_info}")
        if source is None or type(source).iter_full is WeightSource.iter_full:
            raise TypeError("IPC sends full tensors: the source must implement iter_full()")
        engine = IPCTrainer(client, source, init_info.rank == 0, init_info.packed)
        if engine.is_sender:
            client.init_weight_transfer_engine({"packed": init_info.packed})
        return engine


def install(monkeypatch: Any, llm_cls: type = FakeLLM) -> types.ModuleType:
    """Put the fake package (``vllm`` and the submodules spreadrl imports) in sys.modules."""
    vllm = types.ModuleType("vllm")
    vllm.LLM = llm_cls
    vllm.SamplingParams = SamplingParams
    sampling = types.ModuleType("vllm.sampling_params")
    sampling.SamplingParams = SamplingParams
    sampling.RequestOutputKind = RequestOutputKind
    distributed = types.ModuleType("vllm.distributed")
    wt = types.ModuleType("vllm.distributed.weight_transfer")
    wt.WeightSource = WeightSource
    wt.ParamMeta = ParamMeta
    wt.WeightTransferTrainerFactory = WeightTransferTrainerFactory
    ipc = types.ModuleType("vllm.distributed.weight_transfer.ipc_engine")
    ipc.IPCTrainerInitInfo = IPCTrainerInitInfo
    vllm.sampling_params = sampling
    vllm.distributed = distributed
    distributed.weight_transfer = wt
    wt.ipc_engine = ipc
    for name, module in {
        "vllm": vllm,
        "vllm.sampling_params": sampling,
        "vllm.distributed": distributed,
        "vllm.distributed.weight_transfer": wt,
        "vllm.distributed.weight_transfer.ipc_engine": ipc,
    }.items():
        monkeypatch.setitem(sys.modules, name, module)
    llm_cls.instances.clear()
    return vllm
