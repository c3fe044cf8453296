"""`spreadrl eval`: run a model on a task set and report pass@1 / pass@k."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(
    help="Evaluate a policy on a task set (pass@1, pass@k, SpreadsheetBench soft/hard).",
    invoke_without_command=True,
)

EXAMPLES = """
Examples:

  spreadrl eval --backend oracle --tasks builtin:test --out runs/oracle

  spreadrl eval --model runs/demo/grpo --backend hf --tasks builtin:demo-test --samples 4 --out runs/eval

  spreadrl eval --model Qwen/Qwen3-4B --backend openai --base-url http://127.0.0.1:8000/v1 --tasks data/verified --out runs/q4b

  spreadrl eval --backend oracle --env code --tasks builtin-code:test --out runs/code-oracle

  spreadrl eval compare runs/sft runs/grpo
"""


@app.callback(help="Evaluate a policy on a task set.\n" + EXAMPLES)
def evaluate(
    ctx: typer.Context,
    model: str = typer.Option(None, help="Model folder or name (hf, vllm, openai backends)."),
    backend: str = typer.Option("hf", help="hf | vllm | openai | oracle | noop."),
    tasks: str = typer.Option(
        "builtin:test", help="Task folder (native layout) or builtin:<split>."
    ),
    samples: int = typer.Option(1, min=1, help="Samples per task case (K)."),
    out: Path = typer.Option(None, help="Run folder for report.json, trajectories, outputs."),
    preset: str = typer.Option(
        "full", help="Tool preset: minimal | full | comma-separated tool names."
    ),
    env: str = typer.Option(
        "spreadsheet", help="Environment: spreadsheet (the gym) or code (math/code)."
    ),
    concurrency: int = typer.Option(
        0, min=0, help="Environment worker processes (0 = in-process)."
    ),
    temperature: float = typer.Option(1.0, help="Sampling temperature (0 = greedy)."),
    top_p: float = typer.Option(1.0),
    top_k: int = typer.Option(0),
    max_turns: int = typer.Option(20),
    max_new_tokens: int = typer.Option(1024, help="Max new tokens per assistant turn."),
    max_response_tokens: int = typer.Option(8192, help="Max tokens per episode after the prompt."),
    seed: int = typer.Option(0),
    base_url: str = typer.Option(None, help="Endpoint of the openai backend."),
    device: str = typer.Option("cpu"),
    batch_size: int = typer.Option(64, help="Episodes advanced together."),
    scheduler: str = typer.Option(
        "auto",
        help="turn (one batched generation per round) | episode (no barrier between "
        "episodes; vllm) | auto.",
    ),
    skip_bad: bool = typer.Option(False, help="Skip broken tasks instead of stopping."),
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    from rich.console import Console

    from spreadrl.data.sources import resolve_tasks
    from spreadrl.env.factory import make_env_pool
    from spreadrl.errors import SpreadrlError
    from spreadrl.eval.report import render_report
    from spreadrl.eval.runner import run_eval
    from spreadrl.rollout.backends import load_policy
    from spreadrl.rollout.runner import RolloutSettings
    from spreadrl.rollout.types import SamplingParams

    if out is None:
        raise SpreadrlError(
            "spreadrl eval needs --out RUN_DIR (where the report and trajectories go)"
        )
    console = Console()
    task_set = resolve_tasks(tasks, skip_bad=skip_bad)
    policy, tokenizer = load_policy(
        backend, model, device=device, base_url=base_url, max_batch_size=batch_size
    )
    settings = RolloutSettings(
        sampling=SamplingParams(temperature, top_p, top_k, max_new_tokens, seed),
        max_turns=max_turns,
        max_response_tokens=max_response_tokens,
        scheduler=scheduler,
    )
    if env not in ("spreadsheet", "code"):
        raise SpreadrlError(f"--env must be spreadsheet or code, got {env!r}")
    from spreadrl.train.config import EnvSettings

    tools = [t.strip() for t in preset.split(",") if t.strip()]
    env_settings = EnvSettings(
        kind=env, tools=tools if env == "spreadsheet" else ["code_interpreter"]
    )
    with make_env_pool(env_settings, workers=concurrency) as pool:
        report = run_eval(
            task_set,
            policy,
            pool,
            settings,
            out,
            tokenizer=tokenizer,
            samples=samples,
            k_values=sorted({1, samples} | {k for k in (2, 4, 8, 16) if k < samples}),
            batch_size=batch_size,
            meta={"model": model, "backend": backend, "tasks": tasks},
        )
    render_report(report, console, title=f"{backend} on {tasks}")
    console.print(
        f"report: {out / 'report.json'}  trajectories: {out / 'trajectories.jsonl'}  "
        f"outputs: {out / 'outputs'}"
    )


@app.command("compare")
def compare(run_a: Path, run_b: Path) -> None:
    """Print two eval reports side by side and the cases that flipped."""
    import json

    from rich.console import Console
    from rich.table import Table

    from spreadrl.errors import SpreadrlError
    from spreadrl.eval.report import compare_reports

    reports = []
    for run in (run_a, run_b):
        path = run / "report.json" if run.is_dir() else run
        if not path.exists():
            raise SpreadrlError(f"{path}: no report.json (run `spreadrl eval --out {run}` first)")
        reports.append(json.loads(path.read_text()))
    diff = compare_reports(*reports)
    table = Table(title="eval compare")
    table.add_column("metric")
    table.add_column(str(run_a), justify="right")
    table.add_column(str(run_b), justify="right")
    for key, (a, b) in diff["metrics"].items():
        table.add_row(key, _fmt(a), _fmt(b))
    console = Console()
    console.print(table)
    console.print(f"improved cases: {len(diff['improved'])}  regressed: {len(diff['regressed'])}")
    for label in ("improved", "regressed"):
        for case in diff[label][:20]:
            console.print(f"  {label}: {case}")


def _fmt(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)
