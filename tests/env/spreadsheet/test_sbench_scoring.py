"""``--scoring spreadsheetbench``: SpreadsheetBench's verdict, quirks and all.

The value rules and the answer_position reading are checked without LibreOffice;
the conversion (``open_spreadsheet.py``'s) with it. The verdicts of SpreadsheetBench's
own ``evaluation.py`` (and Harbor's evaluator for the position forms upstream
crashes on) on seeded pairs are recorded facts in tests/fixtures/sbench_verdicts.json,
written by scripts/sbench_parity.py from copies of their code outside this repository.
"""

from __future__ import annotations

import datetime as dt
import json
import zipfile
from pathlib import Path

import openpyxl
import pytest

from spreadrl.env.spreadsheet.checker import check_workbook, normalize_value, values_match
from spreadrl.env.spreadsheet.sbench import (
    cell_names,
    compare_books,
    position_parts,
    sbench_check,
    sbench_transform,
    sbench_values_match,
    split_position,
)
from tests.env.spreadsheet.sbench_pairs import HARBOR_FORMS, UPSTREAM_FORMS, make_pairs
from tests.sysdeps import needs_libreoffice

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "sbench_verdicts.json"
RECORD = json.loads(FIXTURE.read_text())
for _label in ("upstream", "harbor"):  # verdict strings: "0110..." -> [0, 1, 1, 0, ...]
    for _kind in ("raw", "converted"):
        RECORD[_label][_kind] = [int(v) for v in RECORD[_label][_kind]]


def test_the_time_rule_is_upstreams_str_slice_not_hh_mm():
    with_ms, without = dt.time(11, 53, 19, 250000), dt.time(11, 53, 19)
    assert sbench_transform(with_ms) == "11:53:19.250"
    assert sbench_transform(without) == "11:53"
    assert not sbench_values_match(with_ms, without)
    # the hybrid reads both as HH:MM: the one rule where the two scorings differ by design
    assert normalize_value(with_ms) == normalize_value(without) == "11:53"
    assert values_match(with_ms, without)


@pytest.mark.parametrize(
    ("expected", "actual", "same"),
    [
        (1.004, 1.0, True),
        (1.006, 1.0, False),
        ("12.5", 12.5, True),
        (None, "", True),
        (True, 1, True),
        (dt.datetime(2024, 6, 1, 11), dt.datetime(2024, 6, 1, 13), False),  # 45444 vs 45445
        (dt.datetime(2024, 6, 1, 1), dt.datetime(2024, 6, 1, 11), True),
        ("Jun", "jun", False),
        (dt.timedelta(hours=1), dt.timedelta(hours=1, microseconds=1), False),
    ],
)
def test_value_rules(expected, actual, same):
    assert sbench_values_match(expected, actual) is same


def test_answer_position_is_read_as_harbors_evaluator_reads_it():
    assert split_position("'b2b, sez, de'!A5:V10,'Sheet 2'!A:G") == [
        "'b2b, sez, de'!A5:V10",
        "'Sheet 2'!A:G",
    ]
    assert split_position("A1:A3, B1") == ["A1:A3", "B1"]
    assert split_position("A1:A3,\u00a0B1") == ["A1:A3", "B1"]  # a non-breaking space
    assert position_parts("Sheet3'!A:G,'Sheet4'!B2", "First") == [
        ("Sheet3", "A:G"),
        ("Sheet4", "B2"),
    ]
    assert position_parts("C3", "First") == [("First", "C3")]
    assert cell_names("BD2:308", 5) == [f"BD{r}" for r in range(2, 309)]
    assert cell_names("A:B", 3) == ["A1", "A2", "A3", "B1", "B2", "B3"]
    assert cell_names("B3:B1", 9) == []


def _book(path: Path, cells: dict[str, object], rows: int = 0) -> Path:
    book = openpyxl.Workbook()
    for ref, value in cells.items():
        book.active[ref] = value
    for row in range(1, rows + 1):
        book.active.cell(row, 9, "x")
    book.save(path)
    return path


def test_an_empty_range_fails_instead_of_passing_vacuously(tmp_path):
    answer = _book(tmp_path / "a.xlsx", {"A1": 1})
    mismatches, checked = compare_books(answer, answer, "A3:A1")
    assert checked == 0 and mismatches and "covers no cell" in mismatches[0].reason
    assert compare_books(answer, answer, "A1:A2") == ([], 2)


