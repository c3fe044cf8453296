"""`spreadrl bench gpu`: GRPO steps at the Spreadsheet-RL recipe's shape on one GPU, plain and under FSDP2."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from spreadrl.bench.gpu import FULL, QUICK, SMOKE, SPLIT, run_bench
from spreadrl.cli.console import RichReporter, cli_console
from spreadrl.errors import ConfigError
from spreadrl.run_folder import check_output_folder


def bench_gpu(
    smoke: bool = typer.Option(False, help="Tiny model on CPU, seconds (what the tests run)."),
    quick: bool = typer.Option(
        False, help="One leg, 256-token responses, 2 steps: minutes on one H100, build included."
    ),
    steps: int = typer.Option(0, help="GRPO steps per leg, the first a warm-up (0 = shape's)."),
    prompts: int = typer.Option(0, help="Prompts per step (0 = shape's: 4)."),
    rollouts: int = typer.Option(0, help="Rollouts per prompt (0 = shape's: 4)."),
    response_tokens: int = typer.Option(0, help="Tokens per response (0 = shape's)."),
    micro_batch_tokens: int = typer.Option(0, help="Update micro-batch tokens (0 = shape's)."),
    torchrun: bool = typer.Option(
        None,
        "--torchrun/--no-torchrun",
        help="Also run the leg under torchrun + FSDP2 (default: on, off with --quick).",
    ),
    settings: list[str] = typer.Option(
        None,
        "--set",
        help="A dotted recipe override for every leg (a lever's setting), repeatable.",
    ),
    out: Path = typer.Option(
        None,
        help="Folder for build.json, each leg's JSON and per-step rows, bench.json "
        "(written as each part ends; default: a temporary folder).",
    ),
) -> None:
    """GRPO on one GPU at the Spreadsheet-RL recipe's shape, plain and under torchrun + FSDP2: one table.

    Examples (on a GPU machine, from the repository root):

      spreadrl bench gpu --quick --out runs/bench-gpu-quick

      spreadrl bench gpu --quick --set model.compile_layers=true --out runs/compiled
    """
    if smoke and quick:
        raise ConfigError("--smoke and --quick: choose one")
    if out is not None:  # a file in its place is one line before any leg runs
        check_output_folder(
            out,
            overwrite=False,
            remedy="a benchmark runs fresh (an earlier run there would be resumed): choose a new folder",
        )
    base = SMOKE if smoke else QUICK if quick else FULL
    shape = replace(
        base,
        prompts=prompts or base.prompts,
        rollouts=rollouts or base.rollouts,
        response_tokens=response_tokens or base.response_tokens,
        micro_batch_tokens=micro_batch_tokens or base.micro_batch_tokens,
        steps=steps or base.steps,
    )
    console = cli_console()
    with tempfile.TemporaryDirectory(prefix="spreadrl-bench-gpu-") as tmp:
        folder = out if out is not None else Path(tmp)
        report = run_bench(
            shape,
            folder,
            torchrun=(not quick) if torchrun is None else torchrun,
            extra=settings or [],
            reporter=RichReporter(console),
        )
    if "error" in report["build"]:
        raise ConfigError(f"bench gpu: the model build failed: {report['build']['error']}")
    console.print(_table(report["legs"]))
    first = next((r for r in report["legs"].values() if "device" in r), {})
    console.print(
        f"model: random Qwen3 {shape.preset}, vocabulary {shape.vocab_size or 'of the tokenizer'} "
        f"({report['build']['tokenizer']} tokenizer, built in {report['build']['build_s']:.1f} s); "
        f"{shape.prompts} prompts x {shape.rollouts} rollouts x {shape.response_tokens} tokens, "
        f"micro-batch {shape.micro_batch_tokens} tokens; overrides {settings or 'none'}; "
        f"device {first.get('device', '?')}; {first.get('versions', '')}; "
        f"{first.get('alloc_conf') or 'default allocator'}"
    )
    if out is not None:
        console.print(f"results in {out}")


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _table(legs: dict[str, dict[str, Any]]) -> Table:
    table = Table(
        "leg",
        "gen tok/s",
        "GPU util (gen)",
        "update tok/s",
        "update MFU",
        "update GiB: allocated / reserved / device (plan: allocated / device)",
        "rollout GiB: allocated / device",
        "step s",
        "mean seq",
        "gen / tools / logprobs / update",
    )
    for label, r in legs.items():
        if "error" in r:
            table.add_row(label, f"[red]failed: {r['error']}[/] (log: {r['log']})", *[""] * 8)
            continue
        mfu = f"{100 * r['update_mfu']:.1f}%" if r["update_mfu"] is not None else "n/a"
        util = f"{r['rollout_gpu_util']:.0f}%" if r["rollout_gpu_util"] is not None else "n/a"
        update = (
            f"{_gib(r['train_peak_gib'])} / {_gib(r['train_reserved_gib'])} / "
            f"{_gib(r['train_device_gib'])} ({r['plan_update_allocated_gib']:.1f} / "
            f"{r['plan_update_device_gib']:.1f})"
        )
        rollout = f"{_gib(r['rollout_peak_gib'])} / {_gib(r['rollout_device_gib'])}"
        split = " / ".join(f"{100 * r['split'][k]:.0f}%" for k in SPLIT)
        table.add_row(
            label,
            f"{r['generate_tok_s']:.0f}",
            util,
            f"{r['update_tok_s']:.0f}",
            mfu,
            update,
            rollout,
            f"{r['step_s']:.1f}",
            str(r["seq_len"]),
            split,
        )
    return table
