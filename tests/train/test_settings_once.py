"""Each setting of a recipe config is defined once (issue 24).

A setting defined in two sections has two defaults that can drift apart, and a
reader cannot tell which one the run uses (SFT once had ``micro_batch_tokens``
at the top and in ``optim``, only one of them read). This walks every leaf key
of each recipe config, nested sections included (``rollout``, ``env`` with
``env.code``, ``eval``), and fails on a key name that appears in two places
unless it is listed below with what makes the two different settings.
"""

from __future__ import annotations

import dataclasses

import pytest

from spreadrl.config import describe_config, section
from spreadrl.train.config import RECIPES, GRPOOptimConfig

# the same name, different settings: each section's own schedule
DIFFERENT_SETTINGS = {
    "every_steps": {
        "checkpoint.every_steps": "how often a checkpoint is saved",
        "logging.every_steps": "how often a line is printed",
        "eval.every_steps": "how often the held-out eval runs (GRPO)",
    },
    "system_prompt": {
        "rollout.system_prompt": "what the gym's episodes open with",
        "env.system_prompt": "env.kind openenv only: what a foreign server's episodes open "
        "with when the server sends none (null reads rollout.system_prompt)",
    },
    "temperature": {
        "rollout.temperature": "how training rollouts sample (exploration)",
        "eval.temperature": "how held-out episodes sample (0 = greedy, as Spreadsheet-RL "
        "validates); None reads rollout.temperature, so the two cannot drift by default",
    },
}


def leaf_keys(cls: type) -> dict[str, list[str]]:
    """Every leaf key path of ``cls``, by its last name."""
    by_name: dict[str, list[str]] = {}
    for path, *_ in describe_config(cls):
        by_name.setdefault(path.rsplit(".", 1)[-1], []).append(path)
    return by_name


def unexplained_duplicates(cls: type) -> dict[str, list[str]]:
    """Key names defined at two paths or more that DIFFERENT_SETTINGS does not explain."""
    out = {}
    for name, paths in leaf_keys(cls).items():
        explained = DIFFERENT_SETTINGS.get(name, {})
        if len(paths) > 1 and any(p not in explained for p in paths):
            out[name] = paths
    return out


@pytest.mark.parametrize("command", sorted(RECIPES))
def test_no_setting_is_defined_in_two_sections(command: str) -> None:
    duplicates = unexplained_duplicates(RECIPES[command])
    assert not duplicates, (
        f"spreadrl {command}: defined in two places: {duplicates}; keep one, or list the "
        "paths in DIFFERENT_SETTINGS with what makes them different settings"
    )


def test_nested_sections_are_walked_and_a_copied_key_is_caught() -> None:
    """Not vacuous: keys of nested sections are seen, and SFT's old shape would fail."""
    grpo = {p for paths in leaf_keys(RECIPES["grpo"]).values() for p in paths}
    assert {"rollout.max_turns", "env.max_tool_calls", "eval.samples", "model.lora.r"} <= grpo

    @dataclasses.dataclass(frozen=True)
    class OldSFT(RECIPES["sft"]):  # type: ignore[misc, valid-type]
        optim: GRPOOptimConfig = section(GRPOOptimConfig, "Optimizer.")  # the old, shared optim

    assert unexplained_duplicates(OldSFT) == {
        "micro_batch_tokens": ["micro_batch_tokens", "optim.micro_batch_tokens"],
        "shared_prefix": ["shared_prefix", "optim.shared_prefix"],
    }


def test_every_listed_path_exists() -> None:
    """A listed exception for a key that is gone would excuse the next duplicate silently."""
    every = {p for cls in RECIPES.values() for paths in leaf_keys(cls).values() for p in paths}
    for name, paths in DIFFERENT_SETTINGS.items():
        for path in paths:
            assert path in every and path.rsplit(".", 1)[-1] == name, path
