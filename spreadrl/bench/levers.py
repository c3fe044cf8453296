"""Each update lever against the plain path on one micro-batch (`spreadrl bench levers`).

One update step is what GRPO's update does per micro-batch: the policy's
log-probs over the response tokens through :func:`sequence_logprobs` (the
sampling distribution of the Spreadsheet-RL recipe: temperature 0.6, top-k 20, top-p
0.95), a loss over them, backward, and an AdamW step, on random sequences of a
fixed length, on a random Qwen3 of a preset (fp32 master weights; bf16 compute
on CUDA through the same autocast the trainer uses). The baseline is the
recipe's: activation checkpointing of every layer, the chunked log-prob head,
AdamW's default kernel, eager layers. Each variant turns one lever on through
the same functions the trainer calls (:mod:`spreadrl.train.levers`) and records:

- FLOPs of one step, counted by ``torch.utils.flop_counter.FlopCounterMode``
  (recomputation included; a compiled layer's FLOPs are not seen by it, so the
  compiled variant reports the eager count);
- the median step time over ``steps`` steps after a warm-up step (compilation
  happens in the warm-up), wall and this process's CPU seconds (on a CPU shared with
  other jobs the wall clock stretches, the CPU seconds do not);
- the peak memory the step adds (the CUDA allocator's peak, or RSS on CPU);
- the loss and gradient norm of its first step beside the baseline's (same
  initial weights, same batch), so a lever that changes the numbers shows.

``profile``: the baseline's step under ``torch.profiler``, exported as a Chrome
trace (open in Perfetto) and a table of the top operators.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from spreadrl.train.batching import Sample, collate
from spreadrl.train.config import ModelConfig, OptimConfig
from spreadrl.train.distributed import decoder_layers
from spreadrl.train.levers import apply_model_levers
from spreadrl.train.logprobs import LogprobSettings, sequence_logprobs
from spreadrl.train.memory import PeakMemory
from spreadrl.train.optimizer import build_optimizer

BASELINE = ModelConfig(gradient_checkpointing=True)
# variant -> (what it is, model settings, optimizer settings)
VARIANTS: dict[str, tuple[str, ModelConfig, dict[str, Any]]] = {
    "baseline": ("checkpointing every layer, chunked head, AdamW, eager", BASELINE, {}),
    "selective-ac": (
        "model.checkpoint_every=2",
        replace(BASELINE, checkpoint_every=2),
        {},
    ),
    "no-ac": (
        "model.gradient_checkpointing=false",
        replace(BASELINE, gradient_checkpointing=False),
        {},
    ),
    "fused-head": ("model.fused_logprob_head=true", replace(BASELINE, fused_logprob_head=True), {}),
    "fused-adamw": ("optim.fused_adamw=true", BASELINE, {"fused_adamw": True}),
    "compile": ("model.compile_layers=true", replace(BASELINE, compile_layers=True), {}),
    "packed": ("model.packed_sequences=true", replace(BASELINE, packed_sequences=True), {}),
}
SAMPLING = {"temperature": 0.6, "top_k": 20, "top_p": 0.95}


@dataclass(frozen=True)
class LeverShape:
    """The model and the micro-batch one step runs."""

    preset: str = "small"
    vocab_size: int = 0  # 0: the preset's stand-in tokenizer's
    sequences: int = 4
    seq_len: int = 256
    prompt_len: int = 64
    steps: int = 3
    device: str = "cpu"


def _build(shape: LeverShape, model_cfg: ModelConfig) -> tuple[torch.nn.Module, LogprobSettings]:
    """A random model of ``shape`` with ``model_cfg``'s levers, and how its passes score
    (the rollout's sampling distribution, bf16 on CUDA)."""
    from spreadrl.models.compat import enable_activation_checkpointing
    from spreadrl.models.init import PRESETS, build_random_model, make_config
    from spreadrl.models.tokenizer import default_corpus, train_tokenizer

    tokenizer = train_tokenizer(default_corpus(size=200), vocab_size=512)
    overrides = {"max_position_embeddings": max(shape.seq_len, 4096)}
    if PRESETS[shape.preset].get("dtype") != "float32":
        overrides["dtype"] = "float32"  # fp32 master weights, as the trainer loads them
    config = make_config(shape.preset, tokenizer, overrides, vocab_size=shape.vocab_size or None)
    device = shape.device if shape.device.startswith("cuda") else "cpu"
    model = build_random_model(config, torch.float32, seed=0, device=device)
    if model_cfg.gradient_checkpointing:
        enable_activation_checkpointing(model)
    levers = apply_model_levers(model, decoder_layers(model), model_cfg)
    model.train()
    compute = "bfloat16" if shape.device.startswith("cuda") else "float32"
    settings = LogprobSettings(
        **SAMPLING, compute_dtype=compute, fused_head=levers.fused_head, packed=levers.packed
    )
    return model, settings


def _batch(shape: LeverShape, vocab: int) -> dict[str, torch.Tensor]:
    """Rows from ``seq_len`` down to half of it: a micro-batch's rows differ in length, so the
    padded path computes over padding (what ``packed`` removes)."""
    g = torch.Generator().manual_seed(0)
    samples = []
    for i in range(shape.sequences):
        n = shape.seq_len - (shape.seq_len // 2) * i // max(1, shape.sequences - 1)
        ids = torch.randint(0, vocab, (n,), generator=g).tolist()
        samples.append(Sample(ids, [0] * shape.prompt_len + [1] * (n - shape.prompt_len)))
    return collate(samples, pad_id=0)


def _step(model, optimizer, batch, settings: LogprobSettings) -> tuple[float, float]:
    """One update step; (loss, gradient norm)."""
    optimizer.zero_grad(set_to_none=True)
    logp, _ = sequence_logprobs(model, batch, settings)
    mask = batch["loss_mask"].to(logp.device)
    loss = -(logp * mask).sum() / mask.sum()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e30)
    optimizer.step()
    return float(loss.detach()), float(norm)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure_variant(shape: LeverShape, name: str, profile: Path | None = None) -> dict[str, Any]:
    """One variant's FLOPs, step time, added peak memory and first-step numbers."""
    _, model_cfg, optim_kwargs = VARIANTS[name]
    model, settings = _build(shape, model_cfg)
    optimizer = build_optimizer(model, replace(OptimConfig(), lr=1e-5, **optim_kwargs))
    batch = _batch(shape, model.config.vocab_size)
    loss, norm = _step(model, optimizer, batch, settings)  # the warm-up (and compilation)
    flops = FlopCounterMode(display=False)
    with flops:
        _step(model, optimizer, batch, settings)
    memory = PeakMemory(shape.device)
    memory.reset()  # the steady state: AdamW's state exists from here on
    times, cpu = [], []
    for _ in range(shape.steps):
        _sync(shape.device)
        start, used = time.perf_counter(), time.process_time()
        _step(model, optimizer, batch, settings)
        _sync(shape.device)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - used)
    added = memory.added_gb()
    if profile is not None:
        profile_step(model, optimizer, batch, settings, profile / f"update-{name}")
    return {
        "flops": flops.get_total_flops(),
        "step_s": statistics.median(times),
        "step_cpu_s": statistics.median(cpu),  # this process's CPU: robust on a shared CPU
        "peak_added_gib": added,
        "first_loss": loss,
        "first_grad_norm": norm,
        "tokens": int(batch["attention_mask"].sum()),
        "what": VARIANTS[name][0],
    }


