"""`spreadrl eval`: run a model on a task set and report pass@1 / pass@k.

The command parses its flags, loads the recipe and draws the report; the eval
itself is :mod:`spreadrl.eval.recipe`'s."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from spreadrl.cli.console import plain
from spreadrl.errors import SpreadrlError
from spreadrl.eval.recipe import EngineSpec, EvalSpec
from spreadrl.rollout.engine import engine_can
from spreadrl.rollout.engines import ENGINES

if TYPE_CHECKING:
    from spreadrl.train.config import GRPOConfig

app = typer.Typer(
    help="Evaluate a policy on a task set (pass@1, pass@k, SpreadsheetBench soft/hard).",
    invoke_without_command=True,
)

EXAMPLES = """
Examples:

  spreadrl eval --config configs/tiny-cpu.yaml --model runs/demo/grpo/final --tasks builtin:demo-test --out runs/eval

  spreadrl eval --config configs/tiny-cpu.yaml --backend oracle --tasks builtin:demo-test --out runs/oracle rollout.max_turns=4

  spreadrl eval --backend oracle --tasks builtin:test --out runs/oracle

  spreadrl eval --model runs/demo/grpo/final --backend hf --tasks builtin:demo-test --samples 4 --out runs/eval

  spreadrl eval --model Qwen/Qwen3-4B --backend openai --base-url http://127.0.0.1:8000/v1 --tasks data/verified --out runs/q4b

  spreadrl eval --backend oracle --env code --tasks builtin-code:test --out runs/code-oracle

  spreadrl eval compare runs/sft runs/grpo
