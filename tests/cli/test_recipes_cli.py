"""The shipped recipes: installed with the package, found by name wherever --config is read.

`--config tiny-cpu` (and the README's `--config configs/tiny-cpu.yaml`) work from
a folder outside the checkout; a --config that names nothing is an error, never
the defaults (issue 32).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml

from spreadrl.recipes import RECIPE_DIR, find_recipe, shipped_recipes
from tests.cli.test_cli_mistakes import cli, one_error_line

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_recipes_are_the_checkouts_configs_and_package_data():
    assert set(shipped_recipes()) == {p.stem for p in (ROOT / "configs").glob("*.yaml")}
    assert RECIPE_DIR.resolve() == (ROOT / "configs").resolve()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "configs/*.yaml" in data["tool"]["setuptools"]["package-data"]["spreadrl"]


def test_a_recipe_is_found_by_name_outside_the_checkout(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert (
        find_recipe("tiny-cpu")
        == find_recipe("configs/tiny-cpu.yaml")
        == RECIPE_DIR / "tiny-cpu.yaml"
    )
    for given in ("tiny-cpu", "configs/tiny-cpu.yaml"):
        code, out, err = cli(monkeypatch, capsys, "config", "show", given)
        assert code in (0, None), err
        assert yaml.safe_load(out)["rollout"]["max_turns"] == 2  # tiny-cpu's, not the default
        code, out, err = cli(monkeypatch, capsys, "grpo", "--config", given, "--print-config")
        assert code in (0, None), err
        assert "max_turns: 2\n" in out and "- write_range\n" in out
    code, out, _ = cli(monkeypatch, capsys, "config", "list")
    assert code in (0, None)
    assert all(name in out for name in shipped_recipes())
    # a file of one's own still wins over a shipped name
    (tmp_path / "tiny-cpu").write_text("steps: 7\n")
    code, out, _ = cli(monkeypatch, capsys, "grpo", "--config", "tiny-cpu", "--print-config")
    assert "\nsteps: 7\n" in out


def test_a_config_that_names_nothing_is_always_an_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "binary.yaml").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    cases = {
        "tiny-cpuu": "did you mean 'tiny-cpu'",
        "configs/tiny-cpuu.yaml": "not found",
        str(tmp_path): "is a folder",
        "empty.yaml": "is empty",
        "binary.yaml": "binary",
    }
    for command in (["grpo"], ["sft"], ["eval", "--backend", "noop", "--out", "x"]):
        for given, expected in cases.items():
            code, _, err = cli(monkeypatch, capsys, *command, "--config", given)
            assert code == 1, (command, given)
            assert expected in one_error_line(err), (command, given, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["binary.yaml", "empty.yaml"]
