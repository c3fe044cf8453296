"""The archive gate: a workbook's zip is looked at before anything parses it.

An ``.xlsx`` is a zip archive, and spreadrl reads many it did not write (the
agent's output, made by model-written code; uploads; imported datasets). A
valid 11 MB workbook can hold 4 GB of sheet XML, and every reader here
(openpyxl, IronCalc, LibreOffice) inflates what it is given. So every read of
a workbook first calls :func:`check_archive`, which reads the end record, the
central directory and each member's 30-byte local header, and inflates
nothing. It refuses (:class:`WorkbookRefused`):

- more than ``max_members`` members (checked on the end record's count,
  before the directory is parsed, so a million-member archive costs nothing);
- more than ``max_member_mb`` uncompressed in one member or ``max_total_mb`` in
  all, and a compression ratio above ``max_ratio`` for a member, or for the
  whole archive, once it is past ``RATIO_FLOOR`` bytes (a small member with a
  high ratio cannot hurt anyone, and real styles parts reach ratios of 300);
- sizes that lie: a directory entry and its local header that disagree, a
  deflated member carrying more compressed bytes than deflate could ever make
  from its declared size, a stored member whose sizes differ, members whose
  data overlap (the overlapping-files bomb), directory counts or zip64 records
  that disagree, data after the directory;
- what an ``.xlsx`` has no business holding: members compressed other than
  stored or deflate, encrypted members, duplicate names, and nested archives
  (a ``.zip``, ``.gz``, ... anywhere; a zip-based document outside
  ``xl/embeddings/``, where Office keeps embedded objects; a stored member
  that is itself a zip).

Not seen here: a member that honestly declares a large size at an allowed
ratio (a 100 MB sheet of distinct cells) still costs its reader memory and
time; the environment workers and the LibreOffice service run under memory
and CPU-time limits for that (:mod:`spreadrl.env.limits`).

The limits are settings (``env.max_workbook_mb`` and friends,
:class:`~spreadrl.env.config.EnvConfig`). They are process-wide: the code that
owns a process's settings (an environment, ``serve``) calls :func:`configure`;
callers that know better pass ``limits`` explicitly. This module sits in the
low layer so the data importers can use it too.
"""

from __future__ import annotations

import io
import os
import posixpath
import struct
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from spreadrl.errors import WorkbookError

MIB = 1 << 20
RATIO_FLOOR = 1 << 20  # bytes; the ratio is judged only above this size
CD_BYTES_PER_MEMBER = 1024  # a directory entry is 46 bytes plus its name and extras
_EOCD = struct.Struct("<4s4H2LH")  # end of central directory record, 22 bytes
_ZIP64_LOCATOR = struct.Struct("<4sLQL")  # 20 bytes
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")  # 56 bytes
_LOCAL = struct.Struct("<4s5H3L2H")  # local file header, 30 bytes
_LOCAL_MAGIC = b"PK\x03\x04"
_STORED, _DEFLATED = zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED
_ARCHIVE_SUFFIXES = frozenset(
    [
        ".zip",
        ".gz",
        ".tgz",
        ".bz2",
        ".xz",
        ".7z",
        ".rar",
        ".tar",
        ".zst",
        ".lz4",
        ".cab",
        ".jar",
        ".war",
        ".z",
        ".lzma",
    ]
)
_DOCUMENT_SUFFIXES = frozenset(
    [
        ".xlsx",
        ".xlsm",
        ".xlsb",
        ".xltx",
        ".xltm",
        ".docx",
        ".docm",
        ".pptx",
        ".pptm",
        ".odt",
        ".ods",
        ".odp",
        ".sldx",
    ]
)
_EMBEDDINGS = "xl/embeddings/"


@dataclass(frozen=True)
class ArchiveLimits:
    """What one workbook's archive may hold (Spreadsheet-RL's own tools check the same four)."""

    max_total_mb: float = 512.0
    max_member_mb: float = 128.0
    max_members: int = 50_000
    max_ratio: float = 200.0


