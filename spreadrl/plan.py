"""`spreadrl plan`: a per-GPU memory and time plan of a GRPO recipe, with no GPU.

Built from the recipe and the model's config alone: the model is instantiated
on the meta device (no memory, no weights) to count its parameters, and every
figure below is arithmetic on those counts and the recipe's budgets. Per GPU,
with W GPUs (FSDP2 shards states W ways under torchrun; one GPU runs in one
process with ``torch.autocast``):

- master weights: the trained weights in float32 (4 bytes x trainable / W);
- gradients: float32, as large as the master weights (freed before generation);
- optimizer state: AdamW's two float32 moments (8 bytes x trainable / W);
- compute copy: the bf16 weights the forward reads. One process: autocast's cache
  holds a bf16 cast of every weight for the whole forward (2 bytes x N). FSDP2:
  the units in flight during the update (the root, with the embeddings, and two
  decoder layers); the log-prob passes gather the whole model (2 bytes x N);
- frozen weights: a LoRA policy's base and the KL reference, kept in bf16;
- activations at ``optim.micro_batch_tokens``: with activation checkpointing each
  decoder layer keeps its input (tokens x hidden) and one layer at a time is
  recomputed and back-propagated (:data:`RECOMPUTE_FACTOR` x its forward's
  elements, :meth:`ModelShape.layer_elements_per_token`); without it every layer keeps its
  forward's elements. Plus one log-prob chunk (the output layer's logits): on CUDA
  :func:`spreadrl.train.logprobs.chunk_tokens_for` sizes it to a quarter of the
  memory free at that moment. The chunk's backward and a recomputed layer come one
  after the other, so a phase's peak counts the larger of the two;
- the rollout engine's share (:meth:`spreadrl.rollout.engine.RolloutEngine.plan`):
  for vLLM ``rollout.vllm_gpu_memory_utilization`` x GPU memory, holding
  the bf16 weights (2 bytes x N, every rank's engine a whole copy), vLLM's own
  working memory (``VLLM_WORKING_GIB``) and the KV cache; the rest is KV
  tokens at ``2 x layers x kv_heads x head_dim x 2 bytes`` each (147,456 bytes
  for Qwen3-4B);
- uncounted allocations: what ``max_memory_allocated`` holds beyond the
  components above (cuBLAS workspaces, casts, generation's logits),
  :data:`UNCOUNTED_GIB`, calibrated on the first GPU run (below).

What the device holds is more than torch allocates. Per phase, the device peak
is the allocated peak x (1 + :data:`ALLOCATOR_RESERVE`) (blocks the caching
allocator keeps cached, and fragmentation) plus the process's CUDA context
(:data:`CUDA_CONTEXT_GIB`) and, with more than one GPU, NCCL's buffers
(:data:`NCCL_GIB`). A phase fits when its device peak leaves
:data:`FIT_MARGIN_GIB` of the GPU free. Calibration (2026-11-26, one H200,
torch 2.11, the ``bench gpu`` shape: 4b-shape, 16,384-token micro-batches, no
KL): the update's ``max_memory_allocated`` was 75.2 GiB (one process) and
75.4 GiB (torchrun) against 73.1 counted by the components, the rollout's
55.1 against 53.0, so 2.2 GiB uncounted; nvidia-smi's device peak was
80.0 GiB against 75.4 allocated: 4.6 GiB, of which the context is assumed
1.0 (CUDA 0.6, NCCL 0.4) and the rest, 4.8% of the allocated peak, is the
reserve. That run used the default allocator; with expandable segments
(:mod:`spreadrl.train.memory` sets them for the trainer) the reserve should
shrink, which the plan does not assume until a device measures it.

Phases: generation (master + optimizer + frozen + runtime + the vLLM share; the
gradients were freed), the log-prob passes (the engine asleep, the whole model
gathered, one layer's no-grad working set and a chunk) and the update (the
gradients, the update's compute copy, activations and a chunk). Gradients are
counted for the whole update, as they are from a mini-batch's second micro-batch
on. Time: the update and log-prob FLOPs of a step at the recipe's full budgets
(every episode at its token limit, an upper bound) at a stated MFU, the rollout's
wall-time bound, and the collective timeout (:mod:`spreadrl.train.timeouts`).

CPU offload (``model.cpu_offload``, FSDP2's ``CPUOffloadPolicy``): the master
weights, gradients, AdamW state and the KL reference leave the GPU for CPU
memory (``Plan.host_gib`` per process); the GPU keeps the units FSDP2 gathers
in the compute dtype, so the update's compute copy is FSDP2's even on one GPU.
The time the copies over PCIe take is not modelled.

Not modelled: attention
kernels that materialise [tokens x tokens] scores (SDPA's flash and
memory-efficient kernels on GPU do not).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, Qwen3Config

from spreadrl.errors import ConfigError
from spreadrl.models.init import PRESETS
from spreadrl.rollout.engine import MemoryQuery, engine_class
from spreadrl.train.checks import check_world_size
from spreadrl.train.config import GRPOConfig
from spreadrl.train.distributed import DistInfo, decoder_layers
from spreadrl.train.logprobs import (
    BYTES_PER_LOGIT,
    BYTES_PER_LOGIT_CUT,
    CUDA_FREE_SHARE,
    MAX_CHUNK_TOKENS,
    chunk_tokens_for,
)
from spreadrl.train.precision import compute_dtype
from spreadrl.train.timeouts import collective_timeout_s, rollout_rounds, rollout_wait_s

GIB = 2**30
UNCOUNTED_GIB = 2.2  # allocated beyond the components: measured - counted (module docstring)
ALLOCATOR_RESERVE = 0.05  # cached + fragmented, x the allocated peak: 4.8% measured, rounded up
CUDA_CONTEXT_GIB = 0.6  # the CUDA context, handles and loaded kernels of one process, assumed
NCCL_GIB = 0.4  # NCCL's communicator buffers per rank (more than one GPU), assumed
FIT_MARGIN_GIB = 2.0  # a phase "fits" when its device peak leaves this much of the GPU free
RECOMPUTE_FACTOR = 1.5  # a checkpointed layer's recompute + backward, x its forward
QWEN3_VOCAB = 151_936
H100_GIB = 79.6  # an H100 80GB as torch reports it (total_memory / 2**30)
H100_BF16_TFLOPS = 989.4
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class ModelShape:
    """What the plan needs of a decoder-only model, counted on the meta device."""

    params: int  # unique parameters (tied embeddings once)
    layer_params: int  # one decoder layer's
    layers: int
    hidden: int
    intermediate: int
    q_dim: int  # heads x head_dim
    kv_dim: int  # kv_heads x head_dim
    vocab: int

    @property
    def root_params(self) -> int:
        """Parameters outside the decoder layers: embeddings, output layer, final norm."""
        return self.params - self.layers * self.layer_params

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV-cache bytes per token: keys and values of every layer."""
        return self.layers * self.kv_dim * 2 * dtype_bytes

    def layer_elements_per_token(self) -> int:
        """Elements one decoder layer's forward keeps per token for its backward: the
        norms' inputs and outputs and the residual (5 x hidden), q and the attention
        output (2 x q_dim), k and v (2 x kv_dim), gate, up, the activation and the
        product (4 x intermediate). Measured on CPU (float32, 4 layers of 512):
        0.94 of this."""
        return 5 * self.hidden + 2 * self.q_dim + 2 * self.kv_dim + 4 * self.intermediate


