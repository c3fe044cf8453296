"""A GRPO step survives an agent whose code writes a zip bomb as its workbook (issue 38).

``spreadrl grpo`` on the tiny recipe with the spreadsheet-rl tools and one real
environment worker. The rollout policy is scripted (the trained model's own
weights still take the update): in each group one sample runs code that
rewrites ``data/data.xlsx`` as a deflate bomb (8 MiB of blanks in 8 KiB), the
other answers at once on a task whose input is already its answer. The step
must complete; the bomb's episode is scored 0 with the end reason
``workbook_refused``, and the step's metrics count it.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from spreadrl.cli.main import main
from spreadrl.data.builtin import builtin_tasks
from spreadrl.rollout import engines
from spreadrl.rollout.engines.hf import HFEngine
from spreadrl.rollout.types import PolicyTurn

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "tiny-cpu.yaml"

BOMB_CODE = """
import zipfile
path = "data/data.xlsx"
with zipfile.ZipFile(path) as src:
    parts = {i.filename: src.read(i) for i in src.infolist()}
sheet = next(n for n in parts if n.startswith("xl/worksheets/"))
parts[sheet] = b"<worksheet>" + b" " * (8 << 20) + b"</worksheet>"
with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
    for name, data in parts.items():
        out.writestr(name, data)
"""


class BombOrAnswer:
    """Even samples call code_interpreter with BOMB_CODE, odd ones answer; later turns answer."""

    token_level = True
    streaming = False
    seeds_per_context = False
    max_context_tokens = 0

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.first_turns = 0

    def act(self, contexts, params, *, seeds=None):
        turns = []
        for _ in contexts:
            call = {"name": "code_interpreter", "arguments": {"code": BOMB_CODE}}
            bomb = self.first_turns % 2 == 0
            self.first_turns += 1
            text = f"<tool_call>\n{json.dumps(call)}\n</tool_call>" if bomb else "Done."
            ids = self.tokenizer.encode(text + "<|im_end|>", add_special_tokens=False)
            turns.append(PolicyTurn(text=text, token_ids=ids, logprobs=[-1.0] * len(ids)))
        return turns


def _solved_task(root: Path) -> Path:
    """One demo-train task whose input workbooks are its answers."""
    source = builtin_tasks("demo-train")
    entry = json.loads((source.root / "dataset.json").read_text())[0]
    folder = root / entry["spreadsheet_path"]
    shutil.copytree(source.root / entry["spreadsheet_path"], folder)
    for answer in folder.glob("*_answer.xlsx"):
        shutil.copy(answer, answer.with_name(answer.name.replace("_answer", "_input")))
    (root / "dataset.json").write_text(json.dumps([entry]))
    return root


class BombEngine(HFEngine):
    """The hf engine (the trainer's model, gathered) sampling with :class:`BombOrAnswer`."""

    def start(self, model, tokenizer):
        self._policy = BombOrAnswer(tokenizer)
        return []


@pytest.mark.slow
def test_a_grpo_step_survives_an_agent_that_writes_a_bomb(tiny_model_dir, tmp_path, monkeypatch):
    tasks = _solved_task(tmp_path / "tasks")
    monkeypatch.setitem(engines.ENGINES, "bomb", BombEngine)  # rollout.backend=bomb below
    out = tmp_path / "run"
    args = ["spreadrl", "--verbose", "grpo", "--config", str(RECIPE)]
    args += [
        f"model.name_or_path={tiny_model_dir}",
        f"data.train_tasks={tasks}",
        f"output_dir={out}",
        "steps=1",
        "rollout.backend=bomb",
        "rollout.group_size=2",
        "rollout.prompts_per_step=1",
        "rollout.max_turns=3",
        "rollout.max_new_tokens_per_turn=1024",  # room for the scripted call
        "rollout.max_response_tokens=4096",
        "rollout.concurrency=1",  # a real environment worker, under its limits
        "env.tools=spreadsheet-rl",
        "env.sandbox_mode=rlimit",
        "sampling.mode=keep",
        "logging.trajectories_per_step=2",
    ]
    monkeypatch.setattr(sys, "argv", args)
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code in (0, None)

    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1]  # the step completed
    assert metrics[0]["workbook_refused"] == 1.0 and metrics[0]["pass_rate"] == 0.5
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    bombed = [r for r in rows if r["stop_reason"] == "workbook_refused"]
    assert len(bombed) == 1 and bombed[0]["env_reward"] == 0.0 and not bombed[0]["passed"]
    observation = next(m["content"] for m in bombed[0]["messages"] if m["role"] == "tool")
    assert "workbook refused" in observation and "compressed" in observation
    assert "workbook refused" in bombed[0]["mismatches"][0]["reason"]
    answered = [r for r in rows if r["stop_reason"] == "answered"]
    assert len(answered) == 1 and answered[0]["passed"]
