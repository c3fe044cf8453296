"""The transformers rollout backend: batched sampling on CPU or GPU.

Many episodes advance together: each call generates one turn for every active
episode, left-padding their contexts into one batch; finished episodes simply
stop being passed in. Contexts that are identical (the G rollouts of a group
on their first turn) share one prefill: the prompt's KV cache is computed once
and copied to each of them. The KV cache is allocated once per call for the
longest context plus ``max_new_tokens`` and written in place (transformers'
default cache copies itself at every decoded token). With ``cascade_attention`` (the
default) a shared prompt is not even copied: its keys and values stay once per group and
each decoded token attends to them once per group (see :mod:`spreadrl.rollout.cascade`).
With ``static_cache`` (``rollout.hf_static_cache``, for GPUs) the cache is transformers'
fixed-size ``StaticCache`` instead, and ``generate`` then compiles the decoding forward
with CUDA graphs (``torch.compile(mode="reduce-overhead")``): a decode step becomes one
graph launch instead of hundreds of kernel launches from Python.

Log-probs are those of the processed sampling distribution (temperature, then
top-k, then top-p; see :mod:`spreadrl.rollout.sampling`), recorded step by step
for the sampled token only, which is what the trainer recomputes, so the hf
backend needs no importance-sampling correction.

Given a seed per context (``act(..., seeds=...)``, which the rollout runner
passes), each row draws from its own random stream, so an episode's tokens do
not depend on which other episodes share its batch: two torchrun ranks rolling
out halves of a step sample what one process sampling all of it does.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, MutableMapping, Sequence
from contextlib import AbstractContextManager
from typing import Literal

import torch
from transformers import (
    DynamicCache,
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.cache_utils import Cache, DynamicLayer, StaticCache

from spreadrl.rollout.cascade import cascade_attention, cascade_cache, is_cascade_cache
from spreadrl.rollout.chat import chat_format
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engine import (
    EngineMemory,
    LoadSpec,
    MemoryQuery,
    PlanView,
    RolloutEngine,
    TrainingSetup,
    WeightFeed,
    require_model,
)
from spreadrl.rollout.kv_cache import PreallocatedLayer, cache_name, output_cache
from spreadrl.rollout.policy import Contexts, Policy, Seeds
from spreadrl.rollout.sampling import SampledLogprobs
from spreadrl.rollout.types import PolicyTurn, SamplingParams


class HFPolicy:
    """Generate assistant turns with a transformers causal LM."""

    token_level: Literal[True] = True
    streaming = False  # one batched call per turn (the turn scheduler)
    seeds_per_context = True  # act() draws each context from its own seed

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        max_batch_size: int = 64,
        share_prefill: bool = True,
        preallocate_cache: bool = True,
        cascade_attention: bool = True,
        static_cache: bool = False,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.share_prefill = share_prefill
        self.preallocate_cache = preallocate_cache
        self.cascade_attention = cascade_attention
        self.static_cache = static_cache
        self.stop_ids = stop_token_ids(tokenizer)
        self.pad_id = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_ids[0]
        )

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def max_context_tokens(self) -> int:
        """The model's context length (``config.max_position_embeddings``; 0 without one)."""
        config = getattr(self.model, "config", None)  # a wrapped model may hide it
        limit = getattr(config, "max_position_embeddings", None)
        return limit if isinstance(limit, int) and limit > 0 else 0

    def act(
        self, contexts: Contexts, params: SamplingParams, *, seeds: Seeds | None = None
    ) -> list[PolicyTurn]:
        """One turn for each context (a full token history ending in the assistant header).

        With ``seeds`` (one per context) each row samples from its own generator
        seeded so; otherwise the batch shares one stream seeded by ``params.seed``.
        """
        turns: list[PolicyTurn] = []
        for start in range(0, len(contexts), self.max_batch_size):
            end = start + self.max_batch_size
            rows = seeds[start:end] if seeds is not None else None
            turns.extend(self._generate(contexts[start:end], params, rows))
        return turns

    def _generate(
        self, contexts: Contexts, params: SamplingParams, seeds: Seeds | None = None
    ) -> list[PolicyTurn]:
        if not contexts:
            return []
        input_ids, attention = _left_padded(contexts, self.pad_id)
        width = input_ids.shape[1]
        if params.seed is not None:
            torch.manual_seed(params.seed)
        sample = not params.greedy
        recorder = SampledLogprobs(
            params.temperature if sample else 1.0,
            params.top_k if sample else 0,
            params.top_p if sample else 1.0,
        )
        processors = _processor_list(recorder)
        kwargs: dict[str, object] = {
            "do_sample": sample,
            "max_new_tokens": params.max_new_tokens,
            "eos_token_id": self.stop_ids,
            "pad_token_id": self.pad_id,
            "return_dict_in_generate": True,
            "logits_processor": processors,
            # under torchrun, generation runs with FSDP's parameters gathered
            # (train.distributed.gathered_params): no collectives, so ranks may generate
            # different numbers of times (refill rounds, multi-turn episodes). transformers'
            # default for an FSDP module syncs every token across ranks, which then hangs.
            "synced_gpus": False,
            # the recorder applies temperature, top-k and top-p; generate adds none of its own
            "temperature": 1.0 if sample else None,
            "top_k": 0 if sample else None,
            "top_p": 1.0 if sample else None,
        }
        if sample and seeds is not None and all(s is not None for s in seeds):
            # each row draws in its own processor stream, after the recorder's processing;
            # generate then takes the one token left standing (greedy, no shared stream)
            processors.append(_row_sampler([int(s) for s in seeds]))
            kwargs.update(do_sample=False, temperature=None, top_k=None, top_p=None)
        was_training = self.model.training
        self.model.eval()
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        with torch.no_grad():
            capacity = width + params.max_new_tokens
            cache = None
            if self.static_cache:  # one fixed-size cache: generate compiles decoding on GPU
                cache = static_cache(self.model, capacity)
            else:
                cache = self._shared_prefill(
                    contexts, input_ids, attention, capacity, params.max_new_tokens
                )
            if cache is None and self.preallocate_cache:
                cache = self._new_cache(capacity)
            if cache is not None:
                kwargs[cache_name()] = cache
            scope = (
                cascade_attention(self.model, cache)
                if is_cascade_cache(cache)
                else contextlib.nullcontext()
            )
            with scope:
                out = self.model.generate(input_ids=input_ids, attention_mask=attention, **kwargs)
        if was_training:
            self.model.train()
        new_tokens = out.sequences[:, width:].cpu()
        return self._turns(new_tokens, recorder.logprobs(new_tokens))

    def _turns(self, new_tokens: torch.Tensor, sampled_lp: torch.Tensor) -> list[PolicyTurn]:
        """Each row's new tokens up to and with its first stop token (``stop``), else all
        of them (``length``), with the log-probs recorded as they were sampled."""
        turns = []
        stop = set(self.stop_ids)
        for row in range(new_tokens.shape[0]):
            ids = new_tokens[row].tolist()
            end = next((i for i, t in enumerate(ids) if t in stop), None)
            finish = "stop" if end is not None else "length"
            keep = ids[: end + 1] if end is not None else ids
            turns.append(
                PolicyTurn(
                    text=self.tokenizer.decode(keep, skip_special_tokens=False),
                    token_ids=keep,
                    logprobs=sampled_lp[row, : len(keep)].tolist(),
                    finish_reason=finish,
                )
            )
        return turns

    def _new_cache(self, capacity: int) -> DynamicCache | None:
        """An empty KV cache for ``generate``: preallocated to ``capacity`` positions per layer
        when ``preallocate_cache`` is on and every layer is a plain full-attention layer,
        else None (``generate`` then makes its own growing cache)."""
        if not self.preallocate_cache:
            return None
        return self._plain_cache(capacity)

    def _plain_cache(self, capacity: int) -> DynamicCache | None:
        """A preallocated cache, or None unless every layer is a plain full-attention layer
        (sliding-window, linear-attention or unknown layers: transformers' own cache)."""
        cache = DynamicCache(config=self.model.config)
        if not cache.layers or any(type(layer) is not DynamicLayer for layer in cache.layers):
            return None
        cache.layers = [PreallocatedLayer(capacity) for _ in cache.layers]
        return cache

    def _shared_prefill(
        self,
        contexts: Sequence[Sequence[int]],
        input_ids: torch.Tensor,
        attention: torch.Tensor,
        capacity: int = 0,
        new_tokens: int = 0,
    ) -> Cache | None:
        """A KV cache of all but the last context token, computed once per distinct context.

        None when every context differs (``generate`` then prefills as usual).
        With ``cascade_attention`` (sdpa attention, plain full-attention layers) it is a
        cascade cache holding each distinct context once plus a per-row suffix of
        ``new_tokens + 1`` positions; otherwise its rows are copies of the distinct
        contexts' rows, in batch order. ``generate`` runs only the last token of each
        context on it.
        """
        first: dict[tuple[int, ...], int] = {}
        inverse = [first.setdefault(tuple(c), len(first)) for c in contexts]
        if not self.share_prefill or len(first) == len(contexts) or input_ids.shape[1] < 2:
            return None
        representative = [inverse.index(u) for u in range(len(first))]
        ids = input_ids[representative, :-1]
        mask = attention[representative, :-1]
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # as generate does for left padding
        cascade = None
        if self.cascade_attention and self.model.config._attn_implementation == "sdpa":
            cascade = self._plain_cache(ids.shape[1])
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{cache_name(): cascade if cascade is not None else self._new_cache(capacity)},
        )
        cache = output_cache(out)
        if cascade is not None:
            return cascade_cache(cache, inverse, new_tokens)
        cache.reorder_cache(torch.tensor(inverse, device=input_ids.device))
        return cache


