"""Every shipped recipe resolves to the config it resolved to before the config redesign.

Issue 24 moves settings between sections and types; a run must not change
because of it. The fixtures in ``tests/fixtures/resolved_configs/`` are the
output of ``spreadrl config show`` for each ``configs/*.yaml`` (and for an
empty recipe: the built-in defaults of each recipe command), saved before that
work began. Compared byte for byte: a default, a key's place or its order
changing shows here. Regenerate a fixture only for a change that moves a key on
purpose, and say so in the commit.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from spreadrl.cli.main import app

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "resolved_configs"
RECIPES = sorted((ROOT / "configs").glob("*.yaml"))

runner = CliRunner()


def _show(kind: str, recipe: Path) -> str:
    result = runner.invoke(app, ["config", "show", "--kind", kind, str(recipe)])
    assert result.exit_code == 0, result.output
    return result.output


def _kind(recipe: Path) -> str:
    """The command a shipped recipe is for: ``sft-*.yaml`` are SFT's, the rest GRPO's."""
    return "sft" if recipe.stem.startswith("sft-") else "grpo"


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.stem for r in RECIPES])
def test_a_shipped_recipe_resolves_as_before(recipe: Path) -> None:
    kind = _kind(recipe)
    fixture = FIXTURES / f"{kind}-{recipe.stem}.yaml"
    assert fixture.exists(), (
        f"{fixture.relative_to(ROOT)} missing: save `spreadrl config show --kind {kind} "
        f"configs/{recipe.name}` there when adding a recipe"
    )
    assert _show(kind, recipe) == fixture.read_text()


@pytest.mark.parametrize("kind", ["grpo", "sft"])
def test_the_built_in_defaults_resolve_as_before(kind: str, tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("{}\n")  # no settings (an empty file is an error: it names nothing)
    assert _show(kind, empty) == (FIXTURES / f"{kind}-defaults.yaml").read_text()


def test_every_fixture_belongs_to_a_recipe() -> None:
    """A fixture left behind by a removed recipe would guard nothing."""
    expected = {f"{_kind(r)}-{r.stem}.yaml" for r in RECIPES} | {
        "grpo-defaults.yaml",
        "sft-defaults.yaml",
    }
    assert {p.name for p in FIXTURES.glob("*.yaml")} == expected