class WorkbookRefused(WorkbookError):
    """A workbook the gate will not let any reader open; the message says why.

    ``status`` is the HTTP answer serve gives (413 for an archive too large,
    422 for one that lies about itself); ``end_reason`` is the episode's end
    reason when an episode meets one.
    """

    end_reason = "workbook_refused"

    def __init__(self, name: str, why: str, *, status: int = 422) -> None:
        super().__init__(f"{name}: workbook refused: {why}")
        self.why = why
        self.status = status


@dataclass(frozen=True)
class ArchiveSummary:
    """What the gate measured on an archive it let through."""

    members: int
    total_bytes: int
    compressed_bytes: int
    largest_member: str
    largest_bytes: int


_current = ArchiveLimits()


def configure(limits: ArchiveLimits) -> ArchiveLimits:
    """Set this process's limits (an environment or serve calls it with its settings);
    return the ones they replace, for a caller that restores them."""
    global _current
    previous, _current = _current, limits
    return previous


Source = str | os.PathLike[str] | bytes | bytearray | memoryview


def check_archive(
    source: Source, *, limits: ArchiveLimits | None = None, name: str | None = None
) -> ArchiveSummary | None:
    """Refuse ``source`` (a path or the file's bytes) unless its zip is safe to hand a reader.

    Raises :class:`WorkbookRefused` (naming ``name``, else the path) for a hostile or
    oversized archive; returns what it measured otherwise. A file that cannot be
    opened or is no zip archive at all gives None: no zip reader inflates anything
    from it, and each reader already reports such a file in its own words.
    """
    limits = limits or _current
    label = name or (str(source) if isinstance(source, str | os.PathLike) else "upload")
    with _open(source) as fp:
        return None if fp is None else _Scan(fp, label, limits).run()


@contextmanager
def _open(source: Source) -> Iterator[BinaryIO | None]:
    if isinstance(source, bytes | bytearray | memoryview):
        yield io.BytesIO(bytes(source))
        return
    try:
        fp = open(Path(source), "rb")  # noqa: SIM115 -- closed below
    except OSError:
        yield None
        return
    with fp:
        yield fp