def model_shape(config: PretrainedConfig) -> ModelShape:
    """Count ``config``'s parameters on the meta device (no memory, no download)."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    params = sum(p.numel() for p in model.parameters())
    layers = decoder_layers(model)
    layer_params = sum(p.numel() for p in layers[0].parameters()) if layers else 0
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return ModelShape(
        params=params,
        layer_params=layer_params,
        layers=len(layers),
        hidden=config.hidden_size,
        intermediate=config.intermediate_size,
        q_dim=heads * head_dim,
        kv_dim=config.num_key_value_heads * head_dim,
        vocab=config.vocab_size,
    )


def preset_config(name: str, vocab_size: int = QWEN3_VOCAB) -> PretrainedConfig:
    """A Qwen3 config of one of ``spreadrl model init``'s presets (``4b-shape``: Qwen3-4B)."""
    if name not in PRESETS:
        raise ConfigError(f"--shape {name!r}: choose one of {', '.join(sorted(PRESETS))}")
    kwargs = dict(PRESETS[name])
    kwargs.update(
        vocab_size=vocab_size, layer_types=["full_attention"] * kwargs["num_hidden_layers"]
    )
    return Qwen3Config(**kwargs)


def load_model_config(name_or_path: str) -> PretrainedConfig:
    """The model's config from a local folder (or the Hugging Face cache), never downloaded."""
    try:
        return AutoConfig.from_pretrained(name_or_path, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"model.name_or_path={name_or_path}: no config.json here or in the Hugging Face "
            "cache; pass model.name_or_path=FOLDER, or --shape 4b-shape for Qwen3-4B's "
            "dimensions"
        ) from exc


