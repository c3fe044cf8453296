"""Tests of a code problem in one canonical form, and the formats they are read from.

Part of the task format (a code task's ``metadata["tests"]``), so it lives in
the data layer; :mod:`spreadrl.env.code.answers` runs them and re-exports these names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spreadrl.data.jsontypes import JSONValue
from spreadrl.errors import TaskFormatError


@dataclass(frozen=True)
class CodeTests:
    """A problem's tests in one canonical form.

    kind "stdio": ``cases`` of {"input", "output"} (TACO, Codeforces style);
    kind "call": ``fn_name`` and ``cases`` of {"args", "expected"} (TACO call-based;
    a method of ``class Solution`` is found too); kind "assert": ``code`` run after
    the solution, with ``entry_point`` passed to ``check(...)`` when the code defines
    it (LeetCodeDataset), and an optional ``prelude`` (imports) placed first.
    """

    kind: str
    cases: tuple[Mapping[str, Any], ...] = ()
    fn_name: str | None = None
    code: str = ""
    entry_point: str | None = None
    prelude: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "cases": [dict(c) for c in self.cases],
            "fn_name": self.fn_name,
            "code": self.code,
            "entry_point": self.entry_point,
            "prelude": self.prelude,
        }


def normalize_tests(raw: CodeTests | JSONValue, where: str = "tests") -> CodeTests:
    """Accept the test formats of the sources and of our JSONL files (see CodeTests).

    Forms: a CodeTests; {"kind": ...} (our own); TACO's {"inputs": [...], "outputs":
    [...], "fn_name"?}; a list of {"input", "output"}; a string of assert code.
    """
    if isinstance(raw, CodeTests):
        return raw
    if isinstance(raw, str):
        if not raw.strip():
            raise TaskFormatError(f"{where}: empty test code")
        return CodeTests(kind="assert", code=raw)
    if isinstance(raw, list):
        raw = {"kind": "stdio", "cases": raw}
    if not isinstance(raw, Mapping):
        raise TaskFormatError(f"{where}: expected an object, a list or a string, got {raw!r:.80}")
    if "inputs" in raw and "outputs" in raw:
        ins, outs = list(raw["inputs"]), list(raw["outputs"])
        if len(ins) != len(outs) or not ins:
            raise TaskFormatError(f"{where}: inputs and outputs must be non-empty, same length")
        if raw.get("fn_name"):
            cases = [{"args": a, "expected": e} for a, e in zip(ins, outs, strict=True)]
            return CodeTests(kind="call", cases=tuple(cases), fn_name=str(raw["fn_name"]))
        cases = [{"input": _join(a), "output": _join(e)} for a, e in zip(ins, outs, strict=True)]
        return CodeTests(kind="stdio", cases=tuple(cases))
    kind = raw.get("kind")
    if kind == "assert":
        if not str(raw.get("code") or "").strip():
            raise TaskFormatError(f"{where}: assert tests need non-empty 'code'")
        return CodeTests(
            kind="assert",
            code=str(raw["code"]),
            entry_point=raw.get("entry_point"),
            prelude=str(raw.get("prelude") or ""),
        )
    if kind in ("stdio", "call"):
        cases = tuple(dict(c) for c in raw.get("cases") or ())
        need = ("input", "output") if kind == "stdio" else ("args", "expected")
        if not cases or any(not all(k in c for k in need) for c in cases):
            raise TaskFormatError(f"{where}: {kind} tests need cases with {' and '.join(need)}")
        if kind == "call" and not raw.get("fn_name"):
            raise TaskFormatError(f"{where}: call tests need 'fn_name'")
        return CodeTests(kind=kind, cases=cases, fn_name=raw.get("fn_name"))
    raise TaskFormatError(
        f"{where}: unknown test format (kind {kind!r}); use kind stdio, call or assert, "
        "or TACO's inputs/outputs"
    )


def _join(value: JSONValue) -> str:
    return "\n".join(map(str, value)) if isinstance(value, list) else str(value)