def _processor_list(recorder: SampledLogprobs) -> LogitsProcessorList:
    """``recorder`` as the one custom logits processor of ``generate``."""

    class Recorder(LogitsProcessor):
        def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
            return recorder(input_ids, scores)

    return LogitsProcessorList([Recorder()])


def _row_sampler(seeds: Sequence[int]) -> LogitsProcessor:
    """A logits processor that draws row i's token from the (processed) distribution with a
    generator seeded ``seeds[i]`` and leaves only that token possible.

    The generators live on the logits' device (made at the first step), so a GPU
    rollout never copies the [batch, vocab] probabilities to the host nor waits for
    them: the draws queue behind the forward like any kernel."""
    generators: list[torch.Generator] = []

    class RowSampler(LogitsProcessor):
        def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
            if not generators:
                generators.extend(
                    torch.Generator(device=scores.device).manual_seed(s) for s in seeds
                )
            probs = torch.softmax(scores.float(), dim=-1)
            # torch.multinomial(p, 1, generator=g) is argmax(p / q) with q ~ Exp(1) drawn
            # from g (its one-sample path); the draws stay per row, the rest runs batched
            noise = torch.empty_like(probs)
            for row, generator in zip(noise, generators, strict=True):
                row.exponential_(1, generator=generator)
            picks = torch.argmax(probs / noise, dim=-1)
            out = torch.full_like(scores, float("-inf"))
            out[torch.arange(len(picks), device=scores.device), picks] = 0.0
            return out

    return RowSampler()


