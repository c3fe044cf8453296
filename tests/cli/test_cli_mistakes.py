"""Every CLI mistake ends in one clear line and a non-zero exit, never a traceback.

Each test runs the real entry point (``spreadrl.cli.main.main``, the one that
turns a SpreadrlError into a red line and exit code 1) on one mistake a user
made, and checks the line names the file, key or flag at fault. A failed start
leaves no output folder behind.
"""

from __future__ import annotations

import json
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from spreadrl.cli.main import main
from spreadrl.cli.outdir import TRAINING_RESULTS, removed_if_failed_start
from spreadrl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "configs" / "tiny-cpu.yaml"


def cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """Run ``spreadrl ARGS`` in-process: (exit code, stdout, stderr)."""
    # --verbose: leave this process's warning filters and environment as they are
    monkeypatch.setattr(sys, "argv", ["spreadrl", "--verbose", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    out, err = capsys.readouterr()
    code = exit_info.value.code
    return (code if isinstance(code, int) else 1), out, err


def one_error_line(err: str) -> str:
    """The one ``error:`` line that ends ``err``, with no traceback before it.

    (Under --verbose, transformers' progress bars may come before it.)
    """
    assert "Traceback" not in err, err
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip()]
    assert [line for line in lines if line.startswith("error: ")] == lines[-1:], err
    return lines[-1]


# ---- spreadrl sft: bad data rows, an empty file; no output folder after a failed start ----

GOOD_ROW = {
    "messages": [
        {"role": "user", "content": "Put 1 in A1."},
        {"role": "assistant", "content": "Done."},
    ]
}


def _sft(monkeypatch, capsys, model_dir: Path, data: Path, out: Path) -> tuple[int, str]:
    args = ["sft", f"model.name_or_path={model_dir}", f"data.path={data}"]
    args += [f"output_dir={out}", "steps=1", "batch_size=1"]
    code, _, err = cli(monkeypatch, capsys, *args)
    return code, err


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"messages": "oops"}, "a row needs a 'messages' list, got str"),
        (
            {"messages": [{"role": "user", "content": "x"}, {"content": "Done."}]},
            "message 2 has no 'role'; expected one of system, user, assistant, tool",
        ),
        (
            {"messages": [{"role": "user", "content": "x"}, {"role": "assistant"}]},
            "message 2 (assistant) needs a 'content' string",
        ),
        ([1, 2], "a row must be a JSON object, got list"),
    ],
    ids=["messages-not-a-list", "no-role", "no-content", "row-not-an-object"],
)
def test_sft_bad_row_names_file_and_line(
    row, expected, tiny_model_dir, tmp_path, monkeypatch, capsys
):
    data = tmp_path / "sft.jsonl"
    data.write_text(json.dumps(GOOD_ROW) + "\n\n" + json.dumps(row) + "\n")  # line 3
    out = tmp_path / "run"
    code, err = _sft(monkeypatch, capsys, tiny_model_dir, data, out)
    assert code == 1
    assert one_error_line(err) == f"error: {data}:3: {expected}"
    assert not out.exists()  # the failed start left no folder (Run had made it, with config.yaml)


def test_sft_empty_file_says_it_is_empty(tiny_model_dir, tmp_path, monkeypatch, capsys):
    data = tmp_path / "empty.jsonl"
    data.write_text("\n")
    code, err = _sft(monkeypatch, capsys, tiny_model_dir, data, tmp_path / "run")
    assert code == 1
    line = one_error_line(err)
    assert f"{data}: the SFT data file has no rows" in line and "max_length" not in line


# ---- spreadrl eval compare: files that are not reports ----


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("not json", "not a JSON eval report"),
        ("[1, 2]", "not an eval report (a JSON list, expected an object)"),
        ('{"x": 1}', "not an eval report (no 'pass@1' or 'per_case'"),
        ('{"pass@1": "high", "per_case": {}}', "'pass@1' must be a number"),
        ('{"pass@1": 0.5, "per_case": {"t/1": null}}', "'per_case' must be an object"),
    ],
    ids=["not-json", "a-list", "no-metrics", "text-metric", "null-case"],
)
def test_eval_compare_rejects_what_is_not_a_report(text, expected, tmp_path, monkeypatch, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"pass@1": 0.5, "per_case": {"t/1": 0.5}}))
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    code, out, err = cli(monkeypatch, capsys, "eval", "compare", str(good), str(bad))
    assert code == 1
    assert one_error_line(err).startswith(f"error: {bad}: {expected}")
    assert "eval compare" not in out  # no table printed


def test_eval_compare_of_two_reports_still_works(tmp_path, monkeypatch, capsys):
    for name, rate in (("a", 0.5), ("b", 1.0)):
        report = {"pass@1": rate, "per_case": {"t/1": rate}}  # an older report: fewer figures
        (tmp_path / f"{name}.json").write_text(json.dumps(report))
    code, out, _ = cli(
        monkeypatch, capsys, "eval", "compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")
    )
    assert code == 0 and "improved cases: 1" in out and "None" not in out


# ---- spreadrl check --output DIR ----


def test_check_output_folder_is_named_as_a_folder(tmp_path, monkeypatch, capsys):
    args = ["check", "--task", "builtin", "--output", str(tmp_path)]
    code, _, err = cli(monkeypatch, capsys, *args)
    assert code == 1
    line = one_error_line(err)
    assert f"--output {tmp_path}: is a folder" in line and "does not exist" not in line


# ---- --engine bogus: refused where the name is given ----


