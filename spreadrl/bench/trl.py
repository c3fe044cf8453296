"""`spreadrl bench trl`: a GRPO step of TRL's GRPOTrainer and of spreadrl's, side by side.

Both systems train the same model folder (a 4.72M-parameter Qwen3: hidden 256,
4 layers, 4/2 heads, head_dim 64, ffn 768, tied embeddings, a BPE trained on
the demo tasks with its embedding padded to 6,150 rows) on the same shape: 8
prompts x 4 rollouts, one turn, 128 new tokens, fp32, one epoch, one
mini-batch, no KL. spreadrl runs its own episodes on ``builtin:demo-train``
(the ``write_range`` tool preset, so the tool schema is in the system prompt),
keeps every group (``sampling.mode=keep``) and packs the update into one
micro-batch.

What TRL is given as prompts is the mode:

- ``--same-prompt`` (the default): equal work. The parent draws the prompts of
  every step as spreadrl's sampler will (same seed, same order), resets each
  episode and renders its opening (system prompt with the tool schema,
  instruction, workbook overview) with the model's chat template, and TRL gets
  that text, unshuffled: its tokenizer turns it into the very ids spreadrl's
  episodes start with. Both children check it: TRL's ids at every step against
  the rendering, spreadrl's first step against TRL's.
- ``--instruction-prompt``: TRL gets the bare task instruction as a one-message
  chat (23 tokens where spreadrl's opening has ~600), the comparison measured
  before equal work was possible.

Each run is a subprocess (``python -m spreadrl.bench.trl SPEC.json``), so peak
RSS is per system and one cannot warm the other's caches; runs alternate
between the systems, round after round, so a busy machine slows both alike.
The first step of each run is a warm-up and is not counted. ``trl`` is the
optional ``bench`` extra; without it only the spreadrl half runs.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from spreadrl.config import load_config
from spreadrl.errors import SpreadrlError
from spreadrl.reporting import LogReporter, Reporter
from spreadrl.train.config import GRPOConfig

# torch, transformers and the gym are imported inside the functions that run them: the
# command tree imports this module, and `spreadrl --help` must not pay for them
if TYPE_CHECKING:
    import torch

    from spreadrl.rollout.types import Trajectory

SYSTEMS = ("trl", "spreadrl")
# the label of TRL's runs given the bare instruction when --both-modes runs it beside
# the same-prompt runs (which keep the label "trl")
TRL_INSTRUCTION = "trl-instruction"
# spreadrl's asynchronous GRPO (rollout.max_staleness >= 1) beside the synchronous runs
SPREADRL_ASYNC = "spreadrl-async"

# The model of the measurement: Qwen3 shape overrides on the tiny preset.
BENCH_MODEL = {
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "intermediate_size": 768,
    "tie_word_embeddings": True,
}
BENCH_VOCAB = 6150


@dataclass(frozen=True)
class Shape:
    """What one GRPO step does, the same for both systems."""

    prompts: int = 8
    group: int = 4
    new_tokens: int = 128
    steps: int = 4
    seed: int = 0
    lr: float = 1e-5
    # spreadrl's update budget: 65536 puts the whole step in one micro-batch, as TRL runs
    # its 32 sequences in one forward; smaller budgets trade nothing but peak memory
    micro_batch_tokens: int = 65536
    # TRL's prompts: spreadrl's rendered openings (equal work), or the bare instruction
    same_prompt: bool = True
    # spreadrl's rollout.max_staleness: 0 is synchronous GRPO, >= 1 rolls out ahead
    max_staleness: int = 0


SMOKE = Shape(prompts=2, group=2, new_tokens=8, steps=2)


class StepRecord(TypedDict, total=False):
    """One counted step of either system (``total=False``: TRL's has no split when untimed)."""

    step_s: float
    generate_s: float
    update_s: float
    tokens: float
    generated: float
    prompt_tokens: float


class RunResult(TypedDict):
    """What one benchmark subprocess hands back (``system`` becomes the run's label)."""

    system: str
    records: list[StepRecord]
    first_prompt_ids: list[list[int]]
    peak_rss_mb: float


class RenderedPrompt(TypedDict):
    """One episode opening as TRL gets it: the chat template's text and spreadrl's ids of it."""

    text: str
    ids: list[int]


def build_bench_model(out: Path, *, seed: int = 0) -> Path:
    """The shared model folder: BPE on the demo tasks' text, Qwen3 of :data:`BENCH_MODEL`."""
    from spreadrl.data.builtin import builtin_tasks
    from spreadrl.models.init import init_model
    from spreadrl.models.tokenizer import default_corpus, task_corpus, train_tokenizer

    tokenizer = train_tokenizer(
        default_corpus(task_corpus(builtin_tasks("demo-train").root)), vocab_size=1024
    )
    return init_model(
        "tiny", tokenizer, out, seed=seed, overrides=BENCH_MODEL, vocab_size=BENCH_VOCAB
    )


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# ---- the spreadrl half ------------------------------------------------------------


def spreadrl_config(model_dir: Path, shape: Shape, out: Path) -> GRPOConfig:
    """spreadrl's recipe for ``shape``; the same-prompt mode draws TRL's prompts from it too."""
    return load_config(
        GRPOConfig,
        None,
        [
            f"model.name_or_path={model_dir}",
            "model.dtype=float32",
            "data.train_tasks=builtin:demo-train",
            "data.max_prompt_tokens=0",
            "env.tools=[write_range]",
            "rollout.backend=hf",
            "rollout.temperature=1.0",
            "rollout.max_turns=1",
            f"rollout.max_new_tokens_per_turn={shape.new_tokens}",
            f"rollout.max_response_tokens={shape.new_tokens}",
            f"rollout.group_size={shape.group}",
            f"rollout.prompts_per_step={shape.prompts}",
            f"rollout.max_staleness={shape.max_staleness}",
            "rollout.concurrency=0",
            "sampling.mode=keep",
            "loss.kl_coef=0.0",
            f"optim.lr={shape.lr}",
            f"optim.micro_batch_tokens={shape.micro_batch_tokens}",
            "optim.mini_batch_size=0",
            "optim.ppo_epochs=1",
            f"steps={shape.steps}",
            f"seed={shape.seed}",
            f"output_dir={out}",
            "checkpoint.every_steps=0",
            "logging.trajectories_per_step=0",
            "device=cpu",
        ],
    )


def spreadrl_steps(
    model_dir: Path, shape: Shape, out: Path
) -> tuple[list[StepRecord], list[list[int]]]:
    """Run ``shape.steps`` spreadrl GRPO steps: one record per step, and the first step's
    prompt ids, one list per episode in rollout order (G per prompt)."""
    import spreadrl.train.episodes as rollouts
    import spreadrl.train.grpo as grpo

    cfg = spreadrl_config(model_dir, shape, out)
    prompt_tokens: list[int] = []
    first_ids: list[list[int]] = []
    collect = rollouts.collect_rollouts

    def counting(*args: object, **kwargs: object) -> tuple[list[Trajectory], torch.Tensor, ...]:
        result = collect(*args, **kwargs)  # the prompt sizes of each step's episodes
        prompt_tokens.append(sum(len(t.prompt_ids) for t in result[0]))
        if not first_ids:
            first_ids.extend(list(t.prompt_ids) for t in result[0])
        return result

    rollouts.collect_rollouts = counting
    try:
        grpo.train_grpo(cfg, save_end=False)  # logged, not printed; a benchmark saves nothing
    finally:
        rollouts.collect_rollouts = collect
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    episodes = shape.prompts * shape.group
    records: list[StepRecord] = []
    # asynchronous GRPO may have rolled out a step past the last when the run stopped
    for row, prompt in zip(rows, prompt_tokens[: len(rows)], strict=True):
        generated = row["generated_tokens"] * episodes
        records.append(
            {
                "step_s": row["step_s"],
                "generate_s": row.get("generate_s", float("nan")),
                "update_s": row.get("update_s", float("nan")),
                "tokens": prompt + row["response_tokens"] * episodes,
                "generated": generated,
                "prompt_tokens": prompt / episodes,
            }
        )
    return records, first_ids


def same_prompts(model_dir: Path, shape: Shape) -> list[RenderedPrompt]:
    """The openings of spreadrl's episodes, one per prompt of every step, in its order.

    The draws are those of ``train_grpo``'s sampler (its seed, its task list); each
    episode is reset as spreadrl resets it (``start_episodes``: system prompt with the
    tool schema, instruction, workbook overview), and rendered with the model's chat
    template as ``render_prompt_ids`` renders it, so TRL's tokenizer gets the text whose
    ids spreadrl trains on. Run in the parent, so no environment weighs on TRL's RSS.
    """
    from spreadrl.data.sources import resolve_tasks
    from spreadrl.env.factory import make_env_pool
    from spreadrl.models.init import load_model_and_tokenizer
    from spreadrl.rollout.chat import EpisodeChat
    from spreadrl.rollout.episode import EpisodeJob, start_episodes
    from spreadrl.rollout.types import RunValues
    from spreadrl.train.sampler import EpochShuffle

    cfg = spreadrl_config(model_dir, shape, model_dir.parent / "prompts-run")  # never written
    _, tokenizer = load_model_and_tokenizer(str(model_dir))
    tasks = resolve_tasks(cfg.data.train_tasks)
    sampler = EpochShuffle([(t.id, c) for t, c in tasks.episodes()], seed=cfg.seed)
    draws = sampler.next(shape.prompts * shape.steps)
    jobs = [EpisodeJob(tasks.get(tid), case, i) for i, (tid, case) in enumerate(draws)]
    with make_env_pool(cfg.env) as pool:
        run = RunValues(seed=cfg.seed, max_prompt_tokens=cfg.data.max_prompt_tokens)
        chat = EpisodeChat.of(tokenizer)
        states = start_episodes(pool, jobs, cfg.rollout, run, chat)
    out: list[RenderedPrompt] = []
    for state in states:
        traj = state.traj
        if traj.error or not traj.prompt_ids:
            raise SpreadrlError(f"bench trl --same-prompt: episode {traj.key}: {traj.error}")
        text = tokenizer.apply_chat_template(
            traj.messages, tools=traj.tools or None, add_generation_prompt=True, tokenize=False
        )
        out.append({"text": str(text), "ids": list(traj.prompt_ids)})
    return out


# ---- the TRL half -----------------------------------------------------------------


def trl_dataset_rows(prompts: Sequence[RenderedPrompt] | None) -> list[dict[str, object]]:
    """TRL's train rows: the rendered openings as text (same prompt, in draw order), or
    the bare instruction as a one-message chat (TRL applies the template itself)."""
    from spreadrl.data.builtin import builtin_tasks

    if prompts is not None:
        return [{"prompt": p["text"]} for p in prompts]
    return [
        {"prompt": [{"role": "user", "content": t.instruction}]}
        for t in builtin_tasks("demo-train").tasks
    ]


def check_trl_prompt_ids(
    got: Sequence[Sequence[int]], prompts: Sequence[RenderedPrompt], step: int, shape: Shape
) -> None:
    """Refuse a same-prompt run whose TRL step did not start from spreadrl's ids.

    ``got``: TRL's prompt ids of step ``step`` (0-based), one row per completion,
    each prompt's ``group`` rows together, as TRL's repeat sampler orders them.
    """
    window = prompts[step * shape.prompts : (step + 1) * shape.prompts]
    want = [list(p["ids"]) for p in window for _ in range(shape.group)]
    if [list(row) for row in got] != want:
        raise SpreadrlError(
            f"bench trl --same-prompt: TRL's prompt ids at step {step + 1} differ from "
            "spreadrl's rendering of the same episodes (has TRL changed how it tokenizes "
            "text prompts?)"
        )


def trl_steps(
    model_dir: Path, shape: Shape, out: Path, prompts: Sequence[RenderedPrompt] | None = None
) -> tuple[list[StepRecord], list[list[int]]]:
    """Run ``shape.steps`` TRL GRPOTrainer steps on the same model: one record per step,
    and the first step's prompt ids, one list per completion.

    With ``prompts`` (the same-prompt mode) TRL trains on them in order, unshuffled,
    and every step's prompt ids are checked against them."""
    try:
        import trl
    except ImportError as exc:
        raise SpreadrlError(
            "bench trl needs TRL: pip install 'spreadrl[bench]' (or pip install trl)"
        ) from exc
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype="float32")
    dataset = Dataset.from_list(trl_dataset_rows(prompts))

    def reward(completions: list[object], **_: object) -> list[float]:
        return [float("write_range" in json.dumps(c)) for c in completions]

    args = trl.GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=shape.prompts * shape.group,
        gradient_accumulation_steps=1,
        num_generations=shape.group,
        steps_per_generation=1,
        num_iterations=1,
        max_completion_length=shape.new_tokens,
        temperature=1.0,
        beta=0.0,
        learning_rate=shape.lr,
        max_steps=shape.steps,
        gradient_checkpointing=False,
        use_cpu=True,
        bf16=False,
        fp16=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=shape.seed,
        disable_tqdm=True,
        shuffle_dataset=prompts is None,  # same prompt: spreadrl's draw order
    )
    records: list[StepRecord] = []
    first_ids: list[list[int]] = []
    current: dict[str, float] = {}

    class Timer(TrainerCallback):
        def on_step_begin(self, *_: object, **__: object) -> None:
            current.clear()
            current["start"] = time.perf_counter()

        def on_step_end(self, *_: object, **__: object) -> None:
            step_s = time.perf_counter() - current.pop("start")
            gen = current.get("generate_s", float("nan"))
            record: StepRecord = {"step_s": step_s, "update_s": step_s - gen, "generate_s": gen}
            for key in ("tokens", "generated", "prompt_tokens"):
                record[key] = current[key]  # type: ignore[literal-required]
            records.append(record)

    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[Timer()],
    )
    generate: Callable[..., dict[str, torch.Tensor]] | None = getattr(
        trainer, "_generate_and_score_completions", None
    )
    if generate is None:  # TRL's rollout + scoring of a step, a private method since 0.14
        raise SpreadrlError(
            f"bench trl: TRL {trl.__version__} has no GRPOTrainer._generate_and_score_completions; "
            "this benchmark was written for TRL 1.16"
        )

    def timed(*a: object, **kw: object) -> dict[str, torch.Tensor]:
        t0 = time.perf_counter()
        batch = generate(*a, **kw)
        current["generate_s"] = time.perf_counter() - t0
        mask = batch["prompt_mask"].bool()
        ids = [row[m].tolist() for row, m in zip(batch["prompt_ids"], mask, strict=True)]
        if prompts is not None:
            check_trl_prompt_ids(ids, prompts, len(records), shape)
        if not first_ids:
            first_ids.extend(ids)
        prompt = float(mask.sum())
        completion = float(batch["completion_mask"].sum())
        current.update(
            tokens=prompt + completion,
            generated=completion,
            prompt_tokens=prompt / mask.shape[0],
        )
        return batch

    trainer._generate_and_score_completions = timed
    trainer.train()
    return records, first_ids


