"""GRPO with ``rollout.backend=vllm`` on the real engine (vLLM's CPU build): after every
weight sync, the engine's log-probs of a fixed probe sequence equal the trainer's.

The sync is ``rollout.weight_sync=files`` (safetensors in /dev/shm, then every
worker's in-place ``reload_weights``), the trainer-side path CUDA-less machines run.
The model has tied embeddings, so the probe also checks that the head the engine
computes with is the embedding it received: vLLM's in-place reload unties the
engine's head, and an export that sent the embedding alone failed here (the
engine's log-probs 0.23 off the trainer's after the first changed sync). A high learning rate with an entropy bonus moves
the weights every step whatever the rewards (Adam's steps are ~lr per weight for
any non-zero gradient), so each probe sees different weights than the last.

Tolerance: as in test_engine.py (float32 on both sides, kernels differ: ~1e-5;
``TOL = 1e-3``), against probe changes of ~1e-1 per step.
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.vllm.conftest import (
    close_engine,
    engine_probe,
    probe_ids,
    train_grpo_on_vllm,
    trainer_probe,
)

pytestmark = pytest.mark.vllm

TOL = 1e-3
STEPS = 3


@pytest.mark.timeout(1500)
def test_grpo_on_vllm_weights_arrive_after_every_sync(qwen3_tiny, tmp_path, monkeypatch):
    from spreadrl.rollout.engines.vllm_sync import ColocatedRollouts, FilesSync

    probe = probe_ids(qwen3_tiny)
    seen: list[tuple[list[float], list[float], torch.Tensor]] = []
    engines = []
    send = ColocatedRollouts.before_rollouts

    def probed(self, model):
        send(self, model)
        assert isinstance(self.sync, FilesSync)
        engines.append(self.policy)
        embed = model.get_input_embeddings().weight.detach().clone()
        seen.append((engine_probe(self.policy, probe), trainer_probe(model, probe), embed))

    monkeypatch.setattr(ColocatedRollouts, "before_rollouts", probed)
    out = tmp_path / "run"
    one_turn = [
        "rollout.prompts_per_step=1",
        "rollout.max_turns=1",
        "rollout.max_new_tokens_per_turn=8",
        "rollout.max_response_tokens=16",
    ]
    try:
        train_grpo_on_vllm(qwen3_tiny, out, STEPS, one_turn)
    finally:
        if engines:
            close_engine(engines[0])
    assert len(seen) == STEPS and len({id(e) for e in engines}) == 1  # one engine, synced each step
    for step, (engine, trainer, _) in enumerate(seen, start=1):
        worst = max(abs(a - b) for a, b in zip(engine, trainer, strict=True))
        assert worst <= TOL, (step, worst)
        print(f"sync {step}: max |engine - trainer| probe log-prob {worst:.2e}")
    for (_, before, e0), (_, after, e1) in zip(seen, seen[1:], strict=False):
        moved = max(abs(a - b) for a, b in zip(before, after, strict=True))
        assert moved > 50 * TOL, moved  # the weights did change between syncs
        assert not torch.equal(e0, e1)  # the tied embedding (= the head) among them
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, STEPS + 1))
