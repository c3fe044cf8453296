"""`spreadrl bench env`: Spreadsheet Gym latency and throughput.

Replays the built-in suite's reference solutions (per-tool latency, scoring
time, episodes per second at concurrency 1 and C through the worker-process
EnvPool), and times three fixed probes: a trivial code_interpreter call
(sandbox overhead), non-code tool calls on a 1,000-cell workbook, and
recalculate_and_read of a 10,000-formula workbook. Figures go to
docs/benchmarks.md; nothing here is a test.
"""

from __future__ import annotations

import functools
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openpyxl
from openpyxl.worksheet.worksheet import Worksheet

from spreadrl.data.builtin import builtin_tasks
from spreadrl.data.task import Task, TaskCase
from spreadrl.env.config import EnvConfig
from spreadrl.env.pool import EnvPool
from spreadrl.env.sandbox import bwrap_problem
from spreadrl.env.spreadsheet.episode import SpreadsheetEnv
from spreadrl.env.types import ToolCall
from spreadrl.errors import SpreadrlError

Episode = tuple[Task, int, list[dict[str, Any]]]
"""A replayed episode: the task, its case index and the reference solution's tool calls."""


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)] * 1000 if ordered else 0.0


def _one_sheet_task(root: Path, name: str, fill: Callable[[Worksheet], None]) -> Task:
    """A throwaway Task whose input is built by ``fill(ws)`` (answer = input)."""
    folder = root / name
    folder.mkdir(parents=True)
    wb = openpyxl.Workbook()
    fill(wb.active)
    wb.save(folder / f"1_{name}_input.xlsx")
    wb.save(folder / f"1_{name}_answer.xlsx")
    case = TaskCase(1, folder / f"1_{name}_input.xlsx", folder / f"1_{name}_answer.xlsx")
    return Task(name, "bench", "Cell-Level Manipulation", "A1", (case,), folder)


def _cells_1000(ws: Worksheet) -> None:
    ws.append([f"col{c}" for c in range(1, 11)])
    for r in range(2, 101):
        ws.append([r * c if c % 3 else f"item {r}-{c}" for c in range(1, 11)])


def _formulas_10000(ws: Worksheet) -> None:
    for r in range(1, 2001):
        ws.cell(r, 1, r)
        ws.cell(r, 2, f"=A{r}*2")
        ws.cell(r, 3, f"=IF(B{r}>100,B{r}-1,B{r}+1)")
        ws.cell(r, 4, f"=ROUND(C{r}/3,2)")
        ws.cell(r, 5, f'=TEXT(A{r},"0000")&"-x"')
        ws.cell(r, 6, f"=SUM($A$1:A{r})")


NON_CODE_CALLS = [
    {"name": "inspect_range", "arguments": {"ranges": ["A1:J20"]}},
    {"name": "list_sheets", "arguments": {}},
    {"name": "find_cells", "arguments": {"query": "item 5"}},
    {"name": "write_range", "arguments": {"range": "K2:K11", "values": 1}},
    {"name": "fill_formula", "arguments": {"source": "L2", "target": "L3:L101"}},
    {"name": "format_range", "arguments": {"range": "A1:J1", "bold": True}},
    {"name": "inspect_range", "arguments": {"ranges": ["A1:J100"], "mode": "summary"}},
    {"name": "clear_range", "arguments": {"range": "K2:K11"}},
]


def _probes(root: Path, repeats: int) -> dict[str, Any]:
    config = EnvConfig(max_tool_calls=100_000)
    out: dict[str, Any] = {}
    with SpreadsheetEnv(config) as env:
        env.reset(_one_sheet_task(root, "cells1000", _cells_1000))
        env.step({"name": "write_range", "arguments": {"range": "L2", "values": "=A2*2"}})
        per_tool: dict[str, list[float]] = {}
        for _ in range(repeats):
            for call in NON_CODE_CALLS:
                step = env.step(call)
                assert step.ok, step.observation
                per_tool.setdefault(call["name"], []).append(step.info["duration_s"])
        every = [t for ts in per_tool.values() for t in ts]
        out["noncode_p50_ms"] = _pct(every, 0.5)
        out["noncode_p95_ms"] = _pct(every, 0.95)
        out["noncode_per_tool_p50_ms"] = {k: _pct(v, 0.5) for k, v in per_tool.items()}
        code, gym_part = [], []
        for _ in range(repeats):
            before = env.ctx.cache.get("sandbox_s", 0.0)
            step = env.step({"name": "code_interpreter", "arguments": {"code": "print(1)"}})
            assert step.ok and "1" in step.observation, step.observation
            code.append(step.info["duration_s"])
            gym_part.append(step.info["duration_s"] - (env.ctx.cache["sandbox_s"] - before))
        out["code_print1_p50_ms"] = _pct(code, 0.5)
        out["code_gym_part_p50_ms"] = _pct(gym_part, 0.5)
        out["code_sandbox_backend"] = _sandbox_backend()
    with SpreadsheetEnv(config) as env:
        env.reset(_one_sheet_task(root, "formulas10000", _formulas_10000))
        recalc = []
        for i in range(3):
            env.step({"name": "write_range", "arguments": {"range": "A1", "values": i + 1}})
            step = env.step({"name": "recalculate_and_read", "arguments": {"ranges": ["F1:F5"]}})
            assert step.ok, step.observation
            recalc.append(step.info["duration_s"])
        out["recalc_10k_median_s"] = statistics.median(recalc)
    return out


