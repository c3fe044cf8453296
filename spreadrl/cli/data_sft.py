"""`spreadrl data sft-build`: agent conversations for the SFT cold start."""

from __future__ import annotations

from pathlib import Path

import typer


def sft_build(
    tasks: str = typer.Option(..., help="Task folder or builtin:<split>."),
    out: Path = typer.Option(..., help="JSONL file to write ({messages, tools, task_id, case})."),
    backend: str = typer.Option(
        "oracle", help="oracle (reference solutions) or a model backend: hf | vllm | openai."
    ),
    model: str = typer.Option(None, help="Model for rejection sampling (hf, vllm, openai)."),
    samples: int = typer.Option(1, min=1, help="Samples per task case (rejection sampling)."),
    preset: str = typer.Option("full", help="Tool preset or comma-separated tool names."),
    temperature: float = typer.Option(1.0),
    max_turns: int = typer.Option(20),
    max_chars: int = typer.Option(
        None, help="Drop conversations longer than this many characters."
    ),
    base_url: str = typer.Option(None, help="Endpoint of the openai backend."),
    seed: int = typer.Option(0),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --out file."),
) -> None:
    """Roll out a policy through the gym and keep the episodes that passed.

    With the oracle, every synthesized task's reference solution becomes a full
    conversation with the gym's real observations; with a model it is rejection
    sampling. Duplicates are removed.

    Examples:

      spreadrl data sft-build --tasks builtin:demo-train --out runs/sft.jsonl

      spreadrl data sft-build --tasks data/train --backend openai --model Qwen/Qwen3-4B \\
          --base-url http://127.0.0.1:8000/v1 --samples 4 --out runs/rs.jsonl
    """
    from rich.console import Console

    from spreadrl.data.sources import resolve_tasks
    from spreadrl.env.factory import make_env_pool
    from spreadrl.rollout.backends import load_policy
    from spreadrl.rollout.config import RolloutConfig
    from spreadrl.rollout.types import RunValues
    from spreadrl.run_folder import check_output_file
    from spreadrl.train.sft_build import build_sft_data

    check_output_file(out, overwrite=overwrite)  # before any rollout: never a silent replace
    task_set = resolve_tasks(tasks)
    policy, tokenizer = load_policy(backend, model, base_url=base_url)
    # the rollout section's defaults but for the flags: a turn samples up to
    # rollout.max_new_tokens_per_turn (1,024), as in training and eval
    cfg = RolloutConfig(temperature=temperature, max_turns=max_turns)
    with make_env_pool(preset) as pool:
        report = build_sft_data(
            task_set,
            policy,
            pool,
            cfg,
            out,
            run=RunValues(seed=seed),
            tokenizer=tokenizer,
            samples=samples,
            max_chars=max_chars,
        )
    Console().print(
        f"{report.episodes} episodes, {report.passed} passed -> {report.rows} conversations "
        f"({report.dropped_too_long} dropped as too long) in {report.path}",
        markup=False,
    )