class _Scan:
    """One pass over one archive's records; every method raises on the first problem."""

    def __init__(self, fp: BinaryIO, label: str, limits: ArchiveLimits) -> None:
        self.fp, self.label, self.limits = fp, label, limits
        self.size = fp.seek(0, os.SEEK_END)

    def refuse(self, why: str, status: int = 422) -> WorkbookRefused:
        return WorkbookRefused(self.label, why, status=status)

    def run(self) -> ArchiveSummary | None:
        end = self._end_record()
        if end is None:
            return None
        count, cd_offset, cd_size = end
        if count > self.limits.max_members:
            raise self.refuse(
                f"{count:,} members (at most {self.limits.max_members:,})", status=413
            )
        if cd_size > max(count, 1) * CD_BYTES_PER_MEMBER:
            raise self.refuse(f"a central directory of {cd_size:,} bytes for {count} members")
        infos = self._directory(count)
        summary = self._sizes(infos)
        self._members(infos, cd_offset)
        return summary

    # ---- the end records ---------------------------------------------------------
    def _read(self, offset: int, size: int) -> bytes:
        self.fp.seek(offset)
        return self.fp.read(size)

    def _end_record(self) -> tuple[int, int, int] | None:
        """(member count, directory offset, directory size), zip64 records reconciled;
        None when there is no end record (no zip archive)."""
        tail_start = max(self.size - _EOCD.size - 0xFFFF, 0)
        tail = self._read(tail_start, self.size - tail_start)
        at = tail.rfind(b"PK\x05\x06")
        if at < 0 or len(tail) - at < _EOCD.size:
            return None
        _, disk, cd_disk, on_disk, count, cd_size, cd_offset, comment = _EOCD.unpack_from(tail, at)
        eocd_at = tail_start + at
        if eocd_at + _EOCD.size + comment != self.size:
            raise self.refuse("bytes after the zip's end record")
        if disk or cd_disk or on_disk != count:
            raise self.refuse("a multi-disk zip archive")
        cd_end = eocd_at
        if count == 0xFFFF or 0xFFFFFFFF in (cd_size, cd_offset):
            count, cd_offset, cd_size, cd_end = self._zip64(eocd_at, count, cd_offset, cd_size)
        if cd_offset + cd_size != cd_end:
            raise self.refuse(
                "the central directory does not end where the end record says "
                "(data before or after it)"
            )
        return count, cd_offset, cd_size

    def _zip64(
        self, eocd_at: int, count: int, cd_offset: int, cd_size: int
    ) -> tuple[int, int, int, int]:
        loc_at = eocd_at - _ZIP64_LOCATOR.size
        locator = self._read(loc_at, _ZIP64_LOCATOR.size) if loc_at >= 0 else b""
        if len(locator) != _ZIP64_LOCATOR.size or locator[:4] != b"PK\x06\x07":
            raise self.refuse("zip64 values in the end record without a zip64 locator")
        _, disk, rec_at, disks = _ZIP64_LOCATOR.unpack(locator)
        record = self._read(rec_at, _ZIP64_EOCD.size)
        if disk or disks != 1 or len(record) != _ZIP64_EOCD.size or record[:4] != b"PK\x06\x06":
            raise self.refuse("a zip64 locator that points at no zip64 end record")
        fields = _ZIP64_EOCD.unpack(record)
        on_disk, count64, size64, offset64 = fields[6:10]
        if on_disk != count64 or fields[4] or fields[5]:
            raise self.refuse("a multi-disk zip64 archive")
        for short, wide, what in ((count, count64, "counts"), (cd_size, size64, "sizes")):
            if short not in (0xFFFF, 0xFFFFFFFF) and short != wide:
                raise self.refuse(f"zip64 and classic end records disagree on directory {what}")
        if cd_offset != 0xFFFFFFFF and cd_offset != offset64:
            raise self.refuse("zip64 and classic end records disagree on the directory offset")
        if rec_at + fields[1] + 12 != loc_at:
            raise self.refuse("data between the zip64 end record and its locator")
        return count64, offset64, size64, rec_at

    # ---- the directory -----------------------------------------------------------
    def _directory(self, count: int) -> list[zipfile.ZipInfo]:
        self.fp.seek(0)
        try:
            with zipfile.ZipFile(self.fp) as archive:  # parses the directory, inflates nothing
                infos = archive.infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError) as exc:
            raise self.refuse(f"a corrupt central directory ({exc})") from exc
        if len(infos) != count:
            raise self.refuse(
                f"the central directory holds {len(infos)} entries, the end record says {count}"
            )
        return infos

    def _sizes(self, infos: list[zipfile.ZipInfo]) -> ArchiveSummary:
        lim = self.limits
        total = packed = 0
        largest = max(infos, key=lambda i: i.file_size, default=None)
        for info in infos:
            size, csize = info.file_size, info.compress_size
            total, packed = total + size, packed + csize
            if size > lim.max_member_mb * MIB:
                raise self.refuse(
                    f"member {info.filename} holds {_mb(size)} uncompressed "
                    f"(at most {lim.max_member_mb:g} MiB a member)",
                    status=413,
                )
            if size > RATIO_FLOOR and size > lim.max_ratio * max(csize, 1):
                raise self.refuse(
                    f"member {info.filename} is compressed {size / max(csize, 1):,.0f}:1 "
                    f"(at most {lim.max_ratio:g}:1)",
                    status=413,
                )
        if total > lim.max_total_mb * MIB:
            raise self.refuse(
                f"{_mb(total)} uncompressed (at most {lim.max_total_mb:g} MiB)", status=413
            )
        if total > RATIO_FLOOR and total > lim.max_ratio * max(packed, 1):
            raise self.refuse(
                f"compressed {total / max(packed, 1):,.0f}:1 overall (at most {lim.max_ratio:g}:1)",
                status=413,
            )
        return ArchiveSummary(
            len(infos),
            total,
            packed,
            largest.filename if largest else "",
            largest.file_size if largest else 0,
        )

    # ---- each member -------------------------------------------------------------
    def _members(self, infos: list[zipfile.ZipInfo], cd_offset: int) -> None:
        names: set[str] = set()
        end = 0
        for info in sorted(infos, key=lambda i: i.header_offset):
            if info.filename in names:
                raise self.refuse(f"two members named {info.filename}")
            names.add(info.filename)
            _check_kind(self, info)
            if info.header_offset < end:
                raise self.refuse(f"member {info.filename} overlaps the member before it")
            end = self._local_header(info)
        if end > cd_offset:
            raise self.refuse("member data runs into the central directory")

    def _local_header(self, info: zipfile.ZipInfo) -> int:
        """Check ``info``'s local header against its directory entry; the offset its data ends."""
        raw = self._read(info.header_offset, _LOCAL.size)
        if len(raw) != _LOCAL.size or raw[:4] != _LOCAL_MAGIC:
            raise self.refuse(
                f"member {info.filename} has no local header where the directory says"
            )
        magic, _, flags, method, _, _, crc, csize, size, name_len, extra_len = _LOCAL.unpack(raw)
        name = self.fp.read(name_len)
        encoding = "utf-8" if flags & 0x800 else "cp437"
        if name.decode(encoding, "replace") != info.orig_filename or method != info.compress_type:
            raise self.refuse(f"member {info.filename}: local header and directory disagree")
        if not flags & 0x08:  # sizes are in the local header (not in a data descriptor)
            if (csize, size) == (0xFFFFFFFF, 0xFFFFFFFF):
                csize, size = _zip64_sizes(self.fp.read(extra_len), info)
            if (crc, csize, size) != (info.CRC, info.compress_size, info.file_size):
                raise self.refuse(
                    f"member {info.filename}: sizes or checksum differ between its local "
                    "header and the central directory"
                )
        start = info.header_offset + _LOCAL.size + name_len + extra_len
        stored = method == _STORED and info.compress_size >= len(_LOCAL_MAGIC)
        nested = stored and self._read(start, len(_LOCAL_MAGIC)) == _LOCAL_MAGIC
        if nested and not info.filename.startswith(_EMBEDDINGS):
            raise self.refuse(f"member {info.filename} is itself a zip archive")
        return start + info.compress_size