@dataclass(frozen=True)
class Hardware:
    gpus: int = 1
    memory_gib: float = H100_GIB
    bf16_tflops: float = H100_BF16_TFLOPS
    mfu: float = 0.35  # prime-rl's published trainer MFU for Qwen3-4B at 64k tokens
    device: str = "cuda"  # "cpu": what a CPU run would hold (the tests measure it)


@dataclass
class Plan:
    """One GPU's figures in GiB: components, phase peaks, the engine's KV tokens, verdict.

    ``phases``: each phase's device peak (what nvidia-smi shows: allocated, the
    allocator's reserve, the context); ``allocated``: its ``max_memory_allocated``.
    On CPU the two are the same."""

    components: list[tuple[str, float, str]]
    phases: dict[str, float]
    kv_tokens: int
    max_model_len: int
    hardware: Hardware
    allocated: dict[str, float] = field(default_factory=dict)
    margin_gib: float = 0.0
    times: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    largest_utilization: float = 0.0
    host_gib: float = 0.0  # CPU memory per process under model.cpu_offload
    engine_lines: list[tuple[str, str, str]] = field(default_factory=list)  # the engine's rows

    @property
    def fits(self) -> bool:
        return not self.problems

    def gib(self, component: str) -> float:
        """One component's GiB, by the name it has in the table."""
        return next(v for name, v, _ in self.components if name == component)

    def spare(self, phase: str) -> float:
        """GiB of the GPU left free at ``phase``'s device peak (negative: over)."""
        return self.hardware.memory_gib - self.phases[phase]

    def verdict(self, phase: str) -> str:
        """ "fits with X GiB margin" when the margin is left free, else "does not fit"."""
        spare = self.spare(phase)
        if spare >= self.margin_gib:
            return f"fits with {spare:.1f} GiB margin"
        return f"does not fit: {spare:.1f} GiB free, {self.margin_gib:g} GiB margin needed"


@dataclass(frozen=True)
class _Budget:
    """The per-GPU byte figures a plan is assembled from."""

    master: float
    grads: float
    optim: float
    frozen: float
    copy_update: float
    copy_full: float
    saved: float  # kept through the forward for the backward
    layer_set: float  # one layer recomputed and back-propagated (checkpointing only)
    no_grad_set: float  # one layer's forward without grad
    chunk_per_token: float
    chunk_floor: float
    vllm_weights: float
    host: float = 0.0  # offloaded to CPU memory (model.cpu_offload), off the GPU


