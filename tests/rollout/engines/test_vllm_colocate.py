"""The vllm backend and colocated weight sync, against the signature-checked vLLM fake."""

import sys

import pytest
import torch

from spreadrl.errors import MissingDependencyError
from spreadrl.rollout.types import SamplingParams
from tests.rollout import fake_vllm


@pytest.fixture()
def vllm(monkeypatch):
    return fake_vllm.install(monkeypatch)


COLOCATED = dict(
    max_model_len=8192, gpu_memory_utilization=0.3, enable_sleep_mode=True, weight_transfer="ipc"
)


def sampling(**given):
    """A request's SamplingParams (the type has no defaults): plain sampling, 16 tokens."""
    return SamplingParams(
        **{"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 16, **given}
    )


def test_missing_vllm_names_the_extra_and_the_alternative(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    from spreadrl.rollout.engines.vllm import VLLMPolicy

    with pytest.raises(MissingDependencyError, match=r"spreadrl\[gpu\].*rollout\.backend=hf"):
        VLLMPolicy("some/model")


def test_vllm_without_a_gpu_stops_with_one_line(vllm, monkeypatch):
    from spreadrl.rollout.engines.vllm import require_vllm_gpu

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(MissingDependencyError, match=r"CUDA GPU.*spreadrl\[gpu\]") as err:
        require_vllm_gpu()
    assert "\n" not in str(err.value)


def test_engine_is_built_from_the_settings(vllm):
    from spreadrl.rollout.engines.vllm import VLLMPolicy

    policy = VLLMPolicy("m", **COLOCATED)
    kwargs = policy.llm.kwargs
    assert kwargs["max_model_len"] == 8192 and kwargs["gpu_memory_utilization"] == 0.3
    assert kwargs["enable_sleep_mode"] is True
    assert kwargs["logprobs_mode"] == "processed_logprobs"
    assert kwargs["weight_transfer_config"] == {"backend": "ipc"}


def test_ipc_transfer_refuses_an_in_process_engine(vllm, monkeypatch):
    from spreadrl.rollout.engines.vllm import VLLMPolicy

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    with pytest.raises(MissingDependencyError, match="VLLM_ENABLE_V1_MULTIPROCESSING"):
        VLLMPolicy("m", **COLOCATED)


def test_vllm_policy_returns_sampled_ids_and_logprobs(vllm):
    from spreadrl.rollout.engines.vllm import VLLMPolicy

    policy = VLLMPolicy("m", stop_token_ids=[2])
    policy.act([[5, 6], [5, 6]], sampling(temperature=0.6, top_k=20, max_new_tokens=4, seed=1))
    assert policy.llm.sampling[0].seed != policy.llm.sampling[1].seed  # same prompt, own stream
    assert policy.llm.sampling[0].top_k == 20 and policy.llm.sampling[0].logprobs == 0
    turns = policy.act([[5, 6], [9]], sampling(temperature=0.6, top_k=0, max_new_tokens=4))
    assert policy.llm.sampling[0].top_k == 0  # off, as vLLM 0.33 spells it
    assert [t.token_ids for t in turns] == [[7, 2], [10, 2]]
    assert turns[0].logprobs == [-0.25, -0.25] and turns[0].finish_reason == "stop"


@pytest.mark.parametrize(
    ("vllm_reason", "ours"),
    [("stop", "stop"), ("length", "length"), ("repetition", "length"), ("abort", "abort")],
)
def test_finish_reasons_map_to_ours(vllm, vllm_reason, ours):
    from spreadrl.rollout.engines.vllm import _turn

    completion = fake_vllm.CompletionOutput("x", [1], [{1: fake_vllm.Logprob(-1.0)}], vllm_reason)
    assert _turn(fake_vllm.RequestOutput("r", [completion], True)).finish_reason == ours


@pytest.mark.parametrize(
    "steps",
    [None, [], [{}], [{7: fake_vllm.Logprob(-1.0)}]],
    ids=["no-logprobs", "too-few", "empty-step", "other-token"],
)
def test_a_missing_logprob_is_an_error_not_zero(steps):
    """0.0 would read as probability 1 and bend truncated importance sampling."""
    from spreadrl.errors import SpreadrlError
    from spreadrl.rollout.engines.vllm import _turn

    completion = fake_vllm.CompletionOutput("x", [5], steps, "stop")
    with pytest.raises(SpreadrlError, match="request r7: .*log-prob") as err:
        _turn(fake_vllm.RequestOutput("r7", [completion], True))
    assert "\n" not in str(err.value)


def test_an_empty_turn_needs_no_logprobs():
    from spreadrl.rollout.engines.vllm import _turn

    completion = fake_vllm.CompletionOutput("", [], None, "abort")
    turn = _turn(fake_vllm.RequestOutput("r", [completion], True))
    assert turn.token_ids == [] and turn.logprobs == [] and turn.finish_reason == "abort"


def test_the_fake_honours_logprobs_max_tokens_and_stop_ids(vllm):
    llm = fake_vllm.FakeLLM("m")
    p = fake_vllm.SamplingParams
    # the fake model continues [last + 1, EOS=2]
    assert llm.complete([5], p(logprobs=None)).logprobs is None
    full = llm.complete([5], p(logprobs=0))
    assert (full.token_ids, full.finish_reason) == ([6, 2], "stop")
    assert [list(s) for s in full.logprobs] == [[6], [2]]
    cut = llm.complete([5], p(max_tokens=1, logprobs=0))
    assert (cut.token_ids, cut.finish_reason, len(cut.logprobs)) == ([6], "length", 1)
    stopped = llm.complete([5], p(stop_token_ids=[6], logprobs=0))
    assert (stopped.token_ids, stopped.finish_reason) == ([6], "stop")
    with pytest.raises(ValueError, match="top_k"):
        p(top_k=-2)


def test_policy_asks_for_logprobs_so_a_fake_without_them_fails(vllm, monkeypatch):
    """The policy's own SamplingParams carry logprobs=0; if they did not, the fake
    (like vLLM) would return none and the turn would fail rather than read 0.0."""
    from spreadrl.errors import SpreadrlError
    from spreadrl.rollout.engines.vllm import VLLMPolicy

    policy = VLLMPolicy("m")
    real = policy._sampling
    monkeypatch.setattr(policy, "_sampling", lambda *a, **k: _without_logprobs(real(*a, **k)))
    with pytest.raises(SpreadrlError, match="log-prob"):
        policy.act([[5]], sampling(max_new_tokens=4))


def _without_logprobs(params):
    params.logprobs = None
    return params


def test_vllm_policy_streams_turns_through_the_engine(vllm):
    from spreadrl.rollout.engines.vllm import VLLMPolicy

    policy = VLLMPolicy("m", enable_sleep_mode=True, stop_token_ids=[2])
    policy.sleep(level=1)
    policy.submit("a#0", [5, 6], sampling(max_new_tokens=8, seed=3))
    policy.submit("b#0", [9], sampling(max_new_tokens=3, seed=3))
    assert policy.llm.events[:3] == ["sleep1", "wake:all", "add:a#0"]  # woken before queuing
    engine = policy.llm.llm_engine
    engine.max_running = 1  # the engine serves one request at a time: b#0 waits
    assert policy.take_started() == []
    assert policy.poll() == []  # a#0's first token: unfinished turns are not returned
    assert policy.take_started() == ["a#0"]  # scheduled, named once
    first = policy.poll()
    assert [rid for rid, _ in first] == ["a#0"]
    # the streamed deltas add up to the whole turn
    assert first[0][1].token_ids == [7, 2] and first[0][1].logprobs == [-0.25, -0.25]
    assert first[0][1].finish_reason == "stop" and first[0][1].text == "x"
    assert policy.take_started() == []  # b#0 still waited for the engine's only slot
    assert engine.params[1].max_tokens == 3
    assert engine.params[1].output_kind is fake_vllm.RequestOutputKind.DELTA
    assert [p.seed for p in engine.params] == [3, 3]  # as the scheduler set it
    assert policy.poll() == [] and policy.take_started() == ["b#0"]
    assert [rid for rid, _ in policy.poll()] == ["b#0"]
    assert policy.poll() == []  # an idle engine is not stepped
    policy.submit("c#0", [1], sampling())
    policy.abort(["c#0"])
    assert engine.aborted == ["c#0"] and not engine.has_unfinished_requests()


def _two_synced_steps(model, policy, colo):
    """Two rollout cycles, each after a weight change; yields the engine's weight once it
    has been checked equal to the trainer's."""
    for step in range(2):
        with torch.no_grad():
            model.weight.fill_(float(step))
        colo.before_rollouts(model)
        policy.act([[1]], sampling())
        colo.after_rollouts()
        assert torch.equal(policy.llm.weights["weight"], model.weight)
        yield policy.llm.weights["weight"]


def test_colocated_cycle_sends_weights_through_the_transfer_api(vllm):
    from spreadrl.rollout.engines.vllm import VLLMPolicy
    from spreadrl.rollout.engines.vllm_sync import ColocatedRollouts

    model = torch.nn.Linear(3, 2)
    policy = VLLMPolicy("m", **COLOCATED)
    colo = ColocatedRollouts(policy, sleep_level=2)
    for engine_weight in _two_synced_steps(model, policy, colo):
        assert engine_weight.data_ptr() != model.weight.data_ptr()
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
    from spreadrl.rollout.engines.vllm import VLLMPolicy
    from spreadrl.rollout.engines.vllm_sync import ColocatedRollouts

    policy = VLLMPolicy("m", enable_sleep_mode=True)  # no weight_transfer
    with pytest.raises(RuntimeError, match="Weight transfer not configured"):
        ColocatedRollouts(policy).before_rollouts(torch.nn.Linear(2, 2))


def test_lora_weights_are_exported_merged_in_base_names():
    from peft import LoraConfig, get_peft_model

    from spreadrl.rollout.engines.vllm_sync import export_metadata, export_weights

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


def test_lora_export_leaves_the_base_weights_untouched_in_bf16():
    """merge_adapter/unmerge_adapter would add and subtract B @ A in bf16, changing
    the base weights by rounding at every sync; the export computes out of place."""
    from peft import LoraConfig, get_peft_model

    from spreadrl.rollout.engines.vllm_sync import export_weights

    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(64, 64)).to(torch.bfloat16)
    model = get_peft_model(base, LoraConfig(r=4, target_modules=["0"], init_lora_weights=False))
    layer = model.base_model.model[0]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    for _ in range(3):
        weights = dict(export_weights(model, torch.bfloat16))
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    a, b = layer.lora_A["default"].weight.float(), layer.lora_B["default"].weight.float()
    merged = layer.base_layer.weight.float() + (b @ a) * layer.scaling["default"]
    assert torch.equal(weights["0.weight"], merged.to(torch.bfloat16))


def test_lora_policy_syncs_merged_weights_through_the_transfer_api(vllm):
    from peft import LoraConfig, get_peft_model

    from spreadrl.rollout.engines.vllm import VLLMPolicy
    from spreadrl.rollout.engines.vllm_sync import ColocatedRollouts

    base = torch.nn.Sequential(torch.nn.Linear(4, 4))
    model = get_peft_model(base, LoraConfig(r=2, target_modules=["0"], init_lora_weights=False))
    policy = VLLMPolicy("m", **COLOCATED)
    ColocatedRollouts(policy).before_rollouts(model)
    x = torch.randn(2, 4)
    got = torch.nn.functional.linear(
        x, policy.llm.weights["0.weight"], policy.llm.weights["0.bias"]
    )
    assert torch.allclose(got, model(x), atol=1e-6)


# -- what crosses the engine's process boundary, encoded as vLLM encodes it


def test_the_fake_wire_refuses_what_vllms_msgpack_refuses(monkeypatch):
    wire = fake_vllm.vllm_wire
    monkeypatch.setenv("VLLM_ALLOW_INSECURE_SERIALIZATION", "0")
    assert wire({"a": (1, 2.5, "s", None)}, engine_insecure=True) == {"a": [1, 2.5, "s", None]}
    for refused in (torch.float32, torch.Tensor, torch.UntypedStorage):
        with pytest.raises(TypeError, match="not serializable.*VLLM_ALLOW_INSECURE"):
            wire({"x": [refused]}, engine_insecure=True)
    with pytest.raises(TypeError, match="memoryview"):  # the CPU multiprocess executor
        wire({"w": torch.ones(2)}, engine_insecure=True)
    monkeypatch.setenv("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    assert wire([torch.float32], engine_insecure=True) == [torch.float32]  # pickled
    with pytest.raises(TypeError):  # the engine process was spawned without it
        wire([torch.float32], engine_insecure=False)


def test_ipc_engine_is_built_to_decode_the_handles(vllm):
    import os

    from spreadrl.rollout.engines.vllm import VLLMPolicy

    VLLMPolicy("m", **COLOCATED)
    assert os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] == "1"
    assert fake_vllm.FakeLLM.instances[-1].insecure  # set before the engine was spawned


@pytest.mark.parametrize("packed", [True, False])
def test_ipc_handles_without_the_variable_fail_as_in_vllm(vllm, monkeypatch, packed):
    """What issue 27 found against vLLM 0.33: the handles hold a torch.dtype and
    classes, which msgpack refuses, so the first update fails without the variable."""
    import spreadrl.rollout.engines.vllm as vllm_policy
    from spreadrl.rollout.engines.vllm_sync import ColocatedRollouts

    monkeypatch.setattr(vllm_policy, "allow_ipc_handles", lambda: None)
    policy = vllm_policy.VLLMPolicy("m", **COLOCATED)
    with pytest.raises(TypeError, match="torch.dtype|class"):
        ColocatedRollouts(policy, packed=packed).before_rollouts(torch.nn.Linear(3, 2))


@pytest.mark.parametrize("packed", [True, False])
def test_ipc_handles_carry_the_weights_through_the_wire(vllm, packed):
    from spreadrl.rollout.engines.vllm import VLLMPolicy
    from spreadrl.rollout.engines.vllm_sync import ColocatedRollouts

    model = torch.nn.Linear(3, 2).to(torch.bfloat16)
    policy = VLLMPolicy("m", **COLOCATED)
    ColocatedRollouts(policy, packed=packed).before_rollouts(model)
    assert set(policy.llm.weights) == {"weight", "bias"}
    assert torch.equal(policy.llm.weights["weight"], model.weight)
    assert policy.llm.weights["weight"].dtype == torch.bfloat16


FILES = dict(enable_sleep_mode=True, weight_transfer="files")


def test_files_sync_reloads_a_shared_memory_folder_in_place(vllm, tmp_path):
    from spreadrl.rollout.engines.vllm import VLLMPolicy
    from spreadrl.rollout.engines.vllm_sync import ColocatedRollouts

    model = torch.nn.Linear(3, 2)
    policy = VLLMPolicy("m", **FILES)
    assert policy.llm.kwargs["weight_transfer_config"] is None  # nothing to build for it
    colo = ColocatedRollouts(policy, sync="files")
    colo.sync.root = str(tmp_path)
    for _ in _two_synced_steps(model, policy, colo):
        pass
    assert policy.llm.events == [
        "reload",
        "reset_cache",
        "generate",
        "sleep2",
        "wake:weights",
        "reload",
        "wake:kv_cache",
        "generate",
        "sleep2",
    ]
    assert len(policy.llm.reloads) == 2 and not list(tmp_path.iterdir())  # folders removed


def test_files_sync_writes_bounded_shards(vllm, tmp_path):
    from spreadrl.rollout.engines.vllm import VLLMPolicy
    from spreadrl.rollout.engines.vllm_sync import FilesSync

    model = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(3)])
    sync = FilesSync(
        VLLMPolicy("m", **FILES), shard_bytes=288
    )  # one layer: 8x8 + 8 fp32 = 288 bytes
    shards = sync.write(model, tmp_path)
    assert len(shards) == 3
    sync.send(model)
    assert set(sync.policy.llm.weights) == set(model.state_dict())


