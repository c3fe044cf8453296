"""A torchrun rank's vLLM engine: pinned to the rank's GPU, spawned without torchrun's
variables, with a compile cache of its own (spreadrl.rollout.engines.vllm)."""

import os

import pytest
import torch

from spreadrl.rollout.engines import vllm as vllm_policy
from spreadrl.rollout.engines.vllm import VLLMPolicy
from tests.rollout import fake_vllm

TORCHRUN = {
    "RANK": "3",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "4",
    "LOCAL_WORLD_SIZE": "2",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
    "TORCHELASTIC_USE_AGENT_STORE": "True",
    "TORCHELASTIC_RUN_ID": "abc",
}


@pytest.fixture()
def torchrun_env(monkeypatch, tmp_path):
    for k, v in TORCHRUN.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def test_engine_kwargs_pin_a_rank_engine_to_its_gpu(monkeypatch):
    fake_vllm.install(monkeypatch)
    assert VLLMPolicy("m", local_rank=3).engine_args["device_ids"] == [3]
    assert "device_ids" not in VLLMPolicy("m").engine_args  # one process: vLLM's own


def test_a_rank_engine_is_spawned_without_torchrun_variables(monkeypatch, torchrun_env):
    fake_vllm.install(monkeypatch)
    before = dict(os.environ)
    policy = VLLMPolicy("m", local_rank=1)
    seen = policy.llm.spawn_env  # the environment at LLM(), which its process inherits
    assert not [k for k in seen if k in TORCHRUN]
    assert seen["VLLM_CACHE_ROOT"] == str(torchrun_env / "cache" / "vllm" / "local-rank-1")
    assert dict(os.environ) == before  # the trainer's own environment is back, whole
    assert policy.llm.device == 1


def test_a_given_cache_root_gets_a_folder_per_rank(monkeypatch, torchrun_env):
    monkeypatch.setenv("VLLM_CACHE_ROOT", "/data/vllm")
    with vllm_policy.engine_process_env(0):
        assert os.environ["VLLM_CACHE_ROOT"] == "/data/vllm/local-rank-0"
        assert "RANK" not in os.environ
    assert os.environ["VLLM_CACHE_ROOT"] == "/data/vllm"
    assert os.environ["RANK"] == "3"


def test_the_environment_comes_back_when_the_engine_fails(monkeypatch, torchrun_env):
    class Broken(fake_vllm.FakeLLM):
        def __init__(self, model, **kwargs):
            raise RuntimeError("no memory")

    fake_vllm.install(monkeypatch, Broken)
    before = dict(os.environ)
    with pytest.raises(RuntimeError, match="no memory"):
        VLLMPolicy("m", local_rank=1)
    assert dict(os.environ) == before


def test_one_process_engine_keeps_the_environment(monkeypatch, torchrun_env):
    fake_vllm.install(monkeypatch)
    policy = VLLMPolicy("m")
    assert policy.llm.spawn_env["RANK"] == "3"
    assert "VLLM_CACHE_ROOT" not in policy.llm.spawn_env
    assert policy.llm.device == 0


def test_an_engine_opens_only_its_own_gpus_handle(monkeypatch):
    # vLLM's receiver picks its GPU's UUID out of the merged map, and fails without it
    fake_vllm.install(monkeypatch)
    llm = fake_vllm.FakeLLM("m", weight_transfer_config={"backend": "ipc"}, device_ids=[1])
    llm.init_weight_transfer_engine(request={"init_info": {"packed": False}})
    llm.start_weight_update()
    info = {"names": ["w"], "dtype_names": ["float32"], "shapes": [[1]]}
    rank0, rank1 = (fake_vllm.fake_ipc_handle(torch.full((1,), float(r)), r) for r in (0, 1))
    monkeypatch.setenv("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # the handles hold a dtype
    llm.insecure = True
    handles = {fake_vllm.gpu_uuid(0): rank0, fake_vllm.gpu_uuid(1): rank1}
    llm.update_weights(request={"update_info": {**info, "ipc_handles": [handles]}})
    assert llm.weights["w"].item() == 1.0  # rank 1's
    with pytest.raises(ValueError, match="IPC handle not found"):
        only_0 = [{fake_vllm.gpu_uuid(0): rank0}]
        llm.update_weights(request={"update_info": {**info, "ipc_handles": only_0}})
    with pytest.raises(ValueError, match="duplicates"):
        fake_vllm.FakeLLM("m", device_ids=[1, 1])
