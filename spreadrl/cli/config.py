"""`spreadrl config`: print a recipe's resolved config, or every key of every recipe."""

from __future__ import annotations

from pathlib import Path

import typer

from spreadrl.config import dump_config, load_config
from spreadrl.errors import ConfigError

app = typer.Typer(
    help="Recipes: `list` the shipped ones, `show` one resolved with overrides, `keys` of all.",
    no_args_is_help=True,
)


@app.command("show")
def show(
    recipe: Path = typer.Argument(
        ..., help="YAML recipe file, or a shipped recipe's name (spreadrl config list)."
    ),
    overrides: list[str] = typer.Argument(None, help="Dotted overrides, e.g. optim.lr=2e-6."),
    kind: str = typer.Option(
        None, "--kind", help="Which recipe's config: grpo or sft (default: the recipe's own)."
    ),
) -> None:
    """Print the resolved config: the recipe's values, the overrides, and every default.

    Examples:

      spreadrl config show tiny-cpu

      spreadrl config show configs/tiny-cpu.yaml

      spreadrl config show configs/spreadsheet-rl-4b.yaml rollout.max_turns=8
    """
    from spreadrl.config import read_recipe
    from spreadrl.train.config import RECIPES, recipe_kinds  # the trainer's modules: when run

    if kind is None:  # a recipe knows its kind by its keys; grpo's when any would do
        kind = (recipe_kinds(read_recipe(recipe)) or ["grpo"])[0]
    if kind not in RECIPES:
        raise ConfigError(f"--kind {kind!r}: choose one of {', '.join(RECIPES)}")
    cfg = load_config(RECIPES[kind], recipe, overrides or [])
    typer.echo(dump_config(cfg), nl=False)


@app.command("keys")
def keys() -> None:
    """Print every key of every recipe (type, default, help) as Markdown tables.

    Examples:

      spreadrl config keys

      spreadrl config keys > keys.md
    """
    from spreadrl.train.config import config_tables

    typer.echo(config_tables(), nl=False)


@app.command("list")
def list_recipes() -> None:
    """List the recipes shipped with spreadrl: pass a name to --config (``--config tiny-cpu``).

    Example:

      spreadrl config list
    """
    from rich.table import Table

    from spreadrl.cli.console import cli_console
    from spreadrl.recipes import shipped_recipes

    table = Table(title="shipped recipes (--config NAME)")
    table.add_column("name", no_wrap=True)
    table.add_column("what it is")
    for name, path in shipped_recipes().items():
        table.add_row(name, _first_comment(path))
    cli_console().print(table)


def _first_comment(path: Path) -> str:
    """The recipe's opening comment sentence (what it is), or nothing."""
    words: list[str] = []
    for line in path.read_text().splitlines():
        if not line.startswith("#") or not line.strip("# "):
            break
        words.append(line.lstrip("# ").strip())
    text = " ".join(words)
    return text.split(". ")[0].rstrip(".") + "." if text else ""
