"""`spreadrl bench train` and `bench logprobs`: throughput, MFU and peak memory of training."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from spreadrl.bench.train import logprobs_line, train_rows
from spreadrl.cli.console import cli_console


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
    rows, footer = train_rows(
        model,
        preset,
        vocab_size,
        config,
        seq_len,
        batch,
        sft_steps,
        grpo_steps,
        gradient_checkpointing,
        peak_tflops,
        device,
    )
    table = Table("measure", "value")
    for row in rows:
        table.add_row(*row)
    console = cli_console()
    console.print(table)
    console.print(footer)


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
    cli_console().print(
        logprobs_line(
            tokens,
            grad,
            vocab_size,
            hidden,
            layers,
            temperature,
            top_k,
            top_p,
            entropy,
            chunk_tokens,
            device,
        )
    )
