"""The end-to-end CPU demo behind `make run`: the whole pipeline in one read.

built-in tasks -> reference conversations through the gym (oracle policy) ->
tokenizer + tiny Qwen3 from scratch -> SFT cold start -> eval -> GRPO-TCR ->
eval on held-out tasks -> before/after table with confidence intervals.

Every stage uses the same library code as the real recipes; only the sizes
are small. Evaluation samples at the training temperature, where RL's gain
shows (greedy decoding of a well-fit SFT model hides it).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spreadrl.config import load_config
from spreadrl.data.builtin import builtin_tasks
from spreadrl.data.task import TaskSet
from spreadrl.env.factory import make_env_pool
from spreadrl.eval.compare import paired_delta
from spreadrl.eval.report import render_report
from spreadrl.eval.runner import read_trajectories, run_eval
from spreadrl.models.init import init_model, load_model_and_tokenizer
from spreadrl.models.tokenizer import default_corpus, train_tokenizer
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engines.hf import HFPolicy
from spreadrl.rollout.engines.scripted import OraclePolicy
from spreadrl.rollout.runner import EpisodeJob, run_episodes
from spreadrl.rollout.types import RunValues
from spreadrl.run_folder import RunIdentity, claim_run_folder, read_record, remove_owned
from spreadrl.train.config import GRPOConfig, SFTConfig
from spreadrl.train.grpo import train_grpo
from spreadrl.train.sft import train_sft
from spreadrl.train.sft_data import trajectories_to_sft_rows

if TYPE_CHECKING:  # annotations only
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from spreadrl.reporting import Reporter


@dataclass(frozen=True)
class DemoSettings:
    """Sizes calibrated on a 2-core CPU (see README, "The demo")."""

    out: Path = Path("runs/demo")
    seed: int = 0
    model_preset: str = "tiny"
    vocab_size: int = 1024
    sft_max_steps: int = 200
    sft_check_every: int = 10
    sft_target_pass: float = 0.5
    sft_batch_size: int = 32
    sft_lr: float = 2e-3
    grpo_config: Path | str | None = "tiny-cpu"  # a recipe file, or a shipped recipe's name
    grpo_steps: int = 60
    eval_samples: int = 4
    eval_validation_tasks: int = 64
    temperature: float = 1.0
    train_tasks: int | None = None  # None: every task of the split
    test_tasks: int | None = None
    grpo_overrides: tuple[str, ...] = ()  # dotted overrides of the GRPO recipe, applied last

    @classmethod
    def smoke(cls, **changes: Any) -> DemoSettings:
        """Every stage at the smallest size that still runs it: a few tasks, a few steps.

        For the test suite and a quick check of an install (well under a minute on
        a 2-core CPU); its pass rates mean nothing.
        """
        sizes: dict[str, Any] = {
            "vocab_size": 512,
            "sft_max_steps": 2,
            "sft_check_every": 2,
            "sft_batch_size": 4,
            "grpo_steps": 1,
            "eval_samples": 1,
            "eval_validation_tasks": 2,
            "train_tasks": 4,
            "test_tasks": 2,
            "grpo_overrides": (
                "rollout.group_size=2",
                "rollout.prompts_per_step=2",
                "rollout.max_new_tokens_per_turn=8",
                "rollout.max_response_tokens=16",
            ),
        }
        return cls(**{**sizes, **changes})


def quick_pass_rate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    tasks: TaskSet,
    grpo_cfg: GRPOConfig,
    settings: DemoSettings,
) -> float:
    """Sampled pass rate of the in-memory ``model`` on ``tasks`` (one sample per case).

    Sampled with the RL recipe's ``rollout`` section, so validation sees what
    training sees."""
    jobs = [EpisodeJob(task, case) for task, case in tasks.episodes()]
    with make_env_pool(grpo_cfg.env, workers=0) as pool:
        batch = run_episodes(
            HFPolicy(model, tokenizer),
            pool,
            jobs,
            grpo_cfg.rollout,
            EpisodeChat.of(tokenizer),
            run=RunValues(seed=settings.seed + 777),
        )
    return sum(t.passed for t in batch.trajectories) / max(len(jobs), 1)


def _first(tasks: TaskSet, count: int | None) -> TaskSet:
    """The first ``count`` tasks of a task set (all of them for None)."""
    return tasks if count is None else TaskSet(tasks.root, tasks.tasks[:count])


DEMO_ENTRIES = (
    "oracle-train",
    "sft.jsonl",
    "init",
    "sft",
    "eval-sft",
    "grpo",
    "eval-grpo",
    "summary.json",
    "summary.md",
)
"""What the demo writes in its folder: the only entries a later demo run replaces."""


def held_out_eval(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    model_dir: Path,
    name: str,
    test: TaskSet,
    grpo_cfg: GRPOConfig,
    settings: DemoSettings,
    reporter: Reporter,
) -> dict[str, Any]:
    """Evaluate the in-memory ``model`` on the held-out ``test`` tasks (into
    ``out/eval-NAME``), sampled with the RL recipe's rollout section as in training and
    with one seed for both models; the report is told to ``reporter`` and returned."""
    model.eval()
    policy = HFPolicy(model, tokenizer)
    with make_env_pool(grpo_cfg.env, workers=0) as pool:
        report = run_eval(
            test,
            policy,
            pool,
            grpo_cfg.rollout,  # sampling and budgets of the RL recipe, as in training
            settings.out / f"eval-{name}",
            run=RunValues(seed=settings.seed + 12345),
            tokenizer=tokenizer,
            samples=settings.eval_samples,
            k_values=(1, settings.eval_samples),
            meta={"model": str(model_dir)},
            reporter=reporter,
        )
    render_report(report, reporter, title=f"{name} model on held-out tasks")
    return report


def sft_cold_start(
    settings: DemoSettings,
    grpo_cfg: GRPOConfig,
    train: TaskSet,
    init_dir: Path,
    sft_path: Path,
    reporter: Reporter,
) -> tuple[Path, dict[str, Any]]:
    """SFT of the model in ``init_dir`` on ``sft_path``, validated in memory every
    ``sft_check_every`` steps and stopped at ``sft_target_pass``.

    Returns the SFT run's final model folder and what the last check saw: ``steps``,
    ``val_rate`` and the ``model`` and ``tokenizer`` still in memory."""
    validation = TaskSet(train.root, train.tasks[: settings.eval_validation_tasks])
    sft_state: dict[str, Any] = {"steps": 0, "val_rate": 0.0}

    def validate(step: int, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> bool:
        sft_state.update(steps=step, model=model, tokenizer=tokenizer)
        if step % settings.sft_check_every and step < settings.sft_max_steps:
            return False
        sft_state["val_rate"] = quick_pass_rate(model, tokenizer, validation, grpo_cfg, settings)
        reporter.line(
            f"  validation pass@1 (training tasks, T={settings.temperature}) "
            f"after {step} steps: {100 * sft_state['val_rate']:.1f}%"
        )
        return sft_state["val_rate"] >= settings.sft_target_pass

    sft_cfg = load_config(
        SFTConfig,
        None,
        [
            f"model.name_or_path={init_dir}",
            f"data.path={sft_path}",
            f"output_dir={settings.out / 'sft'}",
            f"steps={settings.sft_max_steps}",
            f"batch_size={settings.sft_batch_size}",
            f"optim.lr={settings.sft_lr}",
            f"seed={settings.seed}",
            f"logging.every_steps={settings.sft_check_every}",
            "checkpoint.every_steps=0",  # one process, nothing to resume between checks
        ],
    )
    sft_model = train_sft(sft_cfg, reporter=reporter, on_step=validate, shared_prefix=True)
    return sft_model, sft_state


def claim_demo_folder(settings: DemoSettings) -> None:
    """Make ``settings.out`` this demo's folder, deleting nothing the demo did not write.

    The demo's stages do not resume, so a folder holding an earlier demo has that
    demo's own entries (:data:`DEMO_ENTRIES`) replaced; anything else there stays.
    A folder holding another command's run, or files that are no demo's, is refused
    (:func:`spreadrl.run_folder.claim_run_folder`).
    """
    out = settings.out
    record = read_record(out) if out.is_dir() else None
    if record is not None and record.get("command") == "demo":
        remove_owned(out, DEMO_ENTRIES)
    settings_seen = {k: str(v) for k, v in settings.__dict__.items() if k != "out"}
    identity = RunIdentity(
        "demo",
        settings_seen,
        files=DEMO_ENTRIES,
        summary={"model": settings.model_preset, "recipe": str(settings.grpo_config)},
    )
    claim_run_folder(out, identity)


def run_demo(settings: DemoSettings, reporter: Reporter) -> dict[str, Any]:
    """Run every stage, telling ``reporter`` as it goes; return the summary also written
    to ``out/summary.json`` (the CLI prints its result block)."""
    out = settings.out
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def stage(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        if name != "start":
            timings[name] = now - clock
        clock = now

    stage("start")
    overrides = [
        f"seed={settings.seed}",
        f"steps={settings.grpo_steps}",
        f"output_dir={out / 'grpo'}",
        f"rollout.temperature={settings.temperature}",
        *settings.grpo_overrides,
    ]
    grpo_cfg = load_config(GRPOConfig, settings.grpo_config, overrides)
    claim_demo_folder(settings)  # after the recipe loaded: a typo leaves no folder behind

    # 1. tasks: the built-in demo splits (easy aggregate tasks, disjoint train/test)
    reporter.section("1. tasks")
    train = _first(builtin_tasks("demo-train"), settings.train_tasks)
    test = _first(builtin_tasks("demo-test"), settings.test_tasks)
    reporter.line(f"train: {len(train)} tasks ({len(train.episodes())} cases) at {train.root}")
    reporter.line(f"test:  {len(test)} tasks ({len(test.episodes())} cases) at {test.root}")
    stage("tasks")

    # 2. reference conversations: the oracle replays reference solutions through the gym
    reporter.section("2. SFT data from reference solutions")
    # the reference conversations keep the section's defaults (whole tool responses),
    # but for the recipe's turn budget
    oracle_rollout = RolloutConfig(max_turns=grpo_cfg.rollout.max_turns)
    with make_env_pool(grpo_cfg.env, workers=0) as pool:
        oracle_dir = out / "oracle-train"
        run_eval(train, OraclePolicy(), pool, oracle_rollout, oracle_dir)
    rows = trajectories_to_sft_rows(read_trajectories(oracle_dir))
    sft_path = out / "sft.jsonl"
    sft_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    reporter.line(f"{len(rows)} reference conversations -> {sft_path}")
    stage("sft_data")

    # 3. a tokenizer trained on the task text, and a randomly initialised tiny Qwen3
    reporter.section("3. tokenizer and tiny model")
    texts = [json.dumps(r["messages"]) + json.dumps(r["tools"]) for r in rows]
    tokenizer = train_tokenizer(default_corpus(texts), vocab_size=settings.vocab_size)
    init_dir = init_model(settings.model_preset, tokenizer, out / "init", seed=settings.seed)
    model, _ = load_model_and_tokenizer(str(init_dir))
    n_params = sum(p.numel() for p in model.parameters())
    reporter.line(
        f"{settings.model_preset} Qwen3: {n_params / 1e6:.2f}M parameters, "
        f"vocab {len(tokenizer)} -> {init_dir}"
    )
    del model
    stage("model_init")

    # 4. SFT cold start on the reference conversations, in one run: every
    # sft_check_every steps the model in memory is validated, and SFT stops once the
    # policy passes sft_target_pass of a slice of its training tasks when sampling
    # (RL needs a non-zero pass rate, and headroom to show what it adds)
    reporter.section("4. SFT cold start")
    sft_model, sft_state = sft_cold_start(settings, grpo_cfg, train, init_dir, sft_path, reporter)
    steps, val_rate = sft_state["steps"], sft_state["val_rate"]
    stage("sft")

    # 5. evaluate the SFT model (sampled at the training temperature)
    reporter.section("5. eval after SFT")
    # the SFT run's model, still in memory (it is what sft/final holds)
    before = held_out_eval(
        sft_state["model"],
        sft_state["tokenizer"],
        sft_model,
        "sft",
        test,
        grpo_cfg,
        settings,
        reporter,
    )
    del sft_state["model"]
    stage("eval_sft")

    # 6. GRPO-TCR from the SFT model
    reporter.section("6. GRPO-TCR")
    grpo_cfg = replace(grpo_cfg, model=replace(grpo_cfg.model, name_or_path=str(sft_model)))
    grpo_model = train_grpo(grpo_cfg, reporter=reporter)
    stage("grpo")

    # 7. evaluate the GRPO model on the same held-out tasks
    reporter.section("7. eval after GRPO")
    model, tok = load_model_and_tokenizer(str(grpo_model))
    after = held_out_eval(model, tok, grpo_model, "grpo", test, grpo_cfg, settings, reporter)
    stage("eval_grpo")

    delta, half, cases = paired_delta(before["per_case"], after["per_case"])
    summary = {
        "settings": {k: str(v) for k, v in settings.__dict__.items()},
        "sft_steps": steps,
        "sft_validation_pass@1": val_rate,
        "parameters": n_params,
        "sft": {k: before[k] for k in ("pass@1", "pass@1_ci95", "episodes", "cases", "by_family")},
        "grpo": {k: after[k] for k in ("pass@1", "pass@1_ci95", "episodes", "cases", "by_family")},
        "delta_pass@1": delta,
        "delta_ci95": half,
        "paired_cases": cases,
        "timings_s": timings,
        "artifacts": {
            "sft_model": str(sft_model),
            "grpo_model": str(grpo_model),
            "eval_sft": str(out / "eval-sft"),
            "eval_grpo": str(out / "eval-grpo"),
            "grpo_metrics": str(out / "grpo" / "metrics.jsonl"),
        },
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    (out / "summary.md").write_text(_summary_markdown(summary, before, after))
    return summary


def _summary_markdown(
    summary: dict[str, Any], before: dict[str, Any], after: dict[str, Any]
) -> str:
    lines = [
        "# spreadrl demo report card",
        "",
        f"Model: {summary['parameters'] / 1e6:.2f}M-parameter Qwen3 trained from scratch on CPU.",
        "",
        "| family | SFT pass@1 | GRPO pass@1 |",
        "|---|---|---|",
    ]
    for family in sorted(set(before["by_family"]) | set(after["by_family"])):
        b = before["by_family"].get(family, {}).get("pass@1", float("nan"))
        a = after["by_family"].get(family, {}).get("pass@1", float("nan"))
        lines.append(f"| {family} | {100 * b:.1f}% | {100 * a:.1f}% |")
    lines += [
        f"| **all** | {100 * before['pass@1']:.1f}% ± {100 * before['pass@1_ci95']:.1f} | "
        f"{100 * after['pass@1']:.1f}% ± {100 * after['pass@1_ci95']:.1f} |",
        "",
        f"Paired change: {100 * summary['delta_pass@1']:+.1f} ± {100 * summary['delta_ci95']:.1f} points "
        f"over {summary['paired_cases']} held-out cases ({before['episodes']} episodes per model).",
        "",
        "Time per stage (s): " + ", ".join(f"{k} {v:.0f}" for k, v in summary["timings_s"].items()),
    ]
    return "\n".join(lines) + "\n"