def test_open_rows_run_to_the_longer_of_the_two_sheets(tmp_path):
    answer = _book(tmp_path / "a.xlsx", {"A1": 1, "A2": 2})
    output = _book(tmp_path / "o.xlsx", {"A1": 1, "A2": 2, "A7": "stray"})
    mismatches, checked = compare_books(answer, output, "A:A")
    assert checked == 7 and [m.cell for m in mismatches] == ["A7"]


def test_a_sheet_missing_from_the_answer_fails_the_case(tmp_path):
    answer = _book(tmp_path / "a.xlsx", {"A1": 1})
    mismatches, _ = compare_books(answer, answer, "'Nope'!A1")
    assert mismatches and "missing from output" in mismatches[0].reason


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    root = tmp_path_factory.mktemp("sbench-pairs")
    upstream = make_pairs(RECORD["seed"], RECORD["upstream"]["count"], root / "u", UPSTREAM_FORMS)
    harbor = make_pairs(RECORD["seed"], RECORD["harbor"]["count"], root / "h", HARBOR_FORMS)
    return {"upstream": upstream, "harbor": harbor}


def test_the_recorded_verdicts_are_of_these_pairs():
    assert RECORD["upstream"]["forms"] == list(UPSTREAM_FORMS)
    assert RECORD["harbor"]["forms"] == list(HARBOR_FORMS)
    assert RECORD["upstream"]["count"] == 300
    assert RECORD["upstream_commit"].startswith("49b73a9")
    for label in ("upstream", "harbor"):
        for kind in ("raw", "converted"):
            verdicts = RECORD[label][kind]
            assert len(verdicts) == RECORD[label]["count"]
            assert min(sum(verdicts), len(verdicts) - sum(verdicts)) >= 10  # both verdicts


@pytest.mark.slow
@pytest.mark.parametrize("label", ["upstream", "harbor"])
def test_the_rules_give_upstreams_recorded_verdicts(pairs, label):
    """Without the conversion: SpreadsheetBench's (Harbor's) compare_workbooks on the raw files."""
    ours = [int(not compare_books(p.answer, p.output, p.answer_position)[0]) for p in pairs[label]]
    assert ours == RECORD[label]["raw"]


@pytest.mark.slow
@needs_libreoffice
@pytest.mark.parametrize("label", ["upstream", "harbor"])
def test_the_libreoffice_path_gives_upstreams_recorded_verdicts(pairs, label):
    """open_spreadsheet.py's conversion, then compare_workbooks: 300/300 (and Harbor's 60/60)."""
    chosen = pairs[label]
    results = sbench_check(
        [p.output for p in chosen], [p.answer for p in chosen], [p.answer_position for p in chosen]
    )
    ours = [int(not mismatches) for mismatches, *_ in results]
    assert ours == RECORD[label]["converted"]
    # the conversion mattered: formulas LibreOffice computed changed verdicts
    assert RECORD[label]["converted"] != RECORD[label]["raw"]


def _with_cached_value(path: Path, formula: str, cached: str) -> None:
    """Write ``cached`` into the <v> of the cell whose formula is ``formula`` (XML edit)."""
    with zipfile.ZipFile(path) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    sheet = files["xl/worksheets/sheet1.xml"].decode()
    sheet = sheet.replace(f"<f>{formula}</f><v />", f"<f>{formula}</f><v>{cached}</v>")
    sheet = sheet.replace(f"<f>{formula}</f><v></v>", f"<f>{formula}</f><v>{cached}</v>")
    assert f"<v>{cached}</v>" in sheet
    files["xl/worksheets/sheet1.xml"] = sheet.encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)


@needs_libreoffice
def test_a_stale_cached_value_survives_the_conversion_as_upstream_sees_it(tmp_path):
    """LibreOffice's default never recalculates a cached formula on load: upstream scores
    the stale 99, the hybrid recalculates it to 6. The agent's file is left unchanged."""
    answer = _book(tmp_path / "answer.xlsx", {"A1": 2, "A2": 6})
    output = _book(tmp_path / "output.xlsx", {"A1": 2, "A2": "=A1*3", "A3": "=A1*5"})
    _with_cached_value(output, "A1*3", "99")
    before = output.read_bytes()
    sbench = check_workbook(output, answer, "A2", scoring="spreadsheetbench")
    assert not sbench.passed and sbench.mismatches[0].actual == 99
    assert check_workbook(output, answer, "A2").passed
    # a formula without a cached value is computed by the conversion
    assert check_workbook(
        output, _book(tmp_path / "a3.xlsx", {"A3": 10}), "A3", scoring="spreadsheetbench"
    ).passed
    assert output.read_bytes() == before