"""


FLAG_KEYS = {
    "temperature": "rollout.temperature",
    "top_p": "rollout.top_p",
    "top_k": "rollout.top_k",
    "max_turns": "rollout.max_turns",
    "max_new_tokens": "rollout.max_new_tokens_per_turn",
    "max_response_tokens": "rollout.max_response_tokens",
    "scheduler": "rollout.scheduler",
    "concurrency": "rollout.concurrency",
    "env": "env.kind",
    "preset": "env.tools",
    "scoring": "env.scoring",
}
"""Each flag is a shorthand for one recipe key; a flag given wins over the recipe."""


def flag_overrides(**given: object) -> list[str]:
    """The dotted overrides the given flags stand for (``--env code`` also picks its tool)."""
    flags = [f"{FLAG_KEYS[name]}={value}" for name, value in given.items() if value is not None]
    if given.get("env") == "code" and given.get("preset") is None:
        flags.append("env.tools=[code_interpreter]")
    return flags


@app.callback(help="Evaluate a policy on a task set.\n" + EXAMPLES)
def evaluate(
    ctx: typer.Context,
    overrides: list[str] = typer.Argument(
        None, help="Dotted overrides of the recipe, e.g. rollout.max_turns=4 env.overview=none."
    ),
    config: Path = typer.Option(
        None,
        "--config",
        "-c",
        help="YAML recipe, or a shipped recipe's name (spreadrl config list): evaluate with "
        "exactly its rollout and env settings.",
    ),
    model: str = typer.Option(
        None, help="Model folder or name (hf, vllm, openai); default: the recipe's model."
    ),
    backend: str = typer.Option(None, help=f"{' | '.join(ENGINES)} (default hf)."),
    tasks: str = typer.Option(
        None,
        help="Task folder (native layout) or builtin:<split>; default: the recipe's eval.tasks "
        "(builtin:test).",
    ),
    samples: int = typer.Option(
        None, min=1, help="Samples per task case (K); default: the recipe's eval.samples (1)."
    ),
    out: Path = typer.Option(None, help="Run folder for report.json, trajectories, outputs."),
    preset: str = typer.Option(
        None, help="Tool preset: minimal | full | comma-separated tool names (env.tools)."
    ),
    env: str = typer.Option(None, help="Environment: spreadsheet (the gym) or code (env.kind)."),
    concurrency: int = typer.Option(
        None, min=0, help="Environment worker processes, 0 = in-process (rollout.concurrency)."
    ),
    temperature: float = typer.Option(None, help="Sampling temperature, 0 = greedy."),
    top_p: float = typer.Option(None),
    top_k: int = typer.Option(None),
    max_turns: int = typer.Option(None, help="Max assistant turns (rollout.max_turns)."),
    max_new_tokens: int = typer.Option(None, help="Max new tokens per assistant turn."),
    max_response_tokens: int = typer.Option(None, help="Max tokens per episode after the prompt."),
    seed: int = typer.Option(0),
    base_url: str = typer.Option(None, help="Endpoint of the openai backend."),
    device: str = typer.Option("cpu"),
    batch_size: int = typer.Option(64, help="Episodes advanced together."),
    scheduler: str = typer.Option(
        None,
        help="turn (one batched generation per round) | episode (no barrier between "
        "episodes; vllm) | auto.",
    ),
    skip_bad: bool = typer.Option(False, help="Skip broken tasks instead of stopping."),
    scoring: str = typer.Option(
        None,
        help="hybrid (default reward) | spreadsheetbench (SpreadsheetBench's own scoring: "
        "LibreOffice conversion and its rules; env.scoring).",
    ),
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    if overrides and overrides[0] == "compare":
        _run_compare(ctx, overrides[1:])
        return
    if out is None:
        raise SpreadrlError(
            "spreadrl eval needs --out RUN_DIR (where the report and trajectories go)"
        )
    given = {name: value for name, value in locals().items() if name in FLAG_KEYS}
    flags = flag_overrides(**given)
    cfg = _load_with_flags(config, flags, overrides or [])
    backend = backend or "hf"
    if model is None and config is not None and engine_can(backend, "needs_model"):
        model = cfg.model.name_or_path
    spec = EvalSpec(
        model=model,
        backend=backend,
        tasks=tasks or cfg.eval.tasks,
        samples=samples or cfg.eval.samples,
        seed=seed,
    )
    engine = EngineSpec(device=device, base_url=base_url, batch_size=batch_size)
    _evaluate(cfg, spec, engine, out, recipe=config, skip_bad=skip_bad)


def _evaluate(
    cfg: GRPOConfig,
    spec: EvalSpec,
    engine: EngineSpec,
    out: Path,
    *,
    recipe: Path | None,
    skip_bad: bool,
) -> None:
    """Run the eval recipe into ``out`` and draw its report; a folder it failed to start
    in is removed."""
    from spreadrl.cli.console import RichReporter, cli_console, said_on_ctrl_c
    from spreadrl.cli.outdir import removed_if_failed_start
    from spreadrl.eval.recipe import EVAL_FILES, EpisodeSettings, check_episode_errors, evaluate
    from spreadrl.eval.report import render_report, some_did_not_start

    console = cli_console()
    reporter = RichReporter(console)
    episode = EpisodeSettings(cfg.rollout, cfg.env, cfg.data.max_prompt_tokens)
    with said_on_ctrl_c(lambda: stopped_line(out)), removed_if_failed_start(out, EVAL_FILES):
        report = evaluate(
            episode, spec, engine, out, recipe=recipe, skip_bad=skip_bad, reporter=reporter
        )
    render_report(report, reporter, title=f"{spec.backend} on {spec.tasks}")
    warning = some_did_not_start(report)
    if warning is not None:
        console.print(f"[yellow]warning[/]: {plain(warning)}", highlight=False)
    console.print(
        f"report: {out / 'report.json'}  trajectories: {out / 'trajectories.jsonl'}  "
        f"outputs: {out / 'outputs'}  config: {out / 'config.yaml'}",
        markup=False,
    )
    check_episode_errors(report, out)


def stopped_line(out: Path) -> str:
    """What a Ctrl-C left: the finished episodes stay in ``out`` and the same command
    runs the rest (read from the partial report the eval wrote as it stopped)."""
    from spreadrl.eval.report import load_report

    try:
        report = load_report(out)
    except SpreadrlError:
        return "stopped before an episode finished; nothing was kept"
    of = f" of {report['episodes_planned']}" if "episodes_planned" in report else ""
    return (
        f"stopped: {report.get('episodes', 0)}{of} episodes finished and are kept in {out}, "
        "the report counts those only; the same command runs the rest"
    )


def _run_compare(ctx: typer.Context, args: list[str]) -> None:
    """`eval compare A B`: the overrides argument took it (and --help); run the subcommand
    on them, so its own argument checks and help apply."""
    command = ctx.command.get_command(ctx, "compare")
    with command.make_context("compare", list(args), parent=ctx) as sub_ctx:
        command.invoke(sub_ctx)


def _load_with_flags(config: Path | None, flags: list[str], overrides: list[str]) -> GRPOConfig:
    """:func:`load_eval_recipe` with the flags' overrides; an error a flag caused names the flag
    (``--temperature -1``), not the recipe key it stands for."""
    from spreadrl.errors import ConfigError

    try:
        return load_eval_recipe(config, [*flags, *overrides])
    except ConfigError as exc:
        text = str(exc)
        for flag in flags:
            key, value = flag.split("=", 1)
            name = next((n for n, k in FLAG_KEYS.items() if k == key), None)
            if name is not None and text.startswith(f"command line {flag}: "):
                shown = f"--{name.replace('_', '-')} {value}"
                raise ConfigError(
                    f"{shown}: {text.removeprefix(f'command line {flag}: ')}"
                ) from exc
        raise


def load_eval_recipe(recipe: Path | None, overrides: list[str]) -> GRPOConfig:
    """The settings an eval runs with: a training recipe (or the training defaults) + overrides.

    Eval reads the recipe's ``eval``, ``rollout``, ``env`` and
    ``data.max_prompt_tokens`` exactly as training does, so a model is judged
    under the budgets and sampling it was trained with, at ``eval.temperature``
    when the recipe sets one (0: greedy, as upstream validates); with no recipe, the
    defaults are training's. Loaded here, in the command line, because a recipe
    is a training config: the eval library takes its sections and never imports
    the trainer.
    """
    from dataclasses import replace

    from spreadrl.config import load_config
    from spreadrl.eval.config import eval_rollout
    from spreadrl.train.config import GRPOConfig

    cfg = load_config(GRPOConfig, recipe, overrides)
    if any(o.startswith("rollout.temperature=") for o in overrides):
        return cfg  # --temperature (or the key itself) wins over the recipe's eval.temperature
    return replace(cfg, rollout=eval_rollout(cfg.eval, cfg.rollout))


@app.command("compare")
def compare(
    run_a: Path = typer.Argument(..., help="The first eval run folder (or its report.json)."),
    run_b: Path = typer.Argument(..., help="The second, compared with the first."),
    mixed_scoring: bool = typer.Option(
        False,
        "--mixed-scoring",
        help="Compare reports scored two ways (hybrid vs spreadsheetbench) anyway.",
    ),
) -> None:
    """Print two eval reports side by side, the paired change in pass@1 and the cases that flipped.

    The change is measured over the cases both runs evaluated, with its 95% interval;
    a warning says when the runs share only some cases, or none.

    Examples:

      spreadrl eval compare runs/eval-sft runs/eval

      spreadrl eval compare runs/eval-sft/report.json runs/eval/report.json
    """
    from rich.table import Table

    from spreadrl.cli.console import cli_console
    from spreadrl.eval.compare import compare as compare_runs
    from spreadrl.eval.compare import task_set_of
    from spreadrl.eval.report import load_report

    report_a, report_b = load_report(run_a), load_report(run_b)
    diff = compare_runs(report_a, report_b, mixed_scoring=mixed_scoring)
    table = Table(title="eval compare")
    table.add_column("metric")
    table.add_column(plain(run_a), justify="right")
    table.add_column(plain(run_b), justify="right")
    table.add_row("tasks", plain(task_set_of(run_a)), plain(task_set_of(run_b)))
    table.add_row("cases", str(diff.shared + len(diff.only_a)), str(diff.shared + len(diff.only_b)))
    for key, (a, b) in diff.metrics.items():
        table.add_row(key, _fmt(a), _fmt(b))
    console = cli_console()
    console.print(table)
    if diff.scoring[0] != diff.scoring[1]:
        console.print(f"[yellow]scored two ways:[/] {diff.scoring[0]} vs {diff.scoring[1]}")
    for run, report in ((run_a, report_a), (run_b, report_b)):
        if report.get("complete") is False:  # a stopped eval: its report covers some episodes
            console.print(
                f"[yellow]warning:[/] {plain(run)} is a stopped eval: {report['episodes']} of "
                f"{report.get('episodes_planned', '?')} episodes (the same eval command finishes it)"
            )
    warning = diff.warning(str(run_a), str(run_b))
    if warning:
        console.print(f"[yellow]warning:[/] {plain(warning)}")
    if diff.delta is not None:
        ci = "" if diff.delta_ci95 != diff.delta_ci95 else f" ± {100 * diff.delta_ci95:.1f}"
        console.print(
            f"pass@1 change: {100 * diff.delta:+.1f}{ci} points (95% interval) "
            f"over {diff.shared} shared cases"
        )
    console.print(f"improved cases: {len(diff.improved)}  regressed: {len(diff.regressed)}")
    for label, cases in (("improved", diff.improved), ("regressed", diff.regressed)):
        for case in cases[:20]:
            console.print(f"  {label}: {case}", markup=False)


def _fmt(value: object) -> str:
    if value is None:
        return "-"  # an older report without this figure
    return f"{value:.3f}" if isinstance(value, float) else str(value)