# ---- the parent: alternate, then summarise ------------------------------------------


def child_main(spec_path: str) -> None:
    """Entry of one benchmark subprocess: run one system, write its records and peak RSS."""
    import torch

    spec = json.loads(Path(spec_path).read_text())
    torch.set_num_threads(int(spec.get("threads") or torch.get_num_threads()))
    shape = Shape(**spec["shape"])
    out = Path(spec["out"])
    model = Path(spec["model"])
    if spec["system"] == "trl":
        given = spec.get("prompts")
        prompts = json.loads(Path(given).read_text()) if given else None
        records, first_ids = trl_steps(model, shape, out / "run", prompts)
    else:
        records, first_ids = spreadrl_steps(model, shape, out / "run")
    result: RunResult = {
        "system": spec["system"],
        "records": records,
        "first_prompt_ids": first_ids,
        "peak_rss_mb": _peak_rss_mb(),
    }
    Path(spec["result"]).write_text(json.dumps(result))


def run_child(
    system: str,
    model_dir: Path,
    shape: Shape,
    work: Path,
    threads: int = 0,
    prompts: Path | None = None,
) -> RunResult:
    """One run of ``system`` in a fresh Python process; its records and peak RSS.

    ``prompts``: the JSON of :func:`same_prompts`, which a same-prompt TRL run trains on.
    """
    work.mkdir(parents=True, exist_ok=True)
    spec = {
        "system": system,
        "model": str(model_dir),
        "shape": asdict(shape),
        "out": str(work),
        "result": str(work / "result.json"),
        "threads": threads,
        "prompts": str(prompts) if prompts and system == "trl" and shape.same_prompt else None,
    }
    spec_path = work / "spec.json"
    spec_path.write_text(json.dumps(spec))
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [sys.executable, "-m", "spreadrl.bench.trl", str(spec_path)],
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise SpreadrlError(f"bench trl: the {system} run failed (exit {proc.returncode}):\n{tail}")
    return json.loads((work / "result.json").read_text())


