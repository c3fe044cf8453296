"""What a first multi-GPU run of the 4B presets needs at start-up, checked on CPU:
collective timeouts sized from the recipe, a prompt count that divides over the ranks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from spreadrl.config import load_config
from spreadrl.errors import ConfigError
from spreadrl.train.checks import check_world_size
from spreadrl.train.config import GRPOConfig
from spreadrl.train.distributed import DistInfo
from spreadrl.train.timeouts import BASE_S, CHECKPOINT_S, collective_timeout_s, rollout_wait_s
from tests.spawn import free_port

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_timeout_covers_every_rollout_round_the_eval_and_a_checkpoint():
    cfg = load_config(
        GRPOConfig,
        None,
        [
            "rollout.episode_wall_time_s=900",
            "sampling.mode=refill",
            "sampling.max_refill_rounds=2",
            "eval.every_steps=5",
        ],
    )
    # 3 rollout rounds + 1 held-out batch, each up to one episode wall time
    assert collective_timeout_s(_wait(cfg)) == BASE_S + CHECKPOINT_S + 900 * 3 + 900
    no_refill = load_config(GRPOConfig, None, ["rollout.episode_wall_time_s=900"])
    assert collective_timeout_s(_wait(no_refill)) == BASE_S + CHECKPOINT_S + 900
    assert collective_timeout_s() == BASE_S + CHECKPOINT_S  # SFT: no rollouts


def test_spreadsheet_rl_preset_waits_longer_than_torchs_ten_minutes():
    cfg = load_config(GRPOConfig, CONFIGS / "spreadsheet-rl-4b.yaml", [])
    assert collective_timeout_s(_wait(cfg)) >= 600 + cfg.rollout.episode_wall_time_s


def _wait(cfg: GRPOConfig) -> float:
    return rollout_wait_s(cfg.rollout, cfg.sampling, cfg.eval)


def _one_rank_env() -> dict[str, str]:
    """The environment torchrun gives a 1-rank job, on a free port."""
    return {
        **os.environ,
        "WORLD_SIZE": "1",
        "RANK": "0",
        "LOCAL_RANK": "0",
        "TORCHELASTIC_RUN_ID": "test",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }


def test_the_process_group_gets_the_recipes_timeout(tmp_path):
    # a one-rank gloo group as torchrun would start it (in a child: the group is global)
    script = textwrap.dedent(
        """
        import torch, torch.distributed as dist
        from spreadrl.train.distributed import init_distributed, cleanup
        info = init_distributed("cpu", timeout_s=4321.0)
        backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
        print(info.enabled, backend.options._timeout.total_seconds())
        cleanup()
        """
    )
    env = _one_rank_env()
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "4321.0"]


@pytest.mark.parametrize(("prompts", "world"), [(6, 4), (4, 8)])
def test_prompts_that_do_not_divide_over_the_ranks_are_refused_with_the_numbers(prompts, world):
    cfg = load_config(GRPOConfig, None, [f"rollout.prompts_per_step={prompts}"])
    with pytest.raises(ConfigError) as err:
        check_world_size(cfg.rollout, DistInfo(world_size=world))
    message = str(err.value)
    assert f"rollout.prompts_per_step={prompts}" in message and f"{world} ranks" in message
    assert "\n" not in message


def test_prompts_that_divide_are_accepted():
    cfg = load_config(GRPOConfig, None, ["rollout.prompts_per_step=8"])
    check_world_size(cfg.rollout, DistInfo(world_size=4))
    check_world_size(cfg.rollout, DistInfo())


def test_logprob_chunks_grow_with_free_cuda_memory_and_stay_small_on_cpu(monkeypatch):
    import torch

    from spreadrl.train import logprobs

    vocab = 151_936
    assert logprobs.chunk_tokens_for(vocab, 0.95, torch.device("cpu")) == 2**22 // vocab  # 27
    assert logprobs.chunk_tokens_for(vocab, 1.0, "cpu") == 2**24 // vocab  # 110
    free = {"bytes": 20 * 2**30}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free["bytes"], 80 << 30))
    cuda = torch.device("cuda", 0)
    # a quarter of 20 GiB over 56 bytes per logit of a top-p chunk
    assert logprobs.chunk_tokens_for(vocab, 0.95, cuda) == (5 * 2**30) // (vocab * 56) == 630
    assert logprobs.chunk_tokens_for(vocab, 1.0, "cuda:0") == (5 * 2**30) // (vocab * 24)
    free["bytes"] = 2**20  # almost nothing free: never below the CPU size
    assert logprobs.chunk_tokens_for(vocab, 0.95, cuda) == 27
    free["bytes"] = 10**13  # a huge GPU: capped
    assert logprobs.chunk_tokens_for(vocab, 1.0, cuda) == logprobs.MAX_CHUNK_TOKENS


def test_release_for_generation_frees_gradients_and_empties_the_cuda_cache(tiny_model, monkeypatch):
    import torch

    from spreadrl.train.distributed import release_for_generation

    model, _ = tiny_model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
    assert any(p.grad is not None for p in model.parameters())
    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    release_for_generation(model, optimizer, "cpu")
    assert all(p.grad is None for p in model.parameters()) and not emptied
    release_for_generation(model, optimizer, "cuda:0")
    assert emptied == [True]


_FSDP_SCRIPT = """
import sys, torch
from torch.distributed.tensor import DTensor
from transformers import AutoModelForCausalLM
from spreadrl.train.distributed import (
    cleanup, gathered_params, init_distributed, release_for_generation, shard_model,
)

def sharded(model):
    return all(isinstance(p, DTensor) for p in model.parameters())

info = init_distributed("cpu")
model = shard_model(AutoModelForCausalLM.from_pretrained(sys.argv[1]), info)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
with gathered_params(model, enabled=False):  # a colocated engine samples: nothing gathered
    out = [sharded(model)]
with gathered_params(model):  # the trainer's own model samples: gathered
    out.append(sharded(model))
model.unshard()  # a unit left gathered (FSDP2's root stays so after a plain forward)
out.append(sharded(model))
release_for_generation(model, optimizer, "cpu")
out.append(sharded(model))
print(*out)
cleanup()
"""


def test_no_gathered_copy_is_kept_when_a_colocated_engine_generates(tiny_model_dir):
    env = _one_rank_env()
    out = subprocess.run(
        [sys.executable, "-c", _FSDP_SCRIPT, str(tiny_model_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "False", "False", "True"]