def _budget(cfg: GRPOConfig, shape: ModelShape, hw: Hardware, tokens: int) -> _Budget:
    compute = compute_dtype(cfg.model.dtype, hw.device)
    cb = DTYPE_BYTES[compute]
    w = max(1, hw.gpus)
    lora = cfg.model.lora.enabled
    trainable = _lora_params(cfg, shape) if lora else shape.params
    frozen = shape.params if lora else 0
    if getattr(cfg.loss, "kl_coef", 0.0) > 0 and not lora:
        frozen += shape.params  # the reference, a bf16 copy of the starting weights
    mixed = compute != "float32"
    fsdp = w > 1 or cfg.model.cpu_offload  # offload runs through FSDP2 even on one GPU
    if fsdp:  # FSDP2: units gathered one at a time (plus a prefetch) in the update
        copy_update = cb * (shape.root_params + 2 * shape.layer_params)
    else:  # autocast caches a cast of every float32 weight for the whole forward
        copy_update = cb * shape.params if mixed and not lora else 0
    copy_full = cb * shape.params if (fsdp or (mixed and not lora)) else 0
    layer = tokens * shape.layer_elements_per_token() * cb
    if cfg.model.gradient_checkpointing:
        # the layer's forward again, and its gradients as backward walks through it:
        # measured 1.26 x its forward on CPU (float32); 1.5 leaves room. With
        # model.checkpoint_every k, the layers not recomputed keep their whole forward
        recomputed = -(-shape.layers // max(1, cfg.model.checkpoint_every))
        kept = (shape.layers - recomputed) * layer
        saved = tokens * recomputed * shape.hidden * cb + kept
        layer_set = RECOMPUTE_FACTOR * layer
    else:
        saved, layer_set = shape.layers * layer, 0.0
    per_token = shape.vocab * (BYTES_PER_LOGIT_CUT if cfg.rollout.top_p < 1.0 else BYTES_PER_LOGIT)
    if compute == "float32":  # no bf16 head output, no float32 copy: measured 8.7-15.5 on CPU
        per_token -= 12 * shape.vocab
    held = {  # the sharded state: on the GPU, or in CPU memory under model.cpu_offload
        "master": 4 * trainable / w,
        "grads": 4 * trainable / w,
        "optim": 8 * trainable / w,
        "frozen": DTYPE_BYTES[compute] * frozen / w,
    }
    host = sum(held.values()) if cfg.model.cpu_offload else 0.0
    if cfg.model.cpu_offload:
        held = dict.fromkeys(held, 0.0)
    return _Budget(
        **held,
        host=host,
        copy_update=copy_update,
        copy_full=copy_full,
        saved=saved,
        layer_set=layer_set,
        no_grad_set=layer,
        chunk_per_token=per_token,
        chunk_floor=min(tokens, chunk_tokens_for(shape.vocab, cfg.rollout.top_p)) * per_token,
        vllm_weights=cb * shape.params,
    )


def _chunk_bytes(b: _Budget, tokens: int, free: float) -> float:
    """One log-prob chunk: a quarter of the free memory, at most the micro-batch, at
    least the CPU size (:func:`spreadrl.train.logprobs.chunk_tokens_for`)."""
    most = min(tokens, MAX_CHUNK_TOKENS) * b.chunk_per_token
    return max(b.chunk_floor, min(most, CUDA_FREE_SHARE * max(0.0, free)))


def _lora_params(cfg: GRPOConfig, shape: ModelShape) -> int:
    """Adapter parameters: r x (in + out) per targeted projection per layer."""
    lora = cfg.model.lora
    dims = {
        "q_proj": (shape.hidden, shape.q_dim),
        "k_proj": (shape.hidden, shape.kv_dim),
        "v_proj": (shape.hidden, shape.kv_dim),
        "o_proj": (shape.q_dim, shape.hidden),
        "gate_proj": (shape.hidden, shape.intermediate),
        "up_proj": (shape.hidden, shape.intermediate),
        "down_proj": (shape.intermediate, shape.hidden),
    }
    per_layer = sum(lora.r * sum(dims[m]) for m in lora.target_modules if m in dims)
    return per_layer * shape.layers


@dataclass(frozen=True)
class _Device:
    """What a GPU holds beyond the components, in bytes (all zero on CPU)."""

    uncounted: float  # allocated, not in any component
    reserve: float  # x the allocated peak: cached blocks and fragmentation
    context: float  # the CUDA context (and NCCL's buffers)
    margin: float  # left free by a phase that fits

    def peak(self, allocated: float) -> float:
        """The device peak of a phase whose ``max_memory_allocated`` is ``allocated``."""
        return allocated * (1.0 + self.reserve) + self.context


def _device(hw: Hardware) -> _Device:
    if not hw.device.startswith("cuda"):
        return _Device(0.0, 0.0, 0.0, 0.0)
    context = CUDA_CONTEXT_GIB + (NCCL_GIB if hw.gpus > 1 else 0.0)
    return _Device(UNCOUNTED_GIB * GIB, ALLOCATOR_RESERVE, context * GIB, FIT_MARGIN_GIB * GIB)


def plan_memory(cfg: GRPOConfig, shape: ModelShape, hw: Hardware) -> Plan:
    """The per-GPU plan of GRPO recipe ``cfg`` for a model of ``shape`` on ``hw``."""
    compute = compute_dtype(cfg.model.dtype, hw.device)
    tokens = cfg.optim.micro_batch_tokens
    b = _budget(cfg, shape, hw, tokens)
    dev = _device(hw)
    mem = hw.memory_gib * GIB
    resident = b.master + b.optim + b.frozen + dev.uncounted  # held through generation
    engine = engine_class(cfg.rollout.backend)
    query = MemoryQuery(
        rollout=cfg.rollout,
        device_bytes=mem,
        resident=resident,
        resident_peak=dev.peak(resident),
        gathered=b.copy_full,
        engine_weights=b.vllm_weights,
        kv_bytes_per_token=shape.kv_bytes_per_token(DTYPE_BYTES[compute]),
        max_model_len=cfg.data.max_prompt_tokens + cfg.rollout.max_response_tokens,
        sequences=cfg.rollout.prompts_per_step * cfg.rollout.group_size // max(1, hw.gpus),
        on_cuda=hw.device.startswith("cuda"),
    )
    footprint = engine.plan(query)  # what the engine adds while it samples and sleeps
    asleep = footprint.asleep
    logprobs = resident + b.copy_full
    update = resident + b.grads + b.copy_update + b.saved
    free = mem - dev.peak(update) - asleep
    chunk = _chunk_bytes(b, tokens, free) if hw.device.startswith("cuda") else b.chunk_floor
    logprobs += max(b.no_grad_set, chunk / 2)  # no backward: half the chunk's bytes
    update += max(b.layer_set, chunk)
    allocated = {"generation": footprint.generation, "log-prob passes": logprobs, "update": update}
    extra = {"generation": footprint.share, "log-prob passes": asleep, "update": asleep}
    plan = Plan(
        components=_components(cfg, b, dev, hw, chunk, update, footprint.rows),
        phases={k: (dev.peak(v) + extra[k]) / GIB for k, v in allocated.items()},
        kv_tokens=footprint.kv_tokens,
        max_model_len=query.max_model_len,
        hardware=hw,
        allocated={k: v / GIB for k, v in allocated.items()},
        margin_gib=dev.margin / GIB,
    )
    plan.largest_utilization = max(0.0, (mem - dev.peak(resident) - dev.margin) / mem)
    plan.host_gib = b.host / GIB
    problems, plan.engine_lines = engine.plan_report(query, plan)
    plan.problems = _problems(cfg, plan, b, dev, problems)
    if cfg.rollout.prompts_per_step % max(1, hw.gpus):
        try:
            check_world_size(cfg.rollout, DistInfo(world_size=hw.gpus))
        except ConfigError as exc:
            plan.problems.insert(0, str(exc))
    plan.times = plan_times(cfg, shape, hw)
    return plan


def largest_checkpoint_every(cfg: GRPOConfig, shape: ModelShape, hw: Hardware) -> int | None:
    """The largest ``model.checkpoint_every`` (fewest layers recomputed) whose plan fits with
    its margin, or None when even checkpointing every layer does not fit. Selective
    checkpointing is worth its memory only up to this."""
    from dataclasses import replace

    if not cfg.model.gradient_checkpointing:
        return None
    best = None
    for every in range(1, shape.layers + 1):
        model = replace(cfg.model, checkpoint_every=every)
        if plan_memory(replace(cfg, model=model), shape, hw).fits:
            best = every
        else:
            break
    return best


def _components(
    cfg: GRPOConfig,
    b: _Budget,
    dev: _Device,
    hw: Hardware,
    chunk: float,
    update: float,
    engine_rows: list[tuple[str, float, str]],
) -> list[tuple[str, float, str]]:
    """The table's rows in GiB: what is allocated, then what the device holds beside it."""
    compute = compute_dtype(cfg.model.dtype, hw.device)
    tokens = cfg.optim.micro_batch_tokens
    rows = [
        ("master weights (fp32)", b.master, "trained weights, sharded" if hw.gpus > 1 else ""),
        ("gradients (fp32)", b.grads, "freed before generation"),
        ("optimizer state (AdamW, fp32)", b.optim, "2 moments"),
        ("frozen weights", b.frozen, "KL reference / LoRA base, in the compute dtype"),
        ("compute copy (update)", b.copy_update, f"{compute} weights the forward reads"),
        ("compute copy (log-prob passes)", b.copy_full, "the whole model, gathered / cast"),
        ("activations (update)", b.saved + b.layer_set, f"{tokens} tokens per micro-batch"),
        ("log-prob chunk", chunk, "peak counts the larger of this and a recomputed layer"),
        ("uncounted allocations", dev.uncounted, "workspaces, casts (calibrated on a GPU)"),
        (
            "allocator reserve",
            dev.reserve * update,
            f"{100 * dev.reserve:.0f}% of a phase's allocated peak (the update's here)",
        ),
        ("CUDA context", dev.context, "per process" + (", with NCCL" if hw.gpus > 1 else "")),
    ]
    rows += engine_rows
    if cfg.model.cpu_offload:
        moved = {"master weights (fp32)", "gradients (fp32)", "optimizer state (AdamW, fp32)"}
        moved.add("frozen weights")
        note = f"in CPU memory (model.cpu_offload: {b.host / GIB:.1f} GiB per process)"
        rows = [(n, v, note if n in moved else text) for n, v, text in rows]
    return [(n, v / GIB, note) for n, v, note in rows]


def _problems(
    cfg: GRPOConfig, plan: Plan, b: _Budget, dev: _Device, engine: list[str] | None
) -> list[str]:
    """What does not fit (with the margin left free), each naming the setting to change:
    the engine's own (``engine``; None: generation is the trainer's, checked here),
    then the log-prob passes' and the update's."""
    out = list(engine or [])
    if engine is None and plan.spare("generation") < plan.margin_gib:
        out.append(_too_big(cfg, plan, "generation", b, dev))
    for phase in ("log-prob passes", "update"):
        if plan.spare(phase) < plan.margin_gib:
            out.append(_too_big(cfg, plan, phase, b, dev))
    return out


def _too_big(cfg: GRPOConfig, plan: Plan, phase: str, b: _Budget, dev: _Device) -> str:
    gib = plan.hardware.memory_gib
    over = plan.margin_gib - plan.spare(phase)
    head = (
        f"the {phase} peak at {plan.phases[phase]:.1f} GiB on the device "
        f"({plan.allocated[phase]:.1f} allocated) of {gib:g}, with a {plan.margin_gib:g} GiB margin"
    )
    if phase == "update" and not cfg.model.gradient_checkpointing:
        return f"{head}: set model.gradient_checkpointing=true"
    per_token = (b.saved + b.layer_set) * (1.0 + dev.reserve) / max(1, cfg.optim.micro_batch_tokens)
    if phase == "update" and per_token > 0:
        fit = int(cfg.optim.micro_batch_tokens - over * GIB / per_token)
        if fit >= plan.max_model_len:
            return f"{head}: set optim.micro_batch_tokens to at most {fit} (now {cfg.optim.micro_batch_tokens})"
    return f"{head}: use more GPUs (--gpus) or model.lora.enabled=true"


def plan_times(cfg: GRPOConfig, shape: ModelShape, hw: Hardware) -> list[tuple[str, str]]:
    """Seconds per step at the recipe's full budgets (upper bounds), per GPU."""
    seq = cfg.data.max_prompt_tokens + cfg.rollout.max_response_tokens
    sequences = cfg.rollout.prompts_per_step * cfg.rollout.group_size
    tokens = sequences * seq / max(1, hw.gpus)
    forward = 2.0 * shape.params + 4.0 * shape.layers * shape.q_dim * seq  # per token
    train = 3 * forward + (forward if cfg.model.gradient_checkpointing else 0.0)
    passes = int(cfg.optim.ppo_epochs > 1 or (cfg.optim.mini_batch_size or sequences) < sequences)
    passes += int(cfg.loss.kl_coef > 0)
    rate = hw.bf16_tflops * 1e12 * hw.mfu
    update_s = tokens * cfg.optim.ppo_epochs * train / rate
    logprob_s = tokens * passes * forward / rate
    wall = cfg.rollout.episode_wall_time_s * rollout_rounds(cfg.sampling)
    return [
        ("tokens per GPU per step (at full budgets)", f"{tokens:,.0f}"),
        (f"update at {100 * hw.mfu:.0f}% MFU", f"{update_s:,.0f} s"),
        (f"log-prob passes ({passes}) at {100 * hw.mfu:.0f}% MFU", f"{logprob_s:,.0f} s"),
        ("rollouts (bound: wall time x rounds)", f"{wall:,.0f} s"),
        (
            "collective timeout",
            f"{collective_timeout_s(rollout_wait_s(cfg.rollout, cfg.sampling, cfg.eval)):,.0f} s",
        ),
    ]


def plan_recipe(cfg: GRPOConfig, hw: Hardware, *, shape_name: str | None = None) -> Plan:
    """The plan of ``cfg`` on ``hw``; the model's config from ``shape_name`` or the recipe."""
    config = preset_config(shape_name) if shape_name else load_model_config(cfg.model.name_or_path)
    return plan_memory(cfg, model_shape(config), hw)
