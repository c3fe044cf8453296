"""A demo-sized run folder built in code for the viewer tests: real gym episodes, real reports."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from spreadrl.env.factory import make_env_pool
from spreadrl.eval.report import build_report
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engines.scripted import format_tool_call
from spreadrl.rollout.runner import EpisodeJob, run_episodes
from spreadrl.rollout.types import PolicyTurn
from spreadrl.train.step_metrics import save_step_trajectories
from tests.env.spreadsheet.gym_helpers import make_task, revenue_answer


class ScriptPolicy:
    """Message-level policy: sample s follows script s % len(scripts)."""

    token_level = False

    def __init__(self, scripts: list[list[str]]) -> None:
        self.scripts = scripts

    def act_messages(self, states, params):
        out = []
        for s in states:
            script = self.scripts[s.job.sample % len(self.scripts)]
            out.append(PolicyTurn(text=script[min(s.turns_taken, len(script) - 1)]))
        return out


REASONING = "Revenue is units times price: one formula per row, D2 to D6."
GOOD = [
    "I will look at the data first.\n"
    + format_tool_call("inspect_range", {"ranges": ["Sheet1!A1:C6"]}),
    f"<think>\n{REASONING}\n</think>\n\nNow the revenue column.\n"
    + format_tool_call(
        "write_range", {"range": "D2:D6", "values": [[f"=B{r}*C{r}"] for r in range(2, 7)]}
    ),
    "Done: D2:D6 hold Units*Price.",
]
BAD = [
    format_tool_call("write_range", {"range": "D2", "values": 99}),
    "Done.",
]


def build_run(root: Path, steps: int = 3, per_step: int = 4) -> Path:
    """root/grpo (metrics + trajectories + config), root/sft (metrics), root/eval-sft and
    root/eval-grpo (report + trajectories)."""
    (root / "tasks").mkdir(parents=True, exist_ok=True)
    task = make_task(root / "tasks", revenue_answer)
    with make_env_pool("full") as pool:
        trajs = run_episodes(
            ScriptPolicy([GOOD, BAD]),
            pool,
            [EpisodeJob(task, 1, s) for s in range(per_step)],
            RolloutConfig(),
        ).trajectories
    grpo = root / "grpo"
    grpo.mkdir(parents=True)
    with (grpo / "metrics.jsonl").open("w") as fh:
        for step in range(1, steps + 1):
            row = {
                "step": step,
                "reward_mean": 0.2 * step,
                "reward/outcome": 0.1 * step,
                "pass_rate": 0.25 * step,
                "response_tokens": 40 + step,
                "tool_calls": 1.5,
                "kl": 0.001 * step,
                "entropy": 2.0 - 0.1 * step,
                "clip_frac_low": 0.01,
                "clip_frac_high": 0.02,
                "generate_s": 1.0,
                "tools_s": 0.2,
                "update_s": 0.5,
                "step_s": 1.7,
                "tokens_per_s": 900.0 + 10 * step,  # a rate: ends "_s" too, not seconds
            }
            fh.write(json.dumps(row) + "\n")
    (grpo / "config.yaml").write_text("rollout:\n  group_size: 4\noptim:\n  lr: 5.0e-05\n")
    sft = root / "sft"  # a second training run, for overlaid curves
    sft.mkdir()
    rows = [
        {"step": s, "loss": 3.0 / s, "step_s": 0.8, "tokens_per_s": 1200.0} for s in (1, 2, 3, 4)
    ]
    (sft / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for step in range(1, steps + 1):
        save_step_trajectories(grpo, step, trajs, [{"outcome": t.reward} for t in trajs], per_step)
    for name, chosen in (("eval-sft", trajs[1::2]), ("eval-grpo", trajs)):
        folder = root / name
        folder.mkdir()
        report = build_report(chosen)
        if name == "eval-sft":  # stopped halfway, as a Ctrl-C'd eval leaves its report
            report.update(episodes_planned=len(trajs), complete=False)
        (folder / "report.json").write_text(json.dumps(report))
        if name == "eval-sft":  # clearly older, as the demo's eval before RL is
            old = time.time() - 60
            os.utime(folder / "report.json", (old, old))
        with (folder / "trajectories.jsonl").open("w") as fh:
            for t in chosen:
                fh.write(json.dumps(t.to_json(with_tokens=False), default=str) + "\n")
    return root
