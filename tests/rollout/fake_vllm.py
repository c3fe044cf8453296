"""A stand-in for the slice of vLLM that spreadrl uses (no GPU and no vLLM in the tests).

Every callable here declares exactly the parameters recorded for it in
``tools/vllm/surface.py`` (no ``**kwargs``), and
``tests/rollout/engines/test_vllm_surface.py`` checks that, so spreadrl code that passes
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

Everything that crosses the engine's process boundary (``collective_rpc`` and the
weight-sync calls built on it) goes through :func:`vllm_wire`, which applies the
rules of vLLM's ``MsgpackEncoder`` (vllm/v1/serial_utils.py): msgpack's own types
pass (tuples arrive as lists), a class or a ``torch.dtype`` is refused unless
``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` was set both here and when the engine
process was spawned, and a tensor is refused outright (the CPU build's multiprocess
executor fails on it: "cannot pickle memoryview objects"). So an ipc handle (the
tuple of ``torch.multiprocessing.reductions.reduce_tensor``, which holds
``type(tensor)``, the storage class and the dtype) reaches a fake engine only as
it would reach the real one.

``install(monkeypatch, llm_cls)`` puts the fake package in ``sys.modules``.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import functools
import itertools
import os
import pickle
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from tools.vllm.surface import SURFACE

# literal values vLLM accepts, as recorded (the contract check reads them from the wheel)
SLEEP_TAGS = frozenset(SURFACE["sleep_tags"].values)
TRANSFER_BACKENDS = SURFACE["WeightTransferConfig.backend"].values
LOGPROBS_MODES = ("raw_logprobs", *SURFACE["logprobs_mode"].values)  # raw_logprobs: the default
UPDATE_INFO_KEYS = {"names", "dtype_names", "shapes", "ipc_handles", "tensor_sizes"}


INSECURE = "VLLM_ALLOW_INSECURE_SERIALIZATION"
MSGPACK_NATIVE = (type(None), bool, int, float, str, bytes)


def vllm_wire(obj: Any, *, engine_insecure: bool) -> Any:
    """``obj`` as the engine's workers receive it from ``collective_rpc``: encoded and
    decoded by vLLM's msgpack rules (see the module docstring). ``engine_insecure``:
    whether the engine process was spawned with VLLM_ALLOW_INSECURE_SERIALIZATION=1.

    Raises:
        TypeError: where vLLM's encoder refuses the object, with its message.
    """
    insecure = os.environ.get(INSECURE, "0") == "1" and engine_insecure
    return _wire(obj, insecure)


def _wire(obj: Any, insecure: bool) -> Any:
    if isinstance(obj, MSGPACK_NATIVE):
        return obj
    if isinstance(obj, list | tuple):
        return [_wire(x, insecure) for x in obj]
    if isinstance(obj, dict):
        return {_wire(k, insecure): _wire(v, insecure) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _wire(getattr(obj, f.name), insecure) for f in dataclasses.fields(obj)}
    import torch

    if isinstance(obj, torch.Tensor):
        raise TypeError("cannot pickle memoryview objects")  # the CPU multiprocess executor
    if not insecure:
        raise TypeError(
            f"Object of type {type(obj)} is not serializable"
            f"Set {INSECURE}=1 to allow fallback to pickle-based serialization."
        )
    return pickle.loads(pickle.dumps(obj))


# what the fake trainer "exported" (stands for the GPU memory an IPC handle points at),
# by handle number: a fake engine in the same process opens it from here
IPC_MEMORY: dict[int, Any] = {}
_ipc_numbers = itertools.count()


def fake_ipc_handle(tensor: Any, device: int) -> tuple:
    """A tuple shaped like ``reduce_tensor``'s arguments for ``rebuild_cuda_tensor``
    (tensor class, size, stride, offset, storage class, dtype, device, handle, ...),
    the handle a number into :data:`IPC_MEMORY`."""
    number = next(_ipc_numbers)
    IPC_MEMORY[number] = tensor.detach().clone()
    nbytes = tensor.numel() * tensor.element_size()
    storage_cls = type(tensor.untyped_storage())
    return (type(tensor), tensor.size(), tensor.stride(), 0, storage_cls, tensor.dtype, device,
            number, nbytes, 0, False, None, 0, None, False)  # fmt: skip


def open_ipc_handle(args: list) -> Any:
    """What the worker's ``rebuild_cuda_tensor(*args)`` maps: the exported tensor."""
    return IPC_MEMORY[args[7]]


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
    DELTA = 1


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


class EngineCoreClient:
    """``LLMEngine.engine_core``: the client of the engine's processes. ``shutdown`` stops
    them (vLLM's is idempotent too); ``shutdowns`` counts the calls."""

    def __init__(self) -> None:
        self.shutdowns = 0
        self.dead = False

    def shutdown(self, timeout: float | None = None) -> None:
        self.shutdowns += 1
        self.dead = True


