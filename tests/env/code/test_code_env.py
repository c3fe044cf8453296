"""CodeEnv episodes: direct scripted episodes, hostile code, and the real agent loop."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from spreadrl.data.code_tasks import builtin_code_tasks, make_problem_task
from spreadrl.env.code import code_env
from spreadrl.env.code.code_env import (
    CODE_INTERPRETER_SCHEMA,
    CODE_SYSTEM_PROMPT,
    CodeEnv,
    format_execution,
    grading_limits,
    tool_limits,
    truncate_middle,
)
from spreadrl.env.config import EnvConfig
from spreadrl.env.factory import env_factory
from spreadrl.env.pool import InlineEnvPool
from spreadrl.env.sandbox import SandboxLimits, SandboxResult
from spreadrl.env.types import ToolCall
from spreadrl.errors import ConfigError, SpreadrlError, TaskFormatError
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engines.scripted import format_tool_call
from spreadrl.rollout.runner import EpisodeJob, run_episodes
from spreadrl.rollout.types import PolicyTurn
from tests.rollout.fakes import make_task as make_spreadsheet_task


def code_config(**overrides) -> EnvConfig:
    """The recipe's env section for the code env (the GRPO-TCR recipe's budgets unless overridden)."""
    fields = {"max_tool_calls": 16, "max_observation_chars": 4000, **overrides}
    return EnvConfig(kind="code", tools=["code_interpreter"], **fields)


FAST = code_config()


@pytest.fixture(autouse=True)
def fast_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shorter time limits than the GRPO-TCR recipe's 30 s / 60 s / 6 s, so hung code fails fast."""
    monkeypatch.setattr(code_env, "TOOL_WALL_TIME_S", 3.0)
    monkeypatch.setattr(code_env, "GRADING_WALL_TIME_S", 10.0)
    monkeypatch.setattr(code_env, "PER_TEST_TIMEOUT_S", 2.0)


MATH_TASK = make_problem_task(
    "sq", "What is the sum of the squares 1..10?", kind="math", answer="385"
)
CODE_TASK = make_problem_task(
    "add",
    "Read two integers and print their sum.",
    kind="code",
    tests={"inputs": ["1 2\n", "2 2\n"], "outputs": ["3\n", "4\n"]},
)
GOOD_CODE = "Here it is:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```"


def run(code: str) -> ToolCall:
    return ToolCall("code_interpreter", {"code": code})


def test_reset_gives_problem_and_schema():
    env = CodeEnv(FAST)
    obs = env.reset(MATH_TASK)
    assert obs.instruction.startswith("What is the sum") and "\\boxed{}" in obs.instruction
    assert obs.tool_schemas == [CODE_INTERPRETER_SCHEMA]
    fn = obs.tool_schemas[0]["function"]
    assert fn["name"] == "code_interpreter" and fn["parameters"]["required"] == ["code"]
    assert obs.workbook_overview == "" and obs.info["kind"] == "math"
    assert obs.info["system_prompt"] == CODE_SYSTEM_PROMPT
    assert "```python" in env.reset(CODE_TASK).instruction
    env.close()


def test_math_episode_computes_then_answers():
    env = CodeEnv(FAST)
    env.reset(MATH_TASK)
    step = env.step(run("print(sum(i * i for i in range(1, 11)))"))
    assert step.ok and step.observation.strip() == "385"
    result = env.finish("The tool says 385, so the answer is $\\boxed{385}$.")
    assert (result.reward, result.passed, result.tool_calls, result.tool_errors) == (
        1.0,
        True,
        1,
        0,
    )
    assert result.stop_reason == "answered" and result.info["extracted"] == "385"


def test_wrong_or_missing_math_answer_scores_zero():
    env = CodeEnv(FAST)
    env.reset(MATH_TASK)
    wrong = env.finish("\\boxed{386}")
    assert (wrong.reward, wrong.passed) == (0.0, False)
    assert wrong.mismatches[0].expected == "385" and wrong.mismatches[0].actual == "386"
    env.reset(MATH_TASK)
    none = env.finish(None)
    assert none.reward == 0.0 and none.stop_reason == "no_answer"
    assert "boxed" in none.mismatches[0].reason


