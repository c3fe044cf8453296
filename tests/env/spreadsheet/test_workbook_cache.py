"""Parsed task inputs are reused across episodes of a case: each episode still gets its own
copy, the same cells and file as a fresh parse, and an edited source is parsed again."""

import os

import openpyxl
import pytest

from spreadrl.env.spreadsheet.workbook import PARSED_INPUTS, WorkingCopy
from tests.env.spreadsheet.gym_helpers import call, sales_book


@pytest.fixture(autouse=True)
def _empty_cache():
    PARSED_INPUTS.clear()
    yield
    PARSED_INPUTS.clear()


def _copy(tmp_path, name, source):
    folder = tmp_path / name
    folder.mkdir()
    return WorkingCopy(folder, source)


def _cells(path):
    wb = openpyxl.load_workbook(path)
    return {ws.title: [[c.value for c in row] for row in ws.iter_rows()] for ws in wb}


def test_second_episode_reuses_the_parse_with_its_own_copy(tmp_path):
    source = sales_book(tmp_path / "input.xlsx")
    first = _copy(tmp_path, "a", source)
    assert len(PARSED_INPUTS.entries) == 1
    second = _copy(tmp_path, "b", source)
    assert second.wb is not first.wb
    assert second.path.is_file() and second.saved_version == second.version
    assert _cells(second.path) == _cells(first.path) == _cells(source)

    second.wb["Sheet1"]["B2"] = 999  # an edit in one episode never shows in another
    assert first.wb["Sheet1"]["B2"].value == 10
    assert _copy(tmp_path, "c", source).wb["Sheet1"]["B2"].value == 10
    assert second.wb["Sheet1"]["A1"].parent is second.wb["Sheet1"]  # a whole, coherent copy


def test_cached_and_fresh_copies_give_the_same_episode(tmp_path):
    from spreadrl.env.config import EnvConfig
    from spreadrl.env.spreadsheet.tools import ToolContext

    source = sales_book(tmp_path / "input.xlsx")
    outputs = []
    for name in ("fresh", "cached"):
        book = _copy(tmp_path, name, source)
        ctx = ToolContext(book, EnvConfig(), book.folder)
        call(ctx, "write_range", range="D1:D2", values=[["Total"], ["=SUM(B2:B6)"]])
        call(ctx, "manage_sheet", action="add", sheet="Out")
        outputs.append(_cells(book.save()))
    assert outputs[0] == outputs[1]
    assert outputs[1]["Sheet1"][1][3] == "=SUM(B2:B6)" and "Out" in outputs[1]


def test_an_edited_source_is_parsed_again(tmp_path):
    source = sales_book(tmp_path / "input.xlsx")
    _copy(tmp_path, "a", source)
    wb = openpyxl.load_workbook(source)
    wb["Sheet1"]["B2"] = 42
    wb.save(source)
    os.utime(source, ns=(1, 1))  # a different mtime even on a coarse clock
    assert _copy(tmp_path, "b", source).wb["Sheet1"]["B2"].value == 42


def test_a_bad_source_still_names_the_file(tmp_path):
    from spreadrl.errors import WorkbookError

    bad = tmp_path / "bad.xlsx"
    bad.write_text("not a workbook")
    with pytest.raises(WorkbookError, match="bad.xlsx: cannot open"):
        _copy(tmp_path, "a", bad)
    assert not PARSED_INPUTS.entries


def test_the_least_recently_used_go_past_the_budget(tmp_path):
    from spreadrl.env.spreadsheet.workbook import _ParsedInputs

    cache = _ParsedInputs(budget=1)  # room for one entry only
    books = [sales_book(tmp_path / f"in{i}.xlsx") for i in range(3)]
    for i, path in enumerate(books):
        wb = openpyxl.load_workbook(path)
        cache.put(cache.key(path), wb, path)
        assert len(cache.entries) == 1 and cache.get(cache.key(books[i])) is not None
    assert cache.get(cache.key(books[0])) is None
    assert cache.used == sum(len(b) + len(d) for b, d in cache.entries.values())
