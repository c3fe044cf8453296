"""spreadrl's TrainingTrace JSON against OpenEnv 0.10's own model (``openenv.core.harness``).

Skipped where the installed ``openenv`` has no harness capture (openenv-core 0.3, whose
module shadows it); ``make test-envs`` runs it with openenv 0.10."""

import json

import pytest

from spreadrl.rollout.harness.capture import CapturedCall
from spreadrl.rollout.harness.trace import samples_from_trace, to_training_trace

training = pytest.importorskip("openenv.core.harness.training", reason="openenv>=0.10 capture")
pytestmark = pytest.mark.envs


def calls() -> list[CapturedCall]:
    """Two calls of one episode: the second prompt continues the first (tool ids between)."""
    first = CapturedCall([1, 2, 3], [4, 5, 9], [-0.5, -0.25, -0.125], "stop", [], None, {})
    second = CapturedCall(
        [1, 2, 3, 4, 5, 9, 7, 8], [6, 9], [-1.0, -0.0625], "stop", [], None, {}, continued=True
    )
    return [first, second]


def test_a_spreadrl_trace_validates_in_openenv():
    written = json.loads(json.dumps(to_training_trace(calls(), episode_id="t1/1/0")))
    trace = training.TrainingTrace.model_validate(written)  # runs validate_training_turn per turn
    assert [t.node_id for t in trace.turns] == ["t1/1/0#0", "t1/1/0#1"]


def test_an_openenv_trace_trains_as_one_sample():
    turns = [
        training.TrainingTurn(
            node_id=f"n{i}",
            prompt_token_ids=c.prompt_ids,
            completion_token_ids=c.completion_ids,
            per_token_logps=c.logprobs,
            loss_mask=[0] * len(c.prompt_ids) + [1] * len(c.completion_ids),
        )
        for i, c in enumerate(calls())
    ]
    trace = json.loads(training.TrainingTrace(turns=turns).model_dump_json())
    (sample,), breaks = samples_from_trace(trace)
    assert breaks == 0
    assert sample.prompt_ids == [1, 2, 3]
    assert sample.response_ids == [4, 5, 9, 7, 8, 6, 9]
    assert sample.response_mask == [1, 1, 1, 0, 0, 1, 1]
    assert sample.logprobs == [-0.5, -0.25, -0.125, 0.0, 0.0, -1.0, -0.0625]
