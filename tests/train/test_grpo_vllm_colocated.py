"""GRPO with the colocated vllm backend, against a vLLM stand-in backed by transformers.

No GPU or vLLM here, so the stand-in is the signature-checked fake of
``tests/rollout/fake_vllm.py`` (every call spreadrl makes must match vLLM
0.33's recorded signatures) generating with a real copy of the model. That
checks the orchestration end to end: weights reach the engine through the
weight-transfer calls before every step's rollouts, under the names vLLM's
loader takes; the engine sleeps during the update; the episode scheduler
drives it. And the start-up checks: no silent fallback to the hf backend.
"""

from pathlib import Path

import pytest
import torch

from spreadrl.data.task import TaskSet
from spreadrl.errors import ConfigError, MissingDependencyError
from spreadrl.rollout.engines.hf import HFPolicy
from spreadrl.rollout.types import SamplingParams
from spreadrl.train.grpo import train_grpo
from tests.rollout import fake_vllm
from tests.rollout.fakes import FakePool, make_task
from tests.train.test_grpo_e2e import _cfg, _metrics

# auto would pick files without CUDA; the ipc path is the one these tests follow
VLLM = ["rollout.backend=vllm", "rollout.weight_sync=ipc", "data.max_prompt_tokens=2048"]


class TransformersLLM(fake_vllm.FakeLLM):
    """The fake ``vllm.LLM``, generating with a transformers model and loading the
    weights it receives into it."""

    def __init__(self, model, **kwargs):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        super().__init__(model, **kwargs)
        self.model = AutoModelForCausalLM.from_pretrained(model)
        self.policy = HFPolicy(self.model, AutoTokenizer.from_pretrained(model))
        self.synced = []  # a copy of the weights after every update

    def complete(self, prompt_ids, params):
        top_k = max(params.top_k, 0)  # vLLM's 0 (off) is the hf policy's 0 too
        sampling = SamplingParams(
            params.temperature, params.top_p, top_k, params.max_tokens, params.seed
        )
        turn = self.policy.act([prompt_ids], sampling)[0]
        # cut at the request's stop ids and max_tokens, log-probs only when asked for
        completion = fake_vllm.finish_like_vllm(
            turn.token_ids, turn.logprobs, params, eos=self.policy.tokenizer.eos_token_id
        )
        completion.text = turn.text
        return completion

    def load_weights(self, weights):
        weights = dict(weights)
        missing, unexpected = self.model.load_state_dict(weights, strict=False)
        assert not unexpected, unexpected
        assert not [k for k in missing if "lm_head" not in k], missing  # tied head
        self.synced.append({k: v.clone() for k, v in weights.items()})


@pytest.fixture()
def transformers_vllm(monkeypatch):
    import spreadrl.rollout.engines.vllm as vllm_policy

    module = fake_vllm.install(monkeypatch, TransformersLLM)
    monkeypatch.setattr(vllm_policy, "require_vllm_gpu", vllm_policy.import_vllm)  # no GPU here
    return module


@pytest.mark.slow
def test_grpo_with_colocated_vllm_syncs_weights_each_step(
    transformers_vllm, tiny_model_dir, tmp_path
):
    out = tmp_path / "run"
    cfg = _cfg(tiny_model_dir, out, 2, [*VLLM, "checkpoint.every_steps=1"])
    train_grpo(cfg, pool=FakePool(), tasks=TaskSet(Path("."), [make_task()]))
    (engine,) = TransformersLLM.instances
    assert engine.kwargs["enable_sleep_mode"] is True
    assert engine.kwargs["max_model_len"] == 2048 + 48  # prompt + response budget
    assert engine.kwargs["gpu_memory_utilization"] == cfg.rollout.vllm_gpu_memory_utilization
    assert engine.kwargs["weight_transfer_config"] == {"backend": "ipc"}
    # step 1 updates the awake engine; step 2 wakes the weights, updates, then wakes the
    # KV cache; the episode scheduler queued every turn; sleep after each step's rollouts
    events = [e for e in engine.events if not e.startswith("add:")]
    update = ["start_update", "update", "finish_update"]
    assert events == [
        *update,
        "reset_cache",
        "sleep2",
        "wake:weights",
        *update,
        "wake:kv_cache",
        "sleep2",
    ]
    assert sum(e.startswith("add:") for e in engine.events) >= 2 * 8
    # the engine generated step 1 with the initial weights and step 2 with what step 1 trained
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    initial = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    after_1 = load_file(out / "checkpoints" / "step-000001" / "model.safetensors")
    first, second = engine.synced
    # in the engine's dtype (bfloat16 for model.dtype=auto), cast at export; the tied
    # lm_head under its own name too (vLLM's in-place reload unties it)
    assert engine.kwargs["dtype"] == "bfloat16"
    assert {v.dtype for v in first.values()} == {torch.bfloat16}
    assert torch.equal(first["lm_head.weight"], first["model.embed_tokens.weight"])
    assert all(torch.equal(first[k], initial[k].to(torch.bfloat16)) for k in first)
    assert all(torch.equal(second[k], after_1[k].to(torch.bfloat16)) for k in after_1)
    metrics = _metrics(out)
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["trained_sequences"] == 8 for m in metrics)
    if metrics[0]["grad_norm"] > 0:  # step 1 had signal: the engine really got new weights
        assert any(not torch.equal(second[k], initial[k]) for k in second)


