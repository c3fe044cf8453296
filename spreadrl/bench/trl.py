"""`spreadrl bench trl`: a GRPO step of TRL's GRPOTrainer and of spreadrl's, side by side.

Both systems train the same model folder (a 4.72M-parameter Qwen3: hidden 256,
4 layers, 4/2 heads, head_dim 64, ffn 768, tied embeddings, a BPE trained on
the demo tasks with its embedding padded to 6,150 rows) on the same shape: 8
prompts x 4 rollouts, one turn, 128 new tokens, fp32, one epoch, one
mini-batch, no KL. TRL gets the bare task instruction as its prompt; spreadrl
runs its own episodes on ``builtin:demo-train`` (the ``write_range`` tool
preset, so the tool schema is in the system prompt), keeps every group
(``sampling.mode=keep``) and packs the update into one micro-batch.

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
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import typer

from spreadrl.errors import SpreadrlError

SYSTEMS = ("trl", "spreadrl")

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


SMOKE = Shape(prompts=2, group=2, new_tokens=8, steps=2)


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


def spreadrl_steps(model_dir: Path, shape: Shape, out: Path) -> list[dict[str, float]]:
    """Run ``shape.steps`` spreadrl GRPO steps; one record per step (times and token counts)."""
    from rich.console import Console

    import spreadrl.train.grpo as grpo
    from spreadrl.config import load_config
    from spreadrl.train.config import GRPOConfig

    cfg = load_config(
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
    prompt_tokens: list[int] = []
    collect = grpo.collect_rollouts

    def counting(*args: Any, **kwargs: Any) -> Any:  # the prompt sizes of each step's episodes
        result = collect(*args, **kwargs)
        prompt_tokens.append(sum(len(t.prompt_ids) for t in result[0]))
        return result

    grpo.collect_rollouts = counting
    try:
        grpo.train_grpo(cfg, console=Console(quiet=True))
    finally:
        grpo.collect_rollouts = collect
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    episodes = shape.prompts * shape.group
    records = []
    for row, prompt in zip(rows, prompt_tokens, strict=True):
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
    return records


# ---- the TRL half -----------------------------------------------------------------


def trl_steps(model_dir: Path, shape: Shape, out: Path) -> list[dict[str, float]]:
    """Run ``shape.steps`` TRL GRPOTrainer steps on the same model; one record per step."""
    try:
        import trl
    except ImportError as exc:
        raise SpreadrlError(
            "bench trl needs TRL: pip install 'spreadrl[bench]' (or pip install trl)"
        ) from exc
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    from spreadrl.data.builtin import builtin_tasks

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype="float32")
    tasks = builtin_tasks("demo-train")
    dataset = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": t.instruction}]} for t in tasks.tasks]
    )

    def reward(completions: list[Any], **_: Any) -> list[float]:
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
    )
    records: list[dict[str, float]] = []
    current: dict[str, float] = {}

    class Timer(TrainerCallback):
        def on_step_begin(self, *_: Any, **__: Any) -> None:
            current.clear()
            current["start"] = time.perf_counter()

        def on_step_end(self, *_: Any, **__: Any) -> None:
            step_s = time.perf_counter() - current.pop("start")
            gen = current.get("generate_s", float("nan"))
            records.append({**current, "step_s": step_s, "update_s": step_s - gen})

    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[Timer()],
    )
    generate = getattr(trainer, "_generate_and_score_completions", None)
    if generate is None:  # TRL's rollout + scoring of a step, a private method since 0.14
        raise SpreadrlError(
            f"bench trl: TRL {trl.__version__} has no GRPOTrainer._generate_and_score_completions; "
            "this benchmark was written for TRL 1.16"
        )

    def timed(*a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        batch = generate(*a, **kw)
        current["generate_s"] = time.perf_counter() - t0
        prompt = float(batch["prompt_mask"].sum())
        completion = float(batch["completion_mask"].sum())
        current.update(
            tokens=prompt + completion,
            generated=completion,
            prompt_tokens=prompt / batch["prompt_mask"].shape[0],
        )
        return batch

    trainer._generate_and_score_completions = timed
    trainer.train()
    return records


# ---- the parent: alternate, then summarise ------------------------------------------


def child_main(spec_path: str) -> None:
    """Entry of one benchmark subprocess: run one system, write its records and peak RSS."""
    import torch

    spec = json.loads(Path(spec_path).read_text())
    torch.set_num_threads(int(spec.get("threads") or torch.get_num_threads()))
    shape = Shape(**spec["shape"])
    out = Path(spec["out"])
    run = trl_steps if spec["system"] == "trl" else spreadrl_steps
    records = run(Path(spec["model"]), shape, out / "run")
    result = {"system": spec["system"], "records": records, "peak_rss_mb": _peak_rss_mb()}
    Path(spec["result"]).write_text(json.dumps(result))


def run_child(system: str, model_dir: Path, shape: Shape, work: Path, threads: int = 0) -> dict:
    """One run of ``system`` in a fresh Python process; its records and peak RSS."""
    work.mkdir(parents=True, exist_ok=True)
    spec = {
        "system": system,
        "model": str(model_dir),
        "shape": asdict(shape),
        "out": str(work),
        "result": str(work / "result.json"),
        "threads": threads,
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


def summarize(results: Sequence[dict[str, Any]], *, warmup: int = 1) -> dict[str, dict[str, float]]:
    """Per system: median s/step and split, tokens/s, generated tokens/s, peak RSS (max over runs).

    Rates are totals over the counted steps divided by their total time; the
    first ``warmup`` steps of every run are left out (when a run has more).
    """
    out: dict[str, dict[str, float]] = {}
    for system in dict.fromkeys(r["system"] for r in results):
        steps: list[dict[str, float]] = []
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


def table_rows(summary: dict[str, dict[str, float]]) -> list[list[str]]:
    """Rows of the printed table: one per system, then spreadrl / TRL when both ran."""
    rows = [
        [system] + [fmt.format(stats[key]) for key, _, fmt in COLUMNS]
        for system, stats in summary.items()
    ]
    if "trl" in summary and "spreadrl" in summary:
        a, b = summary["spreadrl"], summary["trl"]
        rows.append(
            ["spreadrl / TRL"]
            + [
                f"{a[key] / b[key]:.2f}x" if b[key] and b[key] == b[key] else "-"
                for key, _, _ in COLUMNS
            ]
        )
    return rows


def bench_trl(
    steps: int = typer.Option(4, help="GRPO steps per run (the first is a warm-up)."),
    rounds: int = typer.Option(2, help="Runs per system, alternating TRL and spreadrl."),
    prompts: int = typer.Option(8, help="Prompts per step."),
    group: int = typer.Option(4, help="Rollouts per prompt."),
    new_tokens: int = typer.Option(128, help="New tokens per rollout (one turn)."),
    systems: str = typer.Option("trl,spreadrl", help="Which systems to run, comma-separated."),
    threads: int = typer.Option(0, help="torch threads per run (0 = torch's default)."),
    micro_batch_tokens: int = typer.Option(
        65536, help="spreadrl's update micro-batch token budget (65536: one micro-batch)."
    ),
    smoke: bool = typer.Option(False, help="A tiny shape and 2 steps: checks that both run."),
    out: Path = typer.Option(None, help="Keep the runs here (default: a temporary folder)."),
) -> None:
    """TRL GRPOTrainer vs spreadrl grpo on one model and one step shape, in alternating subprocesses.

    Prints s/step, tokens/s, generated tokens/s and peak RSS per system, and their
    ratios. Needs the bench extra for the TRL half: pip install 'spreadrl[bench]'.

      spreadrl bench trl --steps 4 --rounds 2
    """
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:  # piped into a file or docs: room for every column
        console = Console(width=160)
    shape = SMOKE if smoke else Shape(prompts, group, new_tokens, steps)
    shape = replace(shape, micro_batch_tokens=micro_batch_tokens)
    chosen = [s.strip() for s in systems.split(",") if s.strip()]
    bad = sorted(set(chosen) - set(SYSTEMS))
    if bad or not chosen:
        raise SpreadrlError(f"--systems: unknown {bad}; choose from {list(SYSTEMS)}")
    with tempfile.TemporaryDirectory(prefix="spreadrl-bench-trl-") as tmp:
        root = Path(out) if out else Path(tmp)
        model_dir = build_bench_model(root / "model")
        results = []
        for r in range(1 if smoke else rounds):
            order = chosen if r % 2 == 0 else chosen[::-1]
            for system in order:
                console.print(f"round {r + 1}: {system} ({shape.steps} steps)")
                results.append(run_child(system, model_dir, shape, root / f"{system}-{r}", threads))
        summary = summarize(results)
    versions = _versions()
    table = Table("system", *(title for _, title, _ in COLUMNS))
    for row in table_rows(summary):
        table.add_row(*row)
    console.print(table)
    console.print(
        f"shape: {shape.prompts} prompts x {shape.group} rollouts, {shape.new_tokens} new tokens, "
        f"fp32, 1 epoch, 1 mini-batch, no KL, spreadrl micro_batch_tokens "
        f"{shape.micro_batch_tokens}; medians over steps 2..{shape.steps} of each run; "
        + ", ".join(f"{k} {v}" for k, v in versions.items())
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
