"""Asynchronous GRPO on the real engine (vLLM's CPU build): ``rollout.max_staleness=1``
with the episode scheduler, the engine in its own processes, weights through the files
sync reloaded between engine steps by the producer's thread.

Checked: the run trains every step with its staleness within the bound; the producer
reloaded published weights; after the run the engine computes the probe log-probs of
the last version it loaded, as the trainer computed them when it published that version
(float32 on both sides: ``TOL`` as in test_grpo.py), and the versions did differ.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.vllm.conftest import (
    close_engine,
    engine_probe,
    probe_ids,
    train_grpo_on_vllm,
    trainer_probe,
)

pytestmark = pytest.mark.vllm

TOL = 1e-3
STEPS = 4


@pytest.mark.timeout(1500)
def test_async_grpo_on_vllm_reloads_published_weights_between_engine_steps(
    qwen3_tiny, tmp_path, monkeypatch
):
    import spreadrl.rollout.engines.vllm_sync as vllm_sync

    probe = probe_ids(qwen3_tiny)
    published: dict[str, list[float]] = {}  # folder -> the trainer's probe at that version
    applied: list[str] = []
    engines = []
    write, reload = vllm_sync.FilesReload.write, vllm_sync.FilesReload.__call__

    def spy_write(self, model):
        folder = write(self, model)
        published[folder] = trainer_probe(model, probe)
        engines.append(self.policy)
        return folder

    def spy_reload(self, payload):
        applied.append(str(payload))
        reload(self, payload)

    monkeypatch.setattr(vllm_sync.FilesReload, "write", spy_write)
    monkeypatch.setattr(vllm_sync.FilesReload, "__call__", spy_reload)
    out = tmp_path / "run"
    two_turns_one_step_stale = [
        "rollout.max_staleness=1",
        "rollout.prompts_per_step=2",
        "rollout.max_turns=2",
        "rollout.max_new_tokens_per_turn=16",
        "rollout.max_response_tokens=64",
    ]
    try:
        train_grpo_on_vllm(qwen3_tiny, out, STEPS, two_turns_one_step_stale)
        assert applied, "the producer never reloaded published weights"
        last = applied[-1]
        engine = engine_probe(engines[0], probe)
    finally:
        if engines:
            close_engine(engines[0])
    worst = max(abs(a - b) for a, b in zip(engine, published[last], strict=True))
    assert worst <= TOL, worst
    first = next(iter(published.values()))
    moved = max(abs(a - b) for a, b in zip(first, published[last], strict=True))
    assert last != next(iter(published)) and moved > 50 * TOL, moved
    assert not any(Path(folder).exists() for folder in published)  # every folder removed
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, STEPS + 1))
    assert all(0.0 <= m["staleness_max"] <= 1.0 for m in metrics)
    assert metrics[0]["staleness_max"] == 0.0
    assert all(m["trained_sequences"] == 4 for m in metrics)
    # step 1: the engine sampled the weights the trainer starts from (float rounding only)
    assert metrics[0]["tis_weight_mean"] == pytest.approx(1.0, abs=1e-2)
    print(
        f"reloads {len(applied)}, probe |engine - trainer| {worst:.2e}, moved {moved:.2e}, "
        f"staleness_max {[m['staleness_max'] for m in metrics]}, "
        f"overlap {[round(m['overlap'], 2) for m in metrics]}"
    )
