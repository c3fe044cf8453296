"""Grading for the math/code environment: final-answer extraction, math equivalence,
and running a coding problem's tests in the sandbox.

Why these rules: the GRPO-TCR recipe trains on DeepScaleR / Omni-MATH / NuminaMath
(a boxed final answer compared symbolically) and TACO / LeetCodeDataset (a program
that must pass every test). Math goes through math-verify, the checker the public
recipes use, with a small sympy fallback for plain answers math-verify cannot parse.
Code is graded in a fresh folder (never the episode's working folder, which the agent
could have seeded with a module that shadows the harness's imports), each test in its
own process inside one sandbox call. Expected outputs never enter the sandbox for
stdin/stdout and call tests: the solution's outputs come back and are compared here.
Assert-style tests must run in the sandbox; they count only when the script exits 0
*and* prints a per-grading random marker after the asserts, so ``sys.exit(0)`` at
import time does not pass.
"""

from __future__ import annotations

import json
import logging
import math
import re
import secrets
import tempfile
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

# the test format is part of the task format (data layer); re-exported here
from spreadrl.data.code_tests import CodeTests, normalize_tests  # noqa: F401
from spreadrl.data.jsontypes import JSONValue
from spreadrl.env.sandbox import SandboxLimits, run_python

log = logging.getLogger(__name__)

_ANSWER_LINE_RE = re.compile(r"(?:final answer|answer)\s*(?:is)?\s*[:：]\s*(.+)", re.IGNORECASE)
_CODE_BLOCK_RE = re.compile(r"```([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)
_TEXT_RE = re.compile(r"\\(?:text|mathrm|textbf|mbox)\{[^{}]*\}")


# ---------------------------------------------------------------- math answers


def extract_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced."""
    best = None
    for match in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        depth, start = 1, match.end()
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    best = text[start:i]
                    break
    return best.strip() if best is not None else None


def extract_math_answer(text: str | None) -> str | None:
    """The final answer of a response: the last boxed expression, else the last
    ``Answer: ...`` line (trailing period and ``$`` stripped), else None."""
    if not text:
        return None
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed
    lines = _ANSWER_LINE_RE.findall(text)
    if not lines:
        return None
    answer = lines[-1].strip().rstrip(".").strip().strip("$").strip()
    return answer or None


def math_answers_equal(predicted: str, reference: str) -> bool:
    """True when ``predicted`` and ``reference`` denote the same value (or set of values).

    math-verify first (LaTeX or plain, fractions vs decimals, sets, units stripped);
    then the sympy fallback on normalised plain text.
    """
    if predicted is None or reference is None:
        return False
    if _normalise(predicted) == _normalise(reference):
        return True
    try:
        if _math_verify_equal(predicted, reference):
            return True
    except Exception as exc:  # math-verify raises on pathological input; fall back
        log.debug("math-verify failed on %r vs %r: %s", predicted, reference, exc)
    return _sympy_equal(predicted, reference)


def _math_verify_equal(predicted: str, reference: str) -> bool:
    import math_verify

    # math-verify's timeouts use SIGALRM, which only the main thread may set.
    main = threading.current_thread() is threading.main_thread()
    parse_timeout = 5 if main else None
    gold = math_verify.parse(f"$\\boxed{{{reference}}}$", parsing_timeout=parse_timeout)
    pred = math_verify.parse(f"$\\boxed{{{predicted}}}$", parsing_timeout=parse_timeout)
    if not gold or not pred:
        return False
    return bool(math_verify.verify(gold, pred, timeout_seconds=5 if main else None))


def _normalise(text: str) -> str:
    """Plain-text form: no ``$``, units/text wrappers, spaces, ``\\left``/``\\right``."""
    out = _TEXT_RE.sub("", str(text))
    for old, new in (("\\left", ""), ("\\right", ""), ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac")):
        out = out.replace(old, new)
    out = out.replace("$", "").replace("\\!", "").replace("\\,", "").replace("\\ ", "")
    out = re.sub(r"\s+", "", out)
    out = re.sub(r"^[a-zA-Z]\s*=", "", out)  # "x=3" -> "3"
    return out.rstrip(".")


def _to_sympy_text(text: str) -> str:
    out = _normalise(text)
    while "\\frac" in out:
        new = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", out)
        if new == out:
            break
        out = new
    out = re.sub(r"\\sqrt\{([^{}]*)\}", r"sqrt(\1)", out)
    out = out.replace("\\pi", "pi").replace("\\cdot", "*").replace("\\times", "*")
    out = out.replace("^", "**").replace("{", "(").replace("}", ")")
    return out.replace("\\", "")


def _sympy_equal(predicted: str, reference: str) -> bool:
    import sympy

    def parts(text: str) -> list[str]:
        body = _unwrap(_to_sympy_text(text))
        return [p for p in body.split(",") if p] if "," in body else [body]

    ordered = _normalise(predicted)[:1] in ("(", "[") or _normalise(reference)[:1] in ("(", "[")
    try:
        pred = [sympy.sympify(p) for p in parts(predicted)]
        ref = [sympy.sympify(p) for p in parts(reference)]
    except (sympy.SympifyError, SyntaxError, TypeError, ValueError, AttributeError):
        return False
    if len(pred) != len(ref):
        return False
    if ordered:
        return all(_sympy_zero(p, r) for p, r in zip(pred, ref, strict=True))
    unmatched = list(ref)
    for p in pred:
        for r in unmatched:
            if _sympy_zero(p, r):
                unmatched.remove(r)
                break
        else:
            return False
    return True


def _unwrap(body: str) -> str:
    """``(a,b)`` -> ``a,b`` when the outer brackets enclose the whole text."""
    if len(body) < 2 or body[0] not in "([" or body[-1] not in ")]":
        return body
    depth = 0
    for i, char in enumerate(body):
        depth += char in "(["
        depth -= char in ")]"
        if depth == 0 and i < len(body) - 1:
            return body
    return body[1:-1]


def _sympy_zero(a: Any, b: Any) -> bool:
    import sympy

    try:
        return bool(sympy.simplify(a - b) == 0)
    except (TypeError, ValueError, AttributeError):
        return False


# ---------------------------------------------------------------- code answers


def extract_code(text: str | None) -> str | None:
    """The last fenced ```python (or ```py / untagged) block of a response."""
    if not text:
        return None
    blocks = [(lang.lower(), body) for lang, body in _CODE_BLOCK_RE.findall(text)]
    python = [body for lang, body in blocks if lang in ("python", "py", "python3", "")]
    return python[-1].strip("\n") + "\n" if python else None


@dataclass(frozen=True)
class TestOutcome:
    """One test's verdict; ``detail`` says why it failed (got, error, timeout)."""

    index: int
    passed: bool
    expected: JSONValue = None
    actual: JSONValue = None
    detail: str = ""


