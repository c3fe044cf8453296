"""`spreadrl bench rollout`: generation throughput of the hf backend, batched vs one at a time.

Runs real episodes (the gym, the checker) with a model on the built-in demo
tasks, so the time split between generation and tools is the one training
sees. Without ``--model`` a tiny random Qwen3 is built (its outputs are
noise, but the token counts and timings are real).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import typer


def _random_model(root: Path, preset: str = "tiny", vocab_size: int = 0) -> str:
    """A random model of ``preset`` (its vocabulary padded to ``vocab_size`` if given)."""
    from spreadrl.models.init import init_model
    from spreadrl.models.tokenizer import default_corpus, train_tokenizer

    tokenizer = train_tokenizer(default_corpus(), vocab_size=512)
    overrides = {"vocab_size": vocab_size} if vocab_size > len(tokenizer) else None
    return str(init_model(preset, tokenizer, root / preset, overrides=overrides))


def bench_rollout(
    model: str = typer.Option(None, help="Model folder (default: a tiny random Qwen3)."),
    tasks: str = typer.Option("builtin:demo-test", help="Task set."),
    episodes: int = typer.Option(32, help="Episodes per measurement."),
    max_new_tokens: int = typer.Option(64, help="Max new tokens per turn."),
    max_turns: int = typer.Option(2),
    device: str = typer.Option("cpu"),
    preset: str = typer.Option("write_range", help="Tool preset or list for the episodes."),
) -> None:
    """Tokens/s and episodes/s of batched vs sequential generation, and the tools/generation split.

    Examples:

      spreadrl bench rollout --episodes 16

      spreadrl bench rollout --device cuda --episodes 64 --max-new-tokens 256
    """
    from rich.console import Console
    from rich.table import Table

    from spreadrl.data.sources import resolve_tasks
    from spreadrl.env.factory import make_env_pool
    from spreadrl.models.init import load_model_and_tokenizer
    from spreadrl.rollout.chat import EpisodeChat
    from spreadrl.rollout.config import RolloutConfig
    from spreadrl.rollout.hf_policy import HFPolicy
    from spreadrl.rollout.runner import EpisodeJob, RunValues, run_episodes

    console = Console()
    with tempfile.TemporaryDirectory(prefix="spreadrl-bench-") as tmp:
        path = model or _random_model(Path(tmp))
        lm, tok = load_model_and_tokenizer(path, device=device)
        task_set = resolve_tasks(tasks)
        pairs = task_set.episodes()
        jobs = [EpisodeJob(*pairs[i % len(pairs)], sample=i // len(pairs)) for i in range(episodes)]
        cfg = RolloutConfig(
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens_per_turn=max_new_tokens,
            max_turns=max_turns,
            max_response_tokens=max_new_tokens * max_turns + 256,
        )
        run, chat = RunValues(seed=0), EpisodeChat.of(tok)
        table = Table(
            "mode", "episodes/s", "generated tok/s", "generate s", "tools s", "tools share"
        )
        rates = {}
        with make_env_pool(preset, workers=0) as pool:
            run_episodes(HFPolicy(lm, tok), pool, jobs[:2], cfg, chat, run=run)  # warm up
            for label, batch in (("batched", episodes), ("one at a time", 1)):
                policy = HFPolicy(lm, tok, max_batch_size=batch)
                start = time.perf_counter()
                gen = tools = 0.0
                tokens = 0
                for i in range(0, len(jobs), batch):
                    out = run_episodes(policy, pool, jobs[i : i + batch], cfg, chat, run=run)
                    gen += out.timings["generate_s"]
                    tools += (
                        out.timings["tools_s"] + out.timings["reset_s"] + out.timings["finish_s"]
                    )
                    tokens += sum(t.generated_tokens for t in out.trajectories)
                elapsed = time.perf_counter() - start
                rates[label] = tokens / max(gen, 1e-9)
                table.add_row(
                    label,
                    f"{len(jobs) / elapsed:.2f}",
                    f"{rates[label]:.0f}",
                    f"{gen:.2f}",
                    f"{tools:.2f}",
                    f"{100 * tools / elapsed:.0f}%",
                )
    console.print(table)
    console.print(
        f"batched / one-at-a-time generation throughput: "
        f"{rates['batched'] / max(rates['one at a time'], 1e-9):.1f}x "
        f"({episodes} episodes, model {model or 'tiny random'}, device {device})"
    )