def check_same_work(results: Sequence[RunResult]) -> bool | None:
    """Whether every same-prompt TRL run's first step started from spreadrl's first-step ids.

    None when there is nothing to compare (no same-prompt TRL run, or no spreadrl run).
    """
    ours = [r["first_prompt_ids"] for r in results if r["system"].startswith("spreadrl")]
    theirs = [r["first_prompt_ids"] for r in results if r["system"] == "trl"]
    if not ours or not theirs:
        return None
    return all(t == ours[0] for t in theirs) and all(o == ours[0] for o in ours)


def summarize(results: Sequence[RunResult], *, warmup: int = 1) -> dict[str, dict[str, float]]:
    """Per system: median s/step and split, tokens/s, generated tokens/s, peak RSS (max over runs).

    Rates are totals over the counted steps divided by their total time; the
    first ``warmup`` steps of every run are left out (when a run has more).
    """
    out: dict[str, dict[str, float]] = {}
    for system in dict.fromkeys(r["system"] for r in results):
        steps: list[StepRecord] = []
        rss = 0.0
        for r in results:
            if r["system"] != system:
                continue
            recs = r["records"]
            steps.extend(recs[warmup:] if len(recs) > warmup else recs)
            rss = max(rss, float(r["peak_rss_mb"]))
        if not steps:
            continue
        total = sum(s["step_s"] for s in steps)
        out[system] = {
            "steps": float(len(steps)),
            "step_s": statistics.median(s["step_s"] for s in steps),
            "generate_s": statistics.median(s.get("generate_s", float("nan")) for s in steps),
            "update_s": statistics.median(s.get("update_s", float("nan")) for s in steps),
            "prompt_tokens": statistics.mean(s.get("prompt_tokens", 0.0) for s in steps),
            "tokens_per_s": sum(s["tokens"] for s in steps) / max(total, 1e-9),
            "generated_per_s": sum(s["generated"] for s in steps) / max(total, 1e-9),
            "peak_rss_mb": rss,
        }
    return out


