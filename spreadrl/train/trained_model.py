"""The model a recipe trains, and GRPO's trained side.

:func:`build_model` loads the model a recipe trains (from the newest checkpoint when
resuming), adds LoRA adapters if configured, applies activation checkpointing and the
speed levers, before FSDP2 shards it. :class:`TrainedSide` is everything GRPO trains and
how: the policy and its KL reference, sharded, AdamW and the LR schedule, the log-prob
settings, the no-grad passes (:meth:`TrainedSide.logprob_passes`) and the update
(:meth:`TrainedSide.update`), kept on ``self`` as a torchtune recipe keeps them. It never
sees where the samples came from (the episode side, :mod:`spreadrl.train.episodes`).

The update (:func:`policy_update`): PPO-style epochs over mini-batches, each one optimizer
step over token-budget micro-batches (:func:`spreadrl.train.batching.micro_batch_plan`,
the plan SFT's step shares). Loss aggregation is exact across micro-batches: each
micro-batch's loss is weighted by its share of the mini-batch (trained tokens for
token-mean, sequences for seq-mean-token-mean), so gradient accumulation gives the same
gradient as one big batch would. Each group's shared prompt runs once per micro-batch
(``shared_prefix_min``), as in the no-grad passes; the values equal the full rows' up to
float rounding.

The frozen reference policy of the KL term is one typed object, :class:`Reference`.

Two shapes, one interface: a frozen deep copy of the starting model, or, when
the policy trains LoRA adapters, the policy itself with its adapters disabled
(the base weights never change, so no second copy is needed). The loop asks
:meth:`Reference.active` for the module to score with and never checks which.
"""

from __future__ import annotations

import copy
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler
from transformers import PreTrainedTokenizerBase

from spreadrl.models.compat import enable_activation_checkpointing, peft_wrapping
from spreadrl.models.init import load_model_and_tokenizer
from spreadrl.rollout.config import RolloutConfig
from spreadrl.train.batching import Sample, micro_batch_plan, pass_batches
from spreadrl.train.checkpoint import TrainerState, resume_trainer_state
from spreadrl.train.config import GRPOOptimConfig, LossConfig, ModelConfig
from spreadrl.train.distributed import DistInfo, decoder_layers, gathered_params, shard_model
from spreadrl.train.levers import ModelLevers, apply_model_levers
from spreadrl.train.logprobs import LogprobSettings, compute_logprobs, sequence_logprobs
from spreadrl.train.losses import batch_loss
from spreadrl.train.memory import PeakMemory
from spreadrl.train.optimizer import build_optimizer, build_scheduler, updates_per_step
from spreadrl.train.precision import Precision
from spreadrl.train.setup import Run


def build_model(
    model_cfg: ModelConfig, precision: Precision, device: str, *, path: str | Path | None = None
) -> tuple[nn.Module, PreTrainedTokenizerBase, ModelLevers]:
    """Load the policy (and tokenizer) from ``path`` or the config, add LoRA if configured;
    the speed levers that took (:class:`~spreadrl.train.levers.ModelLevers`).

    A LoRA checkpoint (``path`` with ``adapter_config.json``) holds the adapter alone:
    the base loads from ``model.name_or_path`` and the saved adapter goes back on it,
    trainable, as the run left it.

    ``precision``: the run's (:func:`spreadrl.train.precision.resolve_precision`):
    trained weights load in float32 whatever ``model.dtype`` says (it names the
    compute dtype); a LoRA base never trains and loads in the compute dtype, and
    peft keeps adapters in float32.
    """
    lora = model_cfg.lora
    adapter = path is not None and (Path(path) / "adapter_config.json").is_file()
    model, tokenizer = load_model_and_tokenizer(
        str(path) if path and not adapter else model_cfg.name_or_path,
        dtype=precision.load,
        device=device,
    )
    if adapter:  # a LoRA checkpoint holds the adapter only: put it back on the base
        from peft import PeftModel

        with peft_wrapping():
            model = PeftModel.from_pretrained(model, str(path), is_trainable=True)
    elif lora.enabled:
        from peft import LoraConfig, get_peft_model

        targets = list(lora.target_modules) or ["q_proj", "k_proj", "v_proj", "o_proj"]
        with peft_wrapping():
            model = get_peft_model(
                model,
                LoraConfig(
                    r=lora.r,
                    lora_alpha=lora.alpha,
                    lora_dropout=lora.dropout,
                    target_modules=targets,
                    task_type="CAUSAL_LM",
                ),
            )
    if model_cfg.gradient_checkpointing:
        enable_activation_checkpointing(model)
        if hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()
    # selective checkpointing, fused head, compile
    levers = apply_model_levers(model, decoder_layers(model), model_cfg)
    return model, tokenizer, levers


