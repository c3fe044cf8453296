"""recalculate_and_read (IronCalc) and code_interpreter (the sandbox) on the working copy."""

from __future__ import annotations

import openpyxl

from tests.env.spreadsheet.gym_helpers import call, error_of, make_ctx, value


def test_recalculate_and_read_returns_computed_values(tmp_path):
    ctx = make_ctx(tmp_path)
    call(ctx, "write_range", range="D2:D3", values=["=B2*C2"])
    call(ctx, "write_range", range="E2", values=[["=SUM(B2:B6)", "=1/0", "=NOSUCHFN(1)"]])
    text = call(ctx, "recalculate_and_read", ranges=["D2:D3", "E2:G2"])
    assert text.splitlines() == [
        "recalculated; computed values:",
        "Sheet1!D2:D3 (2 rows x 1 columns, 2 non-empty cells)",
        "D2: 25",
        "D3: 25",  # write_range copies formula text as is; fill_formula translates
        "Sheet1!E2:G2 (1 rows x 3 columns, 3 non-empty cells)",
        "E2: 25 | F2: #DIV/0! | G2: #NAME?",
        "note: cells with formula errors in these ranges: #DIV/0! x1, #NAME? x1",
    ]
    assert ctx.cache["recalc"][0] == ctx.book.version


def test_recalculation_is_reused_until_an_edit(tmp_path):
    ctx = make_ctx(tmp_path)
    call(ctx, "write_range", range="D2", values="=B2+1")
    call(ctx, "recalculate_and_read", ranges=["D2"])
    first = ctx.cache["recalc"][1]
    call(ctx, "recalculate_and_read", ranges=["D2"])
    assert ctx.cache["recalc"][1] is first
    call(ctx, "write_range", range="B2", values=100)
    assert "D2: 101" in call(ctx, "recalculate_and_read", ranges=["D2"])


def test_recalculate_errors(tmp_path):
    ctx = make_ctx(tmp_path)
    assert "1 to 20 ranges" in error_of(ctx, "recalculate_and_read", ranges=[])
    assert "does not exist" in error_of(ctx, "recalculate_and_read", ranges=["X!A1"])


def test_code_interpreter_edits_become_the_working_copy(tmp_path):
    ctx = make_ctx(tmp_path)
    call(ctx, "write_range", range="D1", values="unsaved edit")  # saved before the code runs
    code = (
        "import openpyxl\n"
        "wb = openpyxl.load_workbook('workbook.xlsx')\n"
        "print(wb['Sheet1']['D1'].value)\n"
        "wb['Sheet1']['E1'] = 'from code'\n"
        "wb.save('workbook.xlsx')\n"
    )
    text = call(ctx, "code_interpreter", code=code)
    assert text.splitlines()[:3] == ["exit code: 0", "stdout:", "unsaved edit"]
    assert "the working copy now holds your edits" in text
    assert value(ctx, "E1") == "from code"


def test_code_interpreter_reports_exceptions_and_restores_a_broken_file(tmp_path):
    ctx = make_ctx(tmp_path)
    text = call(ctx, "code_interpreter", code="raise ValueError('boom')")
    assert text.startswith("exit code: 1") and "ValueError: boom" in text
    text = call(ctx, "code_interpreter", code="open('workbook.xlsx', 'w').write('not a zip')")
    assert "cannot be read" in text and "previous version was restored" in text
    assert openpyxl.load_workbook(ctx.book.path)["Sheet1"]["A2"].value == "North"
    assert "code is empty" in error_of(ctx, "code_interpreter", code="  ")


def test_code_interpreter_cannot_write_outside_the_episode_folder(tmp_path):
    ctx = make_ctx(tmp_path)
    outside = tmp_path / "outside.txt"
    code = f"open({str(outside)!r}, 'w').write('x')\nprint('wrote')"
    text = call(ctx, "code_interpreter", code=code)
    assert not outside.exists() and "wrote" not in text.split("stderr:")[0]
    call(ctx, "code_interpreter", code="open('scratch.txt', 'w').write('ok')")
    assert (ctx.folder / "scratch.txt").read_text() == "ok"
