"""The archive gate refuses hostile workbooks from the zip's records alone, and lets real ones by.

The bombs are built at test time (tests/archive_bombs.py). Memory is measured
in a child process that does nothing but gate them: its peak resident set
(``VmHWM``) after gating each bomb, against the same figure before the first.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from spreadrl.archive_gate import (
    RATIO_FLOOR,
    ArchiveLimits,
    WorkbookRefused,
    check_archive,
    configure,
)
from spreadrl.data.synth import synthesize
from spreadrl.env.config import EnvConfig
from spreadrl.errors import ConfigError, SpreadrlError
from tests import archive_bombs as bombs

ROOT = Path(__file__).resolve().parents[1]
MEMORY_BOUND_MB = 16  # what gating one bomb may add to the child's peak resident set

# (builder, HTTP status serve answers with, words of the reason)
BOMBS = {
    "deflate": (bombs.deflate_bomb, 413, "compressed 3"),
    "many_members": (bombs.many_members, 413, "50,001 members"),
    "nested_zip": (bombs.nested_zip, 422, "nested archive"),
    "renamed_nested_zip": (bombs.renamed_nested_zip, 422, "itself a zip archive"),
    "lying_sizes": (bombs.lying_sizes, 422, "declared size is false"),
    "overlapping": (bombs.overlapping_members, 422, "overlaps"),
    "zip64_disagreeing": (bombs.zip64_disagreeing, 422, "zip64 and classic end records"),
}

_CHILD = """
import json, sys, time
from spreadrl.archive_gate import WorkbookRefused, check_archive

def peak_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024

out = {"before_mb": peak_mb(), "bombs": {}}
for name, path in json.loads(sys.argv[1]).items():
    start = time.perf_counter()
    try:
        check_archive(path)
        verdict = {"refused": False}
    except WorkbookRefused as exc:
        verdict = {"refused": True, "status": exc.status, "why": exc.why}
    verdict["seconds"] = time.perf_counter() - start
    verdict["peak_mb"] = peak_mb()
    out["bombs"][name] = verdict
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bombs")
    paths = {name: build(folder / f"{name}.xlsx") for name, (build, _, _) in BOMBS.items()}
    paths["honest_large"] = bombs.honest_large(folder / "honest_large.xlsx")
    return paths


def test_every_bomb_is_refused_with_its_reason_in_bounded_memory(built):
    paths = {name: str(path) for name, path in built.items()}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(paths)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    report = json.loads(proc.stdout)
    for name, (_, status, words) in BOMBS.items():
        verdict = report["bombs"][name]
        assert verdict["refused"], name
        assert (verdict["status"], words in verdict["why"]) == (status, True), verdict
        grown = verdict["peak_mb"] - report["before_mb"]
        assert grown < MEMORY_BOUND_MB, f"{name}: peak RSS grew {grown:.1f} MB"
    assert not report["bombs"]["honest_large"]["refused"]
    # what a reader would have inflated: far beyond what the child's memory grew by
    with zipfile.ZipFile(built["deflate"]) as archive:
        assert sum(i.file_size for i in archive.infolist()) > 30 << 20


def test_a_large_honest_workbook_passes_and_is_measured(built):
    summary = check_archive(built["honest_large"])
    assert summary is not None and summary.largest_member == "xl/worksheets/sheet1.xml"
    assert summary.total_bytes > 6 << 20 and summary.members > 5


def test_the_limits_are_settings(built, tmp_path):
    honest = built["honest_large"]
    with pytest.raises(WorkbookRefused, match="at most 4 MiB a member") as caught:
        check_archive(honest, limits=ArchiveLimits(max_member_mb=4))
    assert caught.value.status == 413
    with pytest.raises(WorkbookRefused, match="at most 5 MiB"):
        check_archive(honest, limits=ArchiveLimits(max_total_mb=5))
    with pytest.raises(WorkbookRefused, match=r"9 members \(at most 5\)"):
        check_archive(honest, limits=ArchiveLimits(max_members=5))
    with pytest.raises(WorkbookRefused, match="at most 2:1"):
        check_archive(honest, limits=ArchiveLimits(max_ratio=2))
    # the deflate bomb passes the ratio once the ratio allows it, and then its size is judged
    assert check_archive(built["deflate"], limits=ArchiveLimits(max_ratio=1000)) is not None
    with pytest.raises(WorkbookRefused, match="a member"):
        check_archive(built["deflate"], limits=ArchiveLimits(max_ratio=1000, max_member_mb=16))