def build_policy(
    model_cfg: ModelConfig,
    loss: LossConfig,
    precision: Precision,
    device: str,
    *,
    resume_from: Path | None,
) -> tuple[nn.Module, PreTrainedTokenizerBase, ModelLevers, nn.Module]:
    """The GRPO policy (from ``resume_from``, the newest checkpoint, when resuming), its
    tokenizer and levers, and the model its KL reference is made from: the starting
    weights, also on resume.

    A checkpoint holds the policy as trained, so when resuming a full
    fine-tune with a KL term the starting model (``model.name_or_path``) is
    loaded again; a resumed run would otherwise measure KL against its own last
    weights. A LoRA policy is its own source: its base, adapters disabled,
    never trains.
    """
    model, tokenizer, levers = build_model(model_cfg, precision, device, path=resume_from)
    if loss.kl_coef <= 0 or resume_from is None or hasattr(model, "disable_adapter"):
        return model, tokenizer, levers, model
    start, _, _ = build_model(model_cfg, precision, device)
    return model, tokenizer, levers, start


@dataclass
class Reference:
    """The KL reference: ``model`` is a frozen copy, or the policy when ``adapter_disabled``."""

    model: torch.nn.Module
    adapter_disabled: bool = False

    @property
    def separate(self) -> bool:
        """Whether the reference holds weights of its own (to shard, to free)."""
        return not self.adapter_disabled

    @contextmanager
    def active(self) -> Iterator[torch.nn.Module]:
        """The module to compute reference log-probs with (parameters gathered)."""
        with gathered_params(self.model):
            if self.adapter_disabled:
                with _adapters_off(self.model):
                    yield self.model
            else:
                yield self.model


def _adapters_off(model: torch.nn.Module) -> AbstractContextManager[object]:
    """peft's ``disable_adapter()``: the model computes its base weights' function."""
    from peft import PeftModel  # peft is imported by the LoRA setup that built ``model``

    if not isinstance(model, PeftModel):
        raise TypeError(f"a reference with adapters disabled needs a peft model, not {model!r}")
    return model.disable_adapter()


def build_reference(
    model: torch.nn.Module, loss: LossConfig, *, dtype: str = "float32"
) -> Reference | None:
    """The reference of ``loss.kl_coef`` (None when the KL term is off).

    ``dtype``: the run's compute dtype. A frozen copy never trains, so it is kept in
    that dtype (bf16: half the memory of the policy's float32 master weights)."""
    if loss.kl_coef <= 0:
        return None
    if hasattr(model, "disable_adapter"):  # a peft model: its base is the reference
        return Reference(model, adapter_disabled=True)
    ref = copy.deepcopy(model)
    if dtype != "float32":
        ref.to(getattr(torch, dtype))
    ref.eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return Reference(ref)


