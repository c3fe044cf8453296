"""Math and coding problems for the GRPO-TCR environment, as Task objects.

A problem is a :class:`spreadrl.data.task.Task` so the agent loop, eval and the
trainer handle it like a spreadsheet task: ``source`` is "math" or "code" (and so is
``instruction_type``), ``instruction`` is the problem text, ``family`` names the
dataset it came from, and ``metadata`` holds what grading needs: ``answer`` (math) or
``tests`` (code, canonical :class:`spreadrl.data.code_tests.CodeTests` JSON), plus an
optional ``reference_solution`` (a final answer text that passes). There is no
workbook: every problem has one case, index 1, whose paths name the file the problem
came from.

On disk (what ``spreadrl data download`` writes for DeepScaleR, Omni-MATH, NuminaMath,
TACO and LeetCodeDataset) one JSON object per line::

    {"id": "...", "source": "deepscaler", "problem": "...", "answer": "..."}
    {"id": "...", "source": "taco", "problem": "...", "tests": {...}}

``tests`` may be any form :func:`spreadrl.data.code_tests.normalize_tests` accepts;
optional fields: ``kind`` ("math" | "code", when both answer and tests are given),
``difficulty``, ``reference_solution``.

The built-in sets are small, hand-checked and offline, so the whole recipe runs on a
laptop: 44 math problems (arithmetic, algebra, counting; several are easier with a
calculation in code) and 20 coding problems (stdin/stdout, function-call and
LeetCode-style assert tests). Every fifth problem is in the test split.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spreadrl.data.code_tests import normalize_tests
from spreadrl.data.jsontypes import JSONObject, JSONValue
from spreadrl.data.task import Task, TaskCase, TaskProblem, TaskSet
from spreadrl.errors import TaskFormatError

MATH = "math"
CODE = "code"
PROBLEM_KINDS = (MATH, CODE)
BUILTIN_ROOT = Path("<builtin-code-tasks>")
SPLITS = ("train", "test", "all")


def make_problem_task(
    task_id: str,
    problem: str,
    *,
    kind: str,
    answer: str | None = None,
    tests: JSONValue = None,
    origin: str = "builtin",
    difficulty: str | None = None,
    reference_solution: str | None = None,
    path: Path = BUILTIN_ROOT,
) -> Task:
    """A math (``answer``) or code (``tests``) problem as a Task; tests are validated."""
    metadata: dict[str, Any] = {}
    if kind == MATH:
        if answer is None or not str(answer).strip():
            raise TaskFormatError(f"{path}: math problem {task_id!r} has no answer")
        metadata["answer"] = str(answer)
    elif kind == CODE:
        if tests is None:
            raise TaskFormatError(f"{path}: code problem {task_id!r} has no tests")
        metadata["tests"] = normalize_tests(tests, f"{path}: problem {task_id!r}").to_json()
    else:
        raise TaskFormatError(f"{path}: problem {task_id!r} has kind {kind!r}; use math or code")
    if reference_solution:
        metadata["reference_solution"] = reference_solution
    case = TaskCase(1, path, path)
    return Task(
        id=task_id,
        instruction=problem,
        instruction_type=kind,
        answer_position="",
        cases=(case,),
        folder=path.parent if path != BUILTIN_ROOT else BUILTIN_ROOT,
        source=kind,
        family=origin,
        difficulty=difficulty,
        metadata=metadata,
    )


def is_problem_task(task: Task) -> bool:
    """True for math/code problems (as opposed to spreadsheet tasks)."""
    return task.source in PROBLEM_KINDS


def builtin_code_tasks(split: str = "train", kinds: tuple[str, ...] = PROBLEM_KINDS) -> TaskSet:
    """The built-in math/code problems of ``split`` ("train", "test" or "all")."""
    if split not in SPLITS:
        raise TaskFormatError(f"unknown split {split!r} of the built-in code tasks; use {SPLITS}")
    tasks: list[Task] = []
    for kind, table in ((MATH, MATH_PROBLEMS), (CODE, CODE_PROBLEMS)):
        if kind not in kinds:
            continue
        for position, entry in enumerate(table):
            in_test = position % 5 == 4
            if split == "all" or in_test == (split == "test"):
                tasks.append(_builtin_task(kind, entry))
    return TaskSet(root=BUILTIN_ROOT / split, tasks=tasks)


def _builtin_task(kind: str, entry: Mapping[str, Any]) -> Task:
    if kind == MATH:
        return make_problem_task(
            entry["id"],
            entry["problem"],
            kind=MATH,
            answer=entry["answer"],
            reference_solution=f"The answer is $\\boxed{{{entry['answer']}}}$.",
        )
    solution = f"```python\n{entry['solution'].strip()}\n```"
    return make_problem_task(
        entry["id"],
        entry["problem"],
        kind=CODE,
        tests=entry["tests"],
        reference_solution=solution,
    )


def load_problem_jsonl(path: str | Path, *, skip_bad: bool = False) -> TaskSet:
    """Problems from a JSONL file; a bad line raises (or, with ``skip_bad``, is recorded
    in ``TaskSet.problems``) with the file and line number in the message."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise TaskFormatError(f"{path}: cannot read the problem file ({exc})") from exc
    tasks: list[Task] = []
    problems: list[TaskProblem] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            task = _parse_line(line, where, path)
            if task.id in seen:
                raise TaskFormatError(f"{where}: duplicate problem id {task.id!r}")
            seen.add(task.id)
            tasks.append(task)
        except TaskFormatError as exc:
            if not skip_bad:
                raise
            problems.append(TaskProblem(where, str(exc)))
    return TaskSet(root=path, tasks=tasks, problems=problems)