@dataclass(frozen=True)
class CodeGrade:
    """All tests of one solution: ``passed`` only when every test passed."""

    passed: bool
    outcomes: list[TestOutcome] = field(default_factory=list)
    error: str | None = None

    @property
    def tests_passed(self) -> int:
        return sum(o.passed for o in self.outcomes)


_MARK = "__SPREADRL_RESULT__"
_HARNESS = """
import json, subprocess, sys
jobs = json.loads({jobs!r})
per_test, cap = {per_test!r}, {cap!r}
results = []
for stdin in jobs:
    try:
        p = subprocess.run([sys.executable, "solution.py"], input=stdin, capture_output=True,
                           text=True, errors="replace", timeout=per_test)
        results.append({{"stdout": p.stdout[:cap], "stderr": p.stderr[-600:], "exit": p.returncode}})
    except subprocess.TimeoutExpired:
        results.append({{"timeout": True}})
        break
print({mark!r} + json.dumps(results))
"""
_CALL_DRIVER = """

def __spreadrl_main():
    import json, sys
    name = {fn!r}
    fn = globals().get(name)
    if "Solution" in globals() and hasattr(globals()["Solution"], name):
        fn = getattr(globals()["Solution"](), name)
    result = fn(*json.loads(sys.stdin.read()))
    print({mark!r} + json.dumps(result, default=repr))

__spreadrl_main()
"""


