"""The body of `spreadrl eval`: claim the run folder, load the policy, run, report.

An eval folder is one eval (:mod:`spreadrl.run_folder`): the same model,
backend, tasks, samples, seed and episode settings resume it (finished episodes
are kept); anything else is refused with the differences named, so a report
never pools the episodes of two evals.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spreadrl.cli.console import RichReporter, cli_console, plain
from spreadrl.errors import SpreadrlError

if TYPE_CHECKING:
    from spreadrl.data.task import TaskSet
    from spreadrl.run_folder import RunIdentity
    from spreadrl.train.config import GRPOConfig

EVAL_FILES = ("trajectories.jsonl", "report.json", "outputs")
"""What an eval writes in its folder; once one is non-empty, the folder holds an eval."""


@dataclass(frozen=True)
class EvalSpec:
    """What is evaluated: these decide the result (recorded in ``run.json``)."""

    model: str | None
    backend: str
    tasks: str
    samples: int
    seed: int


@dataclass(frozen=True)
class EngineSpec:
    """How it runs: these do not change the result (a resumed eval may change them)."""

    device: str
    base_url: str | None
    batch_size: int


def eval_identity(cfg: GRPOConfig, spec: EvalSpec) -> RunIdentity:
    """The eval ``spec`` + the episode settings of ``cfg`` (its worker count aside)."""
    from spreadrl.config import config_to_dict
    from spreadrl.run_folder import RunIdentity, flatten

    episode = {
        "rollout": config_to_dict(cfg.rollout),
        "env": config_to_dict(cfg.env),
        "data": {"max_prompt_tokens": cfg.data.max_prompt_tokens},
    }
    settings = {**asdict(spec), **flatten(episode)}  # type: ignore[arg-type]
    settings.pop("rollout.concurrency", None)  # worker processes: the same episodes
    summary = {k: settings[k] for k in ("model", "backend", "tasks", "samples")}
    return RunIdentity("eval", settings, files=EVAL_FILES, summary=summary)


def run_eval_command(
    cfg: GRPOConfig,
    spec: EvalSpec,
    engine: EngineSpec,
    out: Path,
    *,
    recipe: Path | None,
    skip_bad: bool,
) -> None:
    """Evaluate ``spec`` into ``out``: print the report, or raise when it measured nothing."""
    from spreadrl.cli.outdir import removed_if_failed_start
    from spreadrl.data.sources import resolve_tasks
    from spreadrl.eval.report import no_episode_started, render_report, some_did_not_start
    from spreadrl.run_folder import claim_run_folder

    _check_model_is_no_run(spec)
    console = cli_console()
    task_set = resolve_tasks(spec.tasks, skip_bad=skip_bad)
    for problem in task_set.problems:  # --skip-bad: name each task left out, and why
        console.print(
            f"[yellow]skipped[/] task {plain(problem.task_id)}: {plain(problem.message)}",
            highlight=False,
        )
    if not len(task_set):  # pass@1 of no task is no measurement, never a 0.0%
        skipped = f" ({len(task_set.problems)} skipped as broken)" if task_set.problems else ""
        raise SpreadrlError(
            f"--tasks {spec.tasks}: no tasks to evaluate{skipped}; give a task set that holds some"
        )
    with removed_if_failed_start(out, EVAL_FILES):
        claim = claim_run_folder(out, eval_identity(cfg, spec))
        if claim.resumed:
            console.print(f"resuming the eval in {plain(out)} (finished episodes are kept)")
        report = _run(cfg, spec, engine, out, recipe, task_set)
    reason = no_episode_started(report)
    if reason is not None:  # 0% of nothing is no measurement
        raise SpreadrlError(f"{reason} (report: {out / 'report.json'})")
    reporter = RichReporter(console)
    render_report(report, reporter, title=f"{spec.backend} on {spec.tasks}")
    warning = some_did_not_start(report)
    if warning is not None:
        console.print(f"[yellow]warning[/]: {plain(warning)}", highlight=False)
    console.print(
        f"report: {out / 'report.json'}  trajectories: {out / 'trajectories.jsonl'}  "
        f"outputs: {out / 'outputs'}  config: {out / 'config.yaml'}",
        markup=False,
    )
    if report["episode_errors"]:  # a case that did not run measured nothing: not a 0
        first = report["errors"][0]
        raise SpreadrlError(
            f"{report['episode_errors']} of {report['episodes']} episodes failed with an error "
            f"(first, {first['episode']}: {first['error']}); all are listed in {out / 'report.json'}"
            f", and a rerun with the same --out runs them again"
        )


def _check_model_is_no_run(spec: EvalSpec) -> None:
    """``--model runs/grpo`` names a run folder: point at the model folder it holds."""
    from spreadrl.rollout.engine import engine_can
    from spreadrl.run_folder import RUN_FILE

    folder = Path(spec.model) if spec.model and engine_can(spec.backend, "loads_weights") else None
    if folder is None or not (folder / RUN_FILE).is_file() or (folder / "config.json").exists():
        return
    final = folder / "final"
    hint = f"its final model is {final}" if final.is_dir() else "it holds no final model yet"
    raise SpreadrlError(f"--model {spec.model} is a run folder, not a model; {hint}")


def _run(
    cfg: GRPOConfig,
    spec: EvalSpec,
    engine: EngineSpec,
    out: Path,
    recipe: Path | None,
    task_set: TaskSet,
) -> dict[str, Any]:
    """Load the policy and the gym, record the settings, run every episode; the report."""
    from spreadrl.env.factory import make_env_pool
    from spreadrl.eval.runner import engine_context_tokens, run_eval, save_eval_config
    from spreadrl.rollout.engine import load_policy
    from spreadrl.rollout.types import RunValues

    policy, tokenizer = load_policy(
        spec.backend,
        spec.model,
        device=engine.device,
        base_url=engine.base_url,
        max_batch_size=engine.batch_size,
        max_model_len=engine_context_tokens(cfg.data.max_prompt_tokens, cfg.rollout),
    )
    max_prompt = cfg.data.max_prompt_tokens
    with make_env_pool(cfg.env, workers=cfg.rollout.concurrency) as pool:
        save_eval_config(
            out, rollout=cfg.rollout, env=cfg.env, max_prompt_tokens=max_prompt, recipe=recipe,
            run=asdict(spec),
        )  # fmt: skip
        samples = spec.samples
        return run_eval(
            task_set,
            policy,
            pool,
            cfg.rollout,
            out,
            run=RunValues(seed=spec.seed, max_prompt_tokens=max_prompt),
            tokenizer=tokenizer,
            samples=samples,
            k_values=sorted({1, samples} | {k for k in (2, 4, 8, 16) if k < samples}),
            batch_size=engine.batch_size,
            reporter=RichReporter(),
            meta={
                "model": spec.model,
                "backend": spec.backend,
                "tasks": spec.tasks,
                "scoring": cfg.env.scoring,
            },
        )
