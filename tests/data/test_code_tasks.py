"""Built-in math/code problems and the JSONL problem format."""

from __future__ import annotations

import json

import pytest

from spreadrl.data.code_tasks import (
    builtin_code_tasks,
    is_problem_task,
    load_problem_jsonl,
    make_problem_task,
    write_problem_jsonl,
)
from spreadrl.env.code.answers import (
    extract_code,
    extract_math_answer,
    math_answers_equal,
    normalize_tests,
    run_code_tests,
)
from spreadrl.env.sandbox import SandboxLimits
from spreadrl.errors import TaskFormatError


def test_builtin_splits_are_disjoint_deterministic_and_sized():
    train, test, every = (builtin_code_tasks(s) for s in ("train", "test", "all"))
    train_ids, test_ids = {t.id for t in train}, {t.id for t in test}
    assert not train_ids & test_ids
    assert train_ids | test_ids == {t.id for t in every}
    assert len(every) == 64 and len(test) == 12
    assert sum(t.source == "math" for t in every) == 44
    assert sum(t.source == "code" for t in every) == 20
    assert [t.id for t in builtin_code_tasks("train")] == [t.id for t in train]
    assert {t.source for t in builtin_code_tasks("all", kinds=("math",))} == {"math"}
    with pytest.raises(TaskFormatError, match="unknown split"):
        builtin_code_tasks("valid")


def test_builtin_tasks_look_like_tasks_to_the_loop():
    for task in builtin_code_tasks("all"):
        assert is_problem_task(task) and task.instruction_type == task.source
        assert [c.index for c in task.cases] == [1]
        assert task.family == "builtin"
    set_ = builtin_code_tasks("test")
    assert set_.episodes() == [(t, 1) for t in set_.tasks]


def test_every_math_reference_answer_checks():
    for task in builtin_code_tasks("all", kinds=("math",)):
        answer = extract_math_answer(task.metadata["reference_solution"])
        assert math_answers_equal(answer, task.metadata["answer"]), task.id


def test_every_code_reference_solution_passes_its_tests():
    limits = SandboxLimits(wall_time_s=20, cpu_time_s=10, memory_mb=512)
    for task in builtin_code_tasks("all", kinds=("code",)):
        code = extract_code(task.metadata["reference_solution"])
        tests = normalize_tests(task.metadata["tests"])
        assert run_code_tests(code, tests, limits).passed, task.id


def test_jsonl_loader_reads_math_and_taco_lines(tmp_path):
    path = tmp_path / "mixed.jsonl"
    taco_tests = json.dumps({"inputs": ["2\n"], "outputs": ["4\n"]})
    rows = [
        {"id": "d1", "source": "deepscaler", "problem": "1+1?", "answer": "2", "difficulty": "1"},
        {"id": "t1", "source": "taco", "problem": "Double n.", "tests": taco_tests},
        {"id": "l1", "source": "leetcode", "problem": "f", "tests": "assert f() == 1"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    tasks = load_problem_jsonl(path)
    math_task, taco, leet = tasks.tasks
    assert (math_task.source, math_task.family, math_task.metadata["answer"]) == (
        "math",
        "deepscaler",
        "2",
    )
    assert math_task.difficulty == "1"
    assert taco.source == "code" and taco.metadata["tests"]["kind"] == "stdio"
    assert leet.metadata["tests"]["kind"] == "assert"
    again = load_problem_jsonl(write_problem_jsonl(tmp_path / "out.jsonl", tasks.tasks))
    assert [(t.id, t.source, t.family, dict(t.metadata)) for t in again] == [
        (t.id, t.source, t.family, dict(t.metadata)) for t in tasks
    ]


def test_jsonl_errors_name_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"id": "a", "problem": "p", "answer": "1"}\n'
        "{not json\n"
        '{"id": "b", "problem": "p"}\n'
        '{"id": "a", "problem": "p", "answer": "2"}\n'
        '{"id": "c", "problem": "p", "tests": {"kind": "fuzz"}}\n'
    )
    with pytest.raises(TaskFormatError, match=r"bad\.jsonl:2: not valid JSON"):
        load_problem_jsonl(path)
    loaded = load_problem_jsonl(path, skip_bad=True)
    assert [t.id for t in loaded] == ["a"]
    messages = {p.task_id.rsplit(":", 1)[1]: p.message for p in loaded.problems}
    assert "exactly one of 'answer'" in messages["3"]
    assert "duplicate problem id 'a'" in messages["4"]
    assert "unknown test format" in messages["5"]
    with pytest.raises(TaskFormatError, match="cannot read"):
        load_problem_jsonl(tmp_path / "missing.jsonl")


def test_make_problem_task_validates():
    with pytest.raises(TaskFormatError, match="has no answer"):
        make_problem_task("x", "p", kind="math")
    with pytest.raises(TaskFormatError, match="has no tests"):
        make_problem_task("x", "p", kind="code")
    with pytest.raises(TaskFormatError, match="use math or code"):
        make_problem_task("x", "p", kind="chess", answer="1")
