"""Imports run one way: cli -> train -> eval / serve -> rollout -> env -> data.

The layout is the architecture (docs: README "Layout"): the environment knows
no model and no trainer, rollout knows no trainer, no library module imports
the command line. This test reads every module of the package with ``ast``
(nothing is executed), takes every import, function-level and
``TYPE_CHECKING`` ones included, and fails naming the file and line of each
import that points up a layer, of each import cycle between modules, and of
each cycle between packages (``env`` and ``data`` importing each other through
any of their modules), which the layers and the module check would let through.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "spreadrl"

# Layer of each top-level module or subpackage of spreadrl; a module may import
# its own layer and the layers below it. Several packages may share a layer
# (cli drives bench); cycles are checked apart. eval sits below train: train may
# score the policy in its loop, eval never imports the trainer (its settings are
# its own section, spreadrl.eval.config).
LAYERS: dict[str, int] = {
    # the shared low layer: errors, the config loader, cell addressing
    "errors": 0,
    "run_folder": 0,
    "config": 0,
    "recipes": 0,
    "cells": 0,
    "archive_gate": 0,  # the workbook archive check: env and the data importers share it
    "reporting": 0,  # the reporter protocol: library code tells, cli renders
    "interrupts": 0,  # Ctrl-C held between the items of a long loop
    "data": 1,
    "env": 2,
    "models": 2,  # offline models and tokenizers: beside the gym, below rollout
    "rollout": 3,
    "eval": 4,
    "serve": 4,
    # adapters to other projects' environment standards (OpenEnv, TRL, verifiers)
    "integrations": 4,
    "train": 5,
    "cli": 6,
    # the memory and time plan of a recipe (spreadrl plan): reads train's settings and
    # passes and the engine registry; only cli and bench read it
    "plan": 6,
    "bench": 6,
    "demo": 6,
    "__main__": 7,
}
LAYER_NAMES = {
    0: "the low layer",
    1: "data",
    2: "env/models",
    3: "rollout",
    4: "eval/serve/integrations",
    5: "train",
    6: "cli/bench/demo/plan",
    7: "__main__",
}

# Imports that point up a layer on purpose, each with its reason. Keep this short:
# an entry here is a debt, not a design.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest existing module that ``name`` names (a module, or a name in one)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """(imported spreadrl module, line) for every import in the file, at any depth."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # "from pkg import mod" imports the submodule when one exists
            targets = [f"{base}.{alias.name}" for alias in node.names] or [base]
        for target in targets:
            if not target.startswith("spreadrl"):
                continue
            resolved = _resolve(target, modules)
            if resolved and resolved != module and (resolved, node.lineno) not in found:
                found.append((resolved, node.lineno))
    return found


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:  # spreadrl/__init__.py: the package itself, lowest
        return 0
    top = parts[1]
    if top not in LAYERS:
        raise AssertionError(
            f"{module}: add spreadrl/{top} to LAYERS in tests/test_import_direction.py"
        )
    return LAYERS[top]


def _graph() -> dict[str, list[tuple[str, int]]]:
    modules = _modules()
    return {m: _imports(m, p, modules) for m, p in modules.items()}


def test_every_import_points_down_or_sideways() -> None:
    graph = _graph()
    modules = _modules()
    problems = []
    for module, edges in graph.items():
        for target, line in edges:
            if (module, target) in ALLOWED_UPWARD:
                continue
            low, high = _layer(module), _layer(target)
            if high > low:
                file = modules[module].relative_to(PACKAGE.parent)
                problems.append(
                    f"{file}:{line}: {module} ({LAYER_NAMES[low]}) imports {target} "
                    f"({LAYER_NAMES[high]}), a layer above it"
                )
    assert not problems, "imports that run upward:\n" + "\n".join(problems)


def test_allowed_upward_imports_still_exist() -> None:
    """An exception that is no longer needed is removed, so the list only shrinks."""
    graph = _graph()
    present = {(m, t) for m, edges in graph.items() for t, _ in edges}
    stale = [f"{a} -> {b}" for a, b in ALLOWED_UPWARD if (a, b) not in present]
    assert not stale, "remove from ALLOWED_UPWARD: " + ", ".join(stale)