def test_files_persist_between_calls_but_variables_do_not():
    env = CodeEnv(FAST)
    env.reset(MATH_TASK)
    assert env.step(run("x = 5\nopen('v.txt', 'w').write('7')")).ok
    again = env.step(run("print(open('v.txt').read())\nprint(x)"))
    assert not again.ok
    assert "[stdout]\n7" in again.observation and "NameError" in again.observation
    assert "[exit code 1]" in again.observation
    env.close()


def test_bad_calls_become_error_observations():
    env = CodeEnv(FAST)
    env.reset(MATH_TASK)
    unknown = env.step(ToolCall("write_range", {"range": "A1"}))
    assert not unknown.ok and unknown.observation.startswith("Error: unknown tool 'write_range'")
    missing = env.step(ToolCall("code_interpreter", {}))
    assert not missing.ok and "'code'" in missing.observation
    result = env.finish("\\boxed{385}")
    assert result.passed and result.tool_calls == 2 and result.tool_errors == 2


def test_tool_call_budget_truncates():
    env = CodeEnv(code_config(max_tool_calls=2))
    env.reset(MATH_TASK)
    assert not env.step(run("print(1)")).truncated
    last = env.step(run("print(2)"))
    assert last.ok and last.truncated
    over = env.step(run("print(3)"))
    assert not over.ok and over.truncated and "budget" in over.observation
    result = env.finish("\\boxed{385}")
    assert result.stop_reason == "max_tool_calls" and result.tool_calls == 2


def test_infinite_loop_times_out_and_episode_goes_on(monkeypatch: pytest.MonkeyPatch):
    # The limit must also fit a healthy call on a loaded 2-core machine (a 1 s limit
    # timed out `print(6 * 7)` under bwrap at load 15), so it is not set tighter.
    monkeypatch.setattr(code_env, "TOOL_WALL_TIME_S", 4.0)
    env = CodeEnv(code_config(max_observation_chars=300))
    env.reset(MATH_TASK)
    hung = env.step(run("print('start', flush=True)\nwhile True:\n    pass"))
    assert not hung.ok and hung.info["timed_out"]
    assert "timed out" in hung.observation
    after = env.step(run("print(6 * 7)"))
    assert after.ok and after.observation.strip() == "42"
    flood = env.step(run("print('x' * 100000)"))
    assert flood.ok and "characters truncated" in flood.observation
    assert len(flood.observation) < 400
    assert env.finish("\\boxed{385}").passed


def test_code_episode_grades_final_solution():
    env = CodeEnv(FAST)
    env.reset(CODE_TASK)
    assert env.step(run("print(1 + 2)")).ok
    good = env.finish(GOOD_CODE)
    assert good.passed and good.reward == 1.0
    assert good.info["tests_passed"] == good.info["tests_total"] == 2
    env.reset(CODE_TASK)
    wrong = env.finish(GOOD_CODE.replace("a + b", "a * b"))
    assert not wrong.passed and wrong.info["tests_passed"] == 1
    assert [m.cell for m in wrong.mismatches] == ["test 1"]
    env.reset(CODE_TASK)
    slow = env.finish("```python\nwhile True:\n    pass\n```")
    assert not slow.passed and slow.mismatches[0].reason == "timed out"
    env.reset(CODE_TASK)
    prose = env.finish("I would add the numbers.")
    assert not prose.passed and prose.mismatches[0].reason == "no code block"


def test_grading_ignores_files_the_agent_planted():
    """A module planted in the episode folder must not shadow the harness's imports."""
    env = CodeEnv(FAST)
    env.reset(CODE_TASK)
    plant = "open('json.py', 'w').write('raise SystemExit(0)')\nprint('ok')"
    assert env.step(run(plant)).ok
    assert not env.finish("```python\nprint(0)\n```").passed


def test_finish_writes_a_json_record(tmp_path):
    env = CodeEnv(FAST)
    env.reset(MATH_TASK)
    result = env.finish("\\boxed{385}", output_path=str(tmp_path / "1_sq_output.xlsx"))
    record = json.loads(Path(result.output_path).read_text())
    assert result.output_path.endswith("1_sq_output.json")
    assert record["task"] == "sq" and record["passed"] and record["extracted"] == "385"


