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
