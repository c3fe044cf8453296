"""`torchrun --nproc-per-node 2` (gloo, CPU) of `spreadrl grpo` with rollout.backend=vllm.

Under torchrun each rank builds its own vLLM engine, pinned to the rank's GPU, and
feeds it the rank's gathered (full) weights through vLLM's ipc weight transfer,
where every rank is the sender to its own engine (docs/vllm.md). No GPU or vLLM
here: each rank process gets the signature-checked fake of
``tests/rollout/fake_vllm.py`` through ``tests/train/vllm_shim/sitecustomize.py``
(generating with a transformers copy of the model, and shipping weights the way
vLLM's ipc engine does: all ranks all-gather ``{GPU UUID: handle}``, each engine
opens its own GPU's). Checked: one engine per rank on the rank's own device,
spawned without torchrun's variables; every engine received the full weights the
trainer held before each step's rollouts; and the run's metrics and the update its
two steps made equal a single-process run of the same recipe on the same fake (both
training with plain SGD, see tests/train/equivalence.py).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from spreadrl.config import load_config
from spreadrl.train import trained_model
from spreadrl.train.config import GRPOConfig
from spreadrl.train.grpo import train_grpo
from tests.rollout import fake_vllm
from tests.train.equivalence import SGD_OVERRIDES, assert_same_update, sgd_optimizer
from tests.train.test_grpo_options_cli import REPO, _overrides, torchrun_command
from tests.train.test_grpo_options_torchrun import GLOBAL, SEED, SGD_MODULE, _metrics
from tests.train.test_grpo_vllm_colocated import TransformersLLM

SHIM = Path(__file__).resolve().parent / "vllm_shim"
VLLM = [
    "rollout.backend=vllm",
    "rollout.weight_sync=ipc",  # auto picks files without CUDA; this test is about ipc
    "data.max_prompt_tokens=2048",
    "checkpoint.every_steps=1",
]
LAUNCHER_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _state(path):
    from safetensors.torch import load_file

    return load_file(path)


@pytest.mark.slow
def test_torchrun_vllm_one_engine_per_rank_gets_full_weights(monkeypatch, tiny_model_dir, tmp_path):
    import spreadrl.rollout.engines.vllm as vllm_policy

    single = tmp_path / "single"
    with monkeypatch.context() as patch:
        fake_vllm.install(patch, TransformersLLM)
        patch.setattr(vllm_policy, "require_vllm_gpu", vllm_policy.import_vllm)
        patch.setattr(trained_model, "build_optimizer", sgd_optimizer)  # both runs: equivalence.py
        cfg = load_config(
            GRPOConfig, None, [*_overrides(tiny_model_dir, single, 2), *SEED, *VLLM, *SGD_OVERRIDES]
        )
        train_grpo(cfg)
        (one_engine,) = TransformersLLM.instances
        assert one_engine.kwargs["device_ids"] is None  # one process: vLLM's own placement

    two, engines = tmp_path / "two", tmp_path / "engines"
    engines.mkdir()
    cmd = torchrun_command(
        "grpo",
        *_overrides(tiny_model_dir, two, 2),
        *SEED,
        *VLLM,
        *SGD_OVERRIDES,
        module=SGD_MODULE,
    )
    env = {
        **os.environ,
        "PYTHONPATH": f"{SHIM}{os.pathsep}{REPO}",
        "OMP_NUM_THREADS": "1",
        "SPREADRL_FAKE_VLLM_OUT": str(engines),
    }
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    # one engine per rank, each on its rank's device, spawned without torchrun's variables
    records = [json.loads(p.read_text()) for p in sorted(engines.glob("engine-*.json"))]
    assert sorted(r["device"] for r in records) == [0, 1]
    assert len({r["pid"] for r in records}) == 2
    for r in records:
        assert r["device_ids"] == [r["device"]]
        assert r["seed"] == cfg.seed + r["device"]  # a seed per rank (local rank = rank here)
        assert not [k for k in r["spawn_env"] if k in LAUNCHER_VARS or "TORCHELASTIC" in k]
        assert r["spawn_env"]["VLLM_CACHE_ROOT"].endswith(f"local-rank-{r['device']}")

    # every engine received, before each step's rollouts, the full weights its trainer
    # rank held: the checkpoint's at step 1, what step 1 trained at step 2
    from transformers import AutoModelForCausalLM

    initial = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    after_1 = _state(two / "checkpoints" / "step-000001" / "model.safetensors")
    assert any(not torch.equal(after_1[k], initial[k]) for k in after_1)  # step 1 moved them
    for r in records:
        files = sorted(engines.glob(f"engine-{r['pid']}-sync*.pt"))
        assert len(files) == 2, f"engine on device {r['device']} got {len(files)} of 2 updates"
        syncs = [torch.load(f) for f in files]
        assert [s["rank"] for s in syncs] == [r["device"]] * 2  # the engine of that rank
        first, second = (s["weights"] for s in syncs)
        assert set(after_1) <= set(first) and set(after_1) <= set(second)
        for name, value in after_1.items():
            assert first[name].shape == initial[name].shape  # full tensors, not shards
            # in the engine's dtype (bfloat16: model.dtype=auto), cast at export
            assert torch.equal(first[name], initial[name].to(torch.bfloat16)), name
            assert torch.equal(second[name], value.to(torch.bfloat16)), name

    # the run's metrics (reduced over the ranks) and weights are the single process's
    want, got = _metrics(single), _metrics(two)
    assert [m["step"] for m in got] == [1, 2]
    for a, b in zip(got, want, strict=True):
        for key in GLOBAL:
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), (a["step"], key)
    got_final = _state(two / "final" / "model.safetensors")
    assert_same_update(got_final, _state(single / "final" / "model.safetensors"), initial)
