"""Download the public task sets and turn them into files spreadrl reads.

Three kinds of source, one registry (:data:`DATASETS`):

* ``archive``: SpreadsheetBench's release tarballs. Fetched with httpx into the
  download cache (resumable through a ``.part`` file and an HTTP Range request,
  renamed into place only when complete), unpacked safely (absolute paths,
  ``..``, links and devices are refused), then converted by
  :func:`spreadrl.data.importers.import_spreadsheetbench`.
* ``hub-release``: Spreadsheet-RL's release on the Hugging Face Hub, two files
  per split: ``{split}_{parser}.parquet`` and ``spreadsheets.zip`` (the task
  folders every row points into), fetched with ``huggingface_hub``'s
  ``hf_hub_download`` (its cache, its resumption) and converted by
  :func:`spreadrl.data.importers.import_spreadsheet_rl`, which reads the task
  folders straight from the zip.
* ``hub-problems``: the math and code sets of the GRPO-TCR recipe, read with ``datasets``
  and written as ``problems.jsonl`` rows ``{id, source, kind, problem, answer |
  tests}`` for the code-interpreter environment.

Where the bytes come from is injectable so the same code runs without the
internet: ``endpoint`` (or ``SPREADRL_ARCHIVE_ENDPOINT`` / ``SPREADRL_HUB_ENDPOINT``)
replaces the base URL with a plain file mirror (``HF_ENDPOINT``, a Hub API
mirror, is passed to huggingface_hub), and ``data_files`` points at local
copies. With ``HF_HUB_OFFLINE=1`` (or ``SPREADRL_OFFLINE=1``) nothing is
fetched: the cache is used or the error says what to do offline.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tarfile
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from spreadrl.data.importers import import_spreadsheet_rl, import_spreadsheetbench
from spreadrl.data.importers.rl_release import ARCHIVE, PARSERS, parquet_name
from spreadrl.data.importers.rl_release import SPLITS as SRL_SPLITS
from spreadrl.data.task import foreign_to_task_set
from spreadrl.errors import SpreadrlError
from spreadrl.reporting import LogReporter, Reporter
from spreadrl.run_folder import check_output_folder

log = logging.getLogger(__name__)

SB_BASE_URL = "https://github.com/RUCKBReasoning/SpreadsheetBench/raw/main/data"
HF_DATASETS_URL = "https://huggingface.co/datasets"
PROBLEMS_FILE = "problems.jsonl"
_OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "SPREADRL_OFFLINE")


@dataclass(frozen=True)
class DatasetSpec:
    """One downloadable set: where it lives and how it becomes spreadrl files."""

    name: str
    kind: str  # "archive" | "hub-release" | "hub-problems"
    description: str
    repo_id: str | None = None  # Hugging Face dataset id (hub kinds)
    archive: str | None = None  # archive file name under the base URL (archive kind)
    archive_root: str | None = None  # folder inside the archive holding dataset.json
    splits: tuple[str, ...] = ("train",)
    default_split: str = "train"
    convert: Callable[[dict[str, Any], int], dict[str, Any]] | None = None


@dataclass
class DownloadReport:
    """What a download produced: the output folder, how many tasks or problems, from where."""

    name: str
    split: str | None
    out: Path
    count: int
    origin: str
    skipped: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- problem converters


def _text(row: dict[str, Any], *keys: str) -> str:
    for key in keys:
        value = row.get(key)
        if isinstance(value, str) and value.strip():
            return value
    raise SpreadrlError(f"row has none of the fields {', '.join(keys)} (has {', '.join(row)})")


def _row_id(row: dict[str, Any], index: int, prefix: str) -> str:
    for key in ("id", "task_id", "question_id", "uid"):
        if row.get(key) not in (None, ""):
            return f"{prefix}-{row[key]}"
    return f"{prefix}-{index:06d}"


def math_problem(prefix: str) -> Callable[[dict[str, Any], int], dict[str, Any]]:
    """DeepScaleR / Omni-MATH / NuminaMath rows: problem + final answer."""

    def convert(row: dict[str, Any], index: int) -> dict[str, Any]:
        answer = row.get("answer")
        if answer in (None, ""):
            raise SpreadrlError("math row has no answer")
        return {
            "id": _row_id(row, index, prefix),
            "source": prefix,
            "kind": "math",
            "problem": _text(row, "problem", "question"),
            "answer": str(answer),
        }

    return convert


def taco_problem(row: dict[str, Any], index: int) -> dict[str, Any]:
    """TACO: ``input_output`` is a JSON string {inputs, outputs, fn_name?} (stdio or call tests)."""
    raw = row.get("input_output")
    tests = json.loads(raw) if isinstance(raw, str) and raw.strip() else raw
    if not isinstance(tests, dict) or not tests.get("inputs"):
        raise SpreadrlError("TACO row has no input_output tests")
    keep = {k: tests[k] for k in ("inputs", "outputs", "fn_name") if tests.get(k) is not None}
    return {
        "id": _row_id(row, index, "taco"),
        "source": "taco",
        "kind": "code",
        "problem": _text(row, "question", "problem"),
        "tests": keep,
    }


def leetcode_problem(row: dict[str, Any], index: int) -> dict[str, Any]:
    """LeetCodeDataset: an assert-style ``check(candidate)`` test with its entry point."""
    problem = _text(row, "problem_description", "query", "question")
    starter = row.get("starter_code") or ""
    return {
        "id": _row_id(row, index, "leetcode"),
        "source": "leetcode",
        "kind": "code",
        "problem": f"{problem}\n\n{starter}".strip(),
        "tests": {
            "kind": "assert",
            "code": _text(row, "test"),
            "entry_point": row.get("entry_point"),
            "prelude": row.get("prompt") or "",
        },
    }


DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec(
            "spreadsheet-rl",
            "hub-release",
            "Spreadsheet-RL: parquet splits + spreadsheets.zip "
            "(train = ExcelForum; test, test_2, test_verified, test_domain)",
            repo_id="Spreadsheet-RL/Spreadsheet-RL",
            splits=SRL_SPLITS,
        ),
        DatasetSpec(
            "spreadsheetbench",
            "archive",
            "SpreadsheetBench: 912 tasks, 3 cases each (release archive)",
            archive="spreadsheetbench_912_v0.1.tar.gz",
            archive_root="spreadsheetbench_912_v0.1",
            splits=("test",),
            default_split="test",
        ),
        DatasetSpec(
            "spreadsheetbench-verified",
            "archive",
            "SpreadsheetBench Verified: 400 expert-checked tasks, one case each",
            archive="spreadsheetbench_verified_400.tar.gz",
            archive_root="spreadsheetbench_verified_400",
            splits=("test",),
            default_split="test",
        ),
        DatasetSpec(
            "deepscaler",
            "hub-problems",
            "DeepScaleR-Preview (math)",
            repo_id="agentica-org/DeepScaleR-Preview-Dataset",
            convert=math_problem("deepscaler"),
        ),
        DatasetSpec(
            "omni-math",
            "hub-problems",
            "Omni-MATH (olympiad math)",
            repo_id="KbsdJames/Omni-MATH",
            splits=("test",),
            default_split="test",
            convert=math_problem("omni-math"),
        ),
        DatasetSpec(
            "numina-math",
            "hub-problems",
            "NuminaMath-1.5 (math)",
            repo_id="AI-MO/NuminaMath-1.5",
            convert=math_problem("numina-math"),
        ),
        DatasetSpec(
            "taco",
            "hub-problems",
            "TACO (algorithmic code, stdin/stdout and call tests)",
            repo_id="BAAI/TACO",
            splits=("train", "test"),
            convert=taco_problem,
        ),
        DatasetSpec(
            "leetcode",
            "hub-problems",
            "LeetCodeDataset (code, assert tests)",
            repo_id="newfacade/LeetCodeDataset",
            splits=("train", "test"),
            convert=leetcode_problem,
        ),
    )
}


# ---------------------------------------------------------------- environment


def is_offline() -> bool:
    """True when HF_HUB_OFFLINE / HF_DATASETS_OFFLINE / SPREADRL_OFFLINE is set to a true value."""
    return any(
        os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on")
        for var in _OFFLINE_VARS
    )


def default_cache() -> Path:
    """``SPREADRL_CACHE``/downloads, else ``~/.cache/spreadrl/downloads``."""
    root = os.environ.get("SPREADRL_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "spreadrl"
    return base / "downloads"


def offline_hint(spec: DatasetSpec, split: str, out: Path) -> str:
    """What to do without a network: fetch elsewhere, then import the local copy."""
    if spec.kind == "archive":
        return (
            f"download {SB_BASE_URL}/{spec.archive} on a machine with internet, unpack it, and "
            f"run `spreadrl data import --from spreadsheetbench <unpacked folder> --out {out}`"
        )
    fetch = f"`hf download {spec.repo_id} --repo-type dataset --local-dir DIR` elsewhere"
    if spec.kind == "hub-release":
        return (
            f"run {fetch}, then `spreadrl data import --from spreadsheet-rl DIR --split {split} "
            f"--out {out}` (or pass --data-files DIR/{split}_hermes.parquet DIR/{ARCHIVE})"
        )
    return f"run {fetch}, then pass its files with --data-files"


# ---------------------------------------------------------------- HTTP download


def fetch_url(
    url: str, dest: Path, *, reporter: Reporter | None = None, timeout: float = 30.0
) -> Path:
    """Download ``url`` to ``dest`` atomically, resuming a previous partial download.

    Bytes go to ``dest.part``; a rerun asks for the rest with a Range request
    (a server that ignores it sends everything and the part file restarts).
    ``dest`` appears only once the body is complete (and matches
    Content-Length when the server sent one). Network and HTTP failures raise
    SpreadrlError naming the URL. ``reporter`` shows the bytes as they come (the CLI: a
    bar that disappears when done; default: nothing).
    """
    import httpx

    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    try:
        with httpx.stream(
            "GET", url, headers=headers, follow_redirects=True, timeout=timeout
        ) as response:
            if response.status_code == 416 and have:  # the part file is already complete
                part.replace(dest)
                return dest
            response.raise_for_status()
            resumed = response.status_code == 206
            if not resumed:
                have = 0
            length = response.headers.get("Content-Length")
            total = have + int(length) if length and length.isdigit() else None
            with part.open("ab" if resumed else "wb") as handle:
                _stream_body(response.iter_bytes(), handle, dest.name, have, total, reporter)
    except httpx.HTTPStatusError as exc:
        raise SpreadrlError(f"download of {url} failed: HTTP {exc.response.status_code}") from exc
    except httpx.HTTPError as exc:
        raise SpreadrlError(f"cannot download {url}: {exc.__class__.__name__}: {exc}") from exc
    size = part.stat().st_size
    if total is not None and size != total:
        raise SpreadrlError(
            f"download of {url} stopped at {size} of {total} bytes; run the command again to resume"
        )
    part.replace(dest)
    return dest


def _stream_body(
    chunks: Iterable[bytes],
    handle: BinaryIO,
    label: str,
    have: int,
    total: int | None,
    reporter: Reporter | None,
) -> None:
    reporter = reporter or LogReporter()
    with reporter.progress(label, total, unit="bytes", done=have, keep=False) as bar:
        for chunk in chunks:
            handle.write(chunk)
            bar.advance(len(chunk))


# ---------------------------------------------------------------- safe unpacking


def _check_member(name: str, archive: Path) -> None:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or name.startswith(("/", "\\")) or (name[1:2] == ":"):
        raise SpreadrlError(f"{archive}: refusing member with an absolute path: {name!r}")
    if ".." in path.parts:
        raise SpreadrlError(f"{archive}: refusing member that leaves the folder: {name!r}")


def safe_extract(archive: Path, dest: Path) -> Path:
    """Unpack a .tar(.gz/.bz2/.xz) or .zip into ``dest``, refusing unsafe members.

    Absolute paths, ``..`` components, links and device files raise SpreadrlError
    before anything is written.
    """
    dest.mkdir(parents=True, exist_ok=True)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                _check_member(info.filename, archive)
                if (info.external_attr >> 16) & 0o170000 == 0o120000:
                    raise SpreadrlError(f"{archive}: refusing symbolic link {info.filename!r}")
            zf.extractall(dest)
        return dest
    try:
        with tarfile.open(archive) as tf:
            members = tf.getmembers()
            for member in members:
                _check_member(member.name, archive)
                if not (member.isfile() or member.isdir()):
                    raise SpreadrlError(
                        f"{archive}: refusing {member.name!r} (links and special files "
                        "are not expected in a dataset archive)"
                    )
            tf.extractall(dest, members=members, filter="data")
    except tarfile.TarError as exc:
        raise SpreadrlError(f"{archive}: not a readable tar or zip archive ({exc})") from exc
    return dest


def find_archive_root(unpacked: Path, spec: DatasetSpec) -> Path:
    """The folder with dataset.json: ``archive_root`` when present, else the only candidate."""
    expected = unpacked / (spec.archive_root or "")
    if (expected / "dataset.json").is_file():
        return expected
    found = sorted(p.parent for p in unpacked.rglob("dataset.json"))
    if len(found) == 1:
        return found[0]
    top = ", ".join(sorted(p.name for p in unpacked.iterdir())) or "nothing"
    raise SpreadrlError(
        f"{spec.archive}: expected {spec.archive_root}/dataset.json in the archive; it holds {top}"
    )


def _download_archive(
    spec: DatasetSpec,
    out: Path,
    cache: Path,
    endpoint: str | None,
    reporter: Reporter | None,
    **imp: bool,
) -> DownloadReport:
    base = (endpoint or os.environ.get("SPREADRL_ARCHIVE_ENDPOINT") or SB_BASE_URL).rstrip("/")
    url = f"{base}/{spec.archive}"
    local = cache / spec.name / str(spec.archive)
    if not local.is_file():
        if is_offline():
            raise SpreadrlError(
                f"offline mode is on and {local} is not in the cache; "
                + offline_hint(spec, "test", out)
            )
        try:
            fetch_url(url, local, reporter=reporter)
        except SpreadrlError as exc:
            raise SpreadrlError(f"{exc}. Offline? {offline_hint(spec, 'test', out)}") from exc
    unpacked = cache / spec.name / "unpacked"
    if not unpacked.is_dir():
        staging = cache / spec.name / f".unpacking-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            safe_extract(local, staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        staging.rename(unpacked)
    report = import_spreadsheetbench(find_archive_root(unpacked, spec), out, **imp)
    skipped = [f"{p.task_id}: {p.message}" for p in report.skipped]
    return DownloadReport(spec.name, None, out, report.imported, url, skipped)


# ---------------------------------------------------------------- Hugging Face Hub


def _local_format(files: Sequence[Path]) -> str:
    suffixes = {p.suffix for p in files}
    if suffixes <= {".parquet"}:
        return "parquet"
    if suffixes <= {".json", ".jsonl"}:
        return "json"
    raise SpreadrlError(
        f"--data-files: expected .parquet or .json/.jsonl files, got {', '.join(map(str, files))}"
    )


def _hub_files(
    spec: DatasetSpec,
    split: str,
    out: Path,
    cache: Path,
    endpoint: str | None,
    data_files: Sequence[Path] | None,
    reporter: Reporter | None,
) -> tuple[Any, list[Path] | None, str]:
    """(rows as a datasets.Dataset or None, local files or None, where they came from)."""
    if data_files:
        files = [Path(p) for p in data_files]
        missing = [str(p) for p in files if not p.is_file()]
        if missing:
            raise SpreadrlError(f"--data-files: no such file(s): {', '.join(missing)}")
        return None, files, ", ".join(map(str, files))
    mirror = endpoint or os.environ.get("SPREADRL_HUB_ENDPOINT")
    if mirror:
        url = f"{mirror.rstrip('/')}/{spec.repo_id}/{split}.jsonl"
        local = cache / spec.name / "mirror" / f"{split}.jsonl"
        if not local.is_file():
            if is_offline():
                raise SpreadrlError(
                    f"offline mode is on and {local} is not in the cache; "
                    + offline_hint(spec, split, out)
                )
            try:
                fetch_url(url, local, reporter=reporter)
            except SpreadrlError as exc:
                raise SpreadrlError(f"{exc}. Offline? {offline_hint(spec, split, out)}") from exc
        return None, [local], url
    url = f"{HF_DATASETS_URL}/{spec.repo_id}"
    if is_offline():
        raise SpreadrlError(
            f"offline mode is on (HF_HUB_OFFLINE / SPREADRL_OFFLINE) and {url} cannot be "
            f"fetched; {offline_hint(spec, split, out)}"
        )
    import datasets

    try:
        rows = datasets.load_dataset(
            spec.repo_id, split=split, cache_dir=str(cache / "hf-datasets")
        )
    except (ConnectionError, OSError) as exc:
        raise SpreadrlError(
            f"cannot fetch {url} (split {split}): {exc}. Offline? {offline_hint(spec, split, out)}"
        ) from exc
    return rows, None, url


def _release_local(files: Sequence[Path], split: str, parser: str) -> tuple[Path, Path | None]:
    """(the split's parquet, the zip or None) among --data-files."""
    paths = [Path(p) for p in files]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise SpreadrlError(f"--data-files: no such file(s): {', '.join(missing)}")
    parquets = [p for p in paths if p.suffix == ".parquet"]
    archives = [p for p in paths if p.suffix == ".zip"]
    if len(parquets) != 1 or len(archives) > 1 or len(parquets) + len(archives) != len(paths):
        raise SpreadrlError(
            f"--data-files: expected the split's parquet file ({parquet_name(split, parser)}) "
            f"and optionally {ARCHIVE}, got {', '.join(map(str, paths))}"
        )
    return parquets[0], archives[0] if archives else None


def _hub_download(spec: DatasetSpec, filename: str, cache: Path, hint: str) -> Path:
    """One file of a Hub dataset repo through huggingface_hub (its cache, resumption, auth).

    ``HF_ENDPOINT`` is read here, per call, and passed on, so a Hub mirror set
    after start-up is used; offline, only a cached copy is returned.
    """
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
    )

    url = f"{HF_DATASETS_URL}/{spec.repo_id}/blob/main/{filename}"
    try:
        return Path(
            hf_hub_download(
                str(spec.repo_id),
                filename,
                repo_type="dataset",
                cache_dir=str(cache / "hf-hub"),
                endpoint=os.environ.get("HF_ENDPOINT") or None,
                local_files_only=is_offline(),
            )
        )
    except LocalEntryNotFoundError as exc:
        if is_offline():
            raise SpreadrlError(
                f"offline mode is on and {url} is not in the cache {cache / 'hf-hub'}; {hint}"
            ) from exc
        raise SpreadrlError(f"cannot fetch {url}: {exc}. Offline? {hint}") from exc
    except (HfHubHTTPError, EntryNotFoundError, OSError) as exc:
        raise SpreadrlError(f"cannot fetch {url}: {exc}. Offline? {hint}") from exc


