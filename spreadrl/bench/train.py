"""`spreadrl bench train` and `bench logprobs`: throughput, MFU and peak memory of training.

SFT throughput is measured on synthetic sequences of a fixed length (no data
needed), on any preset (``--preset 4b-shape --vocab-size 151936`` is Qwen3-4B's
shape, for GPUs); MFU uses :mod:`spreadrl.bench.flops`. The GRPO split comes
from a few real steps of a recipe (generation, tools, log-prob passes, update)
read back from metrics.jsonl, with the peak memory of the rollout and of the
log-prob passes + update (``rollout_peak_gb``, ``train_peak_gb``: the GPU
allocator's peak, or the process's peak RSS on CPU).

``bench logprobs`` measures one :func:`spreadrl.train.logprobs.sequence_logprobs`
call on a narrow random Qwen3 of any vocabulary: the peak memory it adds and
its time, with or without grad (the memory goal of the trainer: at a 151,936
vocabulary, <= 1.0 GB for 8,192 tokens without grad, <= 1.5 GB for 4,096 with).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from spreadrl.bench.flops import peak_tflops as lookup_peak
from spreadrl.bench.flops import train_flops_per_token
from spreadrl.bench.rollout import random_model
from spreadrl.config import load_config, read_recipe
from spreadrl.models.init import load_model_and_tokenizer
from spreadrl.train.batching import Sample, collate
from spreadrl.train.config import GRPOConfig
from spreadrl.train.grpo import train_grpo
from spreadrl.train.logprobs import LogprobSettings, sequence_logprobs
from spreadrl.train.memory import PeakMemory
from spreadrl.train.sft import sft_loss_step


def train_rows(
    model: str | None = None,
    preset: str = "tiny",
    vocab_size: int = 0,
    config: Path = Path("configs/tiny-cpu.yaml"),
    seq_len: int = 512,
    batch: int = 8,
    sft_steps: int = 5,
    grpo_steps: int = 3,
    gradient_checkpointing: bool = False,
    peak_tflops: float = 0.0,
    device: str = "cpu",
) -> tuple[list[tuple[str, str]], str]:
    """SFT tokens/s, MFU and peak memory; GRPO step time split (generate / tools / logprobs /
    update): (measure, value) rows and the line that says what ran where."""
    rows: list[tuple[str, str]] = []
    cuda = device.startswith("cuda")
    device_name = torch.cuda.get_device_name(device) if cuda else "cpu"
    peak = peak_tflops or (lookup_peak(device_name) if cuda else None)
    if grpo_steps > 0:  # the recipe first: a typo is one line, not the defaults after the SFT half
        read_recipe(config)
    with tempfile.TemporaryDirectory(prefix="spreadrl-bench-") as tmp:
        path = model or random_model(Path(tmp), preset, vocab_size)
        lm, tok = load_model_and_tokenizer(path, device=device)
        if gradient_checkpointing:
            lm.gradient_checkpointing_enable()
        lm.train()
        opt = torch.optim.AdamW(lm.parameters(), lr=1e-4)
        g = torch.Generator().manual_seed(0)
        vocab = lm.config.vocab_size
        samples = [
            Sample(torch.randint(0, vocab, (seq_len,), generator=g).tolist(), [1] * seq_len)
            for _ in range(batch)
        ]

        def step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
            optimizer.zero_grad(set_to_none=True)
            sft_loss_step(model, samples, pad_id=0, micro_batch_tokens=seq_len * batch)
            optimizer.step()

        step(lm, opt)  # warm up (allocator, kernels, optimizer state)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        for _ in range(sft_steps):
            step(lm, opt)
        if cuda:
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        tokens_per_s = batch * seq_len * sft_steps / elapsed
        achieved = tokens_per_s * train_flops_per_token(lm.config, seq_len) / 1e12
        params = sum(p.numel() for p in lm.parameters())
        rows.append(("parameters", f"{params / 1e6:.1f}M ({next(lm.parameters()).dtype})"))
        rows.append((f"SFT tokens/s (batch {batch} x {seq_len})", f"{tokens_per_s:.0f}"))
        rows.append(("SFT achieved TFLOP/s", f"{achieved:.3f}"))
        rows.append(
            (
                "SFT MFU",
                f"{100 * achieved / peak:.1f}% of {peak:g} TFLOP/s"
                if peak
                else "n/a (no known peak)",
            )
        )
        if cuda:
            rows.append(("peak memory", f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB"))
        del lm, opt
        if cuda:
            torch.cuda.empty_cache()

        if grpo_steps > 0:
            cfg = load_config(
                GRPOConfig,
                config,
                [
                    f"model.name_or_path={path}",
                    f"steps={grpo_steps}",
                    f"output_dir={Path(tmp) / 'grpo'}",
                    "checkpoint.every_steps=0",
                    f"device={device}",
                ],
            )
            train_grpo(cfg, save_end=False)  # logged, not printed; a benchmark saves nothing
            rows = [
                json.loads(line)
                for line in (Path(tmp) / "grpo" / "metrics.jsonl").read_text().splitlines()
            ]
            keys = (
                "step_s",
                "generate_s",
                "tools_s",
                "logprobs_s",
                "update_s",
                "tokens_per_s",
                "rollout_peak_gb",
                "train_peak_gb",
            )
            for key in keys:
                values = [r.get(key, 0.0) for r in rows[1:] or rows]
                rows.append(
                    (
                        f"GRPO {key} (mean of {len(values)} steps)",
                        f"{sum(values) / len(values):.2f}",
                    )
                )
    return rows, (
        f"model {model or preset + ' random'}, device {device_name}, recipe {config}, "
        f"torch {torch.__version__}"
    )


def logprobs_line(
    tokens: int = 8192,
    grad: bool = False,
    vocab_size: int = 151936,
    hidden: int = 64,
    layers: int = 2,
    temperature: float = 0.7,
    top_k: int = 0,
    top_p: float = 1.0,
    entropy: bool = False,
    chunk_tokens: int = 0,
    device: str = "cpu",
) -> str:
    """Peak memory added by, and time of, one log-prob pass over a long sequence: one line."""
    torch.manual_seed(0)
    heads = max(1, hidden // 16)
    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        head_dim=16,
        intermediate_size=2 * hidden,
        tie_word_embeddings=True,
    )
    model = Qwen3ForCausalLM(config).to(device)
    ids = torch.randint(0, vocab_size, (tokens,)).tolist()
    prompt = min(16, tokens - 1)
    batch = collate([Sample(ids, [0] * prompt + [1] * (tokens - prompt))], pad_id=0)
    memory = PeakMemory(device)
    memory.reset()
    start = time.perf_counter()
    settings = LogprobSettings(temperature=temperature, top_k=top_k, top_p=top_p)
    kwargs: dict[str, Any] = dict(entropy=entropy, chunk_tokens=chunk_tokens or None)
    if grad:
        logp, ent = sequence_logprobs(model, batch, settings, **kwargs)
        loss = (logp * batch["loss_mask"].to(logp.device)).sum()
        if ent is not None:
            loss = loss + (ent * batch["loss_mask"].to(ent.device)).sum()
        loss.backward()
    else:
        with torch.no_grad():
            sequence_logprobs(model, batch, settings, **kwargs)
    elapsed = time.perf_counter() - start
    added = memory.added_gb()
    return (
        f"log-probs of {tokens} tokens ({'forward + backward' if grad else 'no grad'}), "
        f"vocab {vocab_size}, hidden {hidden} x {layers} layers, device {device}: "
        f"peak memory added {'n/a' if added is None else f'{added:.2f} GiB'}, "
        f"{elapsed:.2f} s, torch {torch.__version__}"
    )