def _sandbox_backend() -> str:
    return "bwrap" if bwrap_problem() is None else "rlimit"


def _replay_inline(episodes: list[Episode]) -> dict[str, Any]:
    per_tool: dict[str, list[float]] = {}
    finish, rewards = [], []
    start = time.perf_counter()
    for task, case, calls in episodes:
        with SpreadsheetEnv(EnvConfig(max_tool_calls=1000)) as env:
            env.reset(task, case)
            for call in calls:
                step = env.step(call)
                per_tool.setdefault(call["name"], []).append(step.info["duration_s"])
            t0 = time.perf_counter()
            rewards.append(env.finish().reward)
            finish.append(time.perf_counter() - t0)
    wall = time.perf_counter() - start
    return {"per_tool": per_tool, "finish": finish, "rewards": rewards, "wall_s": wall}


def _replay_pool(episodes: list[Episode], workers: int) -> tuple[float, list[float]]:
    """Episodes/s through EnvPool with ``workers`` processes and as many driver threads."""
    factory = functools.partial(SpreadsheetEnv, EnvConfig(max_tool_calls=1000))
    rewards: list[float] = []
    queue = list(enumerate(episodes))
    lock = threading.Lock()

    with EnvPool(factory, num_workers=workers) as pool:
        # warm every worker (imports) before timing
        warm = [pool.reset(("warm", i), *episodes[0][:2]) for i in range(workers)]
        for i, fut in enumerate(warm):
            fut.result()
            pool.finish(("warm", i)).result()

        def drive() -> None:
            while True:
                with lock:
                    if not queue:
                        return
                    index, (task, case, calls) = queue.pop(0)
                pool.reset(index, task, case).result()
                for call in calls:
                    pool.step(index, ToolCall.from_json(call)).result()
                reward = pool.finish(index).result().reward
                with lock:
                    rewards.append(reward)

        start = time.perf_counter()
        threads = [threading.Thread(target=drive) for _ in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start
    return len(episodes) / wall, rewards


def env_rows(
    episodes: int = 40, concurrency: int = 2, split: str = "test", repeats: int = 20
) -> tuple[str, list[tuple[str, str]]]:
    """Per-tool latency, recalc and sandbox time, and episodes/s at concurrency 1 and C:
    the table's title and its (measure, value) rows."""
    suite = [
        (task, case.index, case.load_solution())
        for task in builtin_tasks(split)
        for case in task.cases
        if case.solution_path is not None
    ]
    if not suite:
        raise SpreadrlError(f"built-in split {split!r} has no reference solutions to replay")
    chosen = [suite[i % len(suite)] for i in range(episodes)]
    with tempfile.TemporaryDirectory(prefix="spreadrl-bench-env-") as tmp:
        probes = _probes(Path(tmp), repeats)
    inline = _replay_inline(chosen)
    eps1, rewards1 = _replay_pool(chosen, 1)
    epsc, rewardsc = _replay_pool(chosen, concurrency)

    title = f"spreadrl bench env ({episodes} episodes of {split!r}, C={concurrency})"
    rows: list[tuple[str, str]] = []
    for name, times in sorted(inline["per_tool"].items()):
        rows.append(
            (
                f"{name} in solutions (n={len(times)})",
                f"p50 {_pct(times, 0.5):.1f} ms, p95 {_pct(times, 0.95):.1f} ms",
            )
        )
    rows.append(
        (
            "finish (save + recalc + check)",
            f"p50 {_pct(inline['finish'], 0.5):.1f} ms, p95 {_pct(inline['finish'], 0.95):.1f} ms",
        )
    )
    passed = sum(r == 1.0 for r in inline["rewards"])
    rows.append(("reference solutions passing", f"{passed}/{len(chosen)}"))
    rows.append(
        (
            "non-code tool call, 1,000-cell workbook",
            f"p50 {probes['noncode_p50_ms']:.2f} ms, p95 {probes['noncode_p95_ms']:.2f} ms",
        )
    )
    for name, ms in probes["noncode_per_tool_p50_ms"].items():
        rows.append((f"  {name} p50", f"{ms:.2f} ms"))
    rows.append(
        (
            f"code_interpreter print(1) ({probes['code_sandbox_backend']})",
            f"p50 {probes['code_print1_p50_ms']:.1f} ms "
            f"(gym's own part {probes['code_gym_part_p50_ms']:.2f} ms)",
        )
    )
    rows.append(("recalculate_and_read, 10,000 formulas", f"{probes['recalc_10k_median_s']:.3f} s"))
    rows.append(("episodes/s inline (no pool)", f"{len(chosen) / inline['wall_s']:.2f}"))
    rows.append(("episodes/s EnvPool, 1 worker", f"{eps1:.2f}"))
    rows.append((f"episodes/s EnvPool, {concurrency} workers", f"{epsc:.2f}"))
    rows.append(("speed-up C vs 1", f"{epsc / eps1:.2f}x"))
    bad = sum(r != 1.0 for r in rewards1 + rewardsc)
    if bad:
        rows.append(("pool episodes not passing", str(bad)))
    return title, rows
