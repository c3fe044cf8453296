"""Off a terminal every printed path stays whole on one line.

A path printed into a pipe, a log file or CI's log must survive ``grep`` and
copy-paste: the CLI's console soft-wraps when its stream is not a terminal
(git, pip and pytest never hard-wrap there either). Each command that prints
a path runs here with output captured (not a terminal) under a folder whose
path is over 120 characters, so an 80-column wrap would cut every one of them.
The demo's paths are checked by tests/test_demo_smoke.py, on the same terms.

The commands run at their smallest: four synthesized tasks, one SFT step, one
GRPO step of two episodes, the oracle backend for evaluation.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spreadrl.cli.console import cli_console
from spreadrl.cli.main import app

FOLDER = "a-folder-name-long-enough-that-an-eighty-column-wrap-would-cut-every-path-under-it"
SLICE = Path(__file__).resolve().parents[1] / "fixtures" / "recalc_corpus"


def run(*args: object) -> str:
    """Run ``spreadrl args`` with output captured; its output (stdout and stderr)."""
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def assert_whole(output: str, path: Path) -> None:
    """``path`` appears whole within one line of ``output``."""
    assert len(str(path)) > 120, path  # so a wrap at 80 (or 120) columns would cut it
    lines = output.splitlines()
    assert any(str(path) in line for line in lines), output


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("paths") / FOLDER / FOLDER  # over 120 for any basetemp
    folder.mkdir(parents=True)
    return folder


@pytest.fixture(scope="module")
def tasks(root: Path) -> tuple[Path, str]:
    out = root / "tasks"
    return out, run("data", "synth", "--out", out, "--n", 4, "--seed", 0)


@pytest.fixture(scope="module")
def sft_rows(root: Path, tasks: tuple[Path, str], tiny_model_dir: Path) -> tuple[Path, str]:
    out = root / "sft.jsonl"
    args = ["data", "sft-build", "--config", "tiny-cpu", "--tasks", tasks[0], "--out", out]
    return out, run(*args, "--model", tiny_model_dir)


@pytest.fixture(scope="module")
def sft_run(root: Path, sft_rows: tuple[Path, str], tiny_model_dir: Path) -> tuple[Path, str]:
    out = root / "sft"
    overrides = [f"model.name_or_path={tiny_model_dir}", f"data.path={sft_rows[0]}"]
    overrides += [f"output_dir={out}", "steps=1", "batch_size=2"]
    return out, run("sft", "--config", "sft-tiny-cpu", *overrides)


@pytest.fixture(scope="module")
def evaluated(root: Path, tasks: tuple[Path, str]) -> tuple[Path, str]:
    out = root / "eval"
    return out, run("eval", "--backend", "oracle", "--tasks", tasks[0], "--out", out)


def test_data_synth(tasks):
    assert_whole(tasks[1], tasks[0])


def test_data_split(root, tasks):
    out = root / "splits"
    assert_whole(run("data", "split", tasks[0], "--out", out), out)


def test_data_filter(tasks):
    assert_whole(run("data", "filter", tasks[0], "--dry-run"), tasks[0])


def test_data_import(root, tasks):
    out = root / "imported"
    output = run("data", "import", tasks[0], "--from", "spreadsheetbench", "--out", out)
    assert_whole(output, out)


def test_data_sft_build(sft_rows):
    assert_whole(sft_rows[1], sft_rows[0])


def test_model_init(root):
    out = root / "model"
    assert_whole(run("model", "init", "--out", out, "--vocab-size", 300), out)


def test_sft(sft_run):
    assert_whole(sft_run[1], sft_run[0])


def test_grpo(root, tasks, tiny_model_dir):
    out = root / "grpo"
    overrides = [f"model.name_or_path={tiny_model_dir}", f"data.train_tasks={tasks[0]}"]
    overrides += [f"output_dir={out}", "steps=1", "rollout.group_size=2"]
    overrides += ["rollout.prompts_per_step=1", "rollout.max_new_tokens_per_turn=4"]
    overrides += ["rollout.max_response_tokens=8", "rollout.max_turns=1"]
    assert_whole(run("grpo", "--config", "tiny-cpu", *overrides), out)


def test_eval(evaluated):
    assert_whole(evaluated[1], evaluated[0])


def test_merge(root, sft_run):
    out = root / "merged"
    assert_whole(run("merge", "--checkpoint", sft_run[0] / "final", "--out", out), out)


def test_check(root, tasks, evaluated):
    report = root / "check.json"
    outputs = evaluated[0] / "outputs"
    output = run("check", tasks[0], "--outputs", outputs, "--json", report)
    assert_whole(output, report)


def test_bench(root):
    report = root / "fidelity.json"
    output = run("bench", "recalc-fidelity", SLICE, "--engine", "ironcalc", "--json", report)
    assert_whole(output, report)


@pytest.mark.parametrize("terminal", [True, False])
def test_a_terminal_still_wraps_and_a_pipe_does_not(monkeypatch, terminal):
    monkeypatch.setenv("TTY_COMPATIBLE", "1" if terminal else "0")  # rich: is it a terminal
    monkeypatch.setenv("COLUMNS", "80")
    console = cli_console()
    console.file = buffer = io.StringIO()
    message = "wrote 3 conversations to " + "/a-long-folder" * 12 + "/sft.jsonl"
    console.print(message, markup=False, highlight=False)
    lines = buffer.getvalue().splitlines()
    if terminal:  # wrapped for reading, at the terminal's width
        assert len(lines) > 1 and max(len(line) for line in lines) <= 80, lines
    else:
        assert lines == [message]
