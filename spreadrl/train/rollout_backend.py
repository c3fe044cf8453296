"""GRPO's rollout engine: built by name before any model loads, woken around each
rollout phase.

The engine is the one ``rollout.backend`` names (:mod:`spreadrl.rollout.engine`);
nothing here asks which it is. :func:`generating` is where a rollout phase runs:
an engine with weights of its own (``colocated``) gets the trainer's current
weights and sleeps again afterwards, so the update has the GPU; an engine that
samples with the trainer's own model gets it gathered (FSDP) and in the compute
dtype.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn

from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engine import RolloutEngine, TrainingSetup, engine_class
from spreadrl.train.config import ModelConfig
from spreadrl.train.distributed import DistInfo, gathered_params
from spreadrl.train.logprobs import compute_context


def training_engine(
    rollout: RolloutConfig,
    model_cfg: ModelConfig,
    info: DistInfo,
    *,
    max_prompt_tokens: int,
    seed: int,
) -> RolloutEngine:
    """The engine ``rollout.backend`` names, set up for this run (it refuses a setup that
    cannot run here, in one line, before any model is loaded)."""
    setup = TrainingSetup(
        rollout=rollout,
        model_path=model_cfg.name_or_path,
        model_dtype=model_cfg.dtype,
        max_prompt_tokens=max_prompt_tokens,
        seed=seed,
        rank=info.rank,
        local_rank=info.local_rank if info.enabled else None,
        asynchronous=bool(rollout.max_staleness),
    )
    return engine_class(rollout.backend).for_training(setup)


@contextlib.contextmanager
def generating(model: nn.Module, engine: RolloutEngine, compute_dtype: str) -> Iterator[None]:
    """Where a rollout phase runs: the engine awake with the current weights, or the
    trainer's model gathered and in its compute dtype.

    An engine that samples with the trainer's model needs it gathered (ranks run
    different numbers of forwards); a colocated engine has its own copy, so nothing
    is gathered, and it sleeps again afterwards to give the GPU back to the update.
    """
    engine.sync(model)
    own = not engine.colocated
    with (
        gathered_params(model, enabled=own),
        compute_context(model, compute_dtype if own else "float32"),
    ):
        yield
    engine.sleep()
