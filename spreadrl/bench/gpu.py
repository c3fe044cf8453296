"""`spreadrl bench gpu`: GRPO steps at seed 000's shape on one GPU, plain and under FSDP2.

One command for a session that has a device. It builds a random Qwen3 of the
4B shape with Qwen3's 151,936-row vocabulary (the real tokenizer when the
``qwen`` extra is installed, else a small trained one padded to that many
rows: the compute is the same), then runs a few GRPO steps of
``configs/spreadsheet-rl-4b.yaml`` scaled down to fit about ten minutes
(4 prompts x 4 rollouts, 4,096-token responses, 16,384-token micro-batches,
no KL reference, one turn) on the hf backend, first in one plain process, then under
``torchrun --nproc-per-node 1`` where the update runs FSDP2-sharded. Each leg
runs in its own process (a clean GPU, an out-of-memory error reported as a
row rather than a crash) and one table compares them: generation tokens/s,
update tokens/s and MFU against the device's bf16 peak, peak memory of the
rollout and of the update (GRPO's own ``rollout_peak_gb`` / ``train_peak_gb``:
the GPU allocator's peak, the process's RSS on CPU), and where a step's time
went. The first step is a warm-up and is left out.

``--smoke`` runs the same code on CPU with the tiny preset in seconds; the
tests run it. Its figures mean nothing.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import typer
from rich.console import Console
from rich.table import Table
from transformers import AutoConfig

from spreadrl.bench.flops import peak_tflops, train_flops_per_token
from spreadrl.config import load_config
from spreadrl.models.init import init_model
from spreadrl.models.tokenizer import default_corpus, train_tokenizer
from spreadrl.train.config import GRPOConfig
from spreadrl.train.grpo import train_grpo

# seed 000's recipe, from the repository checkout this package runs from
RECIPE = Path(__file__).resolve().parents[2] / "configs" / "spreadsheet-rl-4b.yaml"


@dataclass(frozen=True)
class Shape:
    """What one leg runs: the model, the batch and the budgets."""

    preset: str
    vocab_size: int
    prompts: int
    rollouts: int
    response_tokens: int
    micro_batch_tokens: int
    steps: int
    device: str
    dtype: str
    tools: str


# 16,384-token micro-batches and no KL reference: one H100 holds the fp32 master weights,
# gradients and AdamW state of 4B parameters (60 GiB) but not 32k-token micro-batches or a
# reference copy beside them (`spreadrl plan` with these overrides: update peak 75.1 GiB)
FULL = Shape("4b-shape", 151_936, 4, 4, 4096, 16_384, 3, "cuda", "bfloat16", "full")
SMOKE = Shape("tiny", 0, 1, 2, 16, 2048, 2, "cpu", "float32", "write_range")


def grpo_overrides(shape: Shape, model: str, out: Path) -> list[str]:
    """Dotted overrides turning the seed-000 recipe into one bench leg."""
    return [
        f"model.name_or_path={model}",
        f"model.dtype={shape.dtype}",
        f"output_dir={out}",
        f"steps={shape.steps}",
        f"device={shape.device}",
        "rollout.backend=hf",
        f"rollout.group_size={shape.rollouts}",
        f"rollout.prompts_per_step={shape.prompts}",
        "rollout.max_turns=1",
        f"rollout.max_new_tokens_per_turn={shape.response_tokens}",
        f"rollout.max_response_tokens={shape.response_tokens}",
        "rollout.concurrency=0",
        "data.train_tasks=builtin:demo-train",
        "data.max_prompt_tokens=0",  # a padded stand-in tokenizer makes longer prompts
        f"env.tools=[{shape.tools}]",
        f"optim.micro_batch_tokens={shape.micro_batch_tokens}",
        "optim.mini_batch_size=0",
        # a random model's groups all score 0: train on them anyway, the work is the same
        "sampling.mode=keep",
        "loss.kl_coef=0",  # no reference copy (see FULL)
        "checkpoint.every_steps=0",
    ]


def build_model(root: Path, shape: Shape) -> tuple[str, str]:
    """A random model of ``shape``; returns (folder, which tokenizer it has)."""
    if shape.vocab_size:
        try:
            from spreadrl.models.qwen3 import load_qwen3_tokenizer

            tokenizer, label = load_qwen3_tokenizer(), "Qwen3's own"
        except Exception:  # the qwen extra is optional: same compute with a padded one
            tokenizer, label = train_tokenizer(default_corpus(), vocab_size=512), "trained, padded"
        path = init_model(shape.preset, tokenizer, root / "model", vocab_size=shape.vocab_size)
    else:
        tokenizer, label = train_tokenizer(default_corpus(), vocab_size=512), "trained"
        path = init_model(shape.preset, tokenizer, root / "model")
    return str(path), label


def run_leg(shape: Shape, model: str, out: Path) -> dict[str, Any]:
    """Run the GRPO steps in this process (plain, or one torchrun worker); summarise them."""
    cfg = load_config(GRPOConfig, RECIPE, grpo_overrides(shape, model, out))
    cuda = shape.device.startswith("cuda")
    train_grpo(cfg, console=Console(quiet=True))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    measured = rows[1:] or rows  # step 1 warms up kernels and the allocator
    total = {k: sum(r.get(k, 0.0) for r in measured) for k in _SPLIT + ("step_s",)}
    episodes = shape.prompts * shape.rollouts
    generated = sum(r["generated_tokens"] * episodes for r in measured)
    trained = sum(r["trained_tokens"] for r in measured)
    if not generated or not trained:
        raise RuntimeError(f"the bench steps generated {generated} and trained {trained} tokens")
    sequences = sum(r["trained_sequences"] for r in measured)
    config = AutoConfig.from_pretrained(model)
    seq_len = round(trained / sequences)
    update_tflops = trained * train_flops_per_token(config, seq_len) / max(total["update_s"], 1e-9)
    device_name = torch.cuda.get_device_name() if cuda else "cpu"
    peak = peak_tflops(device_name) if cuda else None
    return {
        "steps": len(measured),
        "generate_tok_s": generated / max(total["generate_s"], 1e-9),
        "update_tok_s": trained / max(total["update_s"], 1e-9),
        "update_mfu": update_tflops / 1e12 / peak if peak else None,
        # the trainer's own per-phase peaks (spreadrl/train/memory.py): GPU allocator, or RSS
        "rollout_peak_gib": max(r.get("rollout_peak_gb", 0.0) for r in rows),
        "train_peak_gib": max(r.get("train_peak_gb", 0.0) for r in rows),
        "step_s": total["step_s"] / len(measured),
        "seq_len": seq_len,
        "split": {k: total[k] / max(total["step_s"], 1e-9) for k in _SPLIT},
        "device": device_name,
        "versions": f"torch {torch.__version__}",
    }


_SPLIT = ("generate_s", "tools_s", "logprobs_s", "update_s")


def _launch(argv: list[str], result: Path, log: Path) -> dict[str, Any]:
    """Run one leg in a child process; its result, or the error it ended with."""
    start = time.perf_counter()
    with log.open("w") as f:
        proc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode == 0 and result.exists():
        return {**json.loads(result.read_text()), "wall_s": time.perf_counter() - start}
    lines = [ln for ln in log.read_text().splitlines() if ln.strip()]
    error = next((ln for ln in reversed(lines) if "Error" in ln), lines[-1] if lines else "")
    return {"error": error.strip()[:200] or f"exit code {proc.returncode}", "log": str(log)}


def bench_gpu(
    smoke: bool = typer.Option(False, help="Tiny model on CPU, seconds (what the tests run)."),
    steps: int = typer.Option(0, help="GRPO steps per leg, the first a warm-up (0 = shape's)."),
    prompts: int = typer.Option(0, help="Prompts per step (0 = shape's: 4)."),
    rollouts: int = typer.Option(0, help="Rollouts per prompt (0 = shape's: 4)."),
    response_tokens: int = typer.Option(0, help="Tokens per response (0 = shape's: 4096)."),
    micro_batch_tokens: int = typer.Option(0, help="Update micro-batch tokens (0 = 16384)."),
    torchrun: bool = typer.Option(True, help="Also run the leg under torchrun (FSDP2)."),
    out: Path = typer.Option(None, help="Also write the results as JSON here."),
) -> None:
    """GRPO on one GPU at seed 000's shape, plain and under torchrun + FSDP2: one table.

    Examples (the first on a GPU machine, from the repository root; --smoke on a CPU):

      spreadrl bench gpu --out runs/bench-gpu.json

      spreadrl bench gpu --smoke
    """
    base = SMOKE if smoke else FULL
    shape = Shape(
        base.preset,
        base.vocab_size,
        prompts or base.prompts,
        rollouts or base.rollouts,
        response_tokens or base.response_tokens,
        micro_batch_tokens or base.micro_batch_tokens,
        steps or base.steps,
        base.device,
        base.dtype,
        base.tools,
    )
    console = Console()
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="spreadrl-bench-gpu-") as tmp:
        root = Path(tmp)
        model, tokenizer = build_model(root, shape)
        legs = {"hf, one process": [sys.executable, "-m", "spreadrl.bench.gpu"]}
        if torchrun:
            legs["hf, torchrun x1 + FSDP2"] = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nproc-per-node",
                "1",
                "--master-port",
                str(_free_port()),
                "-m",
                "spreadrl.bench.gpu",
            ]
        for i, (label, cmd) in enumerate(legs.items()):
            result = root / f"leg{i}.json"
            args = [json.dumps(asdict(shape)), model, str(root / f"run{i}"), str(result)]
            results[label] = _launch(cmd + args, result, root / f"leg{i}.log")
            if "log" in results[label]:  # keep the log of a failed leg
                kept = Path(tempfile.gettempdir()) / f"spreadrl-bench-gpu-leg{i}.log"
                kept.write_text(Path(results[label]["log"]).read_text())
                results[label]["log"] = str(kept)
    console.print(_table(results))
    first = next((r for r in results.values() if "device" in r), {})
    console.print(
        f"model: random Qwen3 {shape.preset}, vocabulary {shape.vocab_size or 'of the tokenizer'} "
        f"({tokenizer} tokenizer); {shape.prompts} prompts x {shape.rollouts} rollouts x "
        f"{shape.response_tokens} tokens, micro-batch {shape.micro_batch_tokens} tokens; "
        f"device {first.get('device', '?')}; {first.get('versions', '')}"
    )
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"shape": asdict(shape), "legs": results}, indent=2))


def _table(results: dict[str, dict[str, Any]]) -> Table:
    table = Table(
        "leg",
        "gen tok/s",
        "update tok/s",
        "update MFU",
        "peak mem: rollout / update",
        "step s",
        "mean seq",
        "gen / tools / logprobs / update",
    )
    for label, r in results.items():
        if "error" in r:
            table.add_row(label, f"[red]failed: {r['error']}[/] (log: {r['log']})", *[""] * 6)
            continue
        mfu = f"{100 * r['update_mfu']:.1f}%" if r["update_mfu"] is not None else "n/a"
        mem = f"{r['rollout_peak_gib']:.1f} / {r['train_peak_gib']:.1f} GiB"
        split = " / ".join(f"{100 * r['split'][k]:.0f}%" for k in _SPLIT)
        table.add_row(
            label,
            f"{r['generate_tok_s']:.0f}",
            f"{r['update_tok_s']:.0f}",
            mfu,
            mem,
            f"{r['step_s']:.1f}",
            str(r["seq_len"]),
            split,
        )
    return table


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str]) -> None:
    """A leg's worker: ``python -m spreadrl.bench.gpu SHAPE_JSON MODEL OUT RESULT``."""
    shape = Shape(**json.loads(argv[0]))
    summary = run_leg(shape, argv[1], Path(argv[2]))
    if int(os.environ.get("RANK", "0")) == 0:
        Path(argv[3]).write_text(json.dumps(summary))


if __name__ == "__main__":
    main(sys.argv[1:])
