"""download: the real fetch/unpack/import path against a local HTTP server and local files."""

from __future__ import annotations

import io
import json
import socket
import tarfile
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from rich.console import Console

from spreadrl.cli.console import RichReporter
from spreadrl.data.download import (
    DATASETS,
    PROBLEMS_FILE,
    download_dataset,
    fetch_url,
    safe_extract,
)
from spreadrl.data.task import load_tasks
from spreadrl.errors import SpreadrlError
from tests.data.fake_sources import make_spreadsheetbench
from tests.data.srl_release import make_release


class FakeServer:
    """Serves ``files`` (path -> bytes) with Range support; ``cut`` truncates one body once."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.requests: list[tuple[str, str | None]] = []
        self.cut: dict[str, int] = {}
        owner = self

        class Handler(BaseHTTPRequestHandler):
            timeout = 5

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                owner.requests.append((self.path, self.headers.get("Range")))
                body = owner.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                start = 0
                if self.headers.get("Range"):
                    start = int(self.headers["Range"].split("=")[1].split("-")[0])
                    if start >= len(body):
                        self.send_response(416)
                        self.end_headers()
                        return
                    self.send_response(206)
                else:
                    self.send_response(200)
                rest = body[start:]
                self.send_header("Content-Length", str(len(rest)))
                self.end_headers()
                limit = owner.cut.pop(self.path, None)
                self.wfile.write(rest if limit is None else rest[:limit])
                if limit is not None:
                    self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def server():
    with FakeServer() as fake:
        yield fake


@pytest.fixture(autouse=True)
def _online(monkeypatch):
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "SPREADRL_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    for var in ("SPREADRL_ARCHIVE_ENDPOINT", "SPREADRL_HUB_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)


def _tar_of(folder: Path, arcname: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        tf.add(folder, arcname=arcname)
    return buffer.getvalue()


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_spreadsheetbench_archive_downloads_unpacks_and_imports(server, tmp_path):
    spec = DATASETS["spreadsheetbench-verified"]
    release = make_spreadsheetbench(tmp_path / "release", verified=True)
    server.files[f"/{spec.archive}"] = _tar_of(release, spec.archive_root)
    report = download_dataset(
        "spreadsheetbench-verified", tmp_path / "out", cache=tmp_path / "cache", endpoint=server.url
    )
    assert report.count == 2 and report.origin == f"{server.url}/{spec.archive}"
    tasks = load_tasks(tmp_path / "out")
    assert sorted(t.id for t in tasks) == ["101", "102"]
    assert all(len(t.cases) == 1 for t in tasks)
    # The cached archive is reused: a second download into a new folder asks nothing.
    before = len(server.requests)
    download_dataset(
        "spreadsheetbench-verified",
        tmp_path / "out2",
        cache=tmp_path / "cache",
        endpoint=server.url,
    )
    assert len(server.requests) == before


def test_fetch_resumes_a_cut_download_with_a_range_request(server, tmp_path):
    body = bytes(range(256)) * 400
    server.files["/big.bin"] = body
    server.cut["/big.bin"] = 10_000
    dest = tmp_path / "big.bin"
    with pytest.raises(SpreadrlError, match="run the command again to resume|cannot download"):
        fetch_url(f"{server.url}/big.bin", dest)
    assert not dest.exists()  # never a half-written file under the final name
    assert (tmp_path / "big.bin.part").stat().st_size == 10_000
    fetch_url(f"{server.url}/big.bin", dest, reporter=RichReporter(Console(file=io.StringIO())))
    assert dest.read_bytes() == body
    assert server.requests[-1] == ("/big.bin", "bytes=10000-")
    assert not (tmp_path / "big.bin.part").exists()


def test_http_errors_and_missing_network_name_the_url_and_the_offline_route(server, tmp_path):
    with pytest.raises(SpreadrlError, match=r"HTTP 404"):
        fetch_url(f"{server.url}/nope.tar.gz", tmp_path / "x")
    dead = _closed_port_url()
    with pytest.raises(SpreadrlError) as info:
        download_dataset(
            "spreadsheetbench", tmp_path / "out", cache=tmp_path / "cache", endpoint=dead
        )
    message = str(info.value)
    assert f"{dead}/spreadsheetbench_912_v0.1.tar.gz" in message
    assert "spreadrl data import --from spreadsheetbench" in message


def test_offline_mode_fetches_nothing_and_says_what_to_do(server, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SpreadrlError, match="offline mode is on.*spreadrl data import"):
        download_dataset(
            "spreadsheetbench", tmp_path / "out", cache=tmp_path / "c", endpoint=server.url
        )
    with pytest.raises(SpreadrlError, match="offline mode.*huggingface.co/datasets/BAAI/TACO"):
        download_dataset("taco", tmp_path / "out", cache=tmp_path / "c")
    assert server.requests == []


@pytest.mark.parametrize("bad", ["../evil.txt", "/abs/evil.txt", "ok/../../evil.txt"])
def test_safe_extract_refuses_escaping_members(tmp_path, bad):
    archive = tmp_path / "bad.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("fine.txt", "ok")
        zf.writestr(bad, "boom")
    with pytest.raises(SpreadrlError, match="refusing member"):
        safe_extract(archive, tmp_path / "dest")
    assert not (tmp_path / "dest" / "fine.txt").exists()  # checked before writing anything
    tar_path = tmp_path / "bad.tar"
    with tarfile.open(tar_path, "w") as tf:
        data = b"boom"
        member = tarfile.TarInfo(bad)
        member.size = len(data)
        tf.addfile(member, io.BytesIO(data))
    with pytest.raises(SpreadrlError, match="refusing member"):
        safe_extract(tar_path, tmp_path / "dest2")


def test_safe_extract_refuses_links_and_unpacks_zip(tmp_path):
    tar_path = tmp_path / "link.tar"
    with tarfile.open(tar_path, "w") as tf:
        link = tarfile.TarInfo("data/passwd")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tf.addfile(link)
    with pytest.raises(SpreadrlError, match="refusing 'data/passwd'"):
        safe_extract(tar_path, tmp_path / "dest")
    good = tmp_path / "good.zip"
    with zipfile.ZipFile(good, "w") as zf:
        zf.writestr("set/dataset.json", "[]")
    assert (safe_extract(good, tmp_path / "g") / "set" / "dataset.json").read_text() == "[]"


def test_archive_without_the_expected_layout_is_a_clear_error(server, tmp_path):
    spec = DATASETS["spreadsheetbench"]
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "readme.txt").write_text("hi")
    server.files[f"/{spec.archive}"] = _tar_of(tmp_path / "junk", "junk")
    with pytest.raises(SpreadrlError, match="expected spreadsheetbench_912_v0.1/dataset.json"):
        download_dataset(
            "spreadsheetbench", tmp_path / "out", cache=tmp_path / "c", endpoint=server.url
        )


def _release_files(root: Path) -> dict[str, bytes]:
    make_release(root, splits=("test",), parsers=("hermes", "qwen3_coder"))
    return {p.name: p.read_bytes() for p in root.iterdir()}


def test_spreadsheet_rl_split_from_a_mirror_and_from_local_files(server, tmp_path):
    files = _release_files(tmp_path / "src")
    for name, body in files.items():
        server.files[f"/Spreadsheet-RL/Spreadsheet-RL/{name}"] = body
    report = download_dataset(
        "spreadsheet-rl",
        tmp_path / "out",
        split="test",
        cache=tmp_path / "c",
        endpoint=server.url,
    )
    assert report.count == 2 and report.split == "test"
    asked = {path for path, _ in server.requests}
    assert asked == {
        "/Spreadsheet-RL/Spreadsheet-RL/test_hermes.parquet",
        "/Spreadsheet-RL/Spreadsheet-RL/spreadsheets.zip",
    }
    tasks = load_tasks(tmp_path / "out")
    assert [t.source for t in tasks] == ["spreadsheet-rl", "spreadsheet-rl"]
    assert all(t.metadata["prompt"][0]["role"] == "system" for t in tasks)
    assert tasks.tasks[0].cases[0].answer_path.read_bytes().startswith(b"PK")
    # local copies: the parquet file alone (the zip beside it), or both named
    parquet = tmp_path / "src" / "test_qwen3_coder.parquet"
    local = download_dataset(
        "spreadsheet-rl",
        tmp_path / "out2",
        split="test",
        parser="qwen3_coder",
        data_files=[parquet],
    )
    assert local.count == 2 and local.origin == str(parquet)
    moved = tmp_path / "elsewhere" / "spreadsheets.zip"
    moved.parent.mkdir()
    (tmp_path / "src" / "spreadsheets.zip").rename(moved)
    both = download_dataset(
        "spreadsheet-rl", tmp_path / "out3", split="test", data_files=[parquet, moved]
    )
    assert both.count == 2
    with pytest.raises(SpreadrlError, match="no split 'dev'"):
        download_dataset("spreadsheet-rl", tmp_path / "o3", split="dev", data_files=[parquet])
    with pytest.raises(SpreadrlError, match="--data-files: expected the split's parquet"):
        download_dataset("spreadsheet-rl", tmp_path / "o4", split="test", data_files=[moved])


class FakeHub:
    """Answers huggingface_hub's HEAD + GET on /datasets/<repo>/resolve/<rev>/<file>."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files, self.requests = files, []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self, body_too: bool) -> None:
                owner.requests.append((self.command, self.path))
                name = self.path.split("?")[0].rsplit("/resolve/main/", 1)[-1]
                body = owner.files.get(name)
                if "/resolve/main/" not in self.path or body is None:
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("X-Repo-Commit", "a" * 40)
                self.send_header("ETag", f'"{abs(hash(body)):x}"')
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if body_too:
                    self.wfile.write(body)

            def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
                self._serve(False)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                self._serve(True)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_spreadsheet_rl_through_huggingface_hub_and_its_cache(tmp_path, monkeypatch):
    hub = FakeHub(_release_files(tmp_path / "src"))
    try:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
        report = download_dataset(
            "spreadsheet-rl", tmp_path / "out", split="test", cache=tmp_path / "c"
        )
        assert report.count == 2 and report.origin.endswith("Spreadsheet-RL/Spreadsheet-RL")
        got = {path.split("/resolve/main/")[-1] for _, path in hub.requests}
        assert got == {"test_hermes.parquet", "spreadsheets.zip"}
        assert "/datasets/Spreadsheet-RL/Spreadsheet-RL/" in hub.requests[0][1]
        # offline: the files huggingface_hub cached are used, nothing is asked
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        before = len(hub.requests)
        again = download_dataset(
            "spreadsheet-rl", tmp_path / "out2", split="test", cache=tmp_path / "c"
        )
        assert again.count == 2 and len(hub.requests) == before
        with pytest.raises(SpreadrlError, match="offline mode is on.*test_2_hermes.parquet"):
            download_dataset(
                "spreadsheet-rl", tmp_path / "o3", split="test_2", cache=tmp_path / "c"
            )
        monkeypatch.delenv("HF_HUB_OFFLINE")
        with pytest.raises(SpreadrlError, match="cannot fetch .*test_2_hermes.parquet"):
            download_dataset(
                "spreadsheet-rl", tmp_path / "o4", split="test_2", cache=tmp_path / "c"
            )
    finally:
        hub.close()


