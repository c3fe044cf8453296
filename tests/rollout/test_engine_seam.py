"""Only an engine's own module knows which engine it is.

GRPO, eval, serve, the plan and the asynchronous producer reach an engine through
the registry (:mod:`spreadrl.rollout.engine`) and ask it what they need; no code
outside :mod:`spreadrl.rollout.engines` compares a backend name with an engine's
name or asks whether a colocated engine is there (``colocated is None``). Each
such test was one more file a new engine had to touch.
"""

from __future__ import annotations

import ast
from pathlib import Path

from spreadrl.rollout.engines import ENGINES

PACKAGE = Path(__file__).resolve().parents[2] / "spreadrl"
ENGINE_MODULES = PACKAGE / "rollout" / "engines"


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _engine_names(node: ast.AST) -> bool:
    """A constant naming a registered engine, or a tuple/list/set of them."""
    if isinstance(node, ast.Constant):
        return node.value in ENGINES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_engine_names(e) for e in node.elts)
    return False


def engine_tests(source: str) -> list[int]:
    """Lines of ``source`` that ask which engine runs: a name with "backend" in it
    compared with an engine's name, or a name with "colocated" in it compared with None."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        names = [_name(o).lower() for o in operands]
        by_name = any("backend" in n for n in names) and any(_engine_names(o) for o in operands)
        is_none = any(isinstance(o, ast.Constant) and o.value is None for o in operands)
        colocated = is_none and any("colocated" in n for n in names)
        if by_name or colocated:
            lines.append(node.lineno)
    return lines


def test_no_code_outside_an_engine_module_asks_which_engine_it_has():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ENGINE_MODULES in path.parents:
            continue
        for line in engine_tests(path.read_text()):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{line}")
    assert found == [], "ask the engine instead (spreadrl.rollout.engine.RolloutEngine)"


def test_the_guard_catches_each_way_the_recipe_used_to_ask():
    asked = [
        'if rollout.backend == "vllm":\n    pass',
        'vllm = cfg.rollout.backend != "vllm"',
        'ok = backend in ("hf", "vllm", "openai")',
        "own = colocated is None",
        "if colocated is not None:\n    pass",
    ]
    assert all(engine_tests(source) == [1] for source in asked)
    fine = [
        'if backend == "bwrap":\n    pass',
        "if engine.colocated:\n    pass",
        'x = name == "vllm"',
    ]
    assert all(engine_tests(source) == [] for source in fine)


def test_every_registered_engine_answers_what_its_callers_ask():
    from spreadrl.rollout.engine import engine_class
    from spreadrl.rollout.engines import engines_that

    assert engines_that("trains") == engines_that("serves") == ["hf", "vllm"]
    assert engines_that("needs_model") == ["hf", "vllm", "openai"]
    assert engines_that("loads_weights") == ["hf", "vllm"]
    for name in ENGINES:
        cls = engine_class(name)
        assert isinstance(cls.colocated, bool) and callable(cls.load), name
        members = ("for_training", "plan", "plan_report", "allows_expandable_segments")
        if name in engines_that("trains"):
            members += ("start", "sync", "sleep", "eval_engine", "producer")
        for member in members:
            assert callable(getattr(cls, member)), f"{name}: {member}"


def test_grpo_and_the_plan_refuse_an_engine_that_samples_for_eval_only():
    import pytest

    from spreadrl.errors import ConfigError
    from spreadrl.rollout.config import RolloutConfig
    from spreadrl.rollout.engine import TrainingSetup, engine_class

    setup = TrainingSetup(RolloutConfig(backend="openai"), "m", "auto", 0, 0)
    with pytest.raises(ConfigError, match="eval only; .*: hf or vllm$"):
        engine_class("openai").for_training(setup)
    with pytest.raises(ConfigError, match="rollout.backend=oracle samples fixed weights"):
        engine_class("oracle").plan(None)
