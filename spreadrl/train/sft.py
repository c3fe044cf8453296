"""The SFT cold-start recipe: next-token loss on the agent's own tokens only.

One optimizer step consumes ``batch_size`` conversations, split into
micro-batches by a token budget (gradient accumulation); the loss is the mean
over every trained token of the step, so the split does not change it. The
data order is a seeded permutation per epoch and the position in it is
checkpointed, so a resumed run continues with exactly the next batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spreadrl.train.batching import Sample, collate, pack_by_tokens
from spreadrl.train.logprobs import sequence_logprobs


def sft_loss_step(
    model: Any,
    samples: list[Sample],
    *,
    pad_id: int,
    micro_batch_tokens: int,
    world_size: int = 1,
    shared_prefix: bool = False,
) -> dict[str, float]:
    """Accumulate gradients of the token-mean NLL over ``samples``; return loss and token count.

    Under FSDP each rank passes its share; normalising by the global token
    count (times the world size, since FSDP averages gradients) gives the
    single-process gradient, and ranks pad to the same number of micro-batches.
    ``shared_prefix``: see :func:`shared_prefix_nll` (single process only).
    """
    from spreadrl.train.distributed import all_reduce

    local = sum(sum(s.mask[1:]) for s in samples)
    total = all_reduce(local)
    micro = pack_by_tokens(samples, micro_batch_tokens) if samples else []
    n_micro = int(all_reduce(len(micro), op="max"))
    loss_sum = 0.0
    for j in range(n_micro):
        real = j < len(micro)
        chunk = (
            [samples[i] for i in micro[j]]
            if real
            else [samples[0] if samples else Sample([pad_id, pad_id], [0, 0])]
        )
        prefix = common_untrained_prefix(chunk) if shared_prefix and world_size == 1 else 0
        if prefix >= MIN_SHARED_PREFIX and not _checkpointing(model):
            nll = shared_prefix_nll(model, chunk, pad_id, prefix) / max(total, 1)
        else:
            batch = collate(chunk, pad_id)
            logp, _ = sequence_logprobs(model, batch)
            mask = batch["loss_mask"].to(logp.device) * (1.0 if real else 0.0)
            nll = -(logp * mask).sum() / max(total, 1) * world_size
        nll.backward()
        loss_sum += float(nll.detach()) / world_size
    return {"loss": all_reduce(loss_sum), "tokens": float(total)}


MIN_SHARED_PREFIX = 32  # below this, one forward over the whole padded batch is as cheap


def _checkpointing(model: Any) -> bool:
    """Activation checkpointing drops the KV cache the shared-prefix path needs."""
    name = "is_activation_checkpointing"  # transformers 5; is_gradient_checkpointing before
    if not hasattr(type(model), name):
        name = "is_gradient_checkpointing"
    return bool(getattr(model, name, False))


def common_untrained_prefix(samples: list[Sample]) -> int:
    """Tokens every sample starts with, up to the first trained token (and one short of
    the shortest sample, so each keeps a suffix)."""
    import os.path

    if len(samples) < 2:
        return 0
    common = len(os.path.commonprefix([s.ids for s in samples]))
    first_trained = min((s.mask.index(1) if 1 in s.mask else len(s.ids)) for s in samples)
    return max(0, min(common, first_trained, min(len(s.ids) for s in samples) - 1))


def shared_prefix_nll(model: Any, samples: list[Sample], pad_id: int, prefix: int) -> Any:
    """Summed NLL of the trained tokens, running the shared ``prefix`` through the model once.

    SFT conversations of one recipe start with the same system prompt (the tool
    schemas, hundreds of tokens) and train only on the assistant's turns after
    it. The prefix is run once with a KV cache, the cache is repeated across the
    batch (gradients flow back through it to the prefix), and only the suffixes
    are run against it: the same loss and gradients as the full padded forward,
    for a fraction of the tokens. The prefix holds no trained token, so its only
    prediction needed is the last one (for the first suffix token). The suffixes'
    logits are materialised whole (the model's own head), which suits small
    vocabularies like the demo's; with a large one leave ``shared_prefix`` off, and
    the chunked log-prob path (spreadrl.train.logprobs) keeps memory down.
    """
    import torch

    device = next(model.parameters()).device
    head = torch.tensor([samples[0].ids[:prefix]], dtype=torch.long, device=device)
    out = model(input_ids=head, use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    cache.batch_repeat_interleave(len(samples))
    tails = [s.ids[prefix:] for s in samples]
    width = max(len(t) for t in tails)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(samples), prefix + width), dtype=torch.long)
    mask = torch.zeros((len(samples), width), dtype=torch.float32)
    attention[:, :prefix] = 1
    for row, (tail, s) in enumerate(zip(tails, samples, strict=True)):
        ids[row, : len(tail)] = torch.tensor(tail, dtype=torch.long)
        attention[row, prefix : prefix + len(tail)] = 1
        mask[row, : len(tail)] = torch.tensor(s.mask[prefix:], dtype=torch.float32)
    ids, attention, mask = ids.to(device), attention.to(device), mask.to(device)
    positions = torch.arange(prefix, prefix + width, device=device).expand(len(samples), -1)
    logits = model(
        input_ids=ids, attention_mask=attention, past_key_values=cache, position_ids=positions
    ).logits
    # the logits predicting tail token j: the prefix's last position for j = 0, then j - 1
    first = out.logits[:, -1:].expand(len(samples), 1, -1)
    trained = mask.bool()  # the log-softmax only where a token is trained
    logits = torch.cat([first, logits[:, :-1]], dim=1)[trained].float()
    logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[trained].unsqueeze(-1))
    return -logp.sum()


class EpochOrder:
    """A seeded permutation per epoch with a resumable position."""

    def __init__(self, size: int, seed: int) -> None:
        self.size, self.seed, self.epoch, self.position = size, seed, 0, 0
        self.order = self._permutation()

    def _permutation(self) -> list[int]:
        import torch

        gen = torch.Generator().manual_seed(self.seed + self.epoch)
        return torch.randperm(self.size, generator=gen).tolist()

    def take(self, count: int) -> list[int]:
        out = []
        while len(out) < count:
            if self.position >= self.size:
                self.epoch += 1
                self.position = 0
                self.order = self._permutation()
            out.append(self.order[self.position])
            self.position += 1
        return out

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load(self, state: dict[str, int]) -> None:
        self.epoch, self.position = state["epoch"], state["position"]
        self.order = self._permutation()


def total_steps(cfg: Any, dataset_size: int) -> int:
    """``steps`` when set, else enough steps for ``epochs`` passes over the data."""
    if cfg.steps:
        return int(cfg.steps)
    return max(1, -(-dataset_size * int(cfg.epochs) // cfg.batch_size))


def train_sft(
    cfg: Any,
    *,
    console: Any = None,
    on_step: Callable[[int, Any, Any], bool] | None = None,
    shared_prefix: bool = False,
) -> Path:
    """Run SFT per ``cfg`` (a spreadrl.train.config.SFTConfig); return the final model folder.

    ``on_step(step, model, tokenizer)`` runs after every optimizer step, on the
    model in memory; returning True ends training there and that step's model
    is the final one. It lets a caller validate as it goes and stop at a target
    (the demo does) without reloading the model or restarting the run per
    check. It must answer alike on every rank. ``shared_prefix``: run the prefix a
    micro-batch's conversations share (the system prompt) once per micro-batch, see
    :func:`shared_prefix_nll`; single process only, ignored under FSDP.
    """
    import torch
    from rich.console import Console

    from spreadrl.train.distributed import rank_slice, shard_model
    from spreadrl.train.setup import DeferredInterrupt, Run, build_optimizer, build_scheduler
    from spreadrl.train.sft_data import load_sft_dataset

    console = console or Console()
    run = Run(cfg, console)
    info = run.info
    model, tokenizer = run.build_model()
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    data = load_sft_dataset(Path(cfg.data.path), tokenizer, cfg.max_length)
    if data.dropped_too_long:
        console.print(
            f"[yellow]dropped {data.dropped_too_long} conversations longer than "
            f"max_length={cfg.max_length} (never cut)[/]"
        )
    steps = total_steps(cfg, len(data.samples))
    shard_model(model, info)
    optimizer = build_optimizer(model, cfg.optim)
    scheduler = build_scheduler(optimizer, cfg.optim, steps)
    order = EpochOrder(len(data.samples), cfg.seed)
    state = run.resume(model, optimizer, scheduler)
    start = state["step"] if state else 0
    if state:
        order.load(state["extra"]["order"])
    ckpt_args = (model, tokenizer, optimizer, scheduler)
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    # what Ctrl-C saves: the last whole step and the data position right after it
    completed, order_after = start, order.state()
    interrupts = DeferredInterrupt()
    try:
        for step in range(start + 1, steps + 1):
            t0 = time.perf_counter()
            batch = rank_slice([data.samples[i] for i in order.take(cfg.batch_size)], info)
            optimizer.zero_grad(set_to_none=True)
            stats = sft_loss_step(
                model,
                batch,
                pad_id=pad_id,
                micro_batch_tokens=cfg.micro_batch_tokens,
                world_size=info.world_size,
                shared_prefix=shared_prefix,
            )
            norm = torch.nn.utils.clip_grad_norm_(params, cfg.optim.grad_clip)
            grad_norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
            interrupts.hold()  # the weight update, its metrics and checkpoint finish together
            optimizer.step()
            scheduler.step()
            elapsed = time.perf_counter() - t0
            metrics = {
                **stats,
                "grad_norm": grad_norm,
                "lr": scheduler.get_last_lr()[0],
                "epoch": order.epoch,
                "step_s": elapsed,
                "tokens_per_s": sum(len(s.ids) for s in batch) / max(elapsed, 1e-9),
            }
            if info.is_main:
                run.metrics.log(step, metrics)
            if info.is_main and (
                step == 1 or step % max(1, cfg.logging.every_steps) == 0 or step == steps
            ):
                console.print(
                    f"sft step {step:>5}/{steps}  loss {stats['loss']:.4f}  "
                    f"gnorm {grad_norm:.3f}  lr {metrics['lr']:.2e}  "
                    f"{metrics['tokens_per_s']:.0f} tok/s"
                )
            run.maybe_save(step, *ckpt_args, {"order": order.state()})
            completed, order_after = step, order.state()
            interrupts.release()
            if on_step is not None:
                stop = on_step(step, model, tokenizer)
                model.train()  # the hook may have switched to eval mode to sample
                if stop:
                    break
    except KeyboardInterrupt:
        run.save_interrupted(completed, *ckpt_args, {"order": order_after})
        run.metrics.close()
        raise
    finally:
        interrupts.release(raise_pending=False)
    return run.finish(model, tokenizer)