def _cycles(graph: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for target, _ in graph.get(node, []):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _is_package_init(module: str, other: str) -> bool:
    return other.startswith(module + ".")


def test_no_import_cycles() -> None:
    """No two modules import each other, directly or through others.

    A package's ``__init__`` re-exporting its own submodules is not a cycle
    worth reporting (importing ``spreadrl.env.spreadsheet.tools.edit`` runs the package
    first anyway), so edges from a package into its own submodules are left out.
    """
    graph = _graph()
    modules = _modules()
    pruned = {
        m: [(t, line) for t, line in edges if not _is_package_init(m, t)]
        for m, edges in graph.items()
    }
    problems = []
    for component in _cycles(pruned):
        members = set(component)
        for module in component:
            file = modules[module].relative_to(PACKAGE.parent)
            for target, line in pruned[module]:
                if target in members:
                    problems.append(f"{file}:{line}: {module} imports {target}")
        problems.append(f"  (cycle: {' <-> '.join(component)})")
    assert not problems, "import cycles:\n" + "\n".join(problems)


def _package(module: str) -> str:
    """The top-level part of spreadrl a module belongs to (``spreadrl.env.spreadsheet.tools.edit``: env)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _package_cycles(
    graph: dict[str, list[tuple[str, int]]],
) -> list[tuple[list[str], list[tuple[str, str, int]]]]:
    """Cycles between spreadrl's packages: (the packages, the imports that tie them).

    Every edge counts, ALLOWED_UPWARD's and function-level ones too: two packages
    that import each other are one piece whatever the layers say, so a listed
    debt cannot hide a cycle.
    """
    edges: dict[str, list[tuple[str, int]]] = {}
    where: dict[tuple[str, str], list[tuple[str, str, int]]] = {}
    for module, targets in graph.items():
        for target, line in targets:
            a, b = _package(module), _package(target)
            if a and b and a != b:
                if (b, 0) not in edges.setdefault(a, []):
                    edges[a].append((b, 0))
                where.setdefault((a, b), []).append((module, target, line))
    found = []
    for component in _cycles(edges):
        members = set(component)
        ties = [
            tie
            for (a, b), listed in sorted(where.items())
            if a in members and b in members
            for tie in listed
        ]
        found.append((component, ties))
    return found


# Package cycles known and not yet removed, each with its reason; the list only shrinks.
KNOWN_PACKAGE_CYCLES: dict[tuple[str, ...], str] = {}


def test_no_cycles_between_packages() -> None:
    """No two packages import each other, directly or through others, at any depth."""
    modules = _modules()
    problems = []
    for component, ties in _package_cycles(_graph()):
        if tuple(component) in KNOWN_PACKAGE_CYCLES:
            continue
        problems.append(f"cycle between packages: {' <-> '.join(component)}")
        for module, target, line in ties:
            file = modules[module].relative_to(PACKAGE.parent)
            problems.append(f"  {file}:{line}: {module} imports {target}")
    assert not problems, "\n".join(problems)


def test_known_package_cycles_still_exist() -> None:
    """A known cycle that is gone is removed from the list, so it cannot come back."""
    present = {tuple(component) for component, _ in _package_cycles(_graph())}
    stale = [" <-> ".join(c) for c in KNOWN_PACKAGE_CYCLES if c not in present]
    assert not stale, "remove from KNOWN_PACKAGE_CYCLES: " + ", ".join(stale)


def test_the_check_catches_a_cycle_between_packages() -> None:
    """Modules in no cycle of their own still tie their packages into one."""
    graph = {
        "spreadrl.data.filters": [("spreadrl.env.spreadsheet.checker", 80)],
        "spreadrl.env.spreadsheet.checker": [("spreadrl.errors", 3)],
        "spreadrl.env.check": [("spreadrl.data.task", 31)],
        "spreadrl.data.task": [],
        "spreadrl.rollout.runner": [("spreadrl.env.check", 5)],
    }
    assert _cycles(graph) == []  # no module-level cycle
    ((component, ties),) = _package_cycles(graph)
    assert component == ["data", "env"]
    assert ties == [
        ("spreadrl.data.filters", "spreadrl.env.spreadsheet.checker", 80),
        ("spreadrl.env.check", "spreadrl.data.task", 31),
    ]


@pytest.mark.parametrize(
    ("source", "expected", "expected_line"),
    [
        ("from spreadrl.train.config import GRPOConfig\n", "spreadrl.train.config", 1),
        ("def f():\n    import spreadrl.cli.main\n", "spreadrl.cli.main", 2),
        ("from ..rollout import runner\n", "spreadrl.rollout.runner", 1),
        ("if TYPE_CHECKING:\n    from spreadrl.train import grpo\n", "spreadrl.train.grpo", 2),
    ],
)
def test_the_check_catches_an_upward_import(
    tmp_path: Path, source: str, expected: str, expected_line: int
) -> None:
    """The walker sees top-level and function-level imports (so the test above can fail)."""
    modules = _modules()
    fake = tmp_path / "fake.py"
    fake.write_text(source)
    edges = _imports("spreadrl.env.fake", fake, modules)
    assert edges == [(expected, expected_line)]
    assert _layer(expected) > _layer("spreadrl.env.fake")


def test_the_check_catches_a_cycle() -> None:
    graph = {"a": [("b", 1)], "b": [("c", 2)], "c": [("a", 3)], "d": [("a", 4)]}
    assert _cycles(graph) == [["a", "b", "c"]]


# The command line is typer's: a module outside spreadrl/cli that imports it is a
# second command tree (bench/ was one until its commands moved under cli/bench).
# Library modules take arguments and raise; only cli/ parses flags.
TYPER_OUTSIDE_CLI: dict[str, str] = {}  # module: why (none today)


def _imports_of(path: Path, package: str) -> list[int]:
    """Lines of the file that import ``package`` (or a submodule of it), at any depth."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        if any(name == package or name.startswith(package + ".") for name in names):
            lines.append(node.lineno)
    return lines


def _typer_imports(path: Path) -> list[int]:
    return _imports_of(path, "typer")


def _outside_cli(module: str) -> bool:
    return not (module == "spreadrl.cli" or module.startswith("spreadrl.cli."))


def test_no_module_outside_cli_imports_typer() -> None:
    found = {
        f"{module}:{line}"
        for module, path in _modules().items()
        if _outside_cli(module) and module not in TYPER_OUTSIDE_CLI
        for line in _typer_imports(path)
    }
    assert not found, f"typer imported outside spreadrl/cli: {sorted(found)}"


def test_the_typer_check_sees_function_level_imports(tmp_path: Path) -> None:
    fake = tmp_path / "fake.py"
    fake.write_text(
        "import os\n\ndef f():\n    from typer import Option\n    import typer.testing\n"
    )
    assert _typer_imports(fake) == [4, 5]


# Only cli/ renders: library code logs and raises, and what it has to say while it
# runs (step lines, tables, progress) goes through a spreadrl.reporting.Reporter that
# the CLI gives a rich implementation (spreadrl.cli.console.RichReporter). A module
# outside spreadrl/cli that imports rich decides how the terminal looks.
RICH_OUTSIDE_CLI: dict[str, str] = {}  # module: why (none today)


def test_no_module_outside_cli_imports_rich() -> None:
    found = {
        f"{module}:{line}"
        for module, path in _modules().items()
        if _outside_cli(module) and module not in RICH_OUTSIDE_CLI
        for line in _imports_of(path, "rich")
    }
    assert not found, f"rich imported outside spreadrl/cli (use a Reporter): {sorted(found)}"


def test_the_rich_check_sees_every_form_of_import(tmp_path: Path) -> None:
    fake = tmp_path / "fake.py"
    fake.write_text(
        "import richer\nimport rich\n\ndef f():\n    from rich.table import Table\n"
        "    from .rich import x\n"
    )
    assert _imports_of(fake, "rich") == [2, 5]  # not richer, not a relative .rich
