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


# GRPO on the real engine (test_grpo.py, test_async_grpo.py): a fixed sequence whose
# log-probs the engine and the trainer must agree on after every weight sync
PROBE_TEXT = "<|im_start|>user\nPut 42 in A1.<|im_end|>\n<|im_start|>assistant\nDone."

# what both GRPO-on-vLLM runs share: float32 on both sides (log-probs comparable to
# ~1e-5), the files sync (the trainer-side path of CUDA-less machines), and a high
# learning rate with an entropy bonus, which moves the weights every step whatever the
# rewards (Adam's steps are ~lr per weight for any non-zero gradient)
GRPO_ON_VLLM = [
    "device=cpu",
    "model.dtype=float32",
    "rollout.backend=vllm",
    "rollout.weight_sync=files",
    "data.max_prompt_tokens=1024",
    "rollout.group_size=2",
    "rollout.concurrency=0",
    "optim.micro_batch_tokens=512",
    "optim.lr=1e-2",
    "optim.weight_decay=0.0",
    "loss.entropy_coef=1.0",
    "sampling.mode=keep",
    "env.tools=[write_range]",
]


def probe_ids(model_dir: Path) -> list[int]:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir).encode(PROBE_TEXT)


def engine_probe(policy: Any, probe: list[int]) -> list[float]:
    """The engine's log-probs of ``probe``'s tokens (each given the ones before it)."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=1.0, max_tokens=1, prompt_logprobs=0)
    (out,) = policy.llm.generate(
        [{"prompt_token_ids": probe}], sampling_params=[params], use_tqdm=False
    )
    return [step[t].logprob for step, t in zip(out.prompt_logprobs[1:], probe[1:], strict=True)]


def trainer_probe(model: Any, probe: list[int]) -> list[float]:
    """The trainer model's log-probs of the same tokens."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([probe])).logits.float()
    logp = logits.log_softmax(-1)[0, :-1]
    return logp.gather(-1, torch.tensor(probe[1:])[:, None])[:, 0].tolist()


def train_grpo_on_vllm(model_dir: Path, out: Path, steps: int, overrides: list[str]) -> None:
    """``spreadrl grpo`` on ``model_dir`` with :data:`GRPO_ON_VLLM` plus ``overrides``,
    one built-in task, scripted environments (tests.rollout.fakes)."""
    from spreadrl.config import load_config
    from spreadrl.data.task import TaskSet
    from spreadrl.train.config import GRPOConfig
    from spreadrl.train.grpo import train_grpo
    from tests.rollout.fakes import FakePool, make_task

    base = [f"model.name_or_path={model_dir}", f"output_dir={out}", f"steps={steps}"]
    cfg = load_config(GRPOConfig, None, base + GRPO_ON_VLLM + overrides)
    train_grpo(
        cfg,
        pool=FakePool(),
        tasks=TaskSet(Path("."), [make_task()]),
    )
