"""GRPO on the real spreadsheet gym from a shipped recipe: real pool, workbooks and checker.

``spreadrl grpo --config configs/tiny-cpu.yaml`` with dotted overrides for the
sizes, on two built-in tasks copied to a folder. One task's input workbook is
its answer workbook (solved before the agent starts), so the real checker
passes its episodes and fails the other's, whatever the random tiny model
writes: the test can tell that the rewards the trainer logs are the checker's
verdicts. Rewards must also differ within a group, or every advantage is 0
and the update is a no-op: the tiny model is given a known stop rate (about 1
token in 7 ends the turn) so response lengths vary, and overlong shaping from
the first token turns the lengths into different rewards.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import spreadrl.env.spreadsheet.checker as checker
from spreadrl.cli.main import main
from spreadrl.data.builtin import builtin_tasks
from spreadrl.models.init import load_model_and_tokenizer
from spreadrl.rollout.engines.hf import stop_token_ids

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "tiny-cpu.yaml"
STEPS, GROUP, PROMPTS = 2, 4, 2


def _two_tasks(root: Path) -> tuple[Path, str, str]:
    """Two demo-train tasks in ``root``; the first one's input is already its answer."""
    source = builtin_tasks("demo-train")
    entries = json.loads((source.root / "dataset.json").read_text())[:2]
    for entry in entries:
        shutil.copytree(source.root / entry["spreadsheet_path"], root / entry["spreadsheet_path"])
    (root / "dataset.json").write_text(json.dumps(entries))
    solved, unsolved = entries[0]["id"], entries[1]["id"]
    folder = root / entries[0]["spreadsheet_path"]
    for answer in folder.glob("*_answer.xlsx"):
        shutil.copy(answer, answer.with_name(answer.name.replace("_answer", "_input")))
    return root, solved, unsolved


def _stops_often(source: Path, out: Path) -> Path:
    """A copy of the tiny model whose end-of-turn token has probability ~0.14 at every step.

    Embedding column 0 set to 10.0 for every token dominates the residual stream
    (the other entries have std 0.02, and each layer adds a few units), so the
    final RMSNorm output is ~sqrt(192) = 13.9 on dimension 0 (13.6 measured) and
    small elsewhere. With tied embeddings the logits are E_v . x: a shift common
    to all tokens, plus 0.33 * 13.6 = 4.5 for the stop token, whose probability
    is then e^4.5 / (e^4.5 + 511) = 0.14 against a near-uniform rest.
    """
    model, tokenizer = load_model_and_tokenizer(str(source))
    stop = stop_token_ids(tokenizer)[0]
    with torch.no_grad():
        embedding = model.get_input_embeddings().weight
        embedding[:, 0] = 10.0
        embedding[stop, 0] += 0.33
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.mark.slow
def test_grpo_smoke_on_the_real_gym(tiny_model_dir, tmp_path, monkeypatch, capsys):
    tasks, solved, unsolved = _two_tasks(tmp_path / "tasks")
    model_dir = _stops_often(tiny_model_dir, tmp_path / "model")
    verdicts: list[tuple[str, bool]] = []  # (task folder, passed) per checker call
    real_check = checker.check_workbook

    def spy(output, answer, position, **kwargs):
        result = real_check(output, answer, position, **kwargs)
        verdicts.append((Path(answer).parent.name, result.passed))
        return result

    monkeypatch.setattr(checker, "check_workbook", spy)
    out = tmp_path / "run"
    args = ["spreadrl", "--verbose", "grpo", "--config", str(RECIPE)]
    args += [
        f"model.name_or_path={model_dir}",
        f"data.train_tasks={tasks}",
        f"output_dir={out}",
        f"steps={STEPS}",
        f"rollout.group_size={GROUP}",
        f"rollout.prompts_per_step={PROMPTS}",
        "rollout.max_new_tokens_per_turn=16",
        "rollout.max_response_tokens=48",
        "rollout.concurrency=0",  # in-process envs, so the spy sees every check
        "reward.overlong=true",
        "reward.overlong_buffer=47",  # lengths 2..48 all cost something, each its own
        "sampling.mode=keep",
        "optim.lr=1e-3",
    ]
    monkeypatch.setattr(sys, "argv", args)
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code in (0, None), capsys.readouterr().err

    # every episode was scored by the real checker on the real workbooks
    assert len(verdicts) == STEPS * GROUP * PROMPTS
    assert {name for name, _ in verdicts} == {solved, unsolved}
    assert all(passed == (name == solved) for name, passed in verdicts)

    # the rewards the trainer logged are the checker's verdicts (TCR: +1 pass, -1 fail)
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, STEPS + 1))
    per_step = GROUP * PROMPTS
    for step, m in enumerate(metrics):
        step_verdicts = [p for _, p in verdicts[step * per_step : (step + 1) * per_step]]
        passes = sum(step_verdicts)
        assert m["pass_rate"] == pytest.approx(passes / per_step)
        assert m["reward/tcr"] == pytest.approx((passes - (per_step - passes)) / per_step)
        assert m["trained_sequences"] == per_step

    # and the update moved the weights: some group had different rewards (a group's four
    # lengths are all equal with probability sum_L p_L^4 < 1e-3; all four groups: < 1e-12)
    before = load_file(str(model_dir / "model.safetensors"))
    after = load_file(str(out / "final" / "model.safetensors"))
    assert before.keys() == after.keys()
    moved = [k for k in before if not torch.equal(before[k], after[k])]
    assert len(moved) > len(before) // 2, moved
