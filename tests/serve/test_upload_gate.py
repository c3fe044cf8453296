"""POST /v1/tasks (the page's upload too) refuses a hostile workbook before openpyxl sees it."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests import archive_bombs as bombs

BOMBS = [
    (bombs.deflate_bomb, 413),
    (bombs.many_members, 413),
    (bombs.nested_zip, 422),
    (bombs.lying_sizes, 422),
]


def test_a_bomb_upload_is_413_or_422_naming_the_reason(app_factory, tmp_path):
    with TestClient(app_factory()) as client:
        for build, status in BOMBS:
            data = build(tmp_path / "bomb.xlsx").read_bytes()
            r = client.post(
                "/v1/tasks", files={"file": ("bomb.xlsx", data)}, data={"instruction": "x"}
            )
            assert r.status_code == status, (build.__name__, r.text)
            error = r.json()["error"]
            assert error["code"] == "workbook_refused"
            assert error["message"].startswith("bomb.xlsx: workbook refused: ")