def _release_files(
    spec: DatasetSpec,
    split: str,
    parser: str,
    out: Path,
    cache: Path,
    endpoint: str | None,
    data_files: Sequence[Path] | None,
    reporter: Reporter | None,
) -> tuple[Path, Path | None, str]:
    """(parquet, zip, origin) of one released split: local files, a plain mirror or the Hub."""
    if data_files:
        parquet, archive = _release_local(data_files, split, parser)
        return parquet, archive, ", ".join(map(str, data_files))
    names = (parquet_name(split, parser), ARCHIVE)
    hint = offline_hint(spec, split, out)
    mirror = endpoint or os.environ.get("SPREADRL_HUB_ENDPOINT")
    if mirror:
        base = f"{mirror.rstrip('/')}/{spec.repo_id}"
        paths = []
        for name in names:
            local = cache / spec.name / "mirror" / name
            if not local.is_file():
                if is_offline():
                    raise SpreadrlError(
                        f"offline mode is on and {local} is not in the cache; {hint}"
                    )
                try:
                    fetch_url(f"{base}/{name}", local, reporter=reporter)
                except SpreadrlError as exc:
                    raise SpreadrlError(f"{exc}. Offline? {hint}") from exc
            paths.append(local)
        return paths[0], paths[1], base
    parquet, archive = (_hub_download(spec, name, cache, hint) for name in names)
    return parquet, archive, f"{HF_DATASETS_URL}/{spec.repo_id}"


