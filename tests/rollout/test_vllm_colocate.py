"""The vllm backend and colocated weight sync, against the signature-checked vLLM fake."""

import sys

import pytest
import torch

from spreadrl.errors import MissingDependencyError
from spreadrl.rollout.types import SamplingParams
from spreadrl.rollout.vllm_policy import EngineSettings
from tests.rollout import fake_vllm


@pytest.fixture()
def vllm(monkeypatch):
    return fake_vllm.install(monkeypatch)


COLOCATED = EngineSettings(
    max_model_len=8192, gpu_memory_utilization=0.3, enable_sleep_mode=True, weight_transfer="ipc"
)


def test_missing_vllm_names_the_extra_and_the_alternative(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    from spreadrl.rollout.vllm_policy import VLLMPolicy

    with pytest.raises(MissingDependencyError, match=r"spreadrl\[gpu\].*rollout\.backend=hf"):
        VLLMPolicy("some/model")


def test_vllm_without_a_gpu_stops_with_one_line(vllm, monkeypatch):
    from spreadrl.rollout.vllm_policy import require_vllm_gpu

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(MissingDependencyError, match=r"CUDA GPU.*spreadrl\[gpu\]") as err:
        require_vllm_gpu()
    assert "\n" not in str(err.value)


def test_engine_is_built_from_the_settings(vllm):
    from spreadrl.rollout.vllm_policy import VLLMPolicy

    policy = VLLMPolicy("m", COLOCATED)
    kwargs = policy.llm.kwargs
    assert kwargs["max_model_len"] == 8192 and kwargs["gpu_memory_utilization"] == 0.3
    assert kwargs["enable_sleep_mode"] is True
    assert kwargs["logprobs_mode"] == "processed_logprobs"
    assert kwargs["weight_transfer_config"] == {"backend": "ipc"}


def test_ipc_transfer_refuses_an_in_process_engine(vllm, monkeypatch):
    from spreadrl.rollout.vllm_policy import VLLMPolicy

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    with pytest.raises(MissingDependencyError, match="VLLM_ENABLE_V1_MULTIPROCESSING"):
        VLLMPolicy("m", COLOCATED)


def test_vllm_policy_returns_sampled_ids_and_logprobs(vllm):
    from spreadrl.rollout.vllm_policy import VLLMPolicy

    policy = VLLMPolicy("m", stop_token_ids=[2])
    policy.act(
        [[5, 6], [5, 6]], SamplingParams(temperature=0.6, top_k=20, max_new_tokens=4, seed=1)
    )
    assert policy.llm.sampling[0].seed != policy.llm.sampling[1].seed  # same prompt, own stream
    assert policy.llm.sampling[0].top_k == 20 and policy.llm.sampling[0].logprobs == 0
    turns = policy.act([[5, 6], [9]], SamplingParams(temperature=0.6, top_k=0, max_new_tokens=4))
    assert policy.llm.sampling[0].top_k == 0  # off, as vLLM 0.33 spells it
    assert [t.token_ids for t in turns] == [[7, 2], [10, 2]]
    assert turns[0].logprobs == [-0.25, -0.25] and turns[0].finish_reason == "stop"


@pytest.mark.parametrize(
    ("vllm_reason", "ours"),
    [("stop", "stop"), ("length", "length"), ("repetition", "length"), ("abort", "abort")],
)
def test_finish_reasons_map_to_ours(vllm, vllm_reason, ours):
    from spreadrl.rollout.vllm_policy import _turn

    completion = fake_vllm.CompletionOutput("x", [1], None, vllm_reason)
    assert _turn(fake_vllm.RequestOutput("r", [completion], True)).finish_reason == ours


def test_vllm_policy_streams_turns_through_the_engine(vllm):
    from spreadrl.rollout.vllm_policy import VLLMPolicy

    policy = VLLMPolicy("m", EngineSettings(enable_sleep_mode=True), stop_token_ids=[2])
    policy.sleep(level=1)
    policy.submit("a#0", [5, 6], SamplingParams(max_new_tokens=8, seed=3))
    policy.submit("b#0", [9], SamplingParams(max_new_tokens=3, seed=3))
    assert policy.llm.events[:3] == ["sleep1", "wake:all", "add:a#0"]  # woken before queuing
    first = policy.poll()
    assert [rid for rid, _ in first] == ["a#0"]  # unfinished outputs are not returned
    assert first[0][1].token_ids == [7, 2] and first[0][1].logprobs == [-0.25, -0.25]
    engine = policy.llm.llm_engine
    assert engine.params[1].max_tokens == 3
    assert engine.params[1].output_kind is fake_vllm.RequestOutputKind.FINAL_ONLY
    assert [p.seed for p in engine.params] == [3, 3]  # as the scheduler set it
    assert [rid for rid, _ in policy.poll()] == ["b#0"]
    assert policy.poll() == []  # an idle engine is not stepped
    policy.submit("c#0", [1], SamplingParams())
    policy.abort(["c#0"])
    assert engine.aborted == ["c#0"] and not engine.has_unfinished_requests()


def test_colocated_cycle_sends_weights_through_the_transfer_api(vllm):
    from spreadrl.rollout.colocate import ColocatedRollouts
    from spreadrl.rollout.vllm_policy import VLLMPolicy

    model = torch.nn.Linear(3, 2)
    policy = VLLMPolicy("m", COLOCATED)
    colo = ColocatedRollouts(policy, sleep_level=2)
    for step in range(2):
        with torch.no_grad():
            model.weight.fill_(float(step))
        colo.before_rollouts(model)
        policy.act([[1]], SamplingParams())
        colo.after_rollouts()
        assert torch.equal(policy.llm.weights["weight"], model.weight)
        assert policy.llm.weights["weight"].data_ptr() != model.weight.data_ptr()
    update = ["start_update", "update", "finish_update"]
    assert policy.llm.events == [
        *update,
        "reset_cache",  # the first step's engine was awake: drop KV of the old weights
        "generate",
        "sleep2",
        "wake:weights",  # only the weights wake for the transfer, then the KV cache
        *update,
        "wake:kv_cache",
        "generate",
        "sleep2",
    ]
    assert colo.syncs == 2


def test_weight_sync_needs_an_engine_built_for_it(vllm):
    from spreadrl.rollout.colocate import ColocatedRollouts
    from spreadrl.rollout.vllm_policy import VLLMPolicy

    policy = VLLMPolicy("m", EngineSettings(enable_sleep_mode=True))  # no weight_transfer
    with pytest.raises(RuntimeError, match="Weight transfer not configured"):
        ColocatedRollouts(policy).before_rollouts(torch.nn.Linear(2, 2))


def test_lora_weights_are_exported_merged_in_base_names():
    from peft import LoraConfig, get_peft_model

    from spreadrl.rollout.colocate import export_metadata, export_weights

    base = torch.nn.Sequential(torch.nn.Linear(4, 4))
    model = get_peft_model(base, LoraConfig(r=2, target_modules=["0"], init_lora_weights=False))
    x = torch.randn(2, 4)
    expected = model(x)
    weights = dict(export_weights(model))
    assert set(weights) == {"0.weight", "0.bias"}
    assert [n for n, _, _ in export_metadata(model)] == list(weights)
    plain = torch.nn.Linear(4, 4)
    plain.load_state_dict({"weight": weights["0.weight"], "bias": weights["0.bias"]})
    assert torch.allclose(plain(x), expected, atol=1e-6)
    # the adapter is unmerged again afterwards
    assert torch.allclose(model(x), expected, atol=1e-6)


def test_lora_policy_syncs_merged_weights_through_the_transfer_api(vllm):
    from peft import LoraConfig, get_peft_model

    from spreadrl.rollout.colocate import ColocatedRollouts
    from spreadrl.rollout.vllm_policy import VLLMPolicy

    base = torch.nn.Sequential(torch.nn.Linear(4, 4))
    model = get_peft_model(base, LoraConfig(r=2, target_modules=["0"], init_lora_weights=False))
    policy = VLLMPolicy("m", COLOCATED)
    ColocatedRollouts(policy).before_rollouts(model)
    x = torch.randn(2, 4)
    got = torch.nn.functional.linear(
        x, policy.llm.weights["0.weight"], policy.llm.weights["0.bias"]
    )
    assert torch.allclose(got, model(x), atol=1e-6)