def profile_step(model, optimizer, batch, settings: LogprobSettings, stem: Path) -> list[str]:
    """One step under ``torch.profiler``: ``stem.json`` (Chrome trace) and ``stem.txt`` (top ops)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    stem.parent.mkdir(parents=True, exist_ok=True)
    with profile(activities=activities, record_shapes=False) as prof:
        _step(model, optimizer, batch, settings)
    prof.export_chrome_trace(str(stem.with_suffix(".json")))
    sort = "cuda_time_total" if torch.cuda.is_available() else "cpu_time_total"
    table = prof.key_averages().table(sort_by=sort, row_limit=25)
    stem.with_suffix(".txt").write_text(table)
    return [str(stem.with_suffix(".json")), str(stem.with_suffix(".txt"))]


def run_levers(
    shape: LeverShape, names: list[str], profile: Path | None = None
) -> dict[str, dict[str, Any]]:
    """Each named variant (``baseline`` first), the baseline profiled when ``profile``."""
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        raise ValueError(f"unknown lever {unknown[0]!r}; choose from {', '.join(VARIANTS)}")
    results: dict[str, dict[str, Any]] = {}
    for name in ["baseline", *[n for n in names if n != "baseline"]]:
        try:
            results[name] = measure_variant(shape, name, profile if name == "baseline" else None)
        except torch.OutOfMemoryError as exc:  # a row that says so; the next variant runs
            results[name] = {"error": f"out of memory: {str(exc)[:160]}", "what": VARIANTS[name][0]}
        gc.collect()  # the variant's model and AdamW state go before the next is built
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return results