COLUMNS = (
    ("step_s", "s/step (median)", "{:.2f}"),
    ("generate_s", "generation s", "{:.2f}"),
    ("update_s", "update s", "{:.2f}"),
    ("prompt_tokens", "prompt tok / sequence", "{:.0f}"),
    ("tokens_per_s", "prompt+completion tok/s", "{:.0f}"),
    ("generated_per_s", "generated tok/s", "{:.0f}"),
    ("peak_rss_mb", "peak RSS MB", "{:.0f}"),
)
RATIO_NAMES = {
    "spreadrl": "spreadrl",
    SPREADRL_ASYNC: "spreadrl async",
    "trl": "TRL",
    TRL_INSTRUCTION: "TRL (instruction prompt)",
}


def table_rows(summary: dict[str, dict[str, float]]) -> list[list[str]]:
    """Rows of the printed table: one per system, then each spreadrl run over each TRL run."""
    rows = [
        [system] + [fmt.format(stats[key]) for key, _, fmt in COLUMNS]
        for system, stats in summary.items()
    ]
    for ours in ("spreadrl", SPREADRL_ASYNC):
        for theirs in ("trl", TRL_INSTRUCTION):
            a, b = summary.get(ours), summary.get(theirs)
            if a is None or b is None:
                continue
            rows.append(
                [f"{RATIO_NAMES[ours]} / {RATIO_NAMES[theirs]}"]
                + [
                    f"{a[key] / b[key]:.2f}x" if b[key] and b[key] == b[key] else "-"
                    for key, _, _ in COLUMNS
                ]
            )
    return rows


