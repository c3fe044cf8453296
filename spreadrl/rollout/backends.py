"""Build a policy by backend name: the one place the CLI and recipes choose it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spreadrl.errors import SpreadrlError
from spreadrl.rollout.policy import Policy

if TYPE_CHECKING:  # transformers loads only with a model (spreadrl --help stays fast)
    from transformers import PreTrainedTokenizerBase

BACKENDS = ("hf", "vllm", "openai", "oracle", "noop")


def load_policy(
    backend: str,
    model: str | None = None,
    *,
    device: str = "cpu",
    dtype: str = "auto",
    base_url: str | None = None,
    max_batch_size: int = 64,
    max_model_len: int | None = None,
) -> tuple[Policy, PreTrainedTokenizerBase | None]:
    """Return ``(policy, tokenizer)``; the tokenizer is None for message-level policies.

    For eval, serve and ``data sft-build``: a fixed checkpoint loaded from ``model``.
    GRPO builds its rollout policy around the model it trains instead
    (``spreadrl.train.rollout_backend.build_rollout_policy``, whose docstring says why the two
    stay apart).

    ``max_model_len`` (vLLM only) bounds the engine's context, hence its KV cache:
    eval passes its prompt + response budget; None takes the model's own limit
    (262,144 positions for Qwen3-4B-Thinking-2507, which many GPUs cannot hold).
    """
    if backend not in BACKENDS:
        raise SpreadrlError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "oracle":
        from spreadrl.rollout.scripted import OraclePolicy

        return OraclePolicy(), None
    if backend == "noop":
        from spreadrl.rollout.scripted import NoopPolicy

        return NoopPolicy(), None
    if not model:
        raise SpreadrlError(f"the {backend} backend needs --model (a local path or a model name)")
    if backend == "openai":
        from spreadrl.rollout.openai_policy import OpenAIPolicy

        return OpenAIPolicy(model, base_url=base_url), None
    from spreadrl.models.init import load_model_and_tokenizer

    if backend == "vllm":
        from spreadrl.rollout.hf_policy import stop_token_ids
        from spreadrl.rollout.vllm_policy import VLLMPolicy, require_vllm_gpu

        require_vllm_gpu()  # before loading anything: one clear line, no fallback
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model)
        engine = VLLMPolicy(
            model,
            dtype=dtype,
            max_model_len=max_model_len,
            stop_token_ids=stop_token_ids(tokenizer),
        )
        return engine, tokenizer
    from spreadrl.rollout.hf_policy import HFPolicy

    model_obj, tokenizer = load_model_and_tokenizer(model, dtype=dtype, device=device)
    return HFPolicy(model_obj, tokenizer, max_batch_size=max_batch_size), tokenizer
