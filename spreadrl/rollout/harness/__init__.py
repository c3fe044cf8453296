"""Training an agent spreadrl did not write: its harness plays the episodes against a capturing endpoint.

- :mod:`.capture`: each call's ids as the engine saw them, joined into samples;
- :mod:`.endpoint`: the rollout policy served as an OpenAI-compatible chat endpoint;
- :mod:`.program`: ``rollout.harness`` and the launcher that runs it in the sandbox;
- :mod:`.episodes`: the episode runner GRPO uses in place of the built-in loop;
- :mod:`.forkserver`: one sandbox per rollout that imports the harness and forks episodes;
- :mod:`.mcp`: the gym's tools over MCP to a harness's episodes (``rollout.harness_mcp``);
- :mod:`.trace` and :mod:`.trace_folder`: OpenEnv ``TrainingTrace``s both ways, and a
  folder of them as GRPO's episodes (``rollout.traces``).

FastAPI and uvicorn (the ``serve`` extra) are imported when an endpoint starts.
docs/harness.md walks from an existing agent to a trained checkpoint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spreadrl.env.config import EnvConfig
    from spreadrl.rollout.config import RolloutConfig
    from spreadrl.rollout.runner import EpisodeRunner


def episode_runner(
    rollout: RolloutConfig, env: EnvConfig, *, keep_traces: bool = False
) -> EpisodeRunner:
    """Who plays a GRPO step's episodes: a folder of traces (``rollout.traces``), a
    harness (``rollout.harness``; ``keep_traces``: each episode's TrainingTrace in its
    trajectory's metadata), or the built-in loop."""
    from spreadrl.rollout.harness.episodes import HarnessEpisodes
    from spreadrl.rollout.harness.trace_folder import TraceEpisodes
    from spreadrl.rollout.runner import run_episodes

    if rollout.traces:
        return TraceEpisodes.of(rollout.traces)
    if rollout.harness:
        return HarnessEpisodes.of(
            rollout.harness, env, mcp=rollout.harness_mcp, keep_traces=keep_traces
        )
    return run_episodes
