"""The two environments sit beside the shared contract and never reach into each other.

``spreadrl.env.spreadsheet`` (the Spreadsheet Gym) and ``spreadrl.env.code`` (the
math/code environment) share the contract, pools, sandbox, limits and config of
``spreadrl.env``. Neither imports the other, and of the shared modules only the factory
(which builds an env by kind) and the config (which checks the recalculation engine and
locale names it is given) know a kind: a third environment is a folder beside them.
"""

from __future__ import annotations

from tests.test_import_direction import _graph

KINDS = ("spreadrl.env.spreadsheet", "spreadrl.env.code")
# shared module -> the kind it may import, and why
SHARED_KNOWS_A_KIND = {
    "spreadrl.env.factory": "builds an environment by its kind",
    "spreadrl.env.config": "checks env.engine and env.locale against recalc's names",
}


def _kind(module: str) -> str | None:
    return next((k for k in KINDS if module == k or module.startswith(k + ".")), None)


def _crossings(graph: dict[str, list[tuple[str, int]]]) -> list[str]:
    found = []
    for module, edges in graph.items():
        if not module.startswith("spreadrl.env"):
            continue
        mine = _kind(module)
        for target, line in edges:
            theirs = _kind(target)
            if theirs is None or theirs == mine:
                continue
            if mine is None and module in SHARED_KNOWS_A_KIND:
                continue
            found.append(f"{module}:{line} imports {target}")
    return found


def test_the_environments_import_only_the_shared_modules() -> None:
    assert not _crossings(_graph())


def test_the_check_sees_a_crossing() -> None:
    graph = {
        "spreadrl.env.code.code_env": [("spreadrl.env.spreadsheet.checker", 7)],
        "spreadrl.env.pool": [("spreadrl.env.code.answers", 3)],
        "spreadrl.env.factory": [("spreadrl.env.code.code_env", 14)],
        "spreadrl.env.spreadsheet.episode": [("spreadrl.env.config", 28)],
    }
    assert _crossings(graph) == [
        "spreadrl.env.code.code_env:7 imports spreadrl.env.spreadsheet.checker",
        "spreadrl.env.pool:3 imports spreadrl.env.code.answers",
    ]