STATIC_CACHE_BUCKET = 256  # cache lengths round up to this: fewer shapes, fewer recompiles


def static_cache(model: PreTrainedModel, capacity: int) -> Cache:
    """transformers' ``StaticCache`` of ``capacity`` positions per row, rounded up
    to :data:`STATIC_CACHE_BUCKET` so that calls of nearby lengths share one compiled
    decoding graph (``generate`` compiles the forward, ``mode="reduce-overhead"``: CUDA
    graphs, whenever the cache is static and the device is a GPU)."""
    length = -(-capacity // STATIC_CACHE_BUCKET) * STATIC_CACHE_BUCKET
    return StaticCache(config=model.config, max_cache_len=length)


def stop_token_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """End-of-turn ids: the chat template's turn end (Qwen's ``<|im_end|>``), then the eos."""
    return list(chat_format(tokenizer).stop_ids)


def _left_padded(contexts: Contexts, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` [rows, longest context], each context aligned to
    the right (left padding, as decoding appends to every row at the same position)."""
    width = max(len(c) for c in contexts)
    input_ids = torch.full((len(contexts), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(contexts), width), dtype=torch.long)
    for row, ctx in enumerate(contexts):
        input_ids[row, width - len(ctx) :] = torch.tensor(list(ctx), dtype=torch.long)
        attention[row, width - len(ctx) :] = 1
    return input_ids, attention


class HFEngine:
    """The transformers engine: in GRPO it samples with the trainer's own model.

    Nothing to sync (each step samples the very module being updated, FSDP- or
    LoRA-wrapped), nothing to put to sleep; the trainer gathers its shards and casts
    to the compute dtype around each rollout phase (``colocated`` is False). Eval and
    serve load a checkpoint instead (:meth:`load`)."""

    colocated = False

    def __init__(self, rollout: RolloutConfig, policy: Policy | None = None) -> None:
        self.rollout = rollout
        self._policy = policy  # built by start(), or given

    @property
    def policy(self) -> Policy:
        if self._policy is None:
            raise RuntimeError("the hf engine samples once start() has built its policy")
        return self._policy

    @classmethod
    def for_training(cls, setup: TrainingSetup) -> RolloutEngine:
        return cls(setup.rollout)

    @classmethod
    def load(cls, spec: LoadSpec) -> tuple[Policy, PreTrainedTokenizerBase | None]:
        from spreadrl.models.init import load_model_and_tokenizer

        path = require_model("hf", spec)
        model, tokenizer = load_model_and_tokenizer(path, dtype=spec.dtype, device=spec.device)
        return HFPolicy(model, tokenizer, max_batch_size=spec.max_batch_size), tokenizer

    @classmethod
    def plan(cls, query: MemoryQuery) -> EngineMemory:
        """The trainer's own model samples, gathered, with transformers' KV cache."""
        cache = query.sequences * query.max_model_len * query.kv_bytes_per_token
        return EngineMemory(generation=query.resident + query.gathered + cache)

    @classmethod
    def plan_report(
        cls, query: MemoryQuery, plan: PlanView
    ) -> tuple[list[str] | None, list[tuple[str, str, str]]]:
        return None, []  # generation is the trainer's: the plan checks it as its own phase

    @classmethod
    def allows_expandable_segments(cls, environ: MutableMapping[str, str]) -> bool:
        return True

    def _batch(self) -> int:
        return self.rollout.group_size * self.rollout.prompts_per_step

    def start(self, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> list[str]:
        self._policy = HFPolicy(
            model,
            tokenizer,
            max_batch_size=self._batch(),
            static_cache=self.rollout.hf_static_cache,
        )
        return []

    def sync(self, model: torch.nn.Module) -> None:
        pass  # the policy samples with the trained module itself

    def sleep(self) -> None:
        pass  # holds nothing of its own beside the trainer

    def eval_engine(
        self, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
    ) -> RolloutEngine:
        return self  # the trainer's model, as the rollouts sample it

    def producer(
        self,
        model: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        context: Callable[[torch.nn.Module], AbstractContextManager[object]],
    ) -> WeightFeed:
        """A copy of the trainer's model (no gradients), loaded from a snapshot of the
        trainer's weights at each step boundary: one more copy of the weights, plus
        a snapshot in flight."""
        sampler_model = copy.deepcopy(model)
        for p in sampler_model.parameters():
            p.requires_grad_(False)
        return WeightFeed(
            policy=HFPolicy(sampler_model, tokenizer, max_batch_size=self._batch()),
            export=snapshot_weights,
            load=weight_loader(sampler_model),
            context=lambda: context(sampler_model),
        )


def snapshot_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A copy of ``model``'s state dict, taken at a step boundary in the trainer's thread,
    so the producer loads consistent weights while the trainer goes on updating."""
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


def weight_loader(copy: torch.nn.Module) -> Callable[[object], None]:
    """``load`` for the hf producer: loads a :func:`snapshot_weights` into its own copy."""

    def apply(payload: object) -> None:
        if not isinstance(payload, dict):
            raise TypeError(f"the hf producer loads a state dict, got {type(payload).__name__}")
        with torch.no_grad():
            copy.load_state_dict(payload)

    return apply
