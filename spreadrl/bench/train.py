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
import typer
from rich.console import Console
from rich.table import Table
from transformers import Qwen3Config, Qwen3ForCausalLM

from spreadrl.bench.flops import peak_tflops as lookup_peak
from spreadrl.bench.flops import train_flops_per_token
from spreadrl.bench.rollout import _random_model
from spreadrl.config import load_config
from spreadrl.models.init import load_model_and_tokenizer
from spreadrl.train.batching import Sample, collate
from spreadrl.train.config import GRPOConfig
from spreadrl.train.grpo import train_grpo
from spreadrl.train.logprobs import sequence_logprobs
from spreadrl.train.memory import PeakMemory
from spreadrl.train.sft import sft_loss_step


def bench_train(
    model: str = typer.Option(None, help="Model folder (default: a random model of --preset)."),
    preset: str = typer.Option(
        "tiny", help="Random model when --model is absent: tiny | small | 4b-shape."
    ),
    vocab_size: int = typer.Option(
        0, help="Pad the random model's vocabulary to this size (151936 = Qwen3's)."
    ),
    config: Path = typer.Option(
        Path("configs/tiny-cpu.yaml"), help="GRPO recipe for the step split."
    ),
    seq_len: int = typer.Option(512, help="SFT sequence length."),
    batch: int = typer.Option(8, help="SFT sequences per step."),
    sft_steps: int = typer.Option(5),
    grpo_steps: int = typer.Option(3, help="GRPO steps for the time split (0 = skip)."),
    gradient_checkpointing: bool = typer.Option(False, help="Recompute activations."),
    peak_tflops: float = typer.Option(
        0.0, help="Device peak for MFU (default: looked up from the GPU's name)."
    ),
    device: str = typer.Option("cpu"),
) -> None:
    """SFT tokens/s, MFU and peak memory; GRPO step time split (generate / tools / logprobs / update).

    Examples:

      spreadrl bench train

      spreadrl bench train --preset 4b-shape --device cuda --seq-len 4096 --grpo-steps 0
    """
    console = Console()
    table = Table("measure", "value")
    cuda = device.startswith("cuda")
    device_name = torch.cuda.get_device_name(device) if cuda else "cpu"
    peak = peak_tflops or (lookup_peak(device_name) if cuda else None)
    with tempfile.TemporaryDirectory(prefix="spreadrl-bench-") as tmp:
        path = model or _random_model(Path(tmp), preset, vocab_size)
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
        table.add_row("parameters", f"{params / 1e6:.1f}M ({next(lm.parameters()).dtype})")
        table.add_row(f"SFT tokens/s (batch {batch} x {seq_len})", f"{tokens_per_s:.0f}")
        table.add_row("SFT achieved TFLOP/s", f"{achieved:.3f}")
        table.add_row(
            "SFT MFU",
            f"{100 * achieved / peak:.1f}% of {peak:g} TFLOP/s" if peak else "n/a (no known peak)",
        )
        if cuda:
            table.add_row("peak memory", f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
        del lm, opt
        if cuda:
            torch.cuda.empty_cache()

        if grpo_steps > 0:
            cfg = load_config(
                GRPOConfig,
                config if config.exists() else None,
                [
                    f"model.name_or_path={path}",
                    f"steps={grpo_steps}",
                    f"output_dir={Path(tmp) / 'grpo'}",
                    "checkpoint.every_steps=0",
                    f"device={device}",
                ],
            )
            train_grpo(cfg, console=Console(quiet=True))
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
                table.add_row(
                    f"GRPO {key} (mean of {len(values)} steps)", f"{sum(values) / len(values):.2f}"
                )
    console.print(table)
    console.print(
        f"model {model or preset + ' random'}, device {device_name}, recipe {config}, "
        f"torch {torch.__version__}"
    )


def bench_logprobs(
    tokens: int = typer.Option(8192, help="Sequence length (one sequence; all but 16 trained)."),
    grad: bool = typer.Option(False, help="Forward + backward instead of a no-grad pass."),
    vocab_size: int = typer.Option(151936, help="Vocabulary (151936 = Qwen3's)."),
    hidden: int = typer.Option(64, help="Hidden size of the narrow random Qwen3."),
    layers: int = typer.Option(2, help="Decoder layers."),
    temperature: float = typer.Option(0.7),
    top_k: int = typer.Option(0, help="Top-k of the sampling distribution (0 = off)."),
    top_p: float = typer.Option(1.0, help="Top-p of the sampling distribution."),
    entropy: bool = typer.Option(False, help="Also compute the entropy (with grad under --grad)."),
    chunk_tokens: int = typer.Option(0, help="Tokens per chunk (0 = sized from the vocabulary)."),
    device: str = typer.Option("cpu"),
) -> None:
    """Peak memory added by, and time of, one log-prob pass over a long sequence.

    Examples:

      spreadrl bench logprobs --tokens 8192

      spreadrl bench logprobs --tokens 4096 --grad --entropy
    """
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
    kwargs: dict[str, Any] = dict(
        top_k=top_k, top_p=top_p, entropy=entropy, chunk_tokens=chunk_tokens or None
    )
    if grad:
        logp, ent = sequence_logprobs(model, batch, temperature, **kwargs)
        loss = (logp * batch["loss_mask"].to(logp.device)).sum()
        if ent is not None:
            loss = loss + (ent * batch["loss_mask"].to(ent.device)).sum()
        loss.backward()
    else:
        with torch.no_grad():
            sequence_logprobs(model, batch, temperature, **kwargs)
    elapsed = time.perf_counter() - start
    added = memory.added_gb()
    Console().print(
        f"log-probs of {tokens} tokens ({'forward + backward' if grad else 'no grad'}), "
        f"vocab {vocab_size}, hidden {hidden} x {layers} layers, device {device}: "
        f"peak memory added {'n/a' if added is None else f'{added:.2f} GiB'}, "
        f"{elapsed:.2f} s, torch {torch.__version__}"
    )
