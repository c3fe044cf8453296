"""Generation throughput of the hf backend (`spreadrl bench rollout`).

Two measurements:

- :func:`episode_rates`: real episodes (the gym, the checker) on the built-in
  demo tasks, batched vs one at a time, so the time split between generation
  and tools is the one training sees;
- :func:`against_generate`: spreadrl's hf rollout (:class:`HFPolicy`, one
  seeded stream per row, the sampled log-probs recorded, a shared prefill per
  group) beside transformers' own ``generate`` (plain sampling) on the same
  model, batch, prompts and lengths, alternated call by call so both see the
  same machine load. Neither stops early: no stop token can be sampled, so both
  decode exactly ``new_tokens`` per row and the tokens/s compare equal work.

Without a model folder a random Qwen3 of a preset is built (its outputs are
noise, but the token counts and timings are real).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def random_model(root: Path, preset: str = "tiny", vocab_size: int = 0) -> str:
    """A random model of ``preset`` (its vocabulary padded to ``vocab_size`` if given)."""
    from spreadrl.models.init import init_model
    from spreadrl.models.tokenizer import default_corpus, train_tokenizer

    tokenizer = train_tokenizer(default_corpus(), vocab_size=512)
    overrides = {"vocab_size": vocab_size} if vocab_size > len(tokenizer) else None
    return str(init_model(preset, tokenizer, root / preset, overrides=overrides))


def episode_rates(
    model: str | None = None,
    tasks: str = "builtin:demo-test",
    episodes: int = 32,
    max_new_tokens: int = 64,
    max_turns: int = 2,
    device: str = "cpu",
    preset: str = "write_range",
) -> tuple[list[tuple[str, ...]], dict[str, float]]:
    """Tokens/s and episodes/s of batched vs sequential generation, and the tools/generation
    split: rows (mode, episodes/s, tok/s, generate s, tools s, tools share) and the rates."""
    from spreadrl.data.sources import resolve_tasks
    from spreadrl.env.factory import make_env_pool
    from spreadrl.models.init import load_model_and_tokenizer
    from spreadrl.rollout.chat import EpisodeChat
    from spreadrl.rollout.config import RolloutConfig
    from spreadrl.rollout.engines.hf import HFPolicy
    from spreadrl.rollout.runner import EpisodeJob, RunValues, run_episodes

    rows: list[tuple[str, ...]] = []
    rates: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="spreadrl-bench-") as tmp:
        path = model or random_model(Path(tmp))
        lm, tok = load_model_and_tokenizer(path, device=device)
        pairs = resolve_tasks(tasks).episodes()
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
        with make_env_pool(preset, workers=0) as pool:
            run_episodes(HFPolicy(lm, tok), pool, jobs[:2], cfg, chat, run=run)  # warm up
            for label, batch in (("batched", episodes), ("one at a time", 1)):
                policy = HFPolicy(lm, tok, max_batch_size=batch)
                start = time.perf_counter()
                gen = tools = 0.0
                tokens = 0
                for i in range(0, len(jobs), batch):
                    out = run_episodes(policy, pool, jobs[i : i + batch], cfg, chat, run=run)
                    timings = out.timings
                    gen += timings["generate_s"]
                    tools += timings["tools_s"] + timings["reset_s"] + timings["finish_s"]
                    tokens += sum(t.generated_tokens for t in out.trajectories)
                elapsed = time.perf_counter() - start
                rates[label] = tokens / max(gen, 1e-9)
                rows.append(
                    (
                        label,
                        f"{len(jobs) / elapsed:.2f}",
                        f"{rates[label]:.0f}",
                        f"{gen:.2f}",
                        f"{tools:.2f}",
                        f"{100 * tools / elapsed:.0f}%",
                    )
                )
    return rows, rates


def _contexts(vocab: int, batch: int, group: int, prompt_tokens: int, seed: int) -> list[list[int]]:
    """``batch // group`` random prompts of ``prompt_tokens`` tokens, each ``group`` times in a row
    (a GRPO step's shape: G rollouts of every prompt)."""
    g = torch.Generator().manual_seed(seed)
    distinct = [
        torch.randint(0, vocab, (prompt_tokens,), generator=g).tolist()
        for _ in range(max(1, batch // group))
    ]
    return [distinct[i // group % len(distinct)] for i in range(batch)]


def _time(fn: Callable[[], Any], cuda: bool) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) of one call. On a shared CPU the CPU
    seconds measure the work itself: another job's load stretches the wall clock only."""
    if cuda:
        torch.cuda.synchronize()
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start, time.process_time() - cpu


def against_generate(
    model: str | None = None,
    preset: str = "tiny",
    batch: int = 16,
    group: int = 4,
    prompt_tokens: int = 256,
    new_tokens: int = 64,
    repeats: int = 3,
    device: str = "cpu",
    variants: tuple[str, ...] = ("default",),
    vocab_size: int = 0,
    threads: int = 0,
) -> dict[str, Any]:
    """spreadrl's hf rollout beside ``model.generate`` on the same inputs (module docstring).

    ``variants``: the :class:`HFPolicy` settings measured (``default``; ``static``: a
    static KV cache, compiled on CUDA: rollout.hf_static_cache). ``threads``: torch's CPU
    threads (0: its default). Returns per-call wall and CPU seconds, tokens/s (wall, and
    per CPU second) and each run's ratios to ``generate``."""
    from spreadrl.models.init import load_model_and_tokenizer
    from spreadrl.rollout.engines.hf import HFPolicy
    from spreadrl.rollout.types import SamplingParams

    if threads > 0:
        torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory(prefix="spreadrl-bench-") as tmp:
        path = model or random_model(Path(tmp), preset, vocab_size)
        lm, tok = load_model_and_tokenizer(path, device=device)
    vocab = lm.config.vocab_size
    no_stop = [vocab]  # an id no row can sample: every row decodes new_tokens
    contexts = _contexts(vocab, batch, group, prompt_tokens, seed=0)
    params = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=new_tokens)
    seeds = list(range(batch))
    ids = torch.tensor(contexts, device=lm.device)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0

    def generate() -> None:
        with torch.no_grad():
            lm.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                do_sample=True,
                max_new_tokens=new_tokens,
                eos_token_id=no_stop,
                pad_token_id=pad,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
            )

    runs: dict[str, Callable[[], Any]] = {"transformers generate": generate}
    for variant in variants:
        policy = HFPolicy(lm, tok, max_batch_size=batch, static_cache=variant == "static")
        policy.stop_ids = no_stop
        runs[f"spreadrl hf ({variant})"] = lambda p=policy: p.act(contexts, params, seeds=seeds)
    cuda = str(device).startswith("cuda")
    for fn in runs.values():  # warm up: allocator, kernels, a compiled graph
        fn()
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(repeats):
        order = list(runs) if r % 2 == 0 else list(runs)[::-1]
        for name in order:
            wall, used = _time(runs[name], cuda)
            seconds[name].append(wall)
            cpu[name].append(used)
    tokens = batch * new_tokens
    result: dict[str, Any] = {
        "shape": {
            "batch": batch,
            "group": group,
            "prompt_tokens": prompt_tokens,
            "new_tokens": new_tokens,
            "repeats": repeats,
            "device": torch.cuda.get_device_name(device) if cuda else "cpu",
            "model": model or f"random {preset}",
            "vocab": vocab,
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
        },
        "runs": {},
    }
    base = tokens / statistics.median(seconds["transformers generate"])
    base_cpu = tokens / statistics.median(cpu["transformers generate"])
    for name, values in seconds.items():
        rate = tokens / statistics.median(values)
        per_cpu = tokens / statistics.median(cpu[name])
        result["runs"][name] = {
            "seconds": values,
            "cpu_seconds": cpu[name],
            "tok_s": rate,
            "vs_generate": rate / base,
            "tok_per_cpu_s": per_cpu,
            "vs_generate_cpu": per_cpu / base_cpu,
        }
    return result
