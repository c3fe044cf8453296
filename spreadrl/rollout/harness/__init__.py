"""Training an agent spreadrl did not write: its harness plays the episodes against a capturing endpoint.

- :mod:`.capture`: each call's ids as the engine saw them, joined into samples;
- :mod:`.endpoint`: the rollout policy served as an OpenAI-compatible chat endpoint;
- :mod:`.program`: ``rollout.harness`` and the launcher that runs it in the sandbox;
- :mod:`.episodes`: the episode runner GRPO uses in place of the built-in loop.

FastAPI and uvicorn (the ``serve`` extra) are imported when an endpoint starts.
docs/harness.md walks from an existing agent to a trained checkpoint.
"""
