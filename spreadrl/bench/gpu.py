"""GRPO steps at the Spreadsheet-RL recipe's shape on one GPU, plain and under FSDP2 (`spreadrl bench gpu`).

It builds a random Qwen3 of the 4B shape with Qwen3's 151,936-row vocabulary
(the real tokenizer when the ``qwen`` extra is installed, else a small trained
one padded to that many rows: the compute is the same) on the GPU through the
meta device, then runs a few GRPO steps of ``configs/spreadsheet-rl-4b.yaml``
scaled down (4 prompts x 4 rollouts, no KL reference, one turn) on the hf
backend: first in one plain process, then (``torchrun``) under
``torchrun --nproc-per-node 1`` where the update runs FSDP2-sharded. The build
and each leg run in their own process (a clean GPU, an out-of-memory error
reported as a row rather than a crash), and each leg's summary and per-step rows
are written to the output folder as soon as it ends, so a run cut off by its
time limit still returns what finished. A leg records generation and update
tokens/s, MFU against the device's bf16 peak, the allocated, reserved and
device-level (NVML) peaks of the rollout and of the update beside what
``spreadrl plan`` predicts for them, the GPU utilisation during the rollout, and
where a step's time went. The first step warms up and is left out.

Shapes: ``FULL`` (4,096-token responses, 3 steps: about 15 minutes on an H200),
``QUICK`` (256-token responses, 2 steps, one leg: a few minutes on one H100, the
build included) and ``SMOKE`` (the tiny preset on CPU in seconds; the tests run
it, its figures mean nothing).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig

from spreadrl.bench.flops import peak_tflops, train_flops_per_token
from spreadrl.config import load_config
from spreadrl.errors import SpreadrlError
from spreadrl.reporting import LogReporter, Reporter
from spreadrl.rollout.allocator import ALLOC_CONF, use_expandable_segments
from spreadrl.run_folder import has_results
from spreadrl.train.config import GRPOConfig
from spreadrl.train.setup import TRAINING_FILES

# the Spreadsheet-RL recipe, from the repository checkout this package runs from
RECIPE = Path(__file__).resolve().parents[2] / "configs" / "spreadsheet-rl-4b.yaml"
GIB = 2**30


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


# 16,384-token micro-batches and no KL reference, as run on 2026-11-26 (one H200): 75.4 GiB
# allocated and 80.0 GiB on the device, more than an H100's 79.6 (`spreadrl plan` now says so)
FULL = Shape("4b-shape", 151_936, 4, 4, 4096, 16_384, 3, "cuda", "bfloat16", "full")
# what fits a short device lease: 256-token responses, 8,192-token micro-batches (fits one
# H100 by the plan, with its margin), one warm-up step and one measured step
QUICK = replace(FULL, response_tokens=256, micro_batch_tokens=8192, steps=2)
SMOKE = Shape("tiny", 0, 1, 2, 16, 2048, 2, "cpu", "float32", "write_range")
SPLIT = ("generate_s", "tools_s", "logprobs_s", "update_s")
LEG_PLAIN = "hf, one process"
LEG_TORCHRUN = "hf, torchrun x1 + FSDP2"


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


def build_model(root: Path, shape: Shape) -> dict[str, Any]:
    """A random model of ``shape`` under ``root``: its folder, tokenizer and build seconds."""
    from spreadrl.models.init import init_model
    from spreadrl.models.tokenizer import default_corpus, train_tokenizer

    start = time.perf_counter()
    device = shape.device if shape.device.startswith("cuda") else "cpu"
    if shape.vocab_size:
        try:
            from spreadrl.models.qwen3 import load_qwen3_tokenizer

            tokenizer, label = load_qwen3_tokenizer(), "Qwen3's own"
        except Exception:  # the qwen extra is optional: same compute with a padded one
            tokenizer, label = train_tokenizer(default_corpus(), vocab_size=512), "trained, padded"
        path = init_model(
            shape.preset, tokenizer, root / "model", vocab_size=shape.vocab_size, device=device
        )
    else:
        tokenizer, label = train_tokenizer(default_corpus(), vocab_size=512), "trained"
        path = init_model(shape.preset, tokenizer, root / "model", device=device)
    return {"model": str(path), "tokenizer": label, "build_s": time.perf_counter() - start}


def planned_peaks(cfg: GRPOConfig, shape: Shape, gpus: int) -> dict[str, float]:
    """``spreadrl plan``'s rollout and update peaks (device and allocated) for the leg."""
    from spreadrl.plan import Hardware, model_shape, plan_memory

    cuda = shape.device.startswith("cuda")
    memory = torch.cuda.get_device_properties(0).total_memory / GIB if cuda else 64.0
    hw = Hardware(gpus=gpus, memory_gib=memory, device="cuda" if cuda else "cpu")
    plan = plan_memory(cfg, model_shape(AutoConfig.from_pretrained(cfg.model.name_or_path)), hw)
    return {
        "plan_rollout_device_gib": plan.phases["generation"],
        "plan_rollout_allocated_gib": plan.allocated["generation"],
        "plan_update_device_gib": plan.phases["update"],
        "plan_update_allocated_gib": plan.allocated["update"],
        "plan_verdict": plan.verdict("update"),
    }