@dataclass
class TrainedSide:
    """What a GRPO run trains and how one step trains it.

    ``loss`` is the section as the update applies it, decided once at build time
    (asynchronous GRPO turns TIS on: its behaviour weights are TIS's weights);
    ``per_step``: optimizer steps per GRPO step (the LR schedule's unit); ``memory``
    gauges the rollout phase's peak (read and reset by :meth:`logprob_passes`, where
    the trained side takes the device back), then the passes' and the update's."""

    model: nn.Module
    tokenizer: PreTrainedTokenizerBase
    reference: Reference | None
    optimizer: Optimizer
    scheduler: LRScheduler
    logprob_settings: LogprobSettings
    loss: LossConfig
    optim: GRPOOptimConfig
    info: DistInfo
    seed: int
    per_step: int
    memory: PeakMemory
    resumed: TrainerState | None  # the checkpoint's state when resuming, else None

    @classmethod
    def build(
        cls,
        model_cfg: ModelConfig,
        loss: LossConfig,
        optim: GRPOOptimConfig,
        rollout: RolloutConfig,
        run: Run,
        *,
        steps: int,
        seed: int,
    ) -> TrainedSide:
        """The policy (from the run's resume point), its reference, both sharded, AdamW and
        a schedule over ``steps`` GRPO steps, the trainer state resumed when there is one."""
        info, compute_dtype = run.info, run.precision.compute_dtype
        model, tokenizer, levers, start_model = build_policy(
            model_cfg, loss, run.precision, info.device, resume_from=run.resume_from
        )
        reference = build_reference(start_model, loss, dtype=compute_dtype)
        separate = [reference.model] if reference is not None and reference.separate else []
        for module in (model, *separate):  # a reference model of its own is sharded alike
            shard_model(
                module, info, compute_dtype=compute_dtype, cpu_offload=model_cfg.cpu_offload
            )
        per_step = updates_per_step(rollout, optim)
        optimizer = build_optimizer(model, optim)
        scheduler = build_scheduler(optimizer, optim, steps * per_step)
        resumed = resume_trainer_state(run.resume_from, model, optimizer, scheduler, info)
        return cls(
            model=model,
            tokenizer=tokenizer,
            reference=reference,
            optimizer=optimizer,
            scheduler=scheduler,
            logprob_settings=LogprobSettings.for_model(
                levers,
                compute_dtype=compute_dtype,
                sharded=info.enabled,  # shard_model shards under torchrun
                shared_prefix=optim.shared_prefix,
                rollout=rollout,
            ),
            # asynchronous: tokens sampled by older weights than the ones updated are weighted
            # by min(pi_prox / pi_behav, cap) whatever loss.tis says (docs/async.md)
            loss=replace(loss, tis=True) if rollout.max_staleness else loss,
            optim=optim,
            info=info,
            seed=seed,
            per_step=per_step,
            memory=PeakMemory(info.device),  # the rollout's peak, then the passes' and update's
            resumed=resumed,
        )

    @property
    def compute_dtype(self) -> str:
        return self.logprob_settings.compute_dtype

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id or 0

    def logprob_passes(self, samples: list[Sample]) -> dict[str, float]:
        """Attach the proximal and the reference log-probs to ``samples``; their metrics.

        The proximal policy's log-probs first (decoupled PPO in asynchronous mode too):
        with one epoch of one mini-batch they are the weights of the single update,
        whose detached log-probs :func:`policy_update` uses, so
        the pass is skipped. Every rank enters both passes, even with no samples
        (dynamic sampling can keep none on one rank): gathering sharded parameters is
        a collective."""
        memory, settings = self.memory, self.logprob_settings
        metrics = memory.figures("rollout")  # allocated, reserved and device peaks
        memory.reset()
        t0 = time.perf_counter()
        proximal = bool(samples) and self.per_step > 1
        batches = []
        if proximal or self.reference is not None:  # packed and collated once for both
            batches = pass_batches(
                samples,
                self.optim.micro_batch_tokens,
                shared_prefix_min=settings.shared_prefix_min,
                pad_id=self.pad_id,
            )
        with gathered_params(self.model):
            if proximal:
                old = compute_logprobs(self.model, samples, batches, settings)
                for sample, lp in zip(samples, old, strict=True):
                    sample.old_logprobs = lp
        if self.reference is not None:  # a collective when sharded: every rank scores
            with self.reference.active() as module:
                lps = compute_logprobs(module, samples, batches, settings)
            for sample, lp in zip(samples, lps, strict=True):
                sample.ref_logprobs = lp
        metrics["logprobs_s"] = time.perf_counter() - t0
        return metrics

    def update(self, step: int, samples: list[Sample]) -> dict[str, float]:
        """The update of step ``step`` on ``samples``; its metrics (loss terms, grad norm,
        time, peak memory). The LR schedule ends at ``step x per_step`` updates."""
        t0 = time.perf_counter()
        metrics = policy_update(
            self.model,
            self.optimizer,
            samples,
            self.loss,
            self.optim,
            self.logprob_settings,
            pad_id=self.pad_id,
            scheduler=self.scheduler,
            seed=self.seed + step,
            world_size=self.info.world_size,
        )
        # the schedule is laid out for steps x epochs x mini-batches updates, but dynamic
        # sampling can train fewer mini-batches (or none): move it to where the step count
        # says, so the decay neither lags nor misses its end (the same on every rank)
        with warnings.catch_warnings():  # "lr_scheduler.step() before optimizer.step()"
            warnings.simplefilter("ignore", UserWarning)
            while self.scheduler.last_epoch < step * self.per_step:
                self.scheduler.step()
        metrics["update_s"] = time.perf_counter() - t0
        metrics.update(self.memory.figures("train"))
        return metrics