def test_check_refuses_an_unknown_engine_up_front(tmp_path, monkeypatch, capsys):
    # TASKS_DIR does not even exist: the engine name is checked first
    args = ["check", str(tmp_path / "tasks"), "--outputs", str(tmp_path), "--engine", "bogus"]
    code, _, err = cli(monkeypatch, capsys, *args)
    assert code == 1
    assert "--engine 'bogus': unknown recalculation engine" in one_error_line(err)


def test_data_filter_refuses_an_unknown_engine(tmp_path, monkeypatch, capsys):
    args = ["data", "filter", str(tmp_path), "--dry-run", "--no-structure", "--engine", "bogus"]
    code, _, err = cli(monkeypatch, capsys, *args)
    assert code == 1
    assert "--engine 'bogus': unknown recalculation engine" in one_error_line(err)


def test_eval_refuses_an_unknown_engine_before_making_its_folder(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    args = ["eval", "--backend", "oracle", "--tasks", "builtin:demo-test", "--out", str(out)]
    code, _, err = cli(monkeypatch, capsys, *args, "env.engine=bogus")
    assert code == 1
    assert "env.engine 'bogus': unknown recalculation engine" in one_error_line(err)
    assert not out.exists()


def test_the_gym_config_refuses_an_unknown_engine_and_keeps_the_known_ones():
    from spreadrl.config import load_config
    from spreadrl.env.config import EnvConfig
    from spreadrl.env.spreadsheet.recalc import ENGINES
    from spreadrl.train.config import GRPOConfig

    with pytest.raises(ConfigError, match="env.engine 'bogus'"):
        EnvConfig(engine="bogus")
    with pytest.raises(ConfigError, match="env.engine 'ironcalk'"):
        load_config(GRPOConfig, RECIPE, ["env.engine=ironcalk"])
    for name in (*ENGINES, "soffice", "IronCalc"):
        assert EnvConfig(engine=name).engine == name


# ---- a task that does not load: an error in the report and a non-zero exit ----


def test_eval_task_that_is_a_zip_but_not_a_workbook_is_an_error(tmp_path, monkeypatch, capsys):
    from spreadrl.data.sources import resolve_tasks

    tasks = tmp_path / "tasks"
    shutil.copytree(resolve_tasks("builtin:demo-test").root, tasks)
    entries = json.loads((tasks / "dataset.json").read_text())[:2]
    (tasks / "dataset.json").write_text(json.dumps(entries))
    broken = entries[1]["id"]
    workbook = tasks / broken / f"1_{broken}_input.xlsx"
    original = workbook.read_bytes()
    with zipfile.ZipFile(workbook, "w") as archive:
        archive.writestr("notes.txt", "a zip, not a workbook")
    out = tmp_path / "run"
    args = ["eval", "--backend", "oracle", "--tasks", str(tasks), "--out", str(out)]
    code, stdout, err = cli(monkeypatch, capsys, *args)
    assert code == 1
    line = one_error_line(err)
    assert line.startswith(f"error: 1 of 2 episodes failed with an error (first, {broken}/1/0:")
    assert "cannot open the task workbook" in line
    report = json.loads((out / "report.json").read_text())
    assert report["episode_errors"] == 1
    assert [e["episode"] for e in report["errors"]] == [f"{broken}/1/0"]
    assert "episode errors" in stdout  # the table says so too
    assert report["pass@1"] == 0.5  # the task that loaded was scored (the oracle passes it)

    # the task fixed, a rerun into the same folder runs the failed episode again, only it
    workbook.write_bytes(original)
    code, _, err = cli(monkeypatch, capsys, *args)
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    assert (report["episodes"], report["episode_errors"], report["pass@1"]) == (2, 0, 1.0)
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    assert [json.loads(line)["task_id"] for line in lines] == [entries[0]["id"], broken, broken]


# ---- a failed start leaves no output folder; a run that started, or a user's folder, stays ----


def test_grpo_with_a_bad_model_path_leaves_no_output_folder(tmp_path, monkeypatch, capsys):
    out = tmp_path / "grpo"
    args = ["grpo", "--config", str(RECIPE), f"model.name_or_path={tmp_path / 'nope'}"]
    code, _, err = cli(monkeypatch, capsys, *args, f"output_dir={out}")
    assert code == 1
    assert "model directory not found" in one_error_line(err)
    assert not out.exists()


def test_a_failed_start_in_an_existing_folder_keeps_it(tmp_path, monkeypatch, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("the user's")
    args = ["grpo", "--config", str(RECIPE), f"model.name_or_path={tmp_path / 'nope'}"]
    code, _, _ = cli(monkeypatch, capsys, *args, f"output_dir={out}")
    assert code == 1
    assert (out / "notes.txt").read_text() == "the user's"


def test_only_a_new_folder_without_results_is_removed(tmp_path):
    def fail_after(folder: Path, write: dict[str, str]) -> None:
        with pytest.raises(RuntimeError), removed_if_failed_start(folder, TRAINING_RESULTS):
            folder.mkdir()
            for name, text in write.items():
                (folder / name).parent.mkdir(parents=True, exist_ok=True)
                (folder / name).write_text(text)
            raise RuntimeError("boom")

    fail_after(tmp_path / "a", {"config.yaml": "x: 1", "metrics.jsonl": ""})
    assert not (tmp_path / "a").exists()
    fail_after(tmp_path / "b", {"config.yaml": "x: 1", "metrics.jsonl": '{"step": 1}\n'})
    assert (tmp_path / "b" / "metrics.jsonl").exists()  # it ran a step: the failure is later
    fail_after(tmp_path / "c", {"checkpoints/step-1/model.safetensors": "w"})
    assert (tmp_path / "c" / "checkpoints").exists()
    with removed_if_failed_start(tmp_path / "d", TRAINING_RESULTS):
        (tmp_path / "d").mkdir()  # no failure: nothing removed
    assert (tmp_path / "d").is_dir()
