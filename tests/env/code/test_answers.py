"""Math answer extraction/equivalence and code test running (in the real sandbox)."""

from __future__ import annotations

import threading

import pytest

from spreadrl.env.code.answers import (
    CodeTests,
    extract_boxed,
    extract_code,
    extract_math_answer,
    math_answers_equal,
    normalize_tests,
    run_code_tests,
    stdout_matches,
)
from spreadrl.env.sandbox import SandboxLimits
from spreadrl.errors import TaskFormatError

FAST = SandboxLimits(wall_time_s=10, cpu_time_s=5, memory_mb=512)


def test_extract_boxed_takes_the_last_and_balances_braces():
    text = "first \\boxed{1} then \\boxed{\\frac{1}{2}} done"
    assert extract_boxed(text) == "\\frac{1}{2}"
    assert extract_boxed("\\boxed{\\{1, \\{2\\}\\}}") == "\\{1, \\{2\\}\\}"
    assert extract_boxed("no box") is None


def test_extract_math_answer_falls_back_to_answer_line():
    assert extract_math_answer("so it is 7.\nAnswer: $42$.") == "42"
    assert extract_math_answer("The final answer is: 3/4") == "3/4"
    assert extract_math_answer("Answer: 1\n\\boxed{2}") == "2"
    assert extract_math_answer("I think it's about 5") is None
    assert extract_math_answer(None) is None


@pytest.mark.parametrize(
    ("predicted", "reference"),
    [
        ("0.5", "\\frac{1}{2}"),
        ("\\dfrac{3}{4}", "0.75"),
        ("\\frac12", "1/2"),
        ("\\{3, 2\\}", "\\{2, 3\\}"),
        ("3, -2", "-2, 3"),
        ("5\\text{ cm}", "5"),
        ("45^\\circ", "45"),
        ("x = 3", "3"),
        ("12.0", "12"),
        ("\\sqrt{2}/2", "\\frac{1}{\\sqrt{2}}"),
        ("2\\pi", "\\pi \\cdot 2"),
    ],
)
def test_equivalent_answers(predicted, reference):
    assert math_answers_equal(predicted, reference)


@pytest.mark.parametrize(
    ("predicted", "reference"),
    [("2", "3"), ("0.33", "\\frac{1}{3}"), ("(1, 2)", "(2, 1)"), ("\\{2\\}", "\\{2, 3\\}")],
)
def test_different_answers(predicted, reference):
    assert not math_answers_equal(predicted, reference)


def test_equivalence_works_off_the_main_thread():
    """math-verify's SIGALRM timeout cannot be set off the main thread (env workers may
    call finish from a thread); the check must still work there."""
    out = []
    thread = threading.Thread(target=lambda: out.append(math_answers_equal("0.25", "\\frac14")))
    thread.start()
    thread.join()
    assert out == [True]


def test_sympy_fallback_handles_plain_expressions():
    from spreadrl.env.code.answers import _sympy_equal

    assert _sympy_equal("\\frac{2}{4}", "0.5")
    assert _sympy_equal("2, 1", "1, 2")
    assert not _sympy_equal("(2, 1)", "(1, 2)")
    assert not _sympy_equal("foo(", "1")


def test_extract_code_takes_last_python_block():
    text = "try\n```python\nprint(1)\n```\nbetter:\n```python\nprint(2)\n```\n```text\nx\n```"
    assert extract_code(text) == "print(2)\n"
    assert extract_code("no code here") is None


def test_normalize_tests_accepts_source_formats():
    taco = normalize_tests({"inputs": ["1 2\n"], "outputs": ["3\n"]})
    assert taco.kind == "stdio" and taco.cases[0] == {"input": "1 2\n", "output": "3\n"}
    call = normalize_tests({"inputs": [[1, 2]], "outputs": [3], "fn_name": "add"})
    assert call.kind == "call" and call.fn_name == "add"
    assert normalize_tests("assert f() == 1").kind == "assert"
    assert normalize_tests([{"input": "a", "output": "a"}]).kind == "stdio"
    again = normalize_tests(call.to_json())
    assert again == call
    with pytest.raises(TaskFormatError, match="unknown test format"):
        normalize_tests({"kind": "fuzz"})
    with pytest.raises(TaskFormatError, match="same length"):
        normalize_tests({"inputs": ["1"], "outputs": []}, "p.jsonl:3")