def run_plan(
    chosen: Sequence[str],
    same_prompt: bool,
    both_modes: bool,
    rounds: int,
    with_async: bool = False,
) -> list[list[str]]:
    """Each round's runs, by label: ``trl`` is TRL on the same prompt ids, ``trl-instruction``
    TRL on the bare instruction (both with ``both_modes``), ``spreadrl`` spreadrl, and
    ``spreadrl-async`` its asynchronous GRPO after it (``with_async``); the order is
    reversed every other round, so a busy machine's drift slows each alike."""
    labels: list[str] = []
    for system in chosen:
        if system != "trl":
            labels.append(system)
            if system == "spreadrl" and with_async:
                labels.append(SPREADRL_ASYNC)
            continue
        if same_prompt or both_modes:
            labels.append("trl")
        if not same_prompt or both_modes:
            labels.append(TRL_INSTRUCTION)
    return [labels if r % 2 == 0 else labels[::-1] for r in range(rounds)]


def run_trl_bench(
    shape: Shape,
    chosen: Sequence[str],
    *,
    both_modes: bool = False,
    rounds: int = 2,
    async_staleness: int = 0,
    threads: int = 0,
    out: Path | None = None,
    reporter: Reporter | None = None,
) -> tuple[dict[str, dict[str, float]], bool | None]:
    """Run each system's GRPO steps in alternating subprocesses (:func:`run_plan`);
    return the per-system summary and whether TRL's first prompt ids were spreadrl's
    (None when not compared). ``reporter`` gets a line as each run starts (default: logged)."""
    reporter = reporter or LogReporter()
    bad = sorted(set(chosen) - set(SYSTEMS))
    if bad or not chosen:
        raise SpreadrlError(f"--systems: unknown {bad}; choose from {list(SYSTEMS)}")
    if async_staleness < 0:
        raise SpreadrlError(f"--async-staleness: {async_staleness} is below 0")
    same_prompt = shape.same_prompt
    with tempfile.TemporaryDirectory(prefix="spreadrl-bench-trl-") as tmp:
        root = Path(out) if out else Path(tmp)
        model_dir = build_bench_model(root / "model")
        prompt_file = None
        if "trl" in chosen and (same_prompt or both_modes):  # the draws of every step
            prompt_file = root / "prompts.json"
            prompt_file.write_text(json.dumps(same_prompts(model_dir, shape)))
        results = []
        plan = run_plan(chosen, same_prompt, both_modes, rounds, async_staleness > 0)
        for r, order in enumerate(plan):
            for label in order:
                reporter.line(f"round {r + 1}: {label} ({shape.steps} steps)")
                system = {TRL_INSTRUCTION: "trl", SPREADRL_ASYNC: "spreadrl"}.get(label, label)
                staleness = async_staleness if label == SPREADRL_ASYNC else 0
                run_shape = replace(shape, same_prompt=label == "trl", max_staleness=staleness)
                work = root / f"{label}-{r}"
                result = run_child(system, model_dir, run_shape, work, threads, prompt_file)
                results.append({**result, "system": label})
        summary = summarize(results)
    same = check_same_work(results)
    if same is False:
        raise SpreadrlError(
            "bench trl --same-prompt: TRL's first-step prompt ids differ from spreadrl's"
        )
    return summary, same


def shape_line(shape: Shape, summary: dict[str, dict[str, float]], same: bool | None) -> str:
    """The line under the table: the shape, what TRL was prompted with, the versions."""
    versions = ", ".join(f"{k} {v}" for k, v in _versions().items())
    mode = "; ".join(
        text
        for label, text in (
            ("trl", "trl: spreadrl's prompt ids" + (" (checked)" if same else "")),
            (TRL_INSTRUCTION, f"{TRL_INSTRUCTION}: the bare instruction"),
        )
        if label in summary
    )
    return (
        f"shape: {shape.prompts} prompts x {shape.group} rollouts, {shape.new_tokens} new tokens, "
        f"fp32, 1 epoch, 1 mini-batch, no KL, spreadrl micro_batch_tokens "
        f"{shape.micro_batch_tokens}; TRL's prompts: {mode or '-'}; medians over steps "
        f"2..{shape.steps} of each run; {versions}"
    )


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("trl", "transformers", "torch"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out


if __name__ == "__main__":
    child_main(sys.argv[1])