@needs_libreoffice
def test_an_episode_scored_the_spreadsheetbench_way(tmp_path):
    """env.scoring reaches the reward: the formulas the agent wrote (no cached values) are
    computed by LibreOffice's conversion and compared by upstream's rules."""
    from spreadrl.env.config import EnvConfig
    from spreadrl.env.spreadsheet.episode import SpreadsheetEnv
    from tests.env.spreadsheet.gym_helpers import make_task, revenue_answer

    task = make_task(tmp_path, revenue_answer)
    solution = [
        {"name": "write_range", "arguments": {"range": "D2", "values": "=B2*C2"}},
        {"name": "fill_formula", "arguments": {"source": "D2", "target": "D3:D6"}},
    ]
    for steps, passed in ((solution, True), (solution[:1], False)):
        with SpreadsheetEnv(EnvConfig(scoring="spreadsheetbench")) as env:
            env.reset(task, 1)
            for call in steps:
                assert env.step(call).ok
            result = env.finish("done")
        assert result.passed is passed
        if not passed:
            assert "SpreadsheetBench's transform" in result.mismatches[0].reason


def test_an_unknown_scoring_is_refused_where_it_is_set():
    from spreadrl.env.config import EnvConfig
    from spreadrl.env.spreadsheet.checker import check_scoring_name
    from spreadrl.errors import ConfigError

    with pytest.raises(ConfigError, match="env.scoring"):
        EnvConfig(scoring="excel")
    with pytest.raises(ConfigError, match="--scoring 'excel': unknown scoring"):
        check_scoring_name("excel", "--scoring")


_SCRIPTED_SOFFICE = """#!{python}
# soffice --convert-to as a script: writes "converted:<content>" for each input, in order,
# and records its profile; an input holding "crash" ends the process there, status 0 (as a
# dying soffice may), and "bad" is never converted (its own process exits 1)
import sys
from pathlib import Path

args = sys.argv[1:]
profile = args[0].split("=", 1)[1]
outdir = Path(args[args.index("--outdir") + 1])
files = [Path(a) for a in args[args.index("--outdir") + 2 :]]
with open({log!r}, "a") as log:
    log.write(profile + " " + str(len(files)) + "\\n")
outdir.mkdir(exist_ok=True)
for f in files:
    content = f.read_text()
    if content == "bad":
        sys.exit(1) if len(files) == 1 else sys.exit(0)
    if content == "crash" and len(files) > 1:
        sys.exit(0)
    (outdir / (f.stem + ".xlsx")).write_text("converted:" + content)
"""


def test_a_batch_that_broke_off_is_retried_file_by_file_and_a_bad_file_is_left_as_it_was(
    tmp_path,
):
    """Batches of BATCH files, several soffice processes (each its own profile); a process
    that ends early leaves its unconverted files to one process each; a file no process
    converts keeps its content and is reported with LibreOffice's reason."""
    import sys

    from spreadrl.env.spreadsheet.recalc.sbench_convert import BATCH, convert_outputs

    log = tmp_path / "calls.log"
    soffice = tmp_path / "soffice"
    soffice.write_text(_SCRIPTED_SOFFICE.format(python=sys.executable, log=str(log)))
    soffice.chmod(0o755)
    files = []
    for index in range(2 * BATCH + 5):
        content = {3: "crash", BATCH + 1: "bad"}.get(index, f"book {index}")
        files.append(tmp_path / "in" / f"{index}.xlsx")
        files[-1].parent.mkdir(exist_ok=True)
        files[-1].write_text(content)
    failures = convert_outputs(files, soffice=str(soffice))
    assert failures == {files[BATCH + 1]: "LibreOffice wrote no converted file"}
    assert files[BATCH + 1].read_text() == "bad"
    for index, path in enumerate(files):
        if index != BATCH + 1:
            assert path.read_text() == "converted:" + ("crash" if index == 3 else f"book {index}")
    calls = [line.split() for line in log.read_text().splitlines()]
    batches = sorted(int(n) for _, n in calls if n != "1")
    assert batches == [5, BATCH, BATCH]  # three batch processes ...
    retried = [profile for profile, n in calls if n == "1"]
    # ... then one process per file the broken batches left: 4..BATCH-1 of the first, the
    # crash file itself, BATCH+1.. of the second (the bad one among them)
    assert len(retried) == (BATCH - 3) + (BATCH - 1)
    assert len({profile for profile, _ in calls}) == len(calls)  # never a shared profile
