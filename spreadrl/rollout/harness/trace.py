"""Captured episodes as OpenEnv's ``TrainingTrace`` JSON, and such traces as training samples.

OpenEnv (``openenv`` 0.10, ``openenv.core.harness.training``) records an agent's engine
calls as a ``TrainingTrace``: ``schema_version`` 1 and one ``TrainingTurn`` per call,
with ``node_id``, ``prompt_token_ids``, ``completion_token_ids``, ``per_token_logps``
(one per completion token), a ``loss_mask`` over prompt plus completion (the prompt's
part all 0), and the call's ``request``, ``response`` and ``metadata``. The reward is
not in the trace; it comes from the session's verifier, so it is passed beside it.

:func:`to_training_trace` writes a session's calls in that shape (the ids exactly as
the engine saw and sampled them); :func:`samples_from_trace` reads one back into the
samples the trainer takes, joining turns whose prompt starts with the previous
turn's prompt plus completion, as :class:`~spreadrl.rollout.harness.capture.SessionCapture`
joins calls: nothing is re-tokenized either way. Plain dicts, so spreadrl needs no
OpenEnv to write or read them; OpenEnv's own model validates what is written
(``tests/envs``).
"""

from __future__ import annotations

from typing import Any

from spreadrl.errors import SpreadrlError
from spreadrl.rollout.harness.capture import CapturedCall, CapturedSample

SCHEMA_VERSION = 1

TRAINING_TRACE = "training_trace"
"""The trajectory metadata key of a harness episode's trace (``HarnessEpisodes(keep_traces=True)``)."""


class TraceError(SpreadrlError):
    """A TrainingTrace that cannot be trained on (its fields do not line up)."""


def to_training_trace(
    calls: list[CapturedCall], *, episode_id: str, model: str = ""
) -> dict[str, Any]:
    """A session's calls as a ``TrainingTrace`` dict (``json.dumps`` it to write the file)."""
    turns = []
    for index, call in enumerate(calls):
        turns.append(
            {
                "node_id": f"{episode_id}#{index}",
                "prompt_token_ids": list(call.prompt_ids),
                "completion_token_ids": list(call.completion_ids),
                "per_token_logps": [float(lp) for lp in call.logprobs],
                "loss_mask": [0] * len(call.prompt_ids) + [1] * len(call.completion_ids),
                "request": {"model": model, "messages": call.messages, "tools": call.tools},
                "response": {"message": call.reply, "finish_reason": call.finish_reason},
                "metadata": {"episode_id": episode_id, "continued": call.continued},
            }
        )
    return {"schema_version": SCHEMA_VERSION, "turns": turns}


def samples_from_trace(trace: dict[str, Any]) -> tuple[list[CapturedSample], int]:
    """The trace's turns as training samples, and how many prefix breaks split them.

    A turn's completion tokens keep its own loss mask (OpenEnv's masks may leave
    some completion tokens out); ids between turns are context (mask 0)."""
    if trace.get("schema_version") != SCHEMA_VERSION:
        raise TraceError(
            f"TrainingTrace schema_version {trace.get('schema_version')!r}: "
            f"spreadrl reads version {SCHEMA_VERSION}"
        )
    samples: list[CapturedSample] = []
    breaks = 0
    for index, turn in enumerate(trace.get("turns") or []):
        prompt, completion, logps, mask = _turn_fields(turn, index)
        sample = samples[-1] if samples else None
        if sample is not None and prompt[: len(sample.context)] == sample.context:
            between = prompt[len(sample.context) :]
            sample.response_ids += between
            sample.response_mask += [0] * len(between)
            sample.logprobs += [0.0] * len(between)
        else:
            breaks += sample is not None
            sample = CapturedSample(list(prompt))
            samples.append(sample)
        sample.response_ids += completion
        sample.response_mask += mask[len(prompt) :]
        sample.logprobs += logps
    return samples, breaks


def _turn_fields(
    turn: dict[str, Any], index: int
) -> tuple[list[int], list[int], list[float], list[int]]:
    """One turn's ids, log-probs and mask, checked against each other."""
    where = f"TrainingTrace turn {index} ({turn.get('node_id', '?')})"
    try:
        prompt = [int(t) for t in turn["prompt_token_ids"]]
        completion = [int(t) for t in turn["completion_token_ids"]]
        logps = [float(lp) for lp in turn["per_token_logps"]]
        mask = [int(m) for m in turn["loss_mask"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise TraceError(f"{where}: {type(exc).__name__}: {exc}") from exc
    if len(logps) != len(completion):
        raise TraceError(f"{where}: {len(logps)} log-probs for {len(completion)} completion tokens")
    if len(mask) != len(prompt) + len(completion) or any(mask[: len(prompt)]):
        raise TraceError(f"{where}: loss_mask must cover prompt (all 0) plus completion")
    return prompt, completion, logps, mask
