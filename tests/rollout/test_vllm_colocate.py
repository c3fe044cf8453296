"""The vllm backend and colocated orchestration, against a fake vllm module (no GPU here)."""

import sys
import types

import pytest
import torch

from spreadrl.errors import MissingDependencyError
from spreadrl.rollout.types import SamplingParams


class _Logprob:
    def __init__(self, value):
        self.logprob = value


class FakeEngine:
    """vLLM's LLMEngine surface: add_request, then step() until has_unfinished_requests()
    is False; each step finishes the oldest request and reports the others unfinished."""

    def __init__(self, events):
        self.events = events
        self.queue = []

    def add_request(self, request_id, prompt, params):
        self.events.append(f"add:{request_id}")
        self.queue.append((request_id, prompt["prompt_token_ids"], params))

    def has_unfinished_requests(self):
        return bool(self.queue)

    def step(self):
        outs = []
        for i, (rid, ctx, _params) in enumerate(self.queue):
            ids = [ctx[-1] + 1, 2]
            completion = types.SimpleNamespace(
                token_ids=ids,
                text="x",
                finish_reason="stop",
                logprobs=[{t: _Logprob(-0.5)} for t in ids],
            )
            outs.append(
                types.SimpleNamespace(request_id=rid, finished=i == 0, outputs=[completion])
            )
        self.params = [p for _, _, p in self.queue]
        self.queue = self.queue[1:]
        return outs


class FakeLLM:
    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.events = []
        self.loaded = {}
        self.llm_engine = FakeEngine(self.events)

    def generate(self, prompts, sampling, use_tqdm=False):
        self.events.append("generate")
        self.sampling = sampling
        outs = []
        for p in prompts:
            ids = [p["prompt_token_ids"][-1] + 1, 2]
            completion = types.SimpleNamespace(
                token_ids=ids,
                text="x",
                finish_reason="stop",
                logprobs=[{t: _Logprob(-0.25)} for t in ids],
            )
            outs.append(types.SimpleNamespace(outputs=[completion]))
        return outs

    def sleep(self, level=1):
        self.events.append(f"sleep{level}")

    def wake_up(self, tags=None):
        self.events.append(f"wake:{','.join(tags) if tags else 'all'}")

    def collective_rpc(self, fn):
        worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(model=self))
        fn(worker)
        self.events.append("load")

    def load_weights(self, weights):
        self.loaded = dict(weights)

    def reset_prefix_cache(self):
        self.events.append("reset_cache")


@pytest.fixture()
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM = FakeLLM
    module.SamplingParams = lambda **kw: types.SimpleNamespace(**kw)
    module.sampling_params = types.SimpleNamespace(
        RequestOutputKind=types.SimpleNamespace(FINAL_ONLY="final-only")
    )
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


def test_missing_vllm_gives_a_clear_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    from spreadrl.rollout.vllm_policy import VLLMPolicy

    with pytest.raises(MissingDependencyError, match=r"spreadrl\[gpu\]"):
        VLLMPolicy("some/model")


def test_vllm_policy_returns_sampled_ids_and_logprobs(fake_vllm):
    from spreadrl.rollout.vllm_policy import VLLMPolicy

    policy = VLLMPolicy("m", stop_token_ids=[2])
    assert policy.llm.kwargs["enable_sleep_mode"] is True
    turns = policy.act(
        [[5, 6], [5, 6]], SamplingParams(temperature=0.6, top_k=20, max_new_tokens=4, seed=1)
    )
    assert policy.llm.sampling[0].seed != policy.llm.sampling[1].seed  # same prompt, own stream
    turns = policy.act([[5, 6], [9]], SamplingParams(temperature=0.6, top_k=20, max_new_tokens=4))
    assert [t.token_ids for t in turns] == [[7, 2], [10, 2]]
    assert turns[0].logprobs == [-0.25, -0.25] and turns[0].finish_reason == "stop"


def test_vllm_policy_streams_turns_through_the_engine(fake_vllm):
    from spreadrl.rollout.vllm_policy import VLLMPolicy

    policy = VLLMPolicy("m", stop_token_ids=[2])
    policy.sleep(level=1)
    policy.submit("a#0", [5, 6], SamplingParams(max_new_tokens=8, seed=3))
    policy.submit("b#0", [9], SamplingParams(max_new_tokens=3, seed=3))
    assert policy.llm.events[:3] == ["sleep1", "wake:all", "add:a#0"]  # woken before queuing
    first = policy.poll()
    assert [rid for rid, _ in first] == ["a#0"]  # unfinished outputs are not returned
    assert first[0][1].token_ids == [7, 2] and first[0][1].logprobs == [-0.5, -0.5]
    assert policy.llm.llm_engine.params[1].max_tokens == 3
    assert policy.llm.llm_engine.params[1].output_kind == "final-only"
    assert [p.seed for p in policy.llm.llm_engine.params] == [3, 3]  # as the scheduler set it
    assert [rid for rid, _ in policy.poll()] == ["b#0"]
    assert policy.poll() == []  # an idle engine is not stepped


def test_colocated_cycle_syncs_weights_before_generation_and_sleeps_after(fake_vllm):
    from spreadrl.rollout.colocate import ColocatedRollouts
    from spreadrl.rollout.vllm_policy import VLLMPolicy

    model = torch.nn.Linear(3, 2)
    policy = VLLMPolicy("m")
    colo = ColocatedRollouts(policy, sleep_level=2)
    for step in range(2):
        with torch.no_grad():
            model.weight.fill_(float(step))
        colo.before_rollouts(model)
        policy.act([[1]], SamplingParams())
        colo.after_rollouts()
        assert torch.equal(policy.llm.loaded["weight"], model.weight)
    assert policy.llm.events == [
        "load",
        "reset_cache",
        "generate",
        "sleep2",
        "wake:weights",
        "load",
        "reset_cache",
        "wake:kv_cache",
        "generate",
        "sleep2",
    ]
    assert colo.syncs == 2


def test_lora_weights_are_exported_merged_in_base_names():
    from peft import LoraConfig, get_peft_model

    from spreadrl.rollout.colocate import export_weights

    base = torch.nn.Sequential(torch.nn.Linear(4, 4))
    model = get_peft_model(base, LoraConfig(r=2, target_modules=["0"], init_lora_weights=False))
    x = torch.randn(2, 4)
    expected = model(x)
    weights = dict(export_weights(model))
    assert set(weights) == {"0.weight", "0.bias"}
    plain = torch.nn.Linear(4, 4)
    plain.load_state_dict({"weight": weights["0.weight"], "bias": weights["0.bias"]})
    assert torch.allclose(plain(x), expected, atol=1e-6)
    # the adapter is unmerged again afterwards
    assert torch.allclose(model(x), expected, atol=1e-6)
