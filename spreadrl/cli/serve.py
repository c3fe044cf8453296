"""`spreadrl serve`: serve a trained agent over HTTP (OpenAI-compatible chat, tasks, web page)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from spreadrl.errors import MissingDependencyError, SpreadrlError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from spreadrl.rollout.policy import Policy
    from spreadrl.serve.schemas import ServeSettings

EXAMPLES = """
Examples:

  spreadrl serve --model runs/grpo/final

  spreadrl serve --model runs/grpo/final --port 8080 --max-concurrency 4 --max-queue 32 --timeout 300

  spreadrl serve --model runs/grpo/final --view runs/grpo --served-model-name my-agent

  spreadrl serve --model Qwen/Qwen3-4B --backend vllm --host 0.0.0.0

Then open http://127.0.0.1:8000/ for the upload page, or:

  curl -s http://127.0.0.1:8000/v1/chat/completions -H 'content-type: application/json' \\
       -d '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 32}'

  curl -s http://127.0.0.1:8000/v1/tasks -F file=@book.xlsx -F instruction='Sum column B into B10'
"""


def serve(
    model: str = typer.Option(..., help="Model folder (a spreadrl or Hugging Face checkpoint)."),
    backend: str = typer.Option(
        "hf", help="hf (CPU or GPU, transformers) | vllm (GPU, gpu extra; or vLLM's CPU build)."
    ),
    host: str = typer.Option("127.0.0.1", help="Interface to listen on (0.0.0.0 for all)."),
    port: int = typer.Option(8000, min=0, max=65535, help="TCP port."),
    max_concurrency: int = typer.Option(
        2, min=1, help="Requests worked on at once (model calls still run one at a time)."
    ),
    max_queue: int = typer.Option(16, min=0, help="Requests that may wait; one more gets 503."),
    timeout: float = typer.Option(120.0, min=0.1, help="Per-request timeout in seconds (504)."),
    max_body_mb: float = typer.Option(10.0, min=0.001, help="Largest request body in MB (413)."),
    max_tokens_limit: int = typer.Option(4096, min=1, help="Largest max_tokens a request may ask."),
    preset: str = typer.Option(
        None,
        help="Default tool preset of /v1/tasks: minimal | full | comma-separated tools "
        "(default: the tools the model was trained with, from its run's config.yaml; else full).",
    ),
    env_workers: int = typer.Option(
        1, min=0, help="Gym worker processes per task (0 = in the request thread)."
    ),
    work_dir: Path = typer.Option(
        None, help="Where served tasks' folders go (default: a temporary folder)."
    ),
    device: str = typer.Option("cpu", help="Device of the hf backend: cpu | cuda."),
    max_model_len: int = typer.Option(
        None,
        min=1,
        help="vllm: the engine's context in tokens, which sizes its KV cache "
        "(default: the model's own limit, 262,144 for Qwen3-4B-Thinking).",
    ),
    name: str = typer.Option(
        None,
        "--served-model-name",
        "--name",
        help="Model id reported by /v1/models (default: the run's name, runs/grpo/final -> grpo).",
    ),
    log_level: str = typer.Option("info", help="uvicorn log level."),
    view: Path = typer.Option(
        None, help="Also serve the run viewer (spreadrl view) over this run folder at /view/."
    ),
) -> None:
    import logging

    from spreadrl.rollout.engine import load_policy
    from spreadrl.serve.context import context_tokens, recipe_preset, served_model_id
    from spreadrl.serve.listen import bind
    from spreadrl.serve.schemas import ServeSettings

    _check_serve_flags(backend, view, work_dir)
    preset = preset or recipe_preset(model) or "full"
    sock = bind(host, port)  # before the model loads: a taken port fails at once
    try:
        _check_preset_and_model(preset, model)  # and before torch loads
    except BaseException:
        sock.close()
        raise
    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    settings = ServeSettings(
        model_name=name or served_model_id(model),
        context_tokens=context_tokens(model, max_model_len),
        view_url="/view/" if view is not None else None,
        backend=backend,
        max_concurrency=max_concurrency,
        max_queue=max_queue,
        timeout_s=timeout,
        max_body_bytes=int(max_body_mb * 1024 * 1024),
        max_tokens_limit=max_tokens_limit,
        preset=preset,
        env_workers=env_workers,
    )
    try:
        policy, tokenizer = load_policy(backend, model, device=device, max_model_len=max_model_len)
    except BaseException:
        sock.close()
        raise
    _serve_policy(
        sock, settings, policy, tokenizer, work_dir=work_dir, view=view, log_level=log_level
    )


def _check_preset_and_model(preset: str, model: str) -> None:
    """An unknown tool, or a model folder that is not there (every served engine loads
    --model from a folder or the Hub): one line before torch loads."""
    from spreadrl.env.spreadsheet.tools import resolve_tools

    try:
        resolve_tools(preset)
    except SpreadrlError as exc:
        raise SpreadrlError(f"--preset {preset!r}: {exc}") from exc
    looks_local = model.startswith((".", "/", "~")) or model.count("/") != 1
    if looks_local and not Path(model).expanduser().exists():
        raise SpreadrlError(
            f"--model {model}: no such model folder (and not a Hub id such as Qwen/Qwen3-4B)"
        )


def _check_serve_flags(backend: str, view: Path | None, work_dir: Path | None) -> None:
    """Refuse a bad backend, a missing serve extra, a --view that is not a folder or a
    --work-dir that cannot be one: each in one line, before the port and the model."""
    from spreadrl.rollout.engines import engines_that

    served = engines_that("serves")  # read off the registry: nothing is imported
    if backend not in served:
        raise SpreadrlError(f"--backend must be {' or '.join(served)}, got {backend!r}")
    from importlib.util import find_spec

    # the serve extra, found without importing it (the app's imports load transformers)
    missing = [name for name in ("fastapi", "uvicorn", "multipart") if find_spec(name) is None]
    if missing:
        raise MissingDependencyError(
            f"spreadrl serve needs FastAPI and uvicorn ({missing[0]} is missing): "
            "pip install 'spreadrl[serve]'"
        )
    if view is not None and not view.is_dir():
        raise SpreadrlError(f"--view {view}: not a folder; pass a run folder such as runs/demo")
    if work_dir is not None:  # a file in its place: one line before the port and the model
        from spreadrl.run_folder import check_output_folder

        check_output_folder(work_dir, overwrite=True, flag="--work-dir")


def _serve_policy(
    sock: socket.socket,
    settings: ServeSettings,
    policy: Policy,
    tokenizer: PreTrainedTokenizerBase | None,
    *,
    work_dir: Path | None,
    view: Path | None,
    log_level: str,
) -> None:
    """Serve on ``sock`` until SIGINT/SIGTERM; the policy's engine stops whatever happens."""
    from spreadrl.cli.console import cli_console, plain
    from spreadrl.serve.app import create_app
    from spreadrl.serve.limits import close_policy
    from spreadrl.serve.listen import serve_on, url_of

    try:
        app = create_app(settings, policy, tokenizer, work_dir=work_dir, view_dir=view)
        where = f"open {url_of(sock)}" + (f" (viewer: {url_of(sock, '/view/')})" if view else "")
        cli_console().print(
            f"[bold]spreadrl serve[/] {plain(settings.model_name)}: {plain(where)}", highlight=False
        )
        # uvicorn's own shutdown: on SIGINT/SIGTERM it stops accepting, finishes in-flight
        # requests (up to timeout_graceful_shutdown), then runs the app's lifespan exit,
        # which stops the engine; then it re-raises the signal, so no exit handler runs.
        timeout = int(settings.timeout_s) + 5
        serve_on(sock, app, log_level=log_level, timeout_graceful_shutdown=timeout)
    finally:  # also when the app never started: vLLM's processes stop here
        close_policy(policy)


serve.__doc__ = (
    "Serve a trained agent: OpenAI-compatible chat, a task endpoint and a web page.\n" + EXAMPLES
)