def test_math_and_code_sets_become_problem_jsonl(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    math_rows = tmp_path / "math.jsonl"
    math_rows.write_text(
        json.dumps({"problem": "1+1?", "answer": "2", "solution": "..."})
        + "\n"
        + json.dumps({"problem": "no answer", "answer": ""})
        + "\n"
    )
    report = download_dataset(
        "deepscaler", tmp_path / "ds", cache=tmp_path / "c", data_files=[math_rows]
    )
    assert report.count == 1 and len(report.skipped) == 1
    rows = [json.loads(x) for x in (tmp_path / "ds" / PROBLEMS_FILE).read_text().splitlines()]
    assert rows == [
        {
            "id": "deepscaler-000000",
            "source": "deepscaler",
            "kind": "math",
            "problem": "1+1?",
            "answer": "2",
        }
    ]
    io_spec = json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})
    taco = tmp_path / "taco.parquet"
    pq.write_table(pa.Table.from_pylist([{"question": "Add.", "input_output": io_spec}]), taco)
    download_dataset("taco", tmp_path / "taco", cache=tmp_path / "c", data_files=[taco])
    row = json.loads((tmp_path / "taco" / PROBLEMS_FILE).read_text())
    assert row["kind"] == "code" and row["tests"] == {"inputs": ["1 2\n"], "outputs": ["3\n"]}
    leet = tmp_path / "leet.jsonl"
    leet.write_text(
        json.dumps(
            {
                "task_id": "two-sum",
                "problem_description": "Return indices.",
                "starter_code": "class Solution: ...",
                "test": "def check(candidate):\n    assert True",
                "entry_point": "Solution().twoSum",
                "prompt": "from typing import List",
            }
        )
    )
    download_dataset("leetcode", tmp_path / "lc", cache=tmp_path / "c", data_files=[leet])
    row = json.loads((tmp_path / "lc" / PROBLEMS_FILE).read_text())
    assert row["id"] == "leetcode-two-sum"
    assert row["tests"]["kind"] == "assert" and row["tests"]["entry_point"] == "Solution().twoSum"
    with pytest.raises(SpreadrlError, match="not empty"):
        download_dataset("leetcode", tmp_path / "lc", cache=tmp_path / "c", data_files=[leet])


def test_unknown_names_and_misused_options(tmp_path):
    with pytest.raises(SpreadrlError, match="unknown dataset 'nope'.*spreadsheet-rl"):
        download_dataset("nope", tmp_path / "o")
    with pytest.raises(SpreadrlError, match="--data-files does not apply"):
        download_dataset("spreadsheetbench", tmp_path / "o", data_files=[tmp_path / "x"])
    with pytest.raises(SpreadrlError, match="no such file"):
        download_dataset("omni-math", tmp_path / "o", data_files=[tmp_path / "missing.jsonl"])
