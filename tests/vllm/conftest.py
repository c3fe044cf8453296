"""The real-engine leg (`make test-vllm`): vLLM's CPU build, a tiny Qwen3 with Qwen3's
real tokenizer, one engine per test module.

Every test module here is marked ``vllm`` (``pytestmark``): pyproject's ``addopts``
deselects them in ``make test``, whose venv has no vLLM. The engine core and its worker are
spawned processes (vLLM's CPU build always runs the multiprocess executor), so
nothing here may depend on state a spawned child would not have.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def qwen3_tiny(tmp_path_factory) -> Path:
    """``spreadrl model init --preset tiny --tokenizer qwen3``: 30.8M parameters, the
    real 151,936-token vocabulary and chat template, tied embeddings, float32."""
    from typer.testing import CliRunner

    from spreadrl.cli.main import app

    out = tmp_path_factory.mktemp("qwen3-tiny") / "model"
    args = ["model", "init", "--preset", "tiny", "--tokenizer", "qwen3", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return out


def close_engine(policy: Any) -> None:
    """Stop the engine's processes now rather than at interpreter exit, so the next
    module's engine has the machine's two cores to itself."""
    policy.close()
    gc.collect()
