"""The eval recipe (`spreadrl eval`): claim the run folder, load the policy, run, report.

An eval folder is one eval (:mod:`spreadrl.run_folder`): the same model,
backend, tasks, samples, seed and episode settings resume it (finished episodes
are kept); anything else is refused with the differences named, so a report
never pools the episodes of two evals.

It takes the recipe's sections an episode reads (:class:`EpisodeSettings`), never
the training config; it tells its lines to a :class:`~spreadrl.reporting.Reporter`
and raises :class:`~spreadrl.errors.SpreadrlError` when it measured nothing. The
command line parses the flags, loads the recipe and draws the report.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spreadrl.errors import SpreadrlError

if TYPE_CHECKING:
    from spreadrl.data.task import TaskSet
    from spreadrl.env.config import EnvConfig
    from spreadrl.reporting import Reporter
    from spreadrl.rollout.config import RolloutConfig
    from spreadrl.run_folder import RunIdentity

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
    """How it runs (a resumed eval may change them): none changes what is measured, but a
    sampled eval seeds each batch by its place in the eval, so only the same
    ``batch_size`` resumes into exactly the samples of one uninterrupted run."""

    device: str
    base_url: str | None
    batch_size: int


@dataclass(frozen=True)
class EpisodeSettings:
    """The recipe's sections an episode reads: ``rollout``, ``env`` and the prompt budget."""

    rollout: RolloutConfig
    env: EnvConfig
    max_prompt_tokens: int


def eval_identity(episode: EpisodeSettings, spec: EvalSpec) -> RunIdentity:
    """The eval ``spec`` + the episode settings (the worker count aside)."""
    from spreadrl.config import config_to_dict
    from spreadrl.run_folder import RunIdentity, flatten

    sections = {
        "rollout": config_to_dict(episode.rollout),
        "env": config_to_dict(episode.env),
        "data": {"max_prompt_tokens": episode.max_prompt_tokens},
    }
    settings = {**asdict(spec), **flatten(sections)}  # type: ignore[arg-type]
    settings.pop("rollout.concurrency", None)  # worker processes: the same episodes
    summary = {k: settings[k] for k in ("model", "backend", "tasks", "samples")}
    return RunIdentity("eval", settings, files=EVAL_FILES, summary=summary)


def evaluate(
    episode: EpisodeSettings,
    spec: EvalSpec,
    engine: EngineSpec,
    out: Path,
    *,
    recipe: Path | None,
    skip_bad: bool,
    reporter: Reporter,
) -> dict[str, Any]:
    """Evaluate ``spec`` into ``out`` and return the report; raise when it measured nothing.

    A report whose episodes failed with errors is returned (the caller shows it, then
    :func:`check_episode_errors` raises), so the failures are seen before the error.
    """
    from spreadrl.data.sources import resolve_tasks
    from spreadrl.eval.report import no_episode_started
    from spreadrl.run_folder import claim_run_folder

    check_model_is_no_run(spec)
    task_set = resolve_tasks(spec.tasks, skip_bad=skip_bad)
    for problem in task_set.problems:  # --skip-bad: name each task left out, and why
        reporter.line(f"skipped task {problem.task_id}: {problem.message}", level="warning")
    if not len(task_set):  # pass@1 of no task is no measurement, never a 0.0%
        skipped = f" ({len(task_set.problems)} skipped as broken)" if task_set.problems else ""
        raise SpreadrlError(
            f"--tasks {spec.tasks}: no tasks to evaluate{skipped}; give a task set that holds some"
        )
    claim = claim_run_folder(out, eval_identity(episode, spec))
    if claim.resumed:
        reporter.line(f"resuming the eval in {out} (finished episodes are kept)")
    report = _run(episode, spec, engine, out, recipe, task_set, reporter)
    reason = no_episode_started(report)
    if reason is not None:  # 0% of nothing is no measurement
        raise SpreadrlError(f"{reason} (report: {out / 'report.json'})")
    return report


def check_episode_errors(report: dict[str, Any], out: Path) -> None:
    """Raise when some episodes failed with an error: a case that did not run measured
    nothing, so it is no 0."""
    if report["episode_errors"]:
        first = report["errors"][0]
        raise SpreadrlError(
            f"{report['episode_errors']} of {report['episodes']} episodes failed with an error "
            f"(first, {first['episode']}: {first['error']}); all are listed in {out / 'report.json'}"
            f", and a rerun with the same --out runs them again"
        )


def check_model_is_no_run(spec: EvalSpec) -> None:
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
    episode: EpisodeSettings,
    spec: EvalSpec,
    engine: EngineSpec,
    out: Path,
    recipe: Path | None,
    task_set: TaskSet,
    reporter: Reporter,
) -> dict[str, Any]:
    """Load the policy and the gym, record the settings, run every episode; the report."""
    from spreadrl.env.factory import make_env_pool
    from spreadrl.eval.runner import engine_context_tokens, run_eval, save_eval_config
    from spreadrl.rollout.engine import load_policy
    from spreadrl.rollout.harness.episodes import HarnessEpisodes
    from spreadrl.rollout.runner import run_episodes
    from spreadrl.rollout.types import RunValues

    policy, tokenizer = load_policy(
        spec.backend,
        spec.model,
        device=engine.device,
        base_url=engine.base_url,
        max_batch_size=engine.batch_size,
        max_model_len=engine_context_tokens(episode.max_prompt_tokens, episode.rollout),
    )
    max_prompt = episode.max_prompt_tokens
    if episode.rollout.traces:
        raise SpreadrlError("rollout.traces trains on captured traces; an eval plays episodes")
    harness = episode.rollout.harness  # the user's own agent plays, through the endpoint
    runner = (
        HarnessEpisodes.of(harness, episode.env, mcp=episode.rollout.harness_mcp)
        if harness
        else run_episodes
    )
    with make_env_pool(episode.env, workers=episode.rollout.concurrency) as pool:
        save_eval_config(
            out, rollout=episode.rollout, env=episode.env, max_prompt_tokens=max_prompt,
            recipe=recipe, run=asdict(spec),
        )  # fmt: skip
        samples = spec.samples
        return run_eval(
            task_set,
            policy,
            pool,
            episode.rollout,
            out,
            run=RunValues(seed=spec.seed, max_prompt_tokens=max_prompt),
            tokenizer=tokenizer,
            samples=samples,
            k_values=sorted({1, samples} | {k for k in (2, 4, 8, 16) if k < samples}),
            batch_size=engine.batch_size,
            reporter=reporter,
            meta={
                "model": spec.model,
                "backend": spec.backend,
                "tasks": spec.tasks,
                "scoring": episode.env.scoring,
                **({"harness": harness} if harness else {}),
            },
            episodes=runner,
        )
