"""`torchrun --nproc-per-node 2` (gloo, CPU) of the whole `spreadrl grpo` gives what one
process gives on the same seed (issue 12, item 4).

Two ranks each roll out half of every step's prompts, shard the update with FSDP2
and log metrics reduced over ranks. For the runs to agree, an episode must sample
the same tokens whichever rank and batch it lands in (per-episode seeds in the hf
backend), and the sharded update must equal the single-process one (also checked
step by step in test_distributed.py). Compared: the step metrics that are defined
over the whole step, and the update the two steps made to the weights, both runs
training with plain SGD (AdamW makes the weights depend on the CPU's rounding:
tests/train/equivalence.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from spreadrl.config import load_config
from spreadrl.train import trained_model
from spreadrl.train.config import GRPOConfig
from spreadrl.train.grpo import train_grpo
from tests.train.equivalence import SGD_OVERRIDES, assert_same_update, saved_weights, sgd_optimizer
from tests.train.test_grpo_options_cli import REPO, _env, _overrides, torchrun_command

GLOBAL = (
    "reward_mean",
    "pass_rate",
    "response_tokens",
    "generated_tokens",
    "tool_calls",
    "groups",
    "groups_kept",
    "trained_sequences",
    "grad_norm",
)


SGD_MODULE = "tests.train.sgd_spreadrl"  # `python -m spreadrl` with plain SGD

# with this seed some episode of step 1 stops early, so the overlong penalty differs
# within a group and step 1 moves the weights that step 2 samples from (asserted)
SEED = ["seed=2"]


def _metrics(out):
    return [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_torchrun_two_ranks_equal_one_process(tiny_model_dir, tmp_path, monkeypatch):
    # plain SGD on both sides, so the weights can be compared on any CPU, and the
    # single process keeps its own update path (shared prefixes; FSDP ranks take the
    # plain one): the two agree to float rounding (tests/train/equivalence.py)
    single = tmp_path / "single"
    cfg = load_config(
        GRPOConfig, None, [*_overrides(tiny_model_dir, single, 2), *SEED, *SGD_OVERRIDES]
    )
    with monkeypatch.context() as patch:
        patch.setattr(trained_model, "build_optimizer", sgd_optimizer)
        train_grpo(cfg)

    two = tmp_path / "two"
    cmd = torchrun_command(
        "grpo",
        *_overrides(tiny_model_dir, two, 2),
        *SEED,
        *SGD_OVERRIDES,
        module=SGD_MODULE,
    )
    done = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    want, got = _metrics(single), _metrics(two)
    assert [m["step"] for m in got] == [1, 2]
    assert want[0]["grad_norm"] > 0  # the first step moved the weights step 2 samples from
    for a, b in zip(got, want, strict=True):
        for key in GLOBAL:
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), (a["step"], key)

    before = saved_weights(tiny_model_dir)
    assert_same_update(saved_weights(two / "final"), saved_weights(single / "final"), before)


def test_hf_rows_sample_alike_whatever_shares_their_batch(tiny_model):
    # what the torchrun test rests on: with a seed per context, a row's tokens depend on
    # its own context and seed, not on the other rows of the batch or their order
    from spreadrl.rollout.engines.hf import HFPolicy
    from spreadrl.rollout.types import SamplingParams

    model, tok = tiny_model
    policy = HFPolicy(model, tok)
    short, long = tok.encode("Put 42 in A1."), tok.encode("Sum column B into C1, then stop.")
    params = SamplingParams(temperature=1.0, top_k=50, top_p=0.9, max_new_tokens=12, seed=0)
    together = policy.act([short, long, short], params, seeds=[11, 22, 33])
    alone = policy.act([long], params, seeds=[22])
    swapped = policy.act([short, short], params, seeds=[33, 11])
    assert together[1].token_ids == alone[0].token_ids
    assert together[1].logprobs == pytest.approx(alone[0].logprobs, abs=1e-4)  # padding only
    assert together[0].token_ids == swapped[1].token_ids
    assert together[2].token_ids == swapped[0].token_ids
    assert together[0].token_ids != together[2].token_ids  # same context, own streams