def _parse_line(line: str, where: str, path: Path) -> Task:
    try:
        entry = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TaskFormatError(f"{where}: not valid JSON ({exc})") from exc
    if not isinstance(entry, dict):
        raise TaskFormatError(f"{where}: expected a JSON object per line")
    missing = [k for k in ("id", "problem") if not entry.get(k)]
    if missing:
        raise TaskFormatError(f"{where}: missing field(s) {', '.join(missing)}")
    kind = entry.get("kind")
    if kind is None:
        has_answer, has_tests = entry.get("answer") is not None, entry.get("tests") is not None
        if has_answer == has_tests:
            raise TaskFormatError(
                f"{where}: give exactly one of 'answer' (math) or 'tests' (code), or set 'kind'"
            )
        kind = MATH if has_answer else CODE
    tests = entry.get("tests")
    if isinstance(tests, str) and kind == CODE:
        try:  # the HF sets store TACO's tests as a JSON string
            decoded = json.loads(tests)
            tests = decoded if isinstance(decoded, dict | list) else tests
        except json.JSONDecodeError:
            pass
    return make_problem_task(
        str(entry["id"]),
        str(entry["problem"]),
        kind=kind,
        answer=entry.get("answer"),
        tests=tests,
        origin=str(entry.get("source") or path.stem),
        difficulty=entry.get("difficulty"),
        reference_solution=entry.get("reference_solution"),
        path=path,
    )


