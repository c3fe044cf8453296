"""The ``eval`` section of a recipe: which held-out tasks, how many, how often.

Defined in the eval package so evaluation owns its settings and never imports
the trainer: ``GRPOConfig`` composes this section (``eval.*`` in a recipe), the
GRPO loop reads ``every_steps`` and ``max_cases`` for its in-loop check, and
``spreadrl eval --config RECIPE`` takes ``tasks`` and ``samples`` from it when
``--tasks`` / ``--samples`` are not given, so a model is scored on the set its
recipe names.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from spreadrl.config import Section, option
from spreadrl.errors import ConfigError
from spreadrl.rollout.config import RolloutConfig


@dataclass(frozen=True)
class EvalConfig(Section):
    every_steps: int = option(
        0, "Score the policy on held-out tasks every N GRPO steps and after the last (0 = off)."
    )
    tasks: str = option("builtin:test", "Held-out task folder or builtin:<split>.")
    max_cases: int = option(64, "Cases evaluated each time, the first of the set (0 = all).")
    samples: int = option(1, "Samples per case, at eval.temperature.")
    temperature: float | None = option(
        None,
        "Sampling temperature of held-out episodes (0 = greedy, as Spreadsheet-RL validates); "
        "None = the rollout's.",
    )

    def validate(self) -> None:
        if self.temperature is not None and self.temperature < 0:
            raise ConfigError(f"eval.temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if self.every_steps < 0 or self.max_cases < 0 or self.samples < 1:
            raise ConfigError(
                "eval.every_steps and eval.max_cases must be >= 0 and eval.samples >= 1, got "
                f"{self.every_steps}, {self.max_cases}, {self.samples}"
            )


def eval_rollout(evaluation: EvalConfig, rollout: RolloutConfig) -> RolloutConfig:
    """The rollout settings held-out episodes run with: the rollout's, at ``eval.temperature``.

    Training samples to explore; a score is read best from the policy's most
    likely answers, which is why upstream validates greedily. Only the
    temperature changes: budgets, tool handling and top-p/top-k stay the rollout's.
    """
    if evaluation.temperature is None:
        return rollout
    return replace(rollout, temperature=evaluation.temperature)
