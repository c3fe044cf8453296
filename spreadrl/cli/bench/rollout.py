"""`spreadrl bench rollout`: the hf backend's generation throughput."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from spreadrl.bench.rollout import against_generate, episode_rates
from spreadrl.cli.console import cli_console
from spreadrl.errors import ConfigError
from spreadrl.run_folder import check_output_file

VARIANTS = ("default", "static")


def bench_rollout(
    model: str = typer.Option(
        None, help="Model folder (default: a random Qwen3 of --model-preset)."
    ),
    tasks: str = typer.Option("builtin:demo-test", help="Task set (episode mode)."),
    episodes: int = typer.Option(32, help="Episodes per measurement (episode mode)."),
    max_new_tokens: int = typer.Option(64, help="Max new tokens per turn / per row."),
    max_turns: int = typer.Option(2, help="Turns per episode (episode mode)."),
    device: str = typer.Option("cpu"),
    preset: str = typer.Option("write_range", help="Tool preset or list (episode mode)."),
    against: str = typer.Option(
        None, help="generate: beside transformers' generate; harness: beside rollout.harness."
    ),
    model_preset: str = typer.Option(
        "tiny", help="Random model's preset: tiny | small | 4b-shape."
    ),
    batch: int = typer.Option(16, help="Rows per call (--against)."),
    group: int = typer.Option(4, help="Rows per distinct prompt, as a GRPO group (--against)."),
    prompt_tokens: int = typer.Option(256, help="Prompt length (--against)."),
    repeats: int = typer.Option(3, help="Timed calls of each, alternated (--against)."),
    variant: list[str] = typer.Option(
        None, help="spreadrl settings to measure (--against): default, static (repeatable)."
    ),
    threads: int = typer.Option(0, help="torch CPU threads (0 = its default; --against)."),
    vocab_size: int = typer.Option(
        0, help="Random model's embedding rows (151936 = Qwen3's; --against)."
    ),
    out: Path = typer.Option(None, help="Also write the result as JSON here (--against)."),
) -> None:
    """Generation tokens/s of the hf backend: batched vs one at a time over real episodes,
    or (--against generate) beside transformers' own generate on the same inputs.

    Examples:

      spreadrl bench rollout --against generate --model-preset small --batch 16

      spreadrl bench rollout --against harness --episodes 16 --repeats 3

      spreadrl bench rollout --against generate --device cuda --model-preset 4b-shape \\
        --variant default --variant static --prompt-tokens 2048 --max-new-tokens 256
    """
    if out is not None:  # a folder in its place is one line before anything is measured
        check_output_file(out, overwrite=True)
    console = cli_console()
    if against is None:
        rows, rates = episode_rates(
            model, tasks, episodes, max_new_tokens, max_turns, device, preset
        )
        return _print_episodes(console, rows, rates, f"{episodes} episodes", model, device)
    if against == "harness":
        return _print_harness(console, model, episodes, max_new_tokens, repeats, device, out)
    if against != "generate":
        raise ConfigError(f"--against {against!r}: compare with 'generate' or 'harness'")
    chosen = tuple(variant or ("default",))
    bad = sorted(set(chosen) - set(VARIANTS))
    if bad:
        raise ConfigError(f"--variant {bad[0]!r}: choose from {', '.join(VARIANTS)}")
    result = against_generate(
        model,
        model_preset,
        batch,
        group,
        prompt_tokens,
        max_new_tokens,
        repeats,
        device,
        chosen,
        vocab_size,
        threads,
    )
    _print_against(console, result)
    if out is not None:
        out.write_text(json.dumps(result, indent=1))


def _print_episodes(
    console: Console,
    rows: list[tuple[str, ...]],
    rates: dict[str, float],
    what: str,
    model: str | None,
    device: str,
) -> None:
    """Batched vs one-at-a-time episodes: the table and the throughput ratio."""
    table = Table("mode", "episodes/s", "generated tok/s", "generate s", "tools s", "tools share")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    ratio = rates["batched"] / max(rates["one at a time"], 1e-9)
    console.print(
        f"batched / one-at-a-time generation throughput: {ratio:.1f}x "
        f"({what}, model {model or 'tiny random'}, device {device})"
    )


def _print_against(console: Console, result: dict[str, Any]) -> None:
    """Each run's median tokens/s, seconds per call and ratio to generate, then the shape."""
    table = Table(
        "run", "tok/s (median)", "s per call", "x generate", "tok per CPU s", "x generate (CPU)"
    )
    for name, run in result["runs"].items():
        seconds = ", ".join(f"{s:.2f}" for s in run["seconds"])
        table.add_row(
            name,
            f"{run['tok_s']:.1f}",
            seconds,
            f"{run['vs_generate']:.2f}x",
            f"{run['tok_per_cpu_s']:.1f}",
            f"{run['vs_generate_cpu']:.2f}x",
        )
    console.print(table)
    console.print(", ".join(f"{k} {v}" for k, v in result["shape"].items()), markup=False)


def _print_harness(
    console: Console,
    model: str | None,
    episodes: int,
    max_new_tokens: int,
    repeats: int,
    device: str,
    out: Path | None,
) -> None:
    """The built-in loop beside the capturing endpoint (``spreadrl.bench.harness``)."""
    from spreadrl.bench.harness import against_harness

    result = against_harness(
        model, episodes=episodes, max_new_tokens=max_new_tokens, repeats=repeats, device=device
    )
    table = Table(
        "path", "median s", "each repeat (s)", "in the engine (s)", "engine calls", "tokens"
    )
    for label in result["seconds"]:
        times = ", ".join(f"{t:.2f}" for t in result["seconds"][label])
        table.add_row(
            label,
            f"{result['median_s'][label]:.2f}",
            times,
            ", ".join(f"{t:.2f}" for t in result["generate_s"][label]),
            ", ".join(f"{n:g}" for n in result["engine_calls"][label]),
            str(result["generated_tokens"][label]),
        )
    console.print(table)
    same = "same tokens" if result["same_tokens"] else "NOT the same tokens"
    console.print(
        f"capturing endpoint overhead: {100 * result['overhead']:+.1f}% of the built-in "
        f"loop's rollout time ({episodes} episodes, {same}, model {result['model']}, {device}); "
        f"with a sandboxed interpreter per episode (rollout.harness_fork=false): "
        f"{100 * result['overhead_no_fork']:+.1f}%"
    )
    if out is not None:
        out.write_text(json.dumps(result, indent=1))
