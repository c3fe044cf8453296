"""Every path argument of every command: a folder, a missing path, a binary file and an
empty file where it expects something else each end in one `error:` line naming the path.

The commands' path options are found by walking the typer app (every parameter
annotated ``Path``), so a new one fails :func:`test_every_path_option_is_covered`
until it is given an invocation here. Each invocation is the command at its
cheapest, with ``{p}`` where the path goes (and ``{tasks}``, ``{task}``,
``{solution}``, ``{report}`` for a real task set, task, solution file and eval
report); ``in`` paths are read (all four mistakes are tried), ``dir_in`` folders
are read (an empty folder may be right), ``dir`` outputs are folders written (a
file in their place is the mistake), ``file`` outputs are files written (a
folder is).
"""

from __future__ import annotations

import types
import typing
from pathlib import Path

import pytest
import typer.main

from spreadrl.cli.main import app
from tests.cli.test_cli_mistakes import cli, one_error_line

CASES: dict[tuple[str, str], tuple[list[str], str]] = {
    ("check", "tasks_dir"): (["check", "{p}", "--outputs", "a-folder"], "in"),
    ("check", "output"): (["check", "{tasks}", "--task", "{task}", "--output", "{p}"], "graded"),
    ("check", "outputs"): (["check", "{tasks}", "--outputs", "{p}"], "dir_in"),
    ("check", "json_path"): (
        ["check", "{tasks}", "--outputs", "a-folder", "--json", "{p}"],
        "file",
    ),
    ("config show", "recipe"): (["config", "show", "{p}"], "in"),
    ("data builtin", "out"): (["data", "builtin", "--split", "demo-test", "--out", "{p}"], "dir"),
    ("data download", "cache"): (
        ["data", "download", "deepscaler", "--out", "o", "--cache", "{p}"],
        "dir",
    ),
    ("data download", "out"): (["data", "download", "deepscaler", "--out", "{p}"], "dir"),
    ("data filter", "tasks_dir"): (["data", "filter", "{p}", "--out", "o"], "in"),
    ("data filter", "out"): (["data", "filter", "{tasks}", "--out", "{p}"], "dir"),
    ("data filter", "pass_rates"): (
        ["data", "filter", "{tasks}", "--out", "o", "--pass-rates", "{p}"],
        "in",
    ),
    ("data filter", "tokenizer"): (
        [
            "data",
            "filter",
            "{tasks}",
            "--out",
            "o",
            "--tokenizer",
            "{p}",
            "--max-prompt-tokens",
            "99",
        ],
        "in",
    ),
    ("data import", "src"): (
        ["data", "import", "{p}", "--from", "spreadsheetbench", "--out", "o"],
        "in",
    ),
    ("data import", "out"): (
        ["data", "import", "a-folder", "--from", "spreadsheetbench", "--out", "{p}"],
        "dir",
    ),
    ("data import", "workbooks"): (
        [
            "data",
            "import",
            "a-folder",
            "--from",
            "spreadsheet-rl",
            "--out",
            "o",
            "--workbooks",
            "{p}",
        ],
        "in",
    ),
    ("data info", "tasks_dir"): (["data", "info", "{p}"], "in"),
    ("data sft-build", "out"): (
        ["data", "sft-build", "--tasks", "builtin:demo-test", "--out", "{p}"],
        "file",
    ),
    ("data sft-build", "config"): (
        ["data", "sft-build", "--tasks", "{tasks}", "--out", "o.jsonl", "--config", "{p}"],
        "in",
    ),
    ("data split", "tasks_dir"): (["data", "split", "{p}", "--out", "o"], "in"),
    ("data split", "out"): (["data", "split", "{tasks}", "--out", "{p}"], "dir"),
    ("data synth", "out"): (["data", "synth", "--n", "1", "--out", "{p}"], "dir"),
    ("demo", "out"): (["demo", "--smoke", "--out", "{p}"], "dir"),
    ("env serve", "workbook"): (["env", "serve", "--workbook", "{p}"], "in"),
    ("env replay", "trajectory"): (["env", "replay", "{p}"], "in"),
    ("env replay", "tasks_dir"): (["env", "replay", "{solution}", "--tasks", "{p}"], "in"),
    ("env replay", "output"): (["env", "replay", "{solution}", "--output", "{p}"], "file"),
    ("eval", "config"): (["eval", "--backend", "noop", "--config", "{p}", "--out", "o"], "in"),
    ("eval", "out"): (
        ["eval", "--backend", "noop", "--tasks", "builtin:demo-test", "--out", "{p}"],
        "dir",
    ),
    ("eval compare", "run_a"): (["eval", "compare", "{p}", "a-folder"], "in"),
    ("eval compare", "run_b"): (["eval", "compare", "{report}", "{p}"], "in"),
    ("grpo", "config"): (["grpo", "--config", "{p}", "--print-config"], "in"),
    ("merge", "adapter"): (["merge", "--adapter", "{p}", "--out", "o"], "in"),
    ("merge", "checkpoint"): (["merge", "--checkpoint", "{p}", "--out", "o"], "in"),
    ("merge", "out"): (["merge", "--checkpoint", "{tasks}", "--out", "{p}"], "dir"),
    ("model info", "path"): (["model", "info", "{p}"], "in"),
    ("model init", "out"): (["model", "init", "--out", "{p}"], "dir"),
    ("model init", "corpus"): (["model", "init", "--corpus", "{p}", "--out", "o"], "in"),
    ("plan", "recipe"): (["plan", "{p}"], "in"),
    ("sft", "config"): (["sft", "--config", "{p}", "--print-config"], "in"),
    ("view", "run_dir"): (["view", "{p}"], "in"),
    ("bench recalc-fidelity", "folder"): (["bench", "recalc-fidelity", "{p}"], "in"),
    ("bench recalc-fidelity", "json_out"): (
        ["bench", "recalc-fidelity", "a-folder", "--json", "{p}"],
        "file",
    ),
    ("bench train", "config"): (["bench", "train", "--config", "{p}"], "in"),
    ("bench trl", "out"): (["bench", "trl", "--smoke", "--out", "{p}"], "dir"),
    ("bench levers", "out"): (["bench", "levers", "--preset", "nope", "--out", "{p}"], "file"),
    ("bench levers", "profile"): (
        ["bench", "levers", "--preset", "nope", "--profile", "{p}"],
        "dir",
    ),
    ("bench rollout", "out"): (["bench", "rollout", "--out", "{p}"], "file"),
    ("data download", "data_files"): (
        ["data", "download", "deepscaler", "--out", "o", "--data-files", "{p}"],
        "in",
    ),
    ("bench gpu", "out"): (["bench", "gpu", "--out", "{p}"], "dir"),
    ("serve", "view"): (["serve", "--model", "nope", "--view", "{p}"], "dir_in"),
    ("serve", "work_dir"): (["serve", "--model", "nope", "--work-dir", "{p}"], "dir"),
}
"""(command, parameter) -> (an invocation with ``{p}`` for the path, what the path is)."""

