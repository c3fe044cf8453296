"""The shipped recipes: ``configs/*.yaml``, installed with the package, found by name.

``--config tiny-cpu`` (or ``tiny-cpu.yaml``) names a shipped recipe wherever
``--config`` is read, so the README's commands work outside a checkout of the
repository; a path to a file of one's own works as before. A ``--config`` that
is neither a file nor a shipped recipe is an error, never a silent fall-back to
the defaults. ``spreadrl/configs`` is the checkout's ``configs/`` folder (a
link), shipped as package data.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from spreadrl.errors import ConfigError

RECIPE_DIR = Path(__file__).resolve().parent / "configs"
"""Where the shipped recipes are (``configs/`` in a checkout)."""


def shipped_recipes() -> dict[str, Path]:
    """Each shipped recipe's name (its file name without ``.yaml``) and file."""
    if not RECIPE_DIR.is_dir():
        return {}
    return {p.stem: p for p in sorted(RECIPE_DIR.glob("*.yaml")) if p.is_file()}


def find_recipe(given: str | Path) -> Path:
    """The recipe file ``given`` names: a file path, or a shipped recipe's name.

    Raises:
        ConfigError: ``given`` is a folder, or neither a file nor a shipped recipe
            (the message lists the shipped ones, with a "did you mean").
    """
    path = Path(given).expanduser()
    if path.is_dir():
        raise ConfigError(f"recipe {given}: is a folder, not a recipe file (.yaml)")
    if path.is_file():
        return path
    shipped = shipped_recipes()
    name = path.name.removesuffix(".yaml").removesuffix(".yml")
    if name in shipped and (path.parent == Path(".") or path.parent.name == "configs"):
        return shipped[name]  # `tiny-cpu`, or `configs/tiny-cpu.yaml` outside the checkout
    close = difflib.get_close_matches(name, shipped, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    names = ", ".join(shipped) or "none"
    raise ConfigError(
        f"recipe {given}: not found (no such file, and no shipped recipe of that name{hint}; "
        f"shipped: {names}; `spreadrl config list` shows them)"
    )
