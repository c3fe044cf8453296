"""env.locale / check --locale: TEXT renders in the asked locale; auto reads the answer's cache."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import openpyxl
import pytest

from spreadrl.env.config import EnvConfig
from spreadrl.env.spreadsheet.checker import check_workbook
from spreadrl.env.spreadsheet.recalc.locales import infer_locale
from spreadrl.errors import ConfigError
from tests.sysdeps import needs_libreoffice

MONTH = '=TEXT(DATE(2024,6,1),"mmm")'


def _formula_book(path: Path, formula: str) -> Path:
    book = openpyxl.Workbook()
    book.active["A1"] = formula
    book.save(path)
    return path


def _value_book(path: Path, value: object) -> Path:
    book = openpyxl.Workbook()
    book.active["A1"] = value
    book.save(path)
    return path


def _with_cached_text(path: Path, text: str) -> Path:
    """The formula in A1 with ``text`` as the value Excel cached (written into the XML)."""
    with zipfile.ZipFile(path) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    sheet = files["xl/worksheets/sheet1.xml"].decode()
    sheet, count = re.subn(
        r'<c r="A1"([^>]*)><f>(.*?)</f><v\s*/>',
        lambda m: f'<c r="A1"{m.group(1)} t="str"><f>{m.group(2)}</f><v>{text}</v>',
        sheet,
    )
    assert count == 1
    files["xl/worksheets/sheet1.xml"] = sheet.encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def test_the_locale_changes_a_text_result_in_ironcalc(tmp_path):
    """IronCalc's own locales (no LibreOffice needed): German digit grouping."""
    output = _formula_book(tmp_path / "out.xlsx", '=TEXT(1234.5,"#,##0.00")')
    english = _value_book(tmp_path / "en.xlsx", "1,234.50")
    german = _value_book(tmp_path / "de.xlsx", "1.234,50")
    assert check_workbook(output, english, "A1", engine="ironcalc").passed
    assert not check_workbook(output, german, "A1", engine="ironcalc").passed
    assert check_workbook(output, german, "A1", engine="ironcalc", locale="de-DE").passed
    assert not check_workbook(output, english, "A1", engine="ironcalc", locale="de-DE").passed


def test_ironcalc_alone_refuses_a_locale_it_lacks(tmp_path):
    output = _formula_book(tmp_path / "out.xlsx", MONTH)
    with pytest.raises(ConfigError, match="IronCalc has no such locale"):
        check_workbook(output, output, "A1", engine="ironcalc", locale="zh-CN")
    with pytest.raises(ConfigError, match="IronCalc alone cannot render it"):
        EnvConfig(engine="ironcalc", locale="zh-CN")
    with pytest.raises(ConfigError, match="env.locale 'xx-XX': unknown locale"):
        EnvConfig(locale="xx-XX")


@needs_libreoffice
def test_the_locale_changes_a_text_result_in_the_hybrid(tmp_path):
    """The hybrid sends TEXT to LibreOffice, which renders the asked locale: 6月 in zh-CN."""
    output = _formula_book(tmp_path / "out.xlsx", MONTH)
    english = _value_book(tmp_path / "en.xlsx", "Jun")
    chinese = _value_book(tmp_path / "zh.xlsx", "6月")
    assert check_workbook(output, english, "A1").passed
    assert not check_workbook(output, chinese, "A1").passed
    zh = check_workbook(output, chinese, "A1", locale="zh-CN")
    assert zh.passed and zh.cell_engines["Sheet!A1"] == "libreoffice"
    assert not check_workbook(output, english, "A1", locale="zh-CN").passed


def test_auto_reads_the_locale_from_the_answers_cached_text(tmp_path):
    chinese = _with_cached_text(_formula_book(tmp_path / "zh.xlsx", MONTH), "6月")
    english = _with_cached_text(_formula_book(tmp_path / "en.xlsx", MONTH), "Jun")
    french = _with_cached_text(_formula_book(tmp_path / "fr.xlsx", MONTH), "juin")
    plain = _formula_book(tmp_path / "none.xlsx", "=1+1")
    assert infer_locale(chinese) == "zh-CN"
    assert infer_locale(english) == "en-US"
    assert infer_locale(french) == "fr-FR"
    assert infer_locale(plain) is None
    # the answer's cache is read as stored: an auto check compares against "6月" / "Jun"
    assert openpyxl.load_workbook(chinese, data_only=True).active["A1"].value == "6月"


@needs_libreoffice
def test_auto_scores_a_right_output_right_in_both_locales(tmp_path):
    output = _formula_book(tmp_path / "out.xlsx", MONTH)
    for name, text in (("zh", "6月"), ("en", "Jun")):
        answer = _with_cached_text(_formula_book(tmp_path / f"{name}.xlsx", MONTH), text)
        assert check_workbook(output, answer, "A1", locale="auto").passed, name
    chinese = tmp_path / "zh.xlsx"
    assert not check_workbook(output, chinese, "A1").passed  # en-US: "Jun" vs "6月"