def test_engine_without_sleep_mode_is_not_put_to_sleep(vllm, tmp_path):
    from spreadrl.rollout.engines.vllm import VLLMPolicy
    from spreadrl.rollout.engines.vllm_sync import ColocatedRollouts

    policy = VLLMPolicy("m", weight_transfer="files")
    colo = ColocatedRollouts(policy, sync="files")
    colo.sync.root = str(tmp_path)
    colo.before_rollouts(torch.nn.Linear(2, 2))
    colo.after_rollouts()  # the fake raises "Sleep mode is not enabled" if called
    assert "sleep2" not in policy.llm.events


def test_cpu_build_settings(vllm, monkeypatch):
    from spreadrl.rollout.engines import vllm as vllm_policy
    from spreadrl.rollout.engines.vllm import CPU_KV_CACHE_BYTES, VLLMPolicy

    gpu = VLLMPolicy("m", **COLOCATED)
    assert gpu.can_sleep and gpu.engine_args["enable_sleep_mode"] is True
    assert "kv_cache_memory_bytes" not in gpu.engine_args and "enforce_eager" not in gpu.engine_args
    monkeypatch.setattr(vllm_policy, "vllm_cpu_build", lambda: True)
    cpu = VLLMPolicy("m", enable_sleep_mode=True, weight_transfer="files")
    assert cpu.engine_args["enable_sleep_mode"] is False and not cpu.can_sleep  # refused on CPU
    assert cpu.engine_args["kv_cache_memory_bytes"] == CPU_KV_CACHE_BYTES
    assert cpu.engine_args["enforce_eager"] is True
    assert cpu.llm.kwargs["kv_cache_memory_bytes"] == CPU_KV_CACHE_BYTES  # what LLM() got
    with pytest.raises(MissingDependencyError, match="weight_sync=files"):
        VLLMPolicy("m", **COLOCATED)