def policy_update(
    model: nn.Module,
    optimizer: Optimizer,
    samples: Sequence[Sample],
    loss_cfg: LossConfig,
    optim: GRPOOptimConfig,
    logprob_settings: LogprobSettings,
    *,
    pad_id: int,
    scheduler: LRScheduler | None = None,
    seed: int = 0,
    world_size: int = 1,
) -> dict[str, float]:
    """PPO-style epochs over mini-batches (:func:`micro_batch_plan`); returns the step's
    metrics, each averaged over the micro-batches (``grad_norm`` over optimizer steps).

    Under data parallelism (``world_size`` > 1, FSDP averaging gradients over ranks)
    each rank passes its own samples; the loss is normalised by the global token (or
    sequence) count, so the step equals the single-process step on all samples. Ranks
    may hold unequal numbers of samples (dynamic sampling drops groups per rank): with
    ``mini_batch_size`` 0 every rank still takes one optimizer step per epoch; with a
    mini-batch size each rank takes ``mini_batch_size // world_size`` of its own samples
    per mini-batch, and a rank that runs out pads with filler mini-batches.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    metrics: dict[str, list[float]] = {}
    generator = torch.Generator().manual_seed(seed)
    model.train()
    token_mean = loss_cfg.aggregation == "token-mean"
    for _ in range(optim.ppo_epochs):
        for plan in micro_batch_plan(
            samples,
            mini_batch_size=optim.mini_batch_size,
            micro_batch_tokens=optim.micro_batch_tokens,
            token_mean=token_mean,
            generator=generator,
            prefix_min=logprob_settings.shared_prefix_min,
            pad_id=pad_id,
            world_size=world_size,
        ):
            optimizer.zero_grad(set_to_none=True)
            for micro in plan:
                logp, entropy = sequence_logprobs(
                    model, micro.batch, logprob_settings, entropy=loss_cfg.entropy_coef > 0
                )
                loss, info = batch_loss(logp, entropy, micro.batch, loss_cfg)
                (loss * micro.weight).backward()
                for key, value in info.items() if micro.real else ():
                    metrics.setdefault(key, []).append(value)
            grad_norm = torch.nn.utils.clip_grad_norm_(params, optim.grad_clip)
            full = getattr(grad_norm, "full_tensor", None)
            metrics.setdefault("grad_norm", []).append(float(full() if full else grad_norm))
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
    return {k: sum(v) / len(v) for k, v in metrics.items() if v}