class LLMEngine:
    """add_request, then step() until has_unfinished_requests() is False.

    A request asking for ``RequestOutputKind.DELTA`` streams like vLLM's: the engine
    serves at most ``max_running`` requests at once (None: all; the rest wait in
    order, as behind a full KV cache, and output nothing), and every step each served
    request outputs its next token, the last one with its finish reason. Any other
    request: each step finishes the oldest and reports the others as unfinished.
    Requests in ``hang`` never finish (a served one keeps its place); requests in
    ``drop`` finish as aborted; requests in ``lose`` vanish at the next step without
    any output (a lost request id). ``calls`` counts the calls of each method;
    ``served_at`` the step at which each request was first served."""

    def __init__(self, llm: FakeLLM) -> None:
        self.llm = llm
        self.engine_core = EngineCoreClient()
        self.queue: list[tuple[str, list[int], SamplingParams]] = []
        self.params: list[SamplingParams] = []
        self.hang: set[str] = set()
        self.drop: set[str] = set()
        self.lose: set[str] = set()
        self.aborted: list[str] = []
        self.calls: collections.Counter[str] = collections.Counter()
        self.max_running: int | None = None
        self.steps = 0
        self.served_at: dict[str, int] = {}
        self.sent: dict[str, int] = {}  # tokens already streamed, per request
        # each streamed request's whole completion, computed once when first served (a
        # transformers-backed fake would otherwise regenerate it at every step)
        self.full: dict[str, CompletionOutput] = {}

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
        self.steps += 1
        self.llm.check_awake()
        self.queue = [q for q in self.queue if q[0] not in self.lose]
        if any(q[2].output_kind is RequestOutputKind.DELTA for q in self.queue):
            return self._stream_step()
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

    def _stream_step(self) -> list[RequestOutput]:
        served = self.queue if self.max_running is None else self.queue[: self.max_running]
        outs, done = [], []
        for rid, ctx, params in served:
            self.served_at.setdefault(rid, self.steps)
            if rid in self.hang:
                continue
            if rid in self.drop:
                outs.append(RequestOutput(rid, [CompletionOutput("", [], [], "abort")], True))
                done.append(rid)
                continue
            full = self.full.get(rid)
            if full is None:
                full = self.full[rid] = self.llm.complete(ctx, params)
            i = self.sent.get(rid, 0)
            last = i + 1 >= len(full.token_ids)
            ids = full.token_ids[i : i + 1]
            steps = full.logprobs[i : i + 1] if full.logprobs is not None else None
            delta = CompletionOutput(
                full.text if last else "", ids, steps, full.finish_reason if last else None
            )
            self.sent[rid] = i + 1
            outs.append(RequestOutput(rid, [delta], finished=last))
            if last:
                done.append(rid)
                del self.full[rid]
        self.queue = [q for q in self.queue if q[0] not in done]
        return outs

    def abort_request(self, request_ids: list[str]) -> None:
        self.calls["abort_request"] += 1
        self.aborted.extend(request_ids)
        self.queue = [q for q in self.queue if q[0] not in request_ids]
        for request_id in request_ids:
            self.full.pop(request_id, None)


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
        kv_cache_memory_bytes: int | None = None,
        enforce_eager: bool = False,
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
            "kv_cache_memory_bytes": kv_cache_memory_bytes,
            "enforce_eager": enforce_eager,
        }
        # one GPU per engine here (tensor_parallel_size 1): logical GPU 0
        self.device: int | str = device_ids[0] if device_ids else 0
        self.spawn_env = launcher_env()  # what vLLM's engine process would inherit
        # the engine process decodes with the environment it was spawned with
        self.insecure = os.environ.get(INSECURE, "0") == "1"
        self.reloads: list[str] = []
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
    EOS = 2

    def complete(self, prompt_ids: list[int], params: SamplingParams) -> CompletionOutput:
        """The fake model's continuation ``[last + 1, EOS]`` (log-prob -0.25 each), as
        :func:`finish_like_vllm` cuts and reports it."""
        ids = [prompt_ids[-1] + 1, self.EOS]
        return finish_like_vllm(ids, [-0.25] * len(ids), params, eos=self.EOS)

    def check_awake(self) -> None:
        if self.llm_engine.engine_core.dead:  # vLLM raises EngineDeadError
            raise RuntimeError("generation after the engine was shut down")
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

    # -- the workers' RPC (everything below reaches them through it)
    def collective_rpc(
        self,
        method: str,
        timeout: float | None = None,
        args: tuple = (),
        kwargs: dict[str, Any] | None = None,
    ) -> list[Any]:
        if not isinstance(method, str):  # a callable is cloudpickled: insecure only
            vllm_wire(method, engine_insecure=self.insecure)
        args = vllm_wire(tuple(args), engine_insecure=self.insecure)
        kwargs = vllm_wire(kwargs or {}, engine_insecure=self.insecure)
        worker = getattr(self, f"_worker_{method}", None)
        if worker is None:
            raise NotImplementedError(f"Method {method!r} is not implemented.")
        return [worker(*args, **kwargs)]

    def _worker_reload_weights(
        self, weights_iterator: Any = None, weights_path: str | None = None,
        is_checkpoint_format: bool = True,
    ) -> None:  # fmt: skip
        """The worker's in-place reload from a folder of safetensors files."""
        from safetensors.torch import load_file

        if weights_path is None:
            raise ValueError("the fake reloads from weights_path only")
        files = sorted(Path(weights_path).glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"no safetensors files in {weights_path}")
        if "weights" in self.asleep:
            raise RuntimeError("reload_weights into sleeping weights")
        weights: list[tuple[str, Any]] = []
        for f in files:
            weights.extend(load_file(f).items())
        self.reloads.append(weights_path)
        self.load_weights(weights)
        self.events.append("reload")

    # -- weight transfer (RLOfflineMixin: each call is a collective_rpc)
    def init_weight_transfer_engine(self, request: dict) -> None:
        if self.kwargs["weight_transfer_config"] is None:
            raise RuntimeError("Weight transfer not configured.")
        info = vllm_wire(request["init_info"], engine_insecure=self.insecure)
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
        info = vllm_wire(request["update_info"], engine_insecure=self.insecure)
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
            tensors = _unpack(open_ipc_handle(_own_handle(handles, mine)), info)
        else:  # one map per parameter (IPCWeightTransferEngine.receive_weights)
            tensors = [open_ipc_handle(_own_handle(h, mine)) for h in handles]
        self.load_weights(list(zip(info["names"], tensors, strict=True)))
        self.events.append("update")

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        if not self.updating:
            raise RuntimeError("finish_weight_update called without a matching start")
        self.updating = False
        self.events.append("finish_update")

    def load_weights(self, weights: list[tuple[str, Any]]) -> None:
        self.weights.update(weights)