def test_contract_errors():
    env = CodeEnv(FAST)
    with pytest.raises(SpreadrlError, match="reset"):
        env.step(run("print(1)"))
    with pytest.raises(TaskFormatError, match="spreadsheet env"):
        env.reset(make_spreadsheet_task())
    env.reset(MATH_TASK)
    env.finish("\\boxed{1}")
    with pytest.raises(SpreadrlError, match="already finished"):
        env.step(run("print(1)"))
    with pytest.raises(ConfigError, match="sandbox_mode"):
        code_config(sandbox_mode="none")
    with pytest.raises(ConfigError, match="max_tool_calls"):
        code_config(max_tool_calls=0)
    with pytest.raises(ConfigError, match="max_observation_chars must be at least 200"):
        code_config(max_observation_chars=199)
    assert EnvConfig(max_observation_chars=199).max_observation_chars == 199  # the gym's own


def test_the_recipe_section_sets_the_sandbox_limits():
    """The factory hands the env section itself to the code env; its keys reach the sandbox."""
    config = code_config(max_observation_chars=1000, code_memory_mb=512, sandbox_mode="rlimit")
    env = env_factory(config)()
    assert isinstance(env, CodeEnv) and env.config is config
    assert tool_limits(config) == SandboxLimits(
        wall_time_s=3.0, cpu_time_s=3, memory_mb=512, max_output_chars=4000
    )
    assert grading_limits(config) == SandboxLimits(wall_time_s=10.0, cpu_time_s=10, memory_mb=512)


def test_workdir_is_removed_on_close(tmp_path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(code_env, "WORKDIR_ROOT", str(tmp_path / "work"))
    env = CodeEnv(FAST)
    env.reset(MATH_TASK)
    assert len(list((tmp_path / "work").iterdir())) == 1
    env.close()
    assert list((tmp_path / "work").iterdir()) == []


def test_observation_formatting():
    assert truncate_middle("abcdefghij", 20) == "abcdefghij"
    cut = truncate_middle("a" * 50 + "b" * 50, 20)
    assert cut.startswith("a" * 10) and cut.endswith("b" * 10) and "80 characters" in cut
    clean = SandboxResult("", "", 0, False, None, 0.1, "bwrap")
    assert format_execution(clean, 100) == "(no output)"
    killed = SandboxResult("partial\n", "", None, True, "timeout", 3.0, "bwrap")
    text = format_execution(killed, 200)
    assert text.startswith("[stdout]\npartial") and "timed out after 3 s" in text


# -- the real agent loop --------------------------------------------------------


class ScriptPolicy:
    """Message-level policy: per task id, a list of assistant texts, one per turn."""

    token_level = False

    def __init__(self, scripts: dict[str, list[str]]):
        self.scripts = scripts

    def act_messages(self, states, params):
        turns = []
        for s in states:
            script = self.scripts[s.task.id]
            turns.append(PolicyTurn(text=script[min(s.turns_taken, len(script) - 1)]))
        return turns


def test_end_to_end_through_run_episodes():
    compute = format_tool_call("code_interpreter", {"code": "print(sum(i*i for i in range(11)))"})
    policy = ScriptPolicy(
        {
            "sq": [compute, "The sum is $\\boxed{385}$."],
            "add": [format_tool_call("code_interpreter", {"code": "print(1+2)"}), GOOD_CODE],
        }
    )
    wrong = make_problem_task("sq2", "Same as sq.", kind="math", answer="386")
    policy.scripts["sq2"] = policy.scripts["sq"]
    jobs = [EpisodeJob(MATH_TASK), EpisodeJob(CODE_TASK), EpisodeJob(wrong)]
    settings = RolloutConfig(system_prompt=CODE_SYSTEM_PROMPT, max_turns=4)
    pool = InlineEnvPool(functools.partial(CodeEnv, FAST))
    out = run_episodes(policy, pool, jobs, settings)
    math_traj, code_traj, wrong_traj = out.trajectories
    for traj in (math_traj, code_traj):
        assert traj.passed and traj.reward == 1.0 and traj.stop_reason == "answered"
        assert traj.tool_calls == 1 and traj.turns == 2
        assert [m["role"] for m in traj.messages] == [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
        ]
    assert math_traj.messages[3]["content"].strip() == "385"
    assert math_traj.tools == [CODE_INTERPRETER_SCHEMA]
    assert not wrong_traj.passed and wrong_traj.reward == 0.0
    assert wrong_traj.mismatches[0]["expected"] == "386"


def test_builtin_reference_answers_pass_through_the_env():
    tasks = builtin_code_tasks("test")
    assert {t.source for t in tasks} == {"math", "code"}
    env = CodeEnv(FAST)
    for task in tasks:
        env.reset(task)
        assert env.finish(task.metadata["reference_solution"]).passed, task.id
