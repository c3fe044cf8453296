"""`spreadrl data sft-build`: agent conversations for the SFT cold start."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from spreadrl.run_folder import check_output_file

if TYPE_CHECKING:
    from spreadrl.data.task import TaskSet


def sft_build(
    out: Path = typer.Option(..., help="JSONL file to write ({messages, tools, task_id, case})."),
    config: Path = typer.Option(
        None,
        "--config",
        "-c",
        help="Training recipe: build rows in its tool preset, overview and turn budget, on its "
        "data.train_tasks (flags still override).",
    ),
    tasks: str = typer.Option(
        None, help="Task folder or builtin:<split> (default: the recipe's data.train_tasks)."
    ),
    backend: str = typer.Option(
        "oracle", help="oracle (reference solutions) or a model backend: hf | vllm | openai."
    ),
    model: str = typer.Option(
        None,
        help="The model the rows are for: rows longer than its context are dropped (counted); "
        "with hf / vllm / openai also the model that samples them (rejection sampling).",
    ),
    samples: int = typer.Option(1, min=1, help="Samples per task case (rejection sampling)."),
    preset: str = typer.Option(
        None, help="Tool preset or comma-separated tool names (default: the recipe's, else full)."
    ),
    temperature: float = typer.Option(1.0),
    max_turns: int = typer.Option(None, help="Max assistant turns (default: the recipe's, 20)."),
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
    sampling. Duplicates are removed. With --config the rows use the recipe's tools,
    workbook overview and turn budget, so SFT teaches the format GRPO samples in;
    with --model, rows longer than that model's context are dropped and counted.
    Finished batches wait in OUT.partial: after a stop the same command runs the rest.

    Examples:

      spreadrl data sft-build --config tiny-cpu --model runs/tiny --out runs/sft.jsonl

      spreadrl data sft-build --tasks builtin:demo-train --out runs/sft-full.jsonl

      spreadrl data sft-build --tasks data/train --backend openai --model Qwen/Qwen3-4B \\
          --base-url http://127.0.0.1:8000/v1 --samples 4 --out runs/rs.jsonl
    """
    check_output_file(out, overwrite=overwrite, written_by=_is_sft_data)  # before any import
    from spreadrl.cli.console import cli_console, said_on_ctrl_c
    from spreadrl.env.factory import make_env_pool
    from spreadrl.rollout.config import RolloutConfig
    from spreadrl.rollout.engine import load_policy
    from spreadrl.rollout.types import RunValues
    from spreadrl.train.sft_data import build_sft_data, model_context, progress_line

    env, turns, default_tasks = _recipe_settings(config, preset, max_turns)
    task_set = _task_set(tasks or default_tasks)
    policy, tokenizer = load_policy(backend, model, base_url=base_url)
    context = model_context(model) if model is not None else None
    cfg = RolloutConfig(temperature=temperature, max_turns=turns)  # else training's defaults
    with said_on_ctrl_c(lambda: progress_line(out)), make_env_pool(env) as pool:
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
            context=context,
            source={"backend": backend, "model": model, "base_url": base_url, "env": repr(env)},
            restart=overwrite,  # a stopped build's batches are dropped too
        )
    cli_console().print(report.summary(), markup=False)


def _is_sft_data(path: Path) -> bool:
    """Whether ``path`` is what sft-build writes: conversations, one JSON object a line."""
    import json

    try:
        with path.open(encoding="utf-8") as handle:
            first = handle.readline()
        if not first.strip():
            return True
        row = json.loads(first)
        return isinstance(row, dict) and "messages" in row
    except (OSError, UnicodeDecodeError, ValueError, TypeError):
        return False


def _task_set(source: str | None) -> TaskSet:
    """The task set rows are built on: --tasks, else the recipe's data.train_tasks."""
    from spreadrl.data.sources import resolve_tasks
    from spreadrl.errors import SpreadrlError

    if not source:
        raise SpreadrlError("give --tasks (a task folder or builtin:<split>) or a --config recipe")
    return resolve_tasks(source)


def _recipe_settings(
    config: Path | None, preset: str | None, max_turns: int | None
) -> tuple[Any, int, str]:
    """(env settings, turn budget, default task set): the recipe's, flags overriding."""
    from dataclasses import replace

    from spreadrl.rollout.config import RolloutConfig

    if config is None:
        return preset or "full", max_turns or 20, ""
    from spreadrl.cli.eval import load_eval_recipe

    recipe = load_eval_recipe(config, [])
    env = recipe.env if preset is None else replace(recipe.env, tools=preset)
    turns = max_turns or recipe.rollout.max_turns or RolloutConfig().max_turns
    return env, turns, recipe.data.train_tasks
