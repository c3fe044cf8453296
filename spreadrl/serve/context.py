"""What the served model can take: its id, its context length, and the refusal past it.

A prompt longer than the model's positions used to be answered 200 with whatever
the model made of it; vLLM and OpenAI refuse it with a 400 naming both numbers
(``context_length_exceeded``), and so does this server. The model id names the run
(``runs/grpo/final`` -> ``grpo``), not the folder every run's final model shares.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from spreadrl.errors import SpreadrlError

GENERIC_FOLDERS = ("final", "latest", "model", "checkpoints", "checkpoint")
STEP_FOLDER = re.compile(r"step-\d+")


class ContextExceeded(SpreadrlError):
    """The prompt (plus the tokens asked for) does not fit the model's context."""


def served_model_id(model: str) -> str:
    """The id ``/v1/models`` reports for ``model``: the run's name, not ``final``.

    ``runs/grpo/final`` -> ``grpo``; ``runs/grpo/checkpoints/step-000040`` ->
    ``grpo-step-000040``; ``Qwen/Qwen3-4B`` -> ``Qwen/Qwen3-4B`` (a Hub id is kept).
    """
    path = Path(model.rstrip("/"))
    if not path.exists():
        return model
    parts = [p for p in path.resolve().parts if p not in ("", "/")]
    step = None
    while parts and (parts[-1] in GENERIC_FOLDERS or STEP_FOLDER.fullmatch(parts[-1])):
        last = parts.pop()
        if STEP_FOLDER.fullmatch(last) and step is None:
            step = last
    name = parts[-1] if parts else path.name or model
    return f"{name}-{step}" if step else name


def recipe_preset(model: str) -> str | None:
    """The tool preset the model was trained with: ``env.tools`` of its run's ``config.yaml``.

    ``runs/grpo/final`` (or a checkpoint under ``runs/grpo``) -> the tools of
    ``runs/grpo/config.yaml``, as ``/v1/tasks`` takes them (``write_range``); None for a
    model outside a run folder (a Hub id, a merged model) or a run that saved no config.
    A served model gets the tools it learned, and a small model's context fits them.
    """
    import yaml

    from spreadrl.run_folder import run_holding

    path = Path(model.rstrip("/"))
    if not path.exists():
        return None
    run = run_holding(path)
    config = run / "config.yaml" if run is not None else None
    if config is None or not config.is_file():
        return None
    try:
        tools = ((yaml.safe_load(config.read_text()) or {}).get("env") or {}).get("tools")
    except (OSError, yaml.YAMLError, AttributeError):
        return None
    if isinstance(tools, list) and tools and all(isinstance(t, str) for t in tools):
        return ",".join(tools)
    return tools if isinstance(tools, str) and tools else None


def context_tokens(model: str, max_model_len: int | None = None) -> int | None:
    """The model's context in tokens: vLLM's ``max_model_len`` when set, else the
    ``max_position_embeddings`` of a local folder's config.json; None when unknown."""
    if max_model_len:
        return max_model_len
    config = Path(model) / "config.json"
    try:
        value = json.loads(config.read_text()).get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, int) and value > 0 else None


def generation_budget(prompt_tokens: int, max_tokens: int, asked: bool, context: int | None) -> int:
    """The tokens a reply may have: ``max_tokens``, within what the context leaves.

    Raises:
        ContextExceeded: the prompt fills the context, or the client asked for more
            tokens than the context leaves after the prompt (vLLM's and OpenAI's rule).
    """
    if context is None:
        return max_tokens
    room = context - prompt_tokens
    if room <= 0 or (asked and max_tokens > room):
        asked_for = f" + {max_tokens} asked for" if asked else ""
        raise ContextExceeded(
            f"this model's maximum context length is {context} tokens; the messages take "
            f"{prompt_tokens}{asked_for}; shorten the messages or ask for fewer max_tokens"
        )
    return min(max_tokens, room)
