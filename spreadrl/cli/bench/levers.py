"""`spreadrl bench levers`: each update lever's FLOPs, step time and memory beside the plain path."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import typer
from rich.table import Table

from spreadrl.bench.levers import VARIANTS, LeverShape, run_levers
from spreadrl.cli.console import cli_console
from spreadrl.errors import ConfigError
from spreadrl.run_folder import check_output_file, check_output_folder


def bench_levers(
    lever: list[str] = typer.Option(
        None, help=f"Variants to run besides the baseline (repeatable): {', '.join(VARIANTS)}."
    ),
    preset: str = typer.Option("small", help="Random model: tiny | small | 4b-shape."),
    vocab_size: int = typer.Option(0, help="Embedding rows (151936 = Qwen3's; 0 = stand-in)."),
    sequences: int = typer.Option(4, help="Sequences in the micro-batch."),
    seq_len: int = typer.Option(256, help="Tokens per sequence."),
    prompt_len: int = typer.Option(64, help="Untrained prompt tokens at each sequence's start."),
    steps: int = typer.Option(3, help="Timed steps per variant (after one warm-up)."),
    device: str = typer.Option("cpu"),
    profile: Path = typer.Option(
        None, help="Folder for the baseline step's torch.profiler trace (.json) and top ops (.txt)."
    ),
    out: Path = typer.Option(None, help="Also write the results as JSON here."),
) -> None:
    """One update step (log-probs, loss, backward, AdamW) per lever, beside the baseline.

    Examples:

      spreadrl bench levers --preset small --lever selective-ac --lever fused-head

      spreadrl bench levers --device cuda --preset 4b-shape --vocab-size 151936 \\
        --sequences 8 --seq-len 2048 --lever fused-head --lever compile --profile runs/prof
    """
    if profile is not None:  # a path in the wrong place is one line before anything runs
        check_output_folder(profile, overwrite=True, flag="--profile")
    if out is not None:
        check_output_file(out, overwrite=True)
    chosen = list(lever or [n for n in VARIANTS if n != "baseline"])
    bad = sorted(set(chosen) - set(VARIANTS))
    if bad:
        raise ConfigError(f"--lever {bad[0]!r}: choose from {', '.join(VARIANTS)}")
    shape = LeverShape(preset, vocab_size, sequences, seq_len, prompt_len, steps, device)
    results = run_levers(shape, chosen, profile)
    base = results["baseline"]
    table = Table(
        "lever", "setting", "GFLOP/step", "x baseline", "step s", "x baseline", "CPU s",
        "x baseline", "tok/s", "peak added GiB", "loss (first step)", "grad norm",
    )  # fmt: skip
    for name, r in results.items():
        if "error" in r:
            table.add_row(name, r["what"], f"[red]{r['error']}[/]", *[""] * 9)
            continue
        table.add_row(
            name,
            r["what"],
            f"{r['flops'] / 1e9:.1f}",
            f"{r['flops'] / max(base['flops'], 1):.3f}",
            f"{r['step_s']:.3f}",
            f"{r['step_s'] / base['step_s']:.2f}",
            f"{r['step_cpu_s']:.3f}",
            f"{r['step_cpu_s'] / base['step_cpu_s']:.2f}",
            f"{r['tokens'] / r['step_s']:.0f}",
            "-" if r["peak_added_gib"] is None else f"{r['peak_added_gib']:.3f}",
            f"{r['first_loss']:.6f}",
            f"{r['first_grad_norm']:.6f}",
        )
    console = cli_console()
    if not console.is_terminal:  # piped into a file or docs: room for every column
        console = cli_console(width=200)
    console.print(table)
    device_name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    console.print(
        f"{preset} random Qwen3, {sequences} x {seq_len} tokens ({prompt_len} prompt), median of "
        f"{steps} steps after a warm-up; device {device_name}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads",
        markup=False,
    )
    if out is not None:
        out.write_text(json.dumps({"shape": shape.__dict__, "results": results}, indent=1))