def _zip64_sizes(extra: bytes, info: zipfile.ZipInfo) -> tuple[int, int]:
    """(compressed, uncompressed) from a local header's zip64 extra field; (-1, -1) if none."""
    at = 0
    while at + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, at)
        if tag == 0x0001 and length >= 16:
            size, csize = struct.unpack_from("<QQ", extra, at + 4)
            return csize, size
        at += 4 + length
    return -1, -1


def _check_kind(scan: _Scan, info: zipfile.ZipInfo) -> None:
    """Refuse members an .xlsx never holds: other compression, encryption, nested archives."""
    name = info.filename
    if info.compress_type not in (_STORED, _DEFLATED):
        raise scan.refuse(
            f"member {name} uses compression method {info.compress_type} "
            "(an .xlsx uses stored or deflate)"
        )
    if info.flag_bits & 0x01:
        raise scan.refuse(f"member {name} is encrypted")
    size, csize = info.file_size, info.compress_size
    if info.compress_type == _STORED and size != csize:
        raise scan.refuse(f"stored member {name} declares {size} bytes but holds {csize}")
    if info.compress_type == _DEFLATED and csize > size + (size >> 10) + 64:
        raise scan.refuse(
            f"member {name} carries {csize:,} compressed bytes for a declared {size:,}: "
            "its declared size is false"
        )
    suffix = posixpath.splitext(name)[1].lower()
    if suffix in _ARCHIVE_SUFFIXES:
        raise scan.refuse(f"member {name} is a nested archive")
    if suffix in _DOCUMENT_SUFFIXES and not name.startswith(_EMBEDDINGS):
        raise scan.refuse(f"member {name} is a nested document outside {_EMBEDDINGS}")


def _mb(size: int) -> str:
    return f"{size / MIB:,.1f} MiB"
