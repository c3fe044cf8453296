"""`spreadrl bench train`: SFT tokens/s, MFU, peak memory and the time split of a GRPO step.

SFT throughput is measured on synthetic sequences of a fixed length (no data
needed), on any preset (``--preset 4b-shape --vocab-size 151936`` is Qwen3-4B's
shape, for GPUs); MFU uses :mod:`spreadrl.bench.flops`. The GRPO split comes
from a few real steps of a recipe (generation, tools, log-prob passes, update)
read back from metrics.jsonl.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import typer


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
    """SFT tokens/s, MFU and peak memory; GRPO step time split (generate / tools / logprobs / update)."""
    import torch
    from rich.console import Console
    from rich.table import Table

    from spreadrl.bench.flops import peak_tflops as lookup_peak
    from spreadrl.bench.flops import train_flops_per_token
    from spreadrl.bench.rollout import _random_model
    from spreadrl.config import load_config
    from spreadrl.models.init import load_model_and_tokenizer
    from spreadrl.train.batching import Sample
    from spreadrl.train.config import GRPOConfig
    from spreadrl.train.grpo import train_grpo
    from spreadrl.train.sft import sft_loss_step

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

        def step(model: Any, optimizer: Any) -> None:
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
            keys = ("step_s", "generate_s", "tools_s", "logprobs_s", "update_s", "tokens_per_s")
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
