"""Library code says why in its own words: no issue numbers in the package.

An issue number points a reader at a tracker the wheel does not ship; the reason it
stood for belongs in the sentence (the commit that fixed it keeps the reference)."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "spreadrl"
ISSUE = re.compile(r"\bissues? #?\d+\b|\(#\d+\)", re.IGNORECASE)


def issue_numbers(text: str) -> list[int]:
    return [text.count("\n", 0, m.start()) + 1 for m in ISSUE.finditer(text)]


def test_the_package_names_no_issue_number():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in issue_numbers(path.read_text())
    ]
    assert found == []


def test_the_pattern_finds_the_forms_that_were_there():
    assert issue_numbers("x (issue 32).\n") == [1]
    assert issue_numbers("a\n(issue 36 item 4)") == [2]
    assert issue_numbers("see issues 8") == [1]
    assert issue_numbers("fixed in (#12)") == [1]
    assert issue_numbers("the issue is 3 bytes") == []
