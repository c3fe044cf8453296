"""GRPO with the colocated vllm backend, against a vLLM stand-in backed by transformers.

No GPU or vLLM here, so the stand-in implements the slice of vLLM's API the
backend uses (LLM.generate, llm_engine.add_request/step, sleep/wake_up,
collective_rpc + load_weights) over a real copy of the model. That checks the
orchestration end to end: weights reach the engine in memory before every
step's rollouts under the names vLLM's loader takes, the engine sleeps during
the update, and the episode scheduler drives it.
"""

import sys
import types
from pathlib import Path

import pytest
import torch
from rich.console import Console

from spreadrl.data.task import TaskSet
from spreadrl.rollout.hf_policy import HFPolicy
from spreadrl.rollout.types import SamplingParams
from spreadrl.train.grpo import train_grpo
from tests.rollout.fakes import FakePool, make_task
from tests.train.test_grpo_e2e import _cfg, _metrics


class _Logprob:
    def __init__(self, value):
        self.logprob = value


class TransformersLLM:
    """The part of ``vllm.LLM`` spreadrl drives, generating with a transformers model."""

    instances = []

    def __init__(self, model, **kwargs):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.kwargs = kwargs
        self.model = AutoModelForCausalLM.from_pretrained(model)
        self.policy = HFPolicy(self.model, AutoTokenizer.from_pretrained(model))
        self.events = []
        self.synced = []  # a copy of the weights after every load
        self.asleep = False
        self.llm_engine = types.SimpleNamespace(
            add_request=self._add, step=self._step, has_unfinished_requests=lambda: bool(self.queue)
        )
        self.queue = []
        TransformersLLM.instances.append(self)

    def _check_awake(self):
        assert not self.asleep, "generation on a sleeping engine"

    def _add(self, request_id, prompt, params):
        self._check_awake()
        self.events.append("add")
        self.queue.append((request_id, prompt["prompt_token_ids"], params))

    def _step(self):
        self._check_awake()
        outs = []
        for rid, ctx, params in self.queue:
            turn = self.policy.act(
                [ctx],
                SamplingParams(params.temperature, params.top_p, 0, params.max_tokens, params.seed),
            )[0]
            completion = types.SimpleNamespace(
                token_ids=turn.token_ids,
                text=turn.text,
                finish_reason="stop" if turn.finish_reason == "stop" else "length",
                logprobs=[
                    {t: _Logprob(lp)} for t, lp in zip(turn.token_ids, turn.logprobs, strict=True)
                ],
            )
            outs.append(types.SimpleNamespace(request_id=rid, finished=True, outputs=[completion]))
        self.queue = []
        return outs

    def sleep(self, level=1):
        self.events.append(f"sleep{level}")
        self.asleep = True

    def wake_up(self, tags=None):
        self.events.append(f"wake:{','.join(tags or ['all'])}")
        if tags is None or "kv_cache" in tags:
            self.asleep = False

    def collective_rpc(self, fn):
        fn(types.SimpleNamespace(model_runner=types.SimpleNamespace(model=self)))

    def load_weights(self, weights):
        weights = dict(weights)
        missing, unexpected = self.model.load_state_dict(weights, strict=False)
        assert not unexpected, unexpected
        assert not [k for k in missing if "lm_head" not in k], missing  # tied head
        self.synced.append({k: v.clone() for k, v in weights.items()})
        self.events.append("load")

    def reset_prefix_cache(self):
        pass


@pytest.fixture()
def transformers_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM = TransformersLLM
    module.SamplingParams = lambda **kw: types.SimpleNamespace(**kw)
    monkeypatch.setitem(sys.modules, "vllm", module)
    TransformersLLM.instances.clear()
    return module


@pytest.mark.slow
def test_grpo_with_colocated_vllm_syncs_weights_each_step(
    transformers_vllm, tiny_model_dir, tmp_path
):
    out = tmp_path / "run"
    cfg = _cfg(tiny_model_dir, out, 2, ["rollout.backend=vllm", "checkpoint.every_steps=1"])
    train_grpo(
        cfg, console=Console(quiet=True), pool=FakePool(), tasks=TaskSet(Path("."), [make_task()])
    )
    (engine,) = TransformersLLM.instances
    assert engine.kwargs["enable_sleep_mode"] is True
    # step 1 loads the initial weights into the awake engine; step 2 wakes weights, loads,
    # then wakes the KV cache; the episode scheduler queued every turn; sleep after each
    events = [e for e in engine.events if e != "add"]
    assert events == ["load", "sleep2", "wake:weights", "load", "wake:kv_cache", "sleep2"]
    assert engine.events.count("add") >= 2 * 8
    # the engine generated step 1 with the initial weights and step 2 with what step 1 trained
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    initial = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    after_1 = load_file(out / "checkpoints" / "step-000001" / "model.safetensors")
    first, second = engine.synced
    assert all(torch.equal(first[k], initial[k]) for k in first)
    assert all(torch.equal(second[k], after_1[k]) for k in after_1)
    metrics = _metrics(out)
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["trained_sequences"] == 8 for m in metrics)
    if metrics[0]["grad_norm"] > 0:  # step 1 had signal: the engine really got new weights
        assert any(not torch.equal(second[k], initial[k]) for k in second)