EXTRA: dict[tuple[str, str], tuple[list[str], str]] = {
    ("eval", "--tasks"): (["eval", "--backend", "noop", "--tasks", "{p}", "--out", "o"], "in"),
    ("eval", "--model"): (["eval", "--model", "{p}", "--tasks", "{tasks}", "--out", "o"], "in"),
    ("sft", "data.path"): (
        ["sft", "model.name_or_path={model}", "data.path={p}", "output_dir=o", "device=cpu"],
        "in",
    ),
    ("grpo", "data.train_tasks"): (
        ["grpo", "model.name_or_path={model}", "data.train_tasks={p}", "output_dir=o"],
        "in",
    ),
}
"""Paths given as text (a str option, a dotted override): not found by the walk, tried alike."""

NOT_HERE: dict[tuple[str, str], str] = {}
"""Path options not exercised here, each with the reason (keep it empty)."""

MISTAKES = {
    "in": ("a-folder", "missing/x.yaml", "binary.xlsx", "empty.txt"),
    "dir_in": ("missing/x", "binary.xlsx", "empty.txt"),
    # an output being graded: a file that is no workbook is a FAIL verdict naming it, not
    # an error; a folder or a missing file is an error
    "graded": ("a-folder", "missing/x.yaml"),
    "dir": ("binary.xlsx", "empty.txt"),
    "file": ("a-folder",),
}


def _is_path(annotation: object) -> bool:
    """``Path``, ``Path | None`` or ``list[Path]``."""
    if annotation is Path:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, list):
        return any(_is_path(arg) for arg in typing.get_args(annotation))
    return False


def path_options() -> set[tuple[str, str]]:
    """(command, parameter) of every parameter annotated Path, in every command."""
    found: set[tuple[str, str]] = set()

    def walk(command, names: list[str], parent) -> None:
        if hasattr(command, "list_commands"):
            ctx = typer.Context(
                command, parent=parent, info_name=names[-1] if names else "spreadrl"
            )
            for name in command.list_commands(ctx):
                walk(command.get_command(ctx, name), [*names, name], ctx)
        for param in command.params:
            if _is_path(param.type_descriptor.annotation):
                found.add((" ".join(names), param.name))

    walk(typer.main.get_command(app), [], None)
    return found


def test_every_path_option_is_covered():
    options = path_options()
    missing = sorted(options - set(CASES) - set(NOT_HERE))
    assert not missing, f"give these path options an invocation in CASES: {missing}"
    assert not sorted(set(CASES) - options), "CASES names options that no longer exist"


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing here may reach the network
    (tmp_path / "a-folder").mkdir()
    (tmp_path / "binary.xlsx").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x01")
    (tmp_path / "empty.txt").write_text("")
    return tmp_path


@pytest.fixture(scope="module")
def real() -> dict[str, str]:
    """A real task set, one of its tasks and its solution file, and an eval report."""
    import json
    import tempfile

    from spreadrl.data.sources import resolve_tasks

    tasks = resolve_tasks("builtin:demo-test")
    task = tasks.tasks[0]
    solution = next(task.folder.glob("*_solution.json"))
    report = Path(tempfile.mkdtemp()) / "report.json"
    report.write_text(json.dumps({"pass@1": 1.0, "per_case": {f"{task.id}/1": 1.0}}))
    return {
        "tasks": str(tasks.root),
        "task": task.id,
        "solution": str(solution),
        "report": str(report),
    }


@pytest.mark.parametrize(
    ("key", "given"),
    [(key, given) for key, (_, kind) in {**CASES, **EXTRA}.items() for given in MISTAKES[kind]],
    ids=lambda v: "-".join(v) if isinstance(v, tuple) else v,
)
def test_a_path_mistake_is_one_error_line_naming_the_path(
    key, given, workdir, real, tiny_model_dir, monkeypatch, capsys
):
    values = {**real, "model": str(tiny_model_dir)}
    args = [a.replace("{p}", given).format(**values) for a in {**CASES, **EXTRA}[key][0]]
    code, _, err = cli(monkeypatch, capsys, *args)
    assert code == 1, err
    line = one_error_line(err)
    assert given in line, line
    assert sorted(p.name for p in workdir.iterdir()) == ["a-folder", "binary.xlsx", "empty.txt"]