def finish_like_vllm(
    ids: list[int], logprobs: list[float], params: SamplingParams, *, eos: int | None
) -> CompletionOutput:
    """A completion as vLLM reports one: cut after the first stop id (or the model's
    EOS: "stop") or at ``max_tokens`` ("length"); log-probs only when
    ``params.logprobs`` asked for them (None: ``CompletionOutput.logprobs`` is None)."""
    stops = set(params.stop_token_ids or ()) | ({eos} if eos is not None else set())
    out: list[int] = []
    reason = "length"
    for token in ids:
        if params.max_tokens is not None and len(out) >= params.max_tokens:
            break
        out.append(token)
        if token in stops:
            reason = "stop"
            break
    steps = None
    if params.logprobs is not None:
        steps = [{t: Logprob(lp)} for t, lp in zip(out, logprobs, strict=False)]
    return CompletionOutput("x", out, steps, reason)


def _unpack(buffer: Any, info: dict[str, Any]) -> list[Any]:
    """The packed chunk's tensors, cut from the flat byte buffer by ``tensor_sizes``
    and viewed by dtype name and shape (as packed_tensor.packed_ipc_consumer does)."""
    import torch

    tensors, offset = [], 0
    for shape, dtype, size in zip(
        info["shapes"], info["dtype_names"], info["tensor_sizes"], strict=True
    ):
        raw = buffer[offset : offset + size]
        tensors.append(raw.view(getattr(torch, dtype)).reshape(shape))
        offset += size
    return tensors


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
        self.device = index
        self.gpu_uuid = gpu_uuid(index)

    def send_weights(self) -> None:
        import torch

        if self.is_sender:
            self.client.start_weight_update()
        pairs = [(n, t.detach().clone()) for n, t in self.source.iter_full()]
        names = [n for n, _ in pairs]
        if names != [m.name for m in self.source.metadata]:
            raise ValueError("iter_full must yield exactly the metadata's names, in order")
        for (_, t), meta in zip(pairs, self.source.metadata, strict=True):
            if tuple(t.shape) != tuple(meta.shape):
                raise ValueError(f"{meta.name}: shape {tuple(t.shape)} != metadata {meta.shape}")
            if t.dtype != meta.dtype:
                raise ValueError(f"{meta.name}: dtype {t.dtype} != metadata {meta.dtype}")
        info: dict[str, Any] = {
            "names": names,
            "dtype_names": [str(t.dtype).split(".")[-1] for _, t in pairs],
            "shapes": [list(t.shape) for _, t in pairs],
        }
        if self.packed:  # one buffer for the chunk
            buffer = torch.cat([t.contiguous().reshape(-1).view(torch.uint8) for _, t in pairs])
            handle = fake_ipc_handle(buffer, self.device)
            (info["ipc_handles"],) = self._all_gather_and_merge_handles([{self.gpu_uuid: handle}])
            info["tensor_sizes"] = [t.numel() * t.element_size() for _, t in pairs]
        else:
            info["ipc_handles"] = self._all_gather_and_merge_handles(
                [{self.gpu_uuid: fake_ipc_handle(t, self.device)} for _, t in pairs]
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
    """Put the fake package (``vllm`` and the submodules spreadrl imports) in sys.modules,
    with VLLM_ALLOW_INSECURE_SERIALIZATION unset for the test (restored after)."""
    monkeypatch.setenv(INSECURE, "0")
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