def test_stdout_comparison_is_lenient_on_whitespace_and_floats():
    assert stdout_matches("3  \n\n", "3")
    assert stdout_matches("0.3333333", "0.33333333")
    assert not stdout_matches("3 4", "3")
    assert not stdout_matches("0.34", "0.33")


STDIO = normalize_tests({"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]})


def test_stdio_solution_passes_and_wrong_one_fails():
    good = run_code_tests("a, b = map(int, input().split())\nprint(a + b)\n", STDIO, FAST)
    assert good.passed and good.tests_passed == 2
    wrong = run_code_tests("a, b = map(int, input().split())\nprint(a * b)\n", STDIO, FAST)
    assert not wrong.passed
    assert [o.passed for o in wrong.outcomes] == [False, False]
    assert wrong.outcomes[0].actual.strip() == "2" and wrong.outcomes[0].detail == "wrong output"


def test_solution_reading_fd0_and_exiting_works():
    """A test runs as its own process, so open(0) and sys.exit behave as on a judge."""
    code = "import sys\na, b = map(int, open(0).read().split())\nprint(a + b)\nsys.exit(0)\n"
    assert run_code_tests(code, STDIO, FAST).passed


def test_crashing_solution_reports_the_error():
    grade = run_code_tests("raise ValueError('boom')\n", STDIO, FAST)
    assert not grade.passed
    assert "ValueError: boom" in grade.outcomes[0].detail


def test_timeout_fails_and_skips_the_rest():
    grade = run_code_tests("while True:\n    pass\n", STDIO, FAST, per_test_timeout_s=0.5)
    assert not grade.passed
    assert grade.outcomes[0].detail == "timed out"
    assert grade.outcomes[1].detail.startswith("not run")


def test_call_tests_compare_return_values_outside_the_sandbox():
    tests = normalize_tests({"inputs": [[2, 3], [0, 0]], "outputs": [[5], 0], "fn_name": "add"})
    assert run_code_tests("def add(a, b):\n    return a + b\n", tests, FAST).passed
    method = "class Solution:\n    def add(self, a, b):\n        return a + b\n"
    assert run_code_tests(method, tests, FAST).passed
    assert not run_code_tests("def add(a, b):\n    return a - b\n", tests, FAST).passed


def test_assert_tests_with_entry_point():
    tests = CodeTests(
        kind="assert",
        code="def check(candidate):\n    assert candidate([1, 2]) == 3\n",
        entry_point="Solution().total",
        prelude="from typing import List",
    )
    good = "class Solution:\n    def total(self, xs: List[int]) -> int:\n        return sum(xs)\n"
    assert run_code_tests(good, tests, FAST).passed
    bad = good.replace("sum(xs)", "max(xs)")
    grade = run_code_tests(bad, tests, FAST)
    assert not grade.passed and "AssertionError" in grade.outcomes[0].detail


def test_exiting_early_does_not_pass_assert_tests():
    tests = CodeTests(kind="assert", code="assert f() == 1\n")
    for cheat in ("import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n"):
        assert not run_code_tests(cheat, tests, FAST).passed


def test_harness_without_result_is_a_failure_with_a_reason():
    tight = SandboxLimits(wall_time_s=1, cpu_time_s=5, memory_mb=512)
    tests = normalize_tests([{"input": str(i), "output": str(i)} for i in range(3)])
    grade = run_code_tests("import time\ntime.sleep(0.6)\n", tests, tight, per_test_timeout_s=5)
    assert not grade.passed
    assert grade.error is not None and "no result" in grade.error