def test_env_settings_carry_the_limits_and_reject_nonsense():
    cfg = EnvConfig(max_workbook_mb=64, max_workbook_members=10)
    assert cfg.archive_limits() == ArchiveLimits(max_total_mb=64, max_members=10)
    assert EnvConfig().archive_limits() == ArchiveLimits()
    with pytest.raises(ConfigError, match="env.max_workbook_ratio"):
        EnvConfig(max_workbook_ratio=0).validate()


def test_configure_sets_the_process_limits(built):
    before = configure(ArchiveLimits(max_members=3))
    try:
        with pytest.raises(WorkbookRefused, match="at most 3"):
            check_archive(built["honest_large"])
    finally:
        configure(before)
    assert check_archive(built["honest_large"]) is not None


def test_a_small_member_may_have_any_ratio_but_a_large_one_not(tmp_path):
    small = tmp_path / "small.xlsx"
    with zipfile.ZipFile(small, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr("xl/styles.xml", b" " * (RATIO_FLOOR - 1))  # about 1000:1, under the floor
    assert check_archive(small) is not None
    large = tmp_path / "large.xlsx"
    with zipfile.ZipFile(large, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr("xl/styles.xml", b" " * (RATIO_FLOOR + 1))
    with pytest.raises(WorkbookRefused, match="compressed"):
        check_archive(large)


def test_bytes_are_gated_like_files_and_named_as_asked(built):
    data = built["nested_zip"].read_bytes()
    with pytest.raises(WorkbookRefused, match="^upload.xlsx: workbook refused: member"):
        check_archive(data, name="upload.xlsx")
    assert check_archive(bombs.small_workbook()) is not None


def test_what_is_no_zip_is_left_to_its_reader(tmp_path):
    text = tmp_path / "t.xlsx"
    text.write_text("not a workbook")
    assert check_archive(text) is None
    assert check_archive(tmp_path / "missing.xlsx") is None
    assert issubclass(WorkbookRefused, SpreadrlError)  # one `error:` line in the CLI


def test_other_compression_encryption_and_duplicates_are_refused(tmp_path):
    seed = bombs.small_workbook()
    lzma = tmp_path / "lzma.xlsx"
    with zipfile.ZipFile(lzma, "w", zipfile.ZIP_LZMA) as out:
        out.writestr("xl/workbook.xml", b"<workbook/>")
    with pytest.raises(WorkbookRefused, match="compression method 14"):
        check_archive(lzma)
    twice = tmp_path / "twice.xlsx"
    with zipfile.ZipFile(twice, "w") as out:
        out.writestr("xl/workbook.xml", b"<a/>")
        with pytest.warns(UserWarning, match="Duplicate name"):
            out.writestr("xl/workbook.xml", b"<b/>")
    with pytest.raises(WorkbookRefused, match="two members named"):
        check_archive(twice)
    crypt = bytearray(seed)
    at = crypt.rfind(b"PK\x01\x02")
    crypt[at + 8] |= 0x01  # the encryption bit of the last directory entry
    with pytest.raises(WorkbookRefused, match="encrypted"):
        check_archive(bytes(crypt))
    tail = seed + b"trailing"
    with pytest.raises(WorkbookRefused, match="after the zip's end record"):
        check_archive(tail)


def test_embedded_office_documents_stay_allowed(tmp_path):
    """Excel keeps embedded objects (a Word document, another workbook) in xl/embeddings/."""
    inner = bombs.small_workbook()
    path = tmp_path / "embedding.xlsx"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr("xl/workbook.xml", b"<workbook/>")
        out.writestr("xl/embeddings/Microsoft_Excel_Worksheet.xlsx", inner, zipfile.ZIP_STORED)
    assert check_archive(path) is not None
    with zipfile.ZipFile(path, "a") as out:
        out.writestr("xl/media/Microsoft_Excel_Worksheet.xlsx", inner)
    with pytest.raises(WorkbookRefused, match="outside xl/embeddings/"):
        check_archive(path)


def test_the_projects_own_workbooks_all_pass(tmp_path):
    """Every workbook of tests/fixtures and a synthesized suite passes the default limits."""
    synthesize(tmp_path / "synth", n=12, seed=5)
    books = sorted((ROOT / "tests" / "fixtures").rglob("*.xlsx"))
    books += sorted((tmp_path / "synth").rglob("*.xlsx"))
    assert len(books) > 20
    for book in books:
        assert check_archive(book, limits=ArchiveLimits()) is not None, book