def _start(cfg):
    train_grpo(cfg, pool=FakePool(), tasks=TaskSet(Path("."), [make_task()]))


def test_vllm_backend_without_vllm_stops_at_start_up(monkeypatch, tiny_model_dir, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "vllm", None)
    cfg = _cfg(tiny_model_dir, tmp_path / "run", 1, VLLM)
    with pytest.raises(MissingDependencyError, match=r"spreadrl\[gpu\].*rollout\.backend=hf"):
        _start(cfg)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # no step ran on a fallback


def test_vllm_backend_needs_a_prompt_budget(transformers_vllm, tiny_model_dir, tmp_path):
    cfg = _cfg(tiny_model_dir, tmp_path / "run", 1, ["rollout.backend=vllm"])
    with pytest.raises(ConfigError, match="data.max_prompt_tokens"):
        _start(cfg)


def test_vllm_backend_under_torchrun_builds_one_engine_per_rank(monkeypatch, tiny_model):
    # no longer refused: each rank gets an engine of its own, pinned to its GPU
    # (end to end: tests/train/test_grpo_vllm_torchrun.py)
    import spreadrl.rollout.engines.vllm as vllm_policy
    from spreadrl.config import load_config
    from spreadrl.train.checks import training_engine
    from spreadrl.train.config import GRPOConfig
    from spreadrl.train.distributed import DistInfo

    fake_vllm.install(monkeypatch)
    monkeypatch.setattr(vllm_policy, "require_vllm_gpu", vllm_policy.import_vllm)
    cfg = load_config(GRPOConfig, None, VLLM)
    rank1 = DistInfo(rank=1, world_size=2, local_rank=1, device="cuda:1", launched=True)
    model, tokenizer = tiny_model
    rollout_engine = training_engine(
        cfg.rollout, cfg.model, rank1, max_prompt_tokens=cfg.data.max_prompt_tokens, seed=cfg.seed
    )
    rollout_engine.start(model, tokenizer)
    engine = rollout_engine.policy
    assert rollout_engine.colocated and engine.local_rank == 1
    assert engine.llm.kwargs["device_ids"] == [1]
    assert engine.llm.kwargs["seed"] == cfg.seed + 1


def test_the_transformers_stand_in_honours_top_k_max_tokens_and_logprobs(tiny_model_dir):
    """top_k=1 leaves one candidate per step: two seeds sample the same ids (greedy);
    max_tokens cuts the turn as "length"; logprobs=None returns none (as vLLM does)."""
    llm = TransformersLLM(str(tiny_model_dir))
    sp = fake_vllm.SamplingParams
    prompt = [5, 6, 7]
    greedy = [llm.complete(prompt, sp(top_k=1, max_tokens=6, seed=s, logprobs=0)) for s in (1, 2)]
    assert greedy[0].token_ids == greedy[1].token_ids
    free = [llm.complete(prompt, sp(top_k=0, max_tokens=6, seed=s, logprobs=0)) for s in (1, 2, 3)]
    assert len({tuple(c.token_ids) for c in free}) > 1  # without top_k the seeds differ
    cut = llm.complete(prompt, sp(max_tokens=2, seed=1, logprobs=None))
    assert len(cut.token_ids) <= 2 and cut.logprobs is None