def _tied_lm():
    emb = torch.nn.Embedding(5, 3)
    model = torch.nn.Module()
    model.embed_tokens = emb
    model.lm_head = torch.nn.Linear(3, 5, bias=False)
    model.lm_head.weight = emb.weight
    return model


def test_export_sends_tied_weights_under_both_names_in_the_engine_dtype():
    """vLLM's in-place reload unties the engine's head: it must get lm_head.weight."""
    from spreadrl.rollout.engines.vllm_sync import export_metadata, export_weights

    model = _tied_lm()
    weights = dict(export_weights(model, torch.bfloat16))
    assert list(weights) == ["embed_tokens.weight", "lm_head.weight"]
    assert torch.equal(weights["lm_head.weight"], weights["embed_tokens.weight"])
    assert weights["embed_tokens.weight"].dtype == torch.bfloat16
    assert model.embed_tokens.weight.dtype == torch.float32  # the trainer keeps its own
    assert [m[:2] for m in export_metadata(model, torch.bfloat16)] == [
        ("embed_tokens.weight", torch.bfloat16),
        ("lm_head.weight", torch.bfloat16),
    ]


def test_files_sync_writes_a_tied_weight_without_shared_memory(vllm, tmp_path):
    from spreadrl.rollout.engines.vllm import VLLMPolicy
    from spreadrl.rollout.engines.vllm_sync import FilesSync

    sync = FilesSync(VLLMPolicy("m", **FILES))  # dtype auto: no cast, the two names share
    shards = sync.write(_tied_lm(), tmp_path)
    assert len(shards) == 2  # safetensors refuses shared tensors in one file
    sync.send(_tied_lm())
    assert set(sync.policy.llm.weights) == {"embed_tokens.weight", "lm_head.weight"}


def test_files_sync_casts_the_trainers_weights_to_the_engines_dtype(vllm, tmp_path):
    """The engine keeps its copy in the dtype it was built with (GRPO's: bfloat16 beside
    float32 master weights): the export is cast to it, once per sync."""
    from safetensors.torch import load_file

    from spreadrl.rollout.engines.vllm import VLLMPolicy
    from spreadrl.rollout.engines.vllm_sync import FilesSync

    sync = FilesSync(VLLMPolicy("m", dtype="bfloat16", **FILES))
    shards = sync.write(_tied_lm(), tmp_path)
    dtypes = {t.dtype for shard in shards for t in load_file(str(shard)).values()}
    assert dtypes == {torch.bfloat16}
    assert VLLMPolicy("m", **FILES).dtype == "auto"  # auto: the trainer's own dtype, no cast
