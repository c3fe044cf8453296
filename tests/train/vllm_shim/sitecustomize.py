"""Puts the signature-checked vLLM fake into every torchrun rank of a test's run.

``tests/train/test_grpo_vllm_torchrun.py`` starts ``torchrun ... -m spreadrl grpo``
with this folder first on PYTHONPATH and ``SPREADRL_FAKE_VLLM_OUT`` set; Python
imports ``sitecustomize`` at start-up, so each rank process (torchrun sets
``LOCAL_RANK`` for its workers, not for itself) gets ``vllm`` = the fake of
``tests/rollout/fake_vllm.py``, generating with a transformers copy of the model.
No CUDA here, so the start-up GPU check is the import check.

Each engine writes what the test checks under ``SPREADRL_FAKE_VLLM_OUT``:
``engine-<pid>.json`` when built (its device, seed, and the torchrun variables an
engine process spawned at that moment would inherit), and ``engine-<pid>-sync<n>.pt``
for every weight update it receives (the full tensors, and the rank whose trainer
sent them).
"""

from __future__ import annotations

import os

if os.environ.get("SPREADRL_FAKE_VLLM_OUT") and "LOCAL_RANK" in os.environ:
    import json
    import sys
    from pathlib import Path

    import torch

    import spreadrl.rollout.engines.vllm as vllm_policy
    from tests.rollout import fake_vllm
    from tests.train.test_grpo_vllm_colocated import TransformersLLM

    OUT = Path(os.environ["SPREADRL_FAKE_VLLM_OUT"])

    class RecordingLLM(TransformersLLM):
        def __init__(self, model, **kwargs):
            super().__init__(model, **kwargs)
            self.syncs = 0
            record = {
                "pid": os.getpid(),
                "device": self.device,
                "seed": self.kwargs["seed"],
                "device_ids": self.kwargs["device_ids"],
                "spawn_env": self.spawn_env,
            }
            (OUT / f"engine-{os.getpid()}.json").write_text(json.dumps(record))

        def load_weights(self, weights):
            super().load_weights(weights)
            self.syncs += 1
            torch.save(
                {"rank": int(os.environ["RANK"]), "weights": dict(weights)},
                OUT / f"engine-{os.getpid()}-sync{self.syncs}.pt",
            )

    class _SysModules:
        """``install`` takes a monkeypatch; a rank process keeps the fake for good."""

        @staticmethod
        def setitem(mapping, name, value):
            mapping[name] = value

        @staticmethod
        def setenv(name, value):
            os.environ[name] = value

    fake_vllm.install(_SysModules(), RecordingLLM)
    vllm_policy.require_vllm_gpu = vllm_policy.import_vllm
    assert "vllm" in sys.modules
