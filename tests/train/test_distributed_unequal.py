"""Two gloo ranks holding unequal numbers of samples (dynamic sampling drops a group on one
rank only) take the step that one process takes on the union, and never hang.

A rank with fewer micro- or mini-batches runs zero-weight filler micro-batches so that
every rank issues the same FSDP2 collectives; the filler must still run a backward
through every FSDP unit (its loss is a graph-connected zero) and add nothing to the step.
Each spawn is bounded by a timeout, so a hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import pytest
import torch

from spreadrl.train.batching import Sample
from spreadrl.train.trained_model import policy_update
from tests.spawn import join_group, leave_process_group, spawn_ranks
from tests.train.equivalence import assert_same_update
from tests.train.test_distributed import _model, _samples, full_state_dict
from tests.train.update_args import update_args

SETTINGS = dict(clip_low=0.2, clip_high=0.28, micro_batch_tokens=40, grad_clip=1e9)
# rank 0 holds five samples (several micro-batches), rank 1 one or none
SPLITS = {"five-one": ([0, 1, 2, 3, 4], [5]), "six-none": ([0, 1, 2, 3, 4, 5], [])}


def _update_worker(rank, world, port, model_dir, out_path, split, settings_kw, kind):
    join_group(rank, world, port)
    from spreadrl.train.distributed import init_distributed, shard_model

    info = init_distributed("cpu")
    model = shard_model(_model(model_dir), info)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    samples = _samples()
    mine = [samples[i] for i in SPLITS[split][rank]]
    # sharded: no prefix passes (LogprobSettings.for_model decides so in the recipe)
    settings = update_args(**{**SETTINGS, **settings_kw, "shared_prefix_min": 0, "sharded": True})
    if kind == "sft":
        from spreadrl.train.sft import sft_loss_step

        opt.zero_grad(set_to_none=True)
        sft_loss_step(model, mine, pad_id=0, micro_batch_tokens=40, world_size=world)
        opt.step()
    else:
        policy_update(model, opt, mine, *settings, pad_id=0, world_size=world, seed=3)
    state = full_state_dict(model)
    if rank == 0:
        torch.save(state, out_path)
    leave_process_group()


def _run_two(tmp_path, model_dir, split, settings_kw, kind="grpo"):
    out = tmp_path / "dist.pt"
    spawn_ranks(_update_worker, str(model_dir), str(out), split, settings_kw, kind)
    return torch.load(out)


@pytest.mark.slow
@pytest.mark.parametrize(
    "split,aggregation",
    [("five-one", "token-mean"), ("six-none", "token-mean"), ("five-one", "seq-mean-token-mean")],
)
def test_unequal_ranks_one_mini_batch_equal_single_process(
    tiny_model_dir, tmp_path, split, aggregation
):
    # one mini-batch (mini_batch_size 0): the step on the union of the ranks' samples
    model = _model(tiny_model_dir)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    settings = update_args(**{**SETTINGS, "aggregation": aggregation})
    samples = _samples()
    union = [samples[i] for i in SPLITS[split][0] + SPLITS[split][1]]
    policy_update(model, opt, union, *settings, pad_id=0)
    got = _run_two(tmp_path, tiny_model_dir, split, {"aggregation": aggregation})
    assert_same_update(got, model.state_dict(), before)


@pytest.mark.slow
def test_unequal_mini_batch_counts_equal_steps_on_each_union(tiny_model_dir, tmp_path):
    # mini_batch_size 4 = 2 per rank: rank 0 runs 3 mini-batches, rank 1 one and then two
    # of fillers only. Global mini-batch m is the union of the ranks' m-th chunks; one
    # process taking those steps one by one (plain SGD: no optimizer state) must agree.
    split = "five-one"
    samples = _samples()
    chunks = []
    for count, idx in zip((5, 1), SPLITS[split], strict=True):
        order = torch.randperm(count, generator=torch.Generator().manual_seed(3)).tolist()
        mine = [samples[idx[i]] for i in order]
        chunks.append([mine[m * 2 : (m + 1) * 2] for m in range(3)])
    model = _model(tiny_model_dir)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for m in range(3):
        union = chunks[0][m] + chunks[1][m]
        policy_update(model, opt, union, *update_args(**SETTINGS), pad_id=0)
    got = _run_two(tmp_path, tiny_model_dir, split, {"mini_batch_size": 4})
    assert_same_update(got, model.state_dict(), before)


@pytest.mark.slow
def test_sft_rank_without_samples_equals_single_process(tiny_model_dir, tmp_path):
    # sft.batch_size below the world size leaves a rank with nothing: it pads with fillers
    from spreadrl.train.sft import sft_loss_step

    model = _model(tiny_model_dir)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    opt.zero_grad(set_to_none=True)
    sft_loss_step(model, _samples(), pad_id=0, micro_batch_tokens=40)
    opt.step()
    got = _run_two(tmp_path, tiny_model_dir, "six-none", {}, kind="sft")
    assert_same_update(got, model.state_dict(), before)


@pytest.mark.parametrize("tied", [True, False])
def test_filler_loss_is_a_connected_zero(tiny_model_dir, tied):
    # no trained position: the log-probs still hang off the model's graph, so backward
    # runs through every layer and the output layer (untied: a weight of its own), and
    # every gradient is exactly 0
    from transformers import AutoConfig, AutoModelForCausalLM

    from spreadrl.train.batching import collate
    from spreadrl.train.logprobs import sequence_logprobs

    config = AutoConfig.from_pretrained(tiny_model_dir)
    config.tie_word_embeddings = tied
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    batch = collate([Sample(ids=[0, 0], mask=[0, 0])], 0)
    logp, entropy = sequence_logprobs(model, batch, entropy=True)
    assert logp.requires_grad and torch.count_nonzero(logp) == 0
    (logp.sum() + entropy.sum()).backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    assert grads and all(g is not None for g in grads.values()), [
        n for n, g in grads.items() if g is None
    ]
    assert all(torch.count_nonzero(g) == 0 for g in grads.values())
    model.zero_grad(set_to_none=True)
    with torch.no_grad():  # the no-grad passes stay as they were
        logp, _ = sequence_logprobs(model, batch)
    assert not logp.requires_grad