def run_code_tests(
    solution: str,
    tests: CodeTests,
    limits: SandboxLimits | None = None,
    *,
    mode: str = "auto",
    per_test_timeout_s: float = 6.0,
) -> CodeGrade:
    """Run ``tests`` against ``solution`` in one sandbox call, in a fresh folder.

    ``limits`` (SandboxLimits) bounds the whole call; each test also gets
    ``per_test_timeout_s``. A test that times out stops the rest (they count as failed).
    """
    limits = replace(limits or SandboxLimits(), max_output_chars=2_000_000)
    marker = f"__SPREADRL_OK_{secrets.token_hex(8)}__"
    if tests.kind == "assert":
        script = "\n".join([tests.prelude, solution, tests.code])
        if tests.entry_point and re.search(r"^def check\(", tests.code, re.MULTILINE):
            script += f"\ncheck({tests.entry_point})"
        script += f"\nprint({marker!r})\n"
        jobs = [""]
    elif tests.kind == "call":
        script = solution + _CALL_DRIVER.format(fn=tests.fn_name, mark=marker)
        jobs = [json.dumps(case["args"]) for case in tests.cases]
    else:
        script = solution
        jobs = [str(case["input"]) for case in tests.cases]
    harness = _HARNESS.format(
        jobs=json.dumps(jobs), per_test=per_test_timeout_s, cap=200_000, mark=_MARK
    )
    with tempfile.TemporaryDirectory(prefix="spreadrl-grade-") as tmp:
        (Path(tmp) / "solution.py").write_text(script)
        result = run_python(harness, Path(tmp), limits, mode=mode)
    line = next((ln for ln in result.stdout.splitlines() if ln.startswith(_MARK)), None)
    if line is None:
        why = "timed out" if result.timed_out else (result.error or result.stderr[-300:])
        return CodeGrade(False, [], error=f"test harness gave no result: {why}")
    runs = json.loads(line[len(_MARK) :])
    outcomes = [
        _judge(i, tests, runs[i] if i < len(runs) else None, marker) for i in range(len(jobs))
    ]
    return CodeGrade(all(o.passed for o in outcomes), outcomes)


def _judge(index: int, tests: CodeTests, run: dict | None, marker: str) -> TestOutcome:
    case = tests.cases[index] if tests.kind != "assert" else {}
    expected = case.get("output", case.get("expected"))
    if run is None:
        return TestOutcome(index, False, expected, None, "not run (an earlier test timed out)")
    if run.get("timeout"):
        return TestOutcome(index, False, expected, None, "timed out")
    stdout, stderr, code = run["stdout"], run["stderr"], run["exit"]
    if tests.kind == "assert":
        ok = code == 0 and stdout.rstrip().endswith(marker)
        detail = "" if ok else (stderr.strip().splitlines() or [f"exit code {code}"])[-1]
        return TestOutcome(index, ok, "all asserts pass", None, detail)
    if code != 0:
        last = (stderr.strip().splitlines() or [f"exit code {code}"])[-1]
        return TestOutcome(index, False, expected, stdout[:200], f"crashed: {last}")
    if tests.kind == "stdio":
        ok = stdout_matches(stdout, str(expected))
        return TestOutcome(index, ok, expected, stdout[:500], "" if ok else "wrong output")
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.startswith(marker)), None)
    if line is None:
        return TestOutcome(index, False, expected, stdout[:200], "no return value")
    value = json.loads(line[len(marker) :])
    ok = value == expected or [value] == expected
    return TestOutcome(index, ok, expected, value, "" if ok else "wrong return value")


def stdout_matches(actual: str, expected: str) -> bool:
    """TACO-style output comparison: trailing spaces and blank lines ignored; tokens
    compared as numbers (1e-6 tolerance) when both parse as floats."""
    if actual.rstrip().splitlines() == expected.rstrip().splitlines():
        return True
    norm_a = [ln.rstrip() for ln in actual.strip().splitlines()]
    norm_e = [ln.rstrip() for ln in expected.strip().splitlines()]
    if norm_a == norm_e:
        return True
    tok_a, tok_e = actual.split(), expected.split()
    if len(tok_a) != len(tok_e):
        return False
    for a, e in zip(tok_a, tok_e, strict=True):
        if a == e:
            continue
        try:
            if not math.isclose(float(a), float(e), rel_tol=1e-6, abs_tol=1e-6):
                return False
        except ValueError:
            return False
    return True
