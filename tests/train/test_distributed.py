"""Two gloo processes with FSDP2 take the same step as one process on all the data."""

import pytest
import torch

from spreadrl.train.batching import Sample
from spreadrl.train.trained_model import policy_update
from tests.spawn import join_group, leave_process_group, spawn_ranks
from tests.train.equivalence import assert_same_update
from tests.train.update_args import update_args

SETTINGS = dict(
    clip_low=0.2, clip_high=0.28, micro_batch_tokens=40, grad_clip=1e9, shared_prefix_min=4
)


def _samples():
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(6):
        n = 6 + 3 * i
        ids = torch.randint(5, 60, (n,), generator=g).tolist()
        mask = [0] * 3 + [1] * (n - 3)
        out.append(Sample(ids=ids, mask=mask, advantage=(-1.0) ** i * (0.5 + i / 10)))
    return out


def _grouped_samples():
    """GRPO-like groups (a shared prompt, 4 continuations) and two lone samples; 7 per rank."""
    g = torch.Generator().manual_seed(1)
    out = []
    for group in range(3):
        prompt = torch.randint(5, 60, (8 + 2 * group,), generator=g).tolist()
        for k in range(4):
            tail = torch.randint(5, 60, (3 + (k + group) % 3,), generator=g).tolist()
            mask = [0] * len(prompt) + [1] * len(tail)
            adv = (-1.0) ** (k + group) * (0.5 + k / 10)
            out.append(Sample(ids=prompt + tail, mask=mask, advantage=adv, group=group))
    for k in (0, 1):  # groups of one: nothing shared
        ids = list(range(5 + k, 17))
        out.append(Sample(ids=ids, mask=[0] * 6 + [1] * (len(ids) - 6), advantage=0.3, group=9 + k))
    return out


SAMPLES = {"random": _samples, "groups": _grouped_samples}


def _model(model_dir):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Unsharded parameters (each FSDP2 DTensor gathered), to compare across runs."""
    out = {}
    for name, value in model.state_dict().items():
        full = getattr(value, "full_tensor", None)
        out[name] = full() if full is not None else value
    return out


def _worker(rank, world, port, model_dir, out_path, aggregation, kind="random"):
    join_group(rank, world, port)
    from spreadrl.train.distributed import init_distributed, shard_model

    info = init_distributed("cpu")
    model = shard_model(_model(model_dir), info)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    mine = SAMPLES[kind]()[rank::world]
    # sharded: no prefix passes (LogprobSettings.for_model decides so in the recipe)
    settings = update_args(
        **{**SETTINGS, "aggregation": aggregation, "shared_prefix_min": 0, "sharded": True}
    )
    policy_update(model, opt, mine, *settings, pad_id=0, world_size=world)
    state = full_state_dict(model)
    if rank == 0:
        torch.save(state, out_path)
    leave_process_group()


@pytest.mark.slow
@pytest.mark.parametrize(
    "aggregation,kind",
    [("token-mean", "random"), ("seq-mean-token-mean", "random"), ("token-mean", "groups")],
)
def test_two_rank_fsdp_step_equals_single_process_step(tiny_model_dir, tmp_path, aggregation, kind):
    # SETTINGS share prefixes of 4+ tokens: the single process runs the groups' prompts
    # once (prefix passes); FSDP ranks take the plain path; both must take the same step
    model = _model(tiny_model_dir)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    settings = update_args(**{**SETTINGS, "aggregation": aggregation})
    policy_update(model, opt, SAMPLES[kind](), *settings, pad_id=0)
    single = model.state_dict()

    out = tmp_path / "dist.pt"
    spawn_ranks(_worker, str(tiny_model_dir), str(out), aggregation, kind)
    assert_same_update(torch.load(out), single, before)  # up to rounding: equivalence.py


def _save_worker(rank, world, port, model_dir, root, full_path):
    join_group(rank, world, port)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    from spreadrl.train.checkpoint import save_checkpoint
    from spreadrl.train.distributed import init_distributed, shard_model

    info = init_distributed("cpu")
    model = shard_model(_model(model_dir), info)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    policy_update(
        model, opt, _samples()[rank::world], *update_args(**SETTINGS), pad_id=0, world_size=world
    )
    full = get_optimizer_state_dict(
        model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    save_checkpoint(root, 1, model, None, opt, None, {"note": "2 ranks"}, info=info)
    if rank == 0:
        torch.save(full, full_path)
    leave_process_group()


@pytest.mark.slow
def test_checkpoint_saved_by_two_ranks_resumes_in_one_process(tiny_model_dir, tmp_path):
    from spreadrl.train.checkpoint import latest_checkpoint, load_trainer_state

    root, full_path = tmp_path / "ckpt", tmp_path / "full_optim.pt"
    spawn_ranks(_save_worker, str(tiny_model_dir), root, full_path)
    folder = latest_checkpoint(root)
    assert folder is not None and (folder / "optim").is_dir()
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)  # full weights
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    state = load_trainer_state(folder, model, opt, None)
    assert state["step"] == 1 and state["extra"] == {"note": "2 ranks"}
    expected = torch.load(full_path, weights_only=False)["state"]
    names = [n for n, _ in model.named_parameters()]
    resumed = opt.state_dict()["state"]
    for i, name in enumerate(names):
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.allclose(resumed[i][key], expected[name][key], atol=1e-7), (name, key)