def write_problem_jsonl(path: str | Path, tasks: list[Task]) -> Path:
    """Write problem tasks back in the JSONL format (round trip of load_problem_jsonl)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for task in tasks:
        row: dict[str, Any] = {"id": task.id, "source": task.family, "problem": task.instruction}
        row["kind"] = task.source
        for key in ("answer", "tests", "reference_solution"):
            if key in task.metadata:
                row[key] = task.metadata[key]
        if task.difficulty:
            row["difficulty"] = task.difficulty
        rows.append(json.dumps(row, ensure_ascii=False))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def _m(task_id: str, problem: str, answer: str) -> dict[str, str]:
    return {"id": task_id, "problem": problem, "answer": answer}


# Answers were checked by computation; the (a) marks problems a quick script settles.
MATH_PROBLEMS: tuple[dict[str, str], ...] = (
    _m("math-001", "What is $17 \\times 23$?", "391"),
    _m("math-002", "Compute $2^{20}$.", "1048576"),
    _m("math-003", "What is the sum of the integers from 1 to 100?", "5050"),
    _m("math-004", "Solve for $x$: $3x + 7 = 22$.", "5"),
    _m("math-005", "Write $\\frac{84}{126}$ in lowest terms.", "\\frac{2}{3}"),
    _m("math-006", "Compute $\\frac{1}{3} + \\frac{1}{6}$.", "\\frac{1}{2}"),
    _m("math-007", "Find the set of all roots of $x^2 - 5x + 6 = 0$.", "\\{2, 3\\}"),
    _m("math-008", "In how many ways can 3 people be chosen from 10?", "120"),
    _m("math-009", "How many positive divisors does 360 have?", "24"),
    _m("math-010", "What is the sum of all primes less than 100?", "1060"),  # (a)
    _m("math-011", "With $F_1 = F_2 = 1$ and $F_{n} = F_{n-1} + F_{n-2}$, find $F_{15}$.", "610"),
    _m("math-012", "What is the remainder when $2^{100}$ is divided by 7?", "2"),
    _m("math-013", "How many trailing zeros does $100!$ have?", "24"),
    _m("math-014", "Find $\\gcd(462, 1071)$.", "21"),
    _m("math-015", "Find the least common multiple of 12, 18 and 30.", "180"),
    _m("math-016", "What is the arithmetic mean of 3, 8, 10 and 15?", "9"),
    _m("math-017", "Find the area of a triangle with side lengths 13, 14 and 15.", "84"),
    _m("math-018", "A right triangle has legs 9 and 12. How long is its hypotenuse?", "15"),
    _m("math-019", "If $x + y = 10$ and $x - y = 4$, what is $xy$?", "21"),
    _m("math-020", "How many distinct arrangements of the letters of BANANA are there?", "60"),
    _m(
        "math-021",
        "Two fair coins are flipped. What is the probability both land heads?",
        "\\frac{1}{4}",
    ),
    _m("math-022", "What is the sum of the first 20 positive odd integers?", "400"),
    _m("math-023", "Compute $7!$.", "5040"),
    _m("math-024", "How many prime numbers are less than 1000?", "168"),  # (a)
    _m("math-025", "What is the sum of the decimal digits of $2^{50}$?", "76"),  # (a)
    _m("math-026", "What is the largest prime factor of 13195?", "29"),
    _m("math-027", "Find all real $x$ with $x^2 = 49$.", "\\{-7, 7\\}"),
    _m("math-028", "Compute $\\left(\\frac{2}{3}\\right)^2 + \\frac{1}{9}$.", "\\frac{5}{9}"),
    _m("math-029", "Write $0.125$ as a fraction in lowest terms.", "\\frac{1}{8}"),
    _m("math-030", "How many subsets does a set with 6 elements have?", "64"),
    _m("math-031", "Compute $1^2 + 2^2 + \\cdots + 10^2$.", "385"),
    _m("math-032", "What is the remainder when 123456789 is divided by 97?", "39"),  # (a)
    _m("math-033", "How many integers from 1 to 1000 are divisible by 3 or by 5?", "467"),
    _m("math-034", "What is the slope of the line through $(1, 2)$ and $(4, 11)$?", "3"),
    _m("math-035", "If $f(x) = 2x^2 - 3x + 1$, what is $f(4)$?", "21"),
    _m("math-036", "How many diagonals does a convex decagon have?", "35"),
    _m("math-037", "What is the sum of the interior angles of a hexagon, in degrees?", "720"),
    _m("math-038", "Compute $\\sqrt{2} \\cdot \\sqrt{8}$.", "4"),
    _m("math-039", "What is 25% of 480?", "120"),
    _m("math-040", "How many shortest lattice paths go from $(0,0)$ to $(5,5)$?", "252"),
    _m("math-041", "Solve $2^x = 1024$.", "10"),
    _m("math-042", "What is the product of the roots of $2x^2 - 7x + 3 = 0$?", "\\frac{3}{2}"),
    _m("math-043", "Compute $\\sum_{k=1}^{99} \\frac{1}{k(k+1)}$.", "\\frac{99}{100}"),
    _m("math-044", "How many integers $1 \\le n \\le 100$ satisfy $\\gcd(n, 100) = 1$?", "40"),
)


def _stdio(*pairs: tuple[str, str]) -> dict[str, Any]:
    return {"kind": "stdio", "cases": [{"input": i, "output": o} for i, o in pairs]}


def _call(fn: str, *pairs: tuple[list, Any]) -> dict[str, Any]:
    return {"kind": "call", "fn_name": fn, "cases": [{"args": a, "expected": e} for a, e in pairs]}


def _c(task_id: str, problem: str, tests: JSONValue, solution: str) -> JSONObject:
    return {"id": task_id, "problem": problem, "tests": tests, "solution": solution}


_STDIN = " Read from standard input and print to standard output."
CODE_PROBLEMS: tuple[dict[str, Any], ...] = (
    _c(
        "code-001",
        "Read two integers on one line and print their sum." + _STDIN,
        _stdio(("1 2\n", "3"), ("-5 5\n", "0"), ("100 250\n", "350")),
        "a, b = map(int, input().split())\nprint(a + b)",
    ),
    _c(
        "code-002",
        "Read an integer n (0 <= n <= 20) and print n!." + _STDIN,
        _stdio(("0\n", "1"), ("5\n", "120"), ("20\n", "2432902008176640000")),
        "import math\nprint(math.factorial(int(input())))",
    ),
    _c(
        "code-003",
        "Read one line of text and print it reversed." + _STDIN,
        _stdio(("hello\n", "olleh"), ("ab c\n", "c ba")),
        "print(input()[::-1])",
    ),
    _c(
        "code-004",
        "The first line holds n, the second n integers. Print the largest." + _STDIN,
        _stdio(("3\n1 9 4\n", "9"), ("4\n-3 -1 -7 -2\n", "-1")),
        "input()\nprint(max(map(int, input().split())))",
    ),
    _c(
        "code-005",
        "Read an integer n >= 1 and print YES if it is prime, else NO." + _STDIN,
        _stdio(("2\n", "YES"), ("1\n", "NO"), ("91\n", "NO"), ("97\n", "YES")),
        "n = int(input())\nprint('YES' if n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))"
        " else 'NO')",
    ),
    _c(
        "code-006",
        "Read a line and print how many vowels (aeiou, any case) it has." + _STDIN,
        _stdio(("Hello World\n", "3"), ("xyz\n", "0"), ("AEIOU aeiou\n", "10")),
        "print(sum(c in 'aeiou' for c in input().lower()))",
    ),
    _c(
        "code-007",
        "Read n and print FizzBuzz from 1 to n, one item per line." + _STDIN,
        _stdio(
            ("5\n", "1\n2\nFizz\n4\nBuzz"),
            ("15\n", "1\n2\nFizz\n4\nBuzz\nFizz\n7\n8\nFizz\nBuzz\n11\nFizz\n13\n14\nFizzBuzz"),
        ),
        "for i in range(1, int(input()) + 1):\n"
        "    print('Fizz' * (i % 3 == 0) + 'Buzz' * (i % 5 == 0) or i)",
    ),
    _c(
        "code-008",
        "Read n and print the n-th Fibonacci number, with F(0)=0, F(1)=1." + _STDIN,
        _stdio(("0\n", "0"), ("10\n", "55"), ("90\n", "2880067194370816120")),
        "a, b = 0, 1\nfor _ in range(int(input())):\n    a, b = b, a + b\nprint(a)",
    ),
    _c(
        "code-009",
        "Read a line of words and print the distinct words sorted, space separated." + _STDIN,
        _stdio(("b a b c\n", "a b c"), ("one\n", "one")),
        "print(' '.join(sorted(set(input().split()))))",
    ),
    _c(
        "code-010",
        "The first line holds n, the second n integers. Print the sum of the even ones." + _STDIN,
        _stdio(("5\n1 2 3 4 5\n", "6"), ("2\n1 3\n", "0")),
        "input()\nprint(sum(x for x in map(int, input().split()) if x % 2 == 0))",
    ),
    _c(
        "code-011",
        "Write a function is_palindrome(s) that returns True when the string s reads "
        "the same backwards, ignoring case.",
        _call("is_palindrome", (["Level"], True), (["abc"], False), ([""], True)),
        "def is_palindrome(s):\n    s = s.lower()\n    return s == s[::-1]",
    ),
    _c(
        "code-012",
        "Write a function gcd(a, b) returning the greatest common divisor of two "
        "positive integers.",
        _call("gcd", ([12, 18], 6), ([17, 5], 1), ([100, 75], 25)),
        "def gcd(a, b):\n    while b:\n        a, b = b, a % b\n    return a",
    ),
    _c(
        "code-013",
        "Write a function two_sum(nums, target) returning the indices [i, j] (i < j) "
        "of the two numbers of nums that add up to target (exactly one pair does).",
        _call("two_sum", ([[2, 7, 11, 15], 9], [0, 1]), ([[3, 2, 4], 6], [1, 2])),
        "def two_sum(nums, target):\n    seen = {}\n    for i, x in enumerate(nums):\n"
        "        if target - x in seen:\n            return [seen[target - x], i]\n"
        "        seen[x] = i",
    ),
    _c(
        "code-014",
        "Write a function count_bits(n) returning the number of 1 bits in the binary "
        "form of the non-negative integer n.",
        _call("count_bits", ([0], 0), ([7], 3), ([1024], 1)),
        "def count_bits(n):\n    return bin(n).count('1')",
    ),
    _c(
        "code-015",
        "Complete class Solution with a method maxSubArray(self, nums: List[int]) -> int "
        "returning the largest sum of a non-empty contiguous subarray.",
        {
            "kind": "assert",
            "prelude": "from typing import List",
            "entry_point": "Solution().maxSubArray",
            "code": "def check(candidate):\n    assert candidate([-2, 1, -3, 4, -1, 2, 1, -5, 4]) == 6\n"
            "    assert candidate([1]) == 1\n    assert candidate([-3, -2]) == -2\n",
        },
        "class Solution:\n    def maxSubArray(self, nums: List[int]) -> int:\n"
        "        best = cur = nums[0]\n        for x in nums[1:]:\n"
        "            cur = max(x, cur + x)\n            best = max(best, cur)\n        return best",
    ),
    _c(
        "code-016",
        "Complete class Solution with a method isValid(self, s: str) -> bool: is the "
        "bracket string s (of ()[]{}) balanced and properly nested?",
        {
            "kind": "assert",
            "entry_point": "Solution().isValid",
            "code": "def check(candidate):\n    assert candidate('()[]{}') is True\n"
            "    assert candidate('(]') is False\n    assert candidate('([)]') is False\n"
            "    assert candidate('{[]}') is True\n    assert candidate('(') is False\n",
        },
        "class Solution:\n    def isValid(self, s: str) -> bool:\n        pairs = {')': '(', ']': '[', '}': '{'}\n"
        "        stack = []\n        for c in s:\n            if c in pairs:\n"
        "                if not stack or stack.pop() != pairs[c]:\n                    return False\n"
        "            else:\n                stack.append(c)\n        return not stack",
    ),
    _c(
        "code-017",
        "Complete class Solution with a method climbStairs(self, n: int) -> int: the "
        "number of ways to climb n steps taking 1 or 2 steps at a time.",
        {
            "kind": "assert",
            "entry_point": "Solution().climbStairs",
            "code": "def check(candidate):\n    assert candidate(1) == 1\n    assert candidate(2) == 2\n"
            "    assert candidate(5) == 8\n    assert candidate(40) == 165580141\n",
        },
        "class Solution:\n    def climbStairs(self, n: int) -> int:\n        a, b = 1, 1\n"
        "        for _ in range(n):\n            a, b = b, a + b\n        return a",
    ),
    _c(
        "code-018",
        "Write a function rotate(items, k) returning the list rotated right by k "
        "places (k may exceed the length; an empty list stays empty).",
        "assert rotate([1, 2, 3, 4, 5], 2) == [4, 5, 1, 2, 3]\nassert rotate([1, 2], 5) == [2, 1]\n"
        "assert rotate([], 3) == []\n",
        "def rotate(items, k):\n    if not items:\n        return []\n    k %= len(items)\n"
        "    return items[-k:] + items[:-k] if k else list(items)",
    ),
    _c(
        "code-019",
        "Complete class Solution with a method romanToInt(self, s: str) -> int "
        "converting a Roman numeral to an integer.",
        {
            "kind": "assert",
            "entry_point": "Solution().romanToInt",
            "code": "def check(candidate):\n    assert candidate('III') == 3\n"
            "    assert candidate('LVIII') == 58\n    assert candidate('MCMXCIV') == 1994\n",
        },
        "class Solution:\n    def romanToInt(self, s: str) -> int:\n"
        "        v = {'I': 1, 'V': 5, 'X': 10, 'L': 50, 'C': 100, 'D': 500, 'M': 1000}\n"
        "        total = 0\n        for a, b in zip(s, s[1:] + ' '):\n"
        "            total += -v[a] if b != ' ' and v[a] < v[b] else v[a]\n        return total",
    ),
    _c(
        "code-020",
        "The first line holds r and c; then r lines of c integers. Print the transposed "
        "matrix: c lines of r integers separated by spaces." + _STDIN,
        _stdio(("2 3\n1 2 3\n4 5 6\n", "1 4\n2 5\n3 6"), ("1 1\n7\n", "7")),
        "r, c = map(int, input().split())\nrows = [input().split() for _ in range(r)]\n"
        "for col in zip(*rows):\n    print(' '.join(col))",
    ),
)