def _load_local(files: list[Path], cache: Path) -> Iterable[Mapping[str, object]]:
    """The rows of local parquet/JSON files (a ``datasets.Dataset``, read row by row)."""
    import datasets

    return datasets.load_dataset(
        _local_format(files),
        data_files=[str(p) for p in files],
        split="train",
        cache_dir=str(cache / "hf-local"),
    )


def foreign_to_download(out: Path) -> str | None:
    """What in ``out`` no download wrote: a task set, or a problems file and its source record."""
    if {p.name for p in out.iterdir()} <= {PROBLEMS_FILE, "source.json"}:
        return None
    return foreign_to_task_set(out)


def _download_problems(
    spec: DatasetSpec,
    split: str,
    out: Path,
    rows: Iterable[Mapping[str, object]],
    origin: str,
    overwrite: bool,
) -> DownloadReport:
    check_output_folder(out, overwrite=overwrite, written_by=foreign_to_download)
    assert spec.convert is not None
    problems, skipped = [], []
    for index, row in enumerate(rows):
        try:
            problems.append(spec.convert(dict(row), index))
        except (SpreadrlError, json.JSONDecodeError) as exc:
            skipped.append(f"row {index}: {exc}")
    if not problems:
        raise SpreadrlError(f"{origin}: no usable {spec.name} rows ({'; '.join(skipped[:3])})")
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (PROBLEMS_FILE + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for problem in problems:
            handle.write(json.dumps(problem, ensure_ascii=False) + "\n")
    tmp.replace(out / PROBLEMS_FILE)
    meta = {"dataset": spec.name, "split": split, "origin": origin, "count": len(problems)}
    (out / "source.json").write_text(json.dumps(meta | {"skipped": skipped}, indent=2))
    for line in skipped[:5]:
        log.warning("%s: skipped %s", spec.name, line)
    return DownloadReport(spec.name, split, out, len(problems), origin, skipped)


def download_dataset(
    name: str,
    out: Path,
    *,
    split: str | None = None,
    cache: Path | None = None,
    endpoint: str | None = None,
    data_files: Sequence[Path] | None = None,
    overwrite: bool = False,
    skip_bad: bool = False,
    reporter: Reporter | None = None,
    parser: str | None = None,
) -> DownloadReport:
    """Download dataset ``name`` (a key of :data:`DATASETS`) and write it to ``out``.

    Spreadsheet sets land in the native task layout; math/code sets as
    ``out/problems.jsonl``. ``endpoint`` is a plain file mirror (archives:
    ``{endpoint}/{archive}``; Spreadsheet-RL: ``{endpoint}/{repo_id}/{file}`` for
    ``{split}_{parser}.parquet`` and ``spreadsheets.zip``; math/code sets:
    ``{endpoint}/{repo_id}/{split}.jsonl``); ``data_files`` are local copies of
    a hub split (Spreadsheet-RL: its parquet file, and the zip unless it lies
    beside it) and skip the network. ``parser`` picks Spreadsheet-RL's
    parquet variant (hermes, the default, or qwen3_coder). ``reporter`` shows each
    file's download (default: nothing shown).
    """
    if name not in DATASETS:
        raise SpreadrlError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    spec = DATASETS[name]
    split = split or spec.default_split
    if split not in spec.splits:
        raise SpreadrlError(f"{name}: no split {split!r} (splits: {', '.join(spec.splits)})")
    out, cache = Path(out), Path(cache) if cache else default_cache()
    if spec.kind == "archive":
        if data_files:
            raise SpreadrlError(
                f"--data-files does not apply to {name}; for a local copy run "
                "`spreadrl data import --from spreadsheetbench DIR --out OUT`"
            )
        return _download_archive(
            spec, out, cache, endpoint, reporter, skip_bad=skip_bad, overwrite=overwrite
        )
    if spec.kind == "hub-release":
        parser = parser or PARSERS[0]
        if parser not in PARSERS:
            raise SpreadrlError(f"--parser {parser!r}: expected one of {', '.join(PARSERS)}")
        parquet, archive, origin = _release_files(
            spec, split, parser, out, cache, endpoint, data_files, reporter
        )
        report = import_spreadsheet_rl(
            parquet,
            out,
            split=split,
            parser=parser,
            workbooks=archive,
            skip_bad=skip_bad,
            overwrite=overwrite,
        )
        skipped = [f"{p.task_id}: {p.message}" for p in report.skipped]
        return DownloadReport(spec.name, split, out, report.imported, origin, skipped)
    rows, files, origin = _hub_files(spec, split, out, cache, endpoint, data_files, reporter)
    return _download_problems(
        spec, split, out, rows if files is None else _load_local(files, cache), origin, overwrite
    )
