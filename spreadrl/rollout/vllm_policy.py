"""The vLLM rollout backend (the ``gpu`` extra): fast token-in/token-out sampling.

Prompts go in as token ids (``TokensPrompt``) and sampled ids and their
log-probs come out, so multi-turn contexts are never re-tokenized. The engine
is created with sleep mode so a colocated trainer can free its memory during
the update (``sleep``/``wake_up``) and push new weights in place
(``load_weights``) without writing them to disk.

Two ways to drive it: ``act`` generates one turn for a batch of contexts (the
turn scheduler), and ``submit``/``poll`` feed single turns into the running
engine and collect them as they finish (the episode scheduler of
:mod:`spreadrl.rollout.streaming`, which never makes the engine wait for tools).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from spreadrl.errors import MissingDependencyError
from spreadrl.rollout.types import PolicyTurn, SamplingParams, derive_seed


def import_vllm() -> Any:
    """vLLM, or a clear message naming the extra to install."""
    try:
        import vllm
    except ImportError as exc:
        raise MissingDependencyError(
            "the vllm backend needs vLLM and a GPU: pip install 'spreadrl[gpu]' "
            "(or use --backend hf, which runs on CPU and GPU)"
        ) from exc
    return vllm


class VLLMPolicy:
    """Sample turns with an offline ``vllm.LLM`` engine."""

    token_level = True

    def __init__(
        self,
        model_path: str,
        *,
        gpu_memory_utilization: float = 0.5,
        tensor_parallel_size: int = 1,
        enable_sleep_mode: bool = True,
        seed: int = 0,
        max_model_len: int | None = None,
        llm: Any = None,
        stop_token_ids: Sequence[int] = (),
    ) -> None:
        vllm = import_vllm()
        if llm is None:
            kwargs: dict[str, Any] = {
                "model": model_path,
                "gpu_memory_utilization": gpu_memory_utilization,
                "tensor_parallel_size": tensor_parallel_size,
                "enable_sleep_mode": enable_sleep_mode,
                "seed": seed,
                # log-probs of the distribution actually sampled from (after temperature),
                # which is what the trainer recomputes for importance sampling
                "logprobs_mode": "processed_logprobs",
            }
            if max_model_len:
                kwargs["max_model_len"] = max_model_len
            llm = vllm.LLM(**kwargs)
        self.vllm = vllm
        self.llm = llm
        self.stop_token_ids = list(stop_token_ids)
        self.sleeping = False

    def act(self, contexts: Sequence[Sequence[int]], params: SamplingParams) -> list[PolicyTurn]:
        """One turn for each context, all generated together (the turn scheduler)."""
        if self.sleeping:
            self.wake_up()
        prompts = [{"prompt_token_ids": list(c)} for c in contexts]
        sampling = [
            self._sampling(params, derive_seed(params.seed, str(i))) for i in range(len(prompts))
        ]
        outputs = self.llm.generate(prompts, sampling, use_tqdm=False)
        return [_turn(output) for output in outputs]

    def submit(self, request_id: str, context: Sequence[int], params: SamplingParams) -> None:
        """Queue one turn in the running engine (the episode scheduler): continuous
        batching starts decoding it at the next step, beside whatever is running.
        ``params.seed`` is this request's own (the scheduler derives one per turn)."""
        if self.sleeping:
            self.wake_up()
        self.llm.llm_engine.add_request(
            request_id,
            {"prompt_token_ids": list(context)},
            self._sampling(params, params.seed, final_only=True),
        )

    def poll(self) -> list[tuple[str, PolicyTurn]]:
        """Run one engine step; return the turns that finished in it."""
        engine = self.llm.llm_engine
        if not engine.has_unfinished_requests():
            return []
        return [(out.request_id, _turn(out)) for out in engine.step() if out.finished]

    def _sampling(
        self, params: SamplingParams, seed: int | None, *, final_only: bool = False
    ) -> Any:
        kwargs: dict[str, Any] = {
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k if params.top_k > 0 else -1,
            "max_tokens": params.max_new_tokens,
            "logprobs": 0,  # the sampled token's log-prob, for importance sampling
            "seed": seed,
            "stop_token_ids": self.stop_token_ids or None,
            "skip_special_tokens": False,
        }
        if final_only:  # one output per request, when it is done (as LLM.generate asks)
            kind = getattr(getattr(self.vllm, "sampling_params", None), "RequestOutputKind", None)
            if kind is not None:
                kwargs["output_kind"] = kind.FINAL_ONLY
        return self.vllm.SamplingParams(**kwargs)

    def sleep(self, level: int = 1) -> None:
        """Free GPU memory for the update: level 1 offloads weights, level 2 drops them."""
        self.llm.sleep(level=level)
        self.sleeping = True

    def wake_up(self, tags: Iterable[str] | None = None) -> None:
        """Wake the weights (and later the KV cache) before generation resumes."""
        self.llm.wake_up(tags=list(tags) if tags is not None else None)
        self.sleeping = False

    def load_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Load new policy weights in place on the engine's workers (colocated sync)."""
        weights = list(named_tensors)

        def _load(worker: Any) -> None:
            worker.model_runner.model.load_weights(weights=weights)

        self.llm.collective_rpc(_load)
        reset = getattr(self.llm, "reset_prefix_cache", None)
        if reset is not None:
            reset()


def _turn(output: Any) -> PolicyTurn:
    """A PolicyTurn from a vLLM RequestOutput: sampled ids with their log-probs."""
    completion = output.outputs[0]
    ids = list(completion.token_ids)
    steps = completion.logprobs or [{}] * len(ids)
    logprobs = [
        float(step[token].logprob) if step and token in step else 0.0
        for step, token in zip(steps, ids, strict=False)
    ]
    finish = "stop" if completion.finish_reason == "stop" else "length"
    return PolicyTurn(completion.text, ids, logprobs, finish)
