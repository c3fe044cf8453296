import json

import torch

from spreadrl.rollout.types import Trajectory
from spreadrl.train.episodes import to_samples
from spreadrl.train.sampler import EpochShuffle, torch_permutation


def test_the_prompt_order_covers_each_episode_once_per_epoch_and_resumes():
    episodes = [(f"t{i}", 1) for i in range(5)]
    sampler = EpochShuffle(episodes, seed=3)
    first = sampler.next(5)
    assert sorted(first) == sorted(episodes)
    sampler.next(2)
    state = sampler.state()
    upcoming = sampler.next(4)
    clone = EpochShuffle(episodes, seed=3)
    clone.load(json.loads(json.dumps(state)))  # as a checkpoint stores it
    assert clone.next(4) == upcoming


def test_the_sft_order_resumes_at_the_same_position():
    order = EpochShuffle(list(range(7)), seed=1, permutation=torch_permutation)
    order.next(9)
    state = order.state()
    upcoming = order.next(5)
    clone = EpochShuffle(list(range(7)), seed=1, permutation=torch_permutation)
    clone.load(state)
    assert clone.next(5) == upcoming


def test_orders_and_checkpoints_from_before_the_shared_sampler_carry_on():
    """GRPO's PromptSampler and SFT's EpochOrder became one class (issue 24); the draws
    and checkpoint states below were recorded from the two old classes: a run, or a
    resume from an old checkpoint, draws what it drew before."""
    episodes = [(f"t{i}", 1) for i in range(5)]
    grpo = EpochShuffle(episodes, seed=3)
    assert [t for t, _ in grpo.next(7)] == ["t0", "t2", "t3", "t4", "t1", "t3", "t4"]
    old_grpo_state = {"epoch": 1, "position": 2, "order": [3, 4, 0, 2, 1]}
    assert grpo.state() == old_grpo_state
    resumed = EpochShuffle(episodes, seed=3)
    resumed.load(old_grpo_state)
    assert [t for t, _ in resumed.next(6)] == ["t0", "t2", "t1", "t0", "t1", "t3"]

    sft = EpochShuffle(list(range(7)), seed=1, permutation=torch_permutation)
    assert sft.next(9) == [0, 6, 1, 3, 5, 2, 4, 2, 4]
    old_sft_state = {"epoch": 1, "position": 2}  # EpochOrder kept no order
    resumed = EpochShuffle(list(range(7)), seed=1, permutation=torch_permutation)
    resumed.load(old_sft_state)
    assert resumed.next(8) == [3, 0, 6, 1, 5, 5, 3, 4]


def _traj(prompt, response, mask, lps):
    return Trajectory(
        "t",
        1,
        0,
        [],
        prompt_ids=prompt,
        response_ids=response,
        response_mask=mask,
        rollout_logprobs=lps,
    )


def test_to_samples_keeps_sampled_ids_masks_tool_tokens_and_aligns_logprobs():
    t = _traj([1, 2, 3], [10, 11, 50, 51, 12], [1, 1, 0, 0, 1], [-0.1, -0.2, 0.0, 0.0, -0.3])
    other = _traj([1, 2, 3], [10], [1], [-0.5])
    adv = torch.tensor([[1.5, -1.5]])
    samples = to_samples([t, other], adv, torch.tensor([True]), group_size=2)
    s = samples[0]
    assert s.ids == [1, 2, 3, 10, 11, 50, 51, 12]
    assert s.mask == [0, 0, 0, 1, 1, 0, 0, 1]
    assert s.advantage == 1.5 and samples[1].advantage == -1.5
    # target position i predicts ids[i + 1]: ids[3] (=10) is predicted at position 2
    assert len(s.rollout_logprobs) == len(s.ids) - 1
    assert s.rollout_logprobs[2] == -0.1 and s.rollout_logprobs[6] == -0.3


def test_dropped_groups_produce_no_samples():
    t = _traj([1], [2], [1], [-0.1])
    samples = to_samples([t, t, t, t], torch.zeros(2, 2), torch.tensor([False, True]), group_size=2)
    assert len(samples) == 2


def test_the_hf_rollout_policy_samples_the_module_being_trained(tiny_model):
    """Why a training engine is started around the model (RolloutEngine.start): the hf
    engine's policy wraps the trained module itself, so every step samples the updated
    weights, where eval's load_policy loads a checkpoint from a path."""
    from spreadrl.config import load_config
    from spreadrl.train.checks import training_engine
    from spreadrl.train.config import GRPOConfig
    from spreadrl.train.distributed import DistInfo

    model, tok = tiny_model
    cfg = load_config(GRPOConfig, None, ["rollout.group_size=3", "rollout.prompts_per_step=5"])
    engine = training_engine(cfg.rollout, cfg.model, DistInfo(), max_prompt_tokens=0, seed=0)
    engine.start(model, tok)
    policy = engine.policy
    assert policy.model is model and not engine.colocated
    assert policy.max_batch_size == 15  # group_size * prompts_per_step