def _most(rows: Sequence[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if key in r]
    return max(values) if values else None


def summarize_rows(rows: list[dict[str, Any]], shape: Shape, config: Any) -> dict[str, Any]:
    """A leg's figures from its metrics rows; the first row (warm-up) is left out of rates."""
    measured = rows[1:] or rows  # step 1 warms up kernels and the allocator
    total = {k: sum(r.get(k, 0.0) for r in measured) for k in (*SPLIT, "step_s")}
    episodes = shape.prompts * shape.rollouts
    generated = sum(r["generated_tokens"] * episodes for r in measured)
    trained = sum(r["trained_tokens"] for r in measured)
    if not generated or not trained:
        raise RuntimeError(f"the bench steps generated {generated} and trained {trained} tokens")
    sequences = sum(r["trained_sequences"] for r in measured)
    seq_len = round(trained / sequences)
    flops = trained * train_flops_per_token(config, seq_len)
    cuda = shape.device.startswith("cuda")
    device_name = torch.cuda.get_device_name() if cuda else "cpu"
    peak = peak_tflops(device_name) if cuda else None
    util = [r["rollout_gpu_util"] for r in measured if "rollout_gpu_util" in r]
    out = {
        "steps": len(measured),
        "generate_tok_s": generated / max(total["generate_s"], 1e-9),
        "update_tok_s": trained / max(total["update_s"], 1e-9),
        "update_mfu": flops / max(total["update_s"], 1e-9) / 1e12 / peak if peak else None,
        "rollout_gpu_util": sum(util) / len(util) if util else None,
        "step_s": total["step_s"] / len(measured),
        "seq_len": seq_len,
        "split": {k: total[k] / max(total["step_s"], 1e-9) for k in SPLIT},
        "device": device_name,
        "versions": _versions(),
        "alloc_conf": os.environ.get(ALLOC_CONF, ""),
    }
    for phase in ("rollout", "train"):  # the most of any step, the warm-up's included
        for kind in ("peak", "reserved", "device"):
            out[f"{phase}_{kind}_gib"] = _most(rows, f"{phase}_{kind}_gb")
    return out


def _versions() -> str:
    import transformers

    cuda = f", CUDA {torch.version.cuda}" if torch.version.cuda else ""
    return f"torch {torch.__version__}{cuda}, transformers {transformers.__version__}"


def run_leg(shape: Shape, model: str, out: Path, extra: Sequence[str] = ()) -> dict[str, Any]:
    """Run the GRPO steps in this process (plain, or one torchrun worker); summarise them.

    ``extra``: more dotted overrides (a lever's setting, for a before/after)."""
    from spreadrl.train.grpo import train_grpo

    cfg = load_config(GRPOConfig, RECIPE, [*grpo_overrides(shape, model, out), *extra])
    if has_results(out, TRAINING_FILES):  # resumed, it would report an earlier run's steps
        raise SpreadrlError(f"{out} holds an earlier GRPO run; a benchmark leg runs fresh")
    gpus = int(os.environ.get("WORLD_SIZE", "1"))
    plan = planned_peaks(cfg, shape, gpus)
    # its lines logged, not printed: the bench prints its own; no end state and no final
    # model saved (the 4b-shape's end state alone, fp32 weights + AdamW, is ~48 GB)
    train_grpo(cfg, save_end=False)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    summary = summarize_rows(rows, shape, AutoConfig.from_pretrained(model))
    return {**summary, **plan, "overrides": list(extra), "rows": rows}


def _launch(argv: list[str], result: Path, log: Path) -> dict[str, Any]:
    """Run one child process; its result, or the error it ended with."""
    start = time.perf_counter()
    with log.open("w") as f:
        proc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode == 0 and result.exists():
        return {**json.loads(result.read_text()), "wall_s": time.perf_counter() - start}
    lines = [ln for ln in log.read_text().splitlines() if ln.strip()]
    error = next((ln for ln in reversed(lines) if "Error" in ln), lines[-1] if lines else "")
    return {"error": error.strip()[:300] or f"exit code {proc.returncode}", "log": str(log)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def leg_commands(torchrun: bool) -> dict[str, list[str]]:
    """Each leg's command line, by label (the worker is this module's ``main``)."""
    worker = ["-m", "spreadrl.bench.gpu", "leg"]
    legs = {LEG_PLAIN: [sys.executable, *worker]}
    if torchrun:
        port = str(_free_port())
        launcher = ["-m", "torch.distributed.run", "--nproc-per-node", "1", "--master-port", port]
        legs[LEG_TORCHRUN] = [sys.executable, *launcher, *worker]
    return legs


def slug(label: str) -> str:
    """A file name for a leg's label."""
    return re.sub(r"[^0-9A-Za-z]+", "-", label).strip("-")


def write_leg(out: Path, label: str, result: dict[str, Any]) -> None:
    """The leg's summary (JSON) and its per-step rows (JSONL), written as it ends."""
    name = slug(label)
    rows = result.pop("rows", [])
    (out / f"{name}.json").write_text(json.dumps({"leg": label, **result}, indent=1))
    (out / f"{name}.steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def run_bench(
    shape: Shape,
    out: Path,
    *,
    torchrun: bool = True,
    extra: Sequence[str] = (),
    reporter: Reporter | None = None,
) -> dict[str, Any]:
    """Build the model, then run each leg in its own process, writing into ``out`` as each
    part ends: ``build.json``, ``<leg>.json`` and ``<leg>.steps.jsonl``, ``bench.json``.
    ``reporter`` gets a line as each part starts (default: logged)."""
    reporter = reporter or LogReporter()
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    work.mkdir(exist_ok=True)
    report: dict[str, Any] = {"shape": asdict(shape), "overrides": list(extra), "legs": {}}
    spec = json.dumps(asdict(shape))
    reporter.line(f"building a random {shape.preset} model")
    build = _launch(
        [
            sys.executable,
            "-m",
            "spreadrl.bench.gpu",
            "build",
            spec,
            str(work),
            str(out / "build.json"),
        ],
        out / "build.json",
        out / "build.log",
    )
    report["build"] = build
    if "error" in build:
        (out / "bench.json").write_text(json.dumps(report, indent=1))
        return report
    reporter.line(f"model built in {build['build_s']:.1f} s ({build['tokenizer']} tokenizer)")
    for i, (label, cmd) in enumerate(leg_commands(torchrun).items()):
        reporter.line(f"leg {label}: {shape.steps} steps")
        result_file = work / f"leg{i}.json"
        args = [spec, build["model"], str(work / f"run{i}"), str(result_file), *extra]
        result = _launch(cmd + args, result_file, out / f"{slug(label)}.log")
        write_leg(out, label, result)
        report["legs"][label] = result
        (out / "bench.json").write_text(json.dumps(report, indent=1))
    return report


def main(argv: list[str]) -> None:
    """The children: ``build SHAPE_JSON ROOT RESULT`` and ``leg SHAPE_JSON MODEL OUT RESULT
    [OVERRIDE ...]`` (``python -m spreadrl.bench.gpu``)."""
    use_expandable_segments("hf")  # what `spreadrl grpo` does, before CUDA starts
    shape = Shape(**json.loads(argv[1]))
    if argv[0] == "build":
        Path(argv[3]).write_text(json.dumps(build_model(Path(argv[2]), shape)))
        return
    summary = run_leg(shape, argv[2], Path(argv[3]), argv[5:])
    if int(os.environ.get("RANK", "0")) == 0:
        Path(argv[4]).write_text(json.dumps(summary))


if __name__ == "__main__":
    main(sys.argv[1:])
