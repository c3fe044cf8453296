"""Hostile workbooks built at test time (nothing of the kind is checked in).

Each builder writes a file a reader would choke on and the archive gate must
refuse, except :func:`honest_large`, which every reader must still accept.
The bombs stream their members (``ZipFile.open(name, "w")``), so building one
never holds its uncompressed bytes in memory.
"""

from __future__ import annotations

import io
import random
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path

import openpyxl
from openpyxl.utils.cell import get_column_letter

ROW = b'<row r="1"><c r="A1" t="s"><v>0</v></c></row>'


def small_workbook() -> bytes:
    """A real one-sheet workbook from openpyxl: the members every bomb starts from."""
    wb = openpyxl.Workbook()
    wb.active["A1"] = "seed"
    buffer = io.BytesIO()
    wb.save(buffer)
    return buffer.getvalue()


def _copy_members(
    out: zipfile.ZipFile, skip: str = "", compress: int = zipfile.ZIP_DEFLATED
) -> None:
    with zipfile.ZipFile(io.BytesIO(small_workbook())) as seed:
        for info in seed.infolist():
            if info.filename != skip:
                out.writestr(info.filename, seed.read(info), compress_type=compress)


SHEET = "xl/worksheets/sheet1.xml"
_SHEET_OPEN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<worksheet xmlns="http://schemas.openxmlformats.org/'
    b'spreadsheetml/2006/main"><sheetData>'
)
_SHEET_CLOSE = b"</sheetData></worksheet>"


def _sheet_member(out: zipfile.ZipFile, chunks: Iterator[bytes]) -> None:
    """Stream ``chunks`` as the first sheet's XML, deflated (never all in memory)."""
    info = zipfile.ZipInfo(SHEET, date_time=(2024, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    with out.open(info, "w", force_zip64=True) as member:
        member.write(_SHEET_OPEN)
        for chunk in chunks:
            member.write(chunk)
        member.write(_SHEET_CLOSE)


def deflate_bomb(path: Path, uncompressed_mb: int = 32) -> Path:
    """``sheet1.xml`` of ``uncompressed_mb`` MiB of identical rows (about 340:1)."""
    chunk = ROW * ((1 << 20) // len(ROW))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        _copy_members(out, skip=SHEET)
        _sheet_member(out, (chunk for _ in range(uncompressed_mb)))
    return path


def many_members(path: Path, count: int = 50_001) -> Path:
    """A zip of ``count`` empty stored members, written record by record (zipfile is slow at it)."""
    local, central = bytearray(), bytearray()
    for i in range(count):
        name = f"xl/media/m{i}.bin".encode()
        offset = len(local)
        local += struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 0, 0, 0x21, 0, 0, 0, len(name), 0)
        local += name
        central += struct.pack(
            "<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 0, 0, 0x21, 0, 0, 0, len(name), 0, 0, 0, 0,
            0, offset,
        )  # fmt: skip
        central += name
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, count, count, len(central), len(local), 0)
    path.write_bytes(bytes(local + central + end))
    return path


def nested_zip(path: Path, name: str = "xl/media/inner.zip") -> Path:
    """A workbook holding a zip archive as a member (deflated, named as the archive it is)."""
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as z:
        z.writestr("a.txt", b"a" * 1000)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        _copy_members(out)
        out.writestr(name, inner.getvalue())
    return path


def renamed_nested_zip(path: Path) -> Path:
    """A stored member under an innocent name whose bytes are a zip archive."""
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as z:
        z.writestr("a.txt", b"a")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        _copy_members(out)
        out.writestr("xl/media/image9.png", inner.getvalue(), compress_type=zipfile.ZIP_STORED)
    return path


def lying_sizes(path: Path) -> Path:
    """A workbook whose central directory declares sheet1.xml smaller than its local header."""
    data = bytearray(small_workbook())
    at = data.rfind(b"xl/worksheets/sheet1.xml")  # the directory entry's name (last copy)
    entry = at - 46
    assert data[entry : entry + 4] == b"PK\x01\x02"
    (size,) = struct.unpack_from("<L", data, entry + 24)
    struct.pack_into("<L", data, entry + 24, max(size // 4, 1))
    path.write_bytes(bytes(data))
    return path


def overlapping_members(path: Path) -> Path:
    """Two directory entries pointing at one member's data (the overlapping-files bomb)."""
    data = bytearray(small_workbook())
    eocd = data.rfind(b"PK\x05\x06")
    count, cd_size, cd_offset = struct.unpack_from("<HLL", data, eocd + 10)
    first = data[cd_offset : cd_offset + 46]
    name_len, extra_len, comment_len = struct.unpack_from("<3H", first, 28)
    entry = bytearray(data[cd_offset : cd_offset + 46 + name_len + extra_len + comment_len])
    entry[46 : 46 + name_len] = b"y" * name_len  # another name, the same local header
    new = data[:eocd] + entry + data[eocd:]
    struct.pack_into("<HHL", new, eocd + len(entry) + 8, count + 1, count + 1, cd_size + len(entry))
    path.write_bytes(bytes(new))
    return path


def zip64_disagreeing(path: Path) -> Path:
    """A zip64 end record whose member count disagrees with the classic end record's."""
    buffer = io.BytesIO(small_workbook())
    data = bytearray(buffer.getvalue())
    eocd = data.rfind(b"PK\x05\x06")
    count, cd_size, cd_offset = struct.unpack_from("<HLL", data, eocd + 10)
    record = struct.pack(
        "<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, cd_size + 99, cd_offset
    )  # the directory's size differs from the classic record's
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, eocd, 1)
    tail = bytearray(data[eocd:])
    struct.pack_into("<HH", tail, 8, 0xFFFF, 0xFFFF)  # counts: "see the zip64 record"
    path.write_bytes(bytes(data[:eocd] + record + locator + tail))
    return path


def honest_large(path: Path, rows: int = 25_000, columns: int = 8) -> Path:
    """A workbook of ``rows`` x ``columns`` distinct random numbers: about 8 MB of sheet XML at
    an ordinary ratio (about 3.5:1), far more than any workbook of the project's corpora."""
    rng = random.Random(0)

    def rows_xml() -> Iterator[bytes]:
        for r in range(1, rows + 1):
            cells = "".join(
                f'<c r="{get_column_letter(c)}{r}"><v>{rng.random() * 1e6:.6f}</v></c>'
                for c in range(1, columns + 1)
            )
            yield f'<row r="{r}">{cells}</row>'.encode()

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        _copy_members(out, skip=SHEET)
        _sheet_member(out, rows_xml())
    return path
