"""The math/code environment of the GRPO-TCR recipe.

Same contract as the spreadsheet gym (``reset(task, case) -> Observation``,
``step(ToolCall) -> StepResult``, ``finish(final_answer, output_path) ->
EpisodeResult``, ``close()``), so the agent loop, the env pools, eval and the trainer
drive it unchanged. The task is a math or coding problem
(:mod:`spreadrl.data.code_tasks`); the only tool is ``code_interpreter``, which runs
the model's Python in the sandbox: a fresh process per call (no variables survive
between calls) in a per-episode folder (files do survive). The episode is graded on
the final assistant message: math by its last ``\\boxed{}`` (or ``Answer:``) against
the reference with math-verify; code by its last ```python block against the
problem's tests, run in the sandbox. Reward is 1.0 or 0.0; the tool-call reward and
overlong shaping of GRPO-TCR are applied by the trainer from ``tool_calls`` and the
response length.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from spreadrl.data.code_tasks import MATH, is_problem_task
from spreadrl.data.task import Task
from spreadrl.env.code.answers import (
    extract_code,
    extract_math_answer,
    math_answers_equal,
    normalize_tests,
    run_code_tests,
)
from spreadrl.env.config import EnvConfig
from spreadrl.env.sandbox import SandboxLimits, SandboxResult, run_python
from spreadrl.env.types import (
    EndReason,
    EpisodeResult,
    Mismatch,
    Observation,
    StepResult,
    ToolCall,
)
from spreadrl.errors import SpreadrlError, TaskFormatError

log = logging.getLogger(__name__)

TOOL_NAME = "code_interpreter"
CODE_INTERPRETER_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": (
            "Run Python 3 code and return its stdout, stderr and exit status. Each call "
            "is a fresh process: variables do not persist between calls, files written "
            "to the current folder do. Print every value you want to see. numpy and "
            "sympy are available; there is no network."
        ),
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The Python code to run."}},
            "required": ["code"],
        },
    },
}
CODE_SYSTEM_PROMPT = (
    "You are a helpful assistant that solves math and programming problems. You may "
    "call the code_interpreter tool to compute or test things; call it only when it "
    "helps. When you are done, reply without a tool call and give the final answer."
)
MATH_SUFFIX = "\n\nPlease reason step by step, and put your final answer within \\boxed{}."
CODE_SUFFIX = (
    "\n\nWhen you are done, give your complete final solution in one ```python code block."
)
_MARKER = "\n[... {n} characters truncated ...]\n"


# Limits of the code environment that no recipe key sets. They are constants, not
# options, because a new key would change every recipe's resolved config (kept
# byte-identical on purpose), and no existing key means the same thing: env.code_wall_time_s
# (120 s) is the spreadsheet gym's code_interpreter limit, while the GRPO-TCR recipe
# gives each call of this environment 30 s. Tests patch these module attributes to
# run faster; the helpers below read them at call time.
TOOL_WALL_TIME_S = 30.0
"""Wall-clock limit of one ``code_interpreter`` call (the GRPO-TCR recipe's)."""
GRADING_WALL_TIME_S = 60.0
"""Wall-clock limit of grading one final solution against all of its tests."""
PER_TEST_TIMEOUT_S = 6.0
"""Wall-clock limit of one test of a code problem (inside the grading limit)."""
WORKDIR_ROOT: str | None = None
"""Parent folder of the per-episode folders; None: the system's temporary folder."""


def tool_limits(config: EnvConfig) -> SandboxLimits:
    """Sandbox limits of one ``code_interpreter`` call under ``config``.

    The output cap is four observations' worth, so the head and tail of a long
    output survive until :func:`format_execution` cuts it to the observation size.
    """
    wall = TOOL_WALL_TIME_S
    return SandboxLimits(
        wall_time_s=wall,
        cpu_time_s=max(1, int(wall)),
        memory_mb=config.code_memory_mb,
        max_output_chars=4 * config.max_observation_chars,
    )


def grading_limits(config: EnvConfig) -> SandboxLimits:
    """Sandbox limits of grading one final solution (the same memory as a tool call)."""
    wall = GRADING_WALL_TIME_S
    return SandboxLimits(
        wall_time_s=wall, cpu_time_s=max(1, int(wall)), memory_mb=config.code_memory_mb
    )


def truncate_middle(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, keeping its head and tail with a marker."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return text[:head] + _MARKER.format(n=len(text) - limit) + text[-tail:]


def format_execution(result: SandboxResult, max_chars: int) -> str:
    """A compact observation of one run: stdout alone when the code ran cleanly;
    otherwise labelled stdout/stderr sections and the exit status or limit hit."""
    stdout, stderr = result.stdout, result.stderr
    clean = result.exit_code == 0 and not result.timed_out and not result.error
    if clean and not stderr.strip():
        return truncate_middle(stdout, max_chars) if stdout.strip() else "(no output)"
    if result.timed_out:
        status = f"[timed out after {result.duration_s:.0f} s; the process was killed]"
    elif result.error:
        status = f"[sandbox: {result.error}]"
    else:
        status = f"[exit code {result.exit_code}]"
    budget = max(100, max_chars - len(status) - 40)
    out_budget = budget // 2 if stderr.strip() else budget
    parts = []
    if stdout.strip():
        parts.append("[stdout]\n" + truncate_middle(stdout.rstrip("\n"), out_budget))
    if stderr.strip():
        parts.append("[stderr]\n" + truncate_middle(stderr.rstrip("\n"), budget - out_budget))
    parts.append(status)
    return "\n".join(parts)


class CodeEnv:
    """One episode at a time of a math or code problem; see the module docstring.

    ``config`` is the recipe's ``env`` section, read directly as the spreadsheet
    gym reads it: the tool-call budget, the observation size, ``code_memory_mb``
    and ``sandbox_mode``; the time limits are this module's constants.
    """

    def __init__(self, config: EnvConfig | None = None) -> None:
        self.config = config or EnvConfig(kind="code", tools=[TOOL_NAME])
        self._task: Task | None = None
        self._workdir: Path | None = None
        self._calls = 0
        self._errors = 0
        self._finished = False

    # -- contract ---------------------------------------------------------------
    def reset(self, task: Task, case: int = 1) -> Observation:
        """Start an episode on ``task`` (a problem from spreadrl.data.code_tasks)."""
        if not is_problem_task(task):
            raise TaskFormatError(
                f"task {task.id!r} has source {task.source!r}: the code environment takes "
                "math/code problems (spreadrl.data.code_tasks); use the spreadsheet env"
            )
        self._cleanup()
        self._task = task
        self._calls = self._errors = 0
        self._finished = False
        root = WORKDIR_ROOT
        if root is not None:
            Path(root).mkdir(parents=True, exist_ok=True)
        self._workdir = Path(tempfile.mkdtemp(prefix="spreadrl-code-", dir=root))
        suffix = MATH_SUFFIX if task.source == MATH else CODE_SUFFIX
        return Observation(
            instruction=task.instruction + suffix,
            workbook_overview="",
            tool_schemas=[CODE_INTERPRETER_SCHEMA],
            info={"kind": task.source, "task_id": task.id, "system_prompt": CODE_SYSTEM_PROMPT},
        )

    def step(self, call: ToolCall) -> StepResult:
        """Run one ``code_interpreter`` call; bad calls become error observations."""
        self._require_running()
        if self._calls >= self.config.max_tool_calls:
            return StepResult(
                f"Error: the tool-call budget ({self.config.max_tool_calls}) is used up; "
                "give your final answer.",
                ok=False,
                truncated=True,
                info={"error": "budget"},
            )
        self._calls += 1
        truncated = self._calls >= self.config.max_tool_calls
        error = self._call_problem(call)
        if error is not None:
            self._errors += 1
            return StepResult(
                f"Error: {error}", ok=False, truncated=truncated, info={"error": "call"}
            )
        assert self._workdir is not None
        result = run_python(
            call.arguments["code"],
            self._workdir,
            tool_limits(self.config),
            mode=self.config.sandbox_mode,
        )
        ok = result.exit_code == 0 and not result.timed_out and not result.error
        if not ok:
            self._errors += 1
        info = {
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "duration_s": round(result.duration_s, 3),
            "sandbox": result.sandbox,
        }
        text = format_execution(result, self.config.max_observation_chars)
        return StepResult(text, ok=ok, truncated=truncated, info=info)

    def finish(
        self, final_answer: str | None = None, output_path: str | None = None
    ) -> EpisodeResult:
        """Grade ``final_answer`` (the last assistant message) and end the episode.

        With ``output_path`` a JSON record of the answer and verdict is written next to
        it (suffix ``.json``; the loop names outputs after workbooks).
        """
        self._require_running()
        task = self._task
        assert task is not None
        self._finished = True
        try:
            if task.source == MATH:
                passed, mismatches, info = self._grade_math(task, final_answer)
            else:
                passed, mismatches, info = self._grade_code(task, final_answer)
        finally:
            self._cleanup()
        info["kind"] = task.source
        if self._calls >= self.config.max_tool_calls:
            stop = EndReason.MAX_TOOL_CALLS
        else:
            stop = EndReason.ANSWERED if final_answer else EndReason.NO_ANSWER
        written = None
        if output_path is not None:
            written = self._write_record(Path(output_path), task, final_answer, passed, info)
        return EpisodeResult(
            reward=1.0 if passed else 0.0,
            passed=passed,
            mismatches=mismatches,
            tool_calls=self._calls,
            tool_errors=self._errors,
            stop_reason=stop,
            output_path=written,
            info=info,
        )

    def close(self) -> None:
        """Remove the episode folder; safe to call more than once."""
        self._cleanup()

    # -- helpers ----------------------------------------------------------------
    def _require_running(self) -> None:
        if self._task is None:
            raise SpreadrlError("the code environment has no episode: call reset(task) first")
        if self._finished:
            raise SpreadrlError(f"the episode of task {self._task.id!r} is already finished")

    @staticmethod
    def _call_problem(call: ToolCall) -> str | None:
        if call.name != TOOL_NAME:
            return f"unknown tool {call.name!r}; the only tool is {TOOL_NAME}."
        code = call.arguments.get("code")
        if not isinstance(code, str) or not code.strip():
            return f"{TOOL_NAME} needs a non-empty string argument 'code'."
        return None

    def _grade_math(self, task: Task, final: str | None) -> tuple[bool, list, dict]:
        reference = str(task.metadata["answer"])
        extracted = extract_math_answer(final)
        if extracted is None:
            reason = "no \\boxed{} answer"
            passed = False
        else:
            passed = math_answers_equal(extracted, reference)
            reason = "" if passed else "not equivalent"
        mismatches = [] if passed else [Mismatch("", "answer", reference, extracted, reason)]
        return passed, mismatches, {"extracted": extracted, "reference": reference}

    def _grade_code(self, task: Task, final: str | None) -> tuple[bool, list, dict]:
        code = extract_code(final)
        if code is None:
            miss = Mismatch("", "solution", "a ```python block", None, "no code block")
            return False, [miss], {"extracted": None, "tests_passed": 0}
        tests = normalize_tests(task.metadata.get("tests"), f"task {task.id!r}")
        grade = run_code_tests(
            code,
            tests,
            grading_limits(self.config),
            mode=self.config.sandbox_mode,
            per_test_timeout_s=PER_TEST_TIMEOUT_S,
        )
        mismatches = [
            Mismatch("", f"test {o.index + 1}", o.expected, o.actual, o.detail)
            for o in grade.outcomes
            if not o.passed
        ][:5]
        if grade.error:
            mismatches.append(Mismatch("", "tests", "a result", None, grade.error))
        info = {
            "extracted": code,
            "tests_passed": grade.tests_passed,
            "tests_total": len(grade.outcomes),
            "grading_error": grade.error,
        }
        return grade.passed, mismatches, info

    @staticmethod
    def _write_record(path: Path, task: Task, final: str | None, passed: bool, info: dict) -> str:
        path = path.with_suffix(".json")
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"task": task.id, "final_answer": final, "passed": passed, **info}
        path.write_text(json.dumps(record, indent=2, ensure_ascii=False, default=str))
        return str(path)

    def _cleanup(self) -> None:
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
