"""`spreadrl bench rollout --against harness` runs both paths on the same episodes."""

from __future__ import annotations

import json

import pytest

from spreadrl.bench.harness import against_harness


@pytest.mark.slow
def test_the_endpoint_bench_rolls_out_the_same_episodes_both_ways():
    result = against_harness(episodes=2, repeats=1, max_new_tokens=8)
    assert set(result["seconds"]) == {"built-in", "endpoint", "endpoint, no fork"}
    assert all(len(times) == 1 for times in result["seconds"].values())
    # the same work: both generated for every episode, one turn each (at most 8 + a stop)
    tokens = result["generated_tokens"]
    assert all(2 <= n <= 18 for n in tokens.values()), tokens
    assert result["threads"] == 1
    json.dumps(result)  # what --out writes


def test_the_demo_harness_opens_its_episode_as_the_built_in_loop_does(tiny_model):
    """`spreadrl.bench.harness_agent:demo` with the demo recipe: the first prompt's ids
    are the built-in loop's (the recipe's env: no overview, write_range)."""
    from spreadrl.config import load_config
    from spreadrl.data.builtin import builtin_tasks
    from spreadrl.env.factory import make_env_pool
    from spreadrl.rollout.chat import EpisodeChat
    from spreadrl.rollout.engines.hf import HFPolicy
    from spreadrl.rollout.harness.episodes import HarnessEpisodes
    from spreadrl.rollout.runner import EpisodeJob, RunValues, run_episodes
    from spreadrl.train.config import GRPOConfig

    model, tokenizer = tiny_model
    cfg = load_config(GRPOConfig, "tiny-cpu", ["rollout.max_new_tokens_per_turn=4"])
    job = [EpisodeJob(*builtin_tasks("demo-test").episodes()[0], 0)]
    chat, run = EpisodeChat.of(tokenizer), RunValues(seed=3)
    harness = HarnessEpisodes.of("spreadrl.bench.harness_agent:demo", cfg.env)
    with make_env_pool(cfg.env, workers=0) as pool:
        built_in = run_episodes(HFPolicy(model, tokenizer), pool, job, cfg.rollout, chat, run=run)
        through = harness(HFPolicy(model, tokenizer), None, job, cfg.rollout, chat, run=run)
    (a,), (b,) = built_in.trajectories, through.trajectories
    harness.close()
    assert b.error is None, b.traceback
    assert b.prompt_ids == a.prompt_ids and b.response_ids[:4] == a.response_ids[:4]
