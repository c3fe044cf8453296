"""The output layer and the log-prob of the sampled token in one autograd function.

The default path (:func:`spreadrl.train.logprobs.selective_logprobs`) already
never holds the [tokens x vocabulary] logits whole: it runs the output layer a
chunk of tokens at a time, each chunk under ``torch.utils.checkpoint``, and
autograd records the chunk's half-dozen [chunk x vocabulary] operations (the
float copy, the temperature, the top-k/top-p cut, log-sum-exp, gather, entropy)
and walks them back. This one (``model.fused_logprob_head``) does the same
matrix multiplies (the head forward, its recompute in backward, the two
gradient products) and writes the backward by hand: the gradient of
``log p(target)`` over the kept tokens K of the sampling distribution is
``onehot(target) - p`` (p is 0 outside K, and K, chosen by top-k/top-p, is held
fixed as autograd holds it), and that of the entropy ``H`` is
``-p * (log p + H)``. So a chunk's backward holds two [chunk x vocabulary]
float32 tensors instead of autograd's saved set, and launches a few kernels
instead of autograd's chain. Same values within float rounding (the tests
compare them, top-k/top-p and entropy included).
"""

from __future__ import annotations

from typing import Any

import torch

from spreadrl.rollout.sampling import process_logits


def _scores(raw: torch.Tensor, temperature: float, top_k: int, top_p: float, targets: torch.Tensor):
    """(processed float32 scores with the target always kept, the raw scaled logits)."""
    raw = raw.float()
    if temperature != 1.0:
        raw = raw / temperature
    if not (top_k or top_p < 1.0):
        return raw
    scores = process_logits(raw, 1.0, top_k, top_p)
    index = targets.unsqueeze(-1)
    return scores.scatter(-1, index, raw.gather(-1, index))


def _matmul_dtype(saved: torch.dtype | None, tensor: torch.Tensor) -> torch.dtype:
    return saved if saved is not None else tensor.dtype


class FusedHeadLogprob(torch.autograd.Function):
    """``[n]`` (or ``[n, 2]`` with entropy) log-probs of ``targets`` under ``hidden @ weight.T``.

    ``forward`` and ``backward`` keep the signatures of ``torch.autograd.Function``'s
    (``apply``'s arguments arrive as ``*args``) and hand them to typed functions."""

    @staticmethod
    def forward(ctx: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        return _forward(ctx, *args, **kwargs)

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> tuple[torch.Tensor | None, ...]:
        (grad_out,) = grad_outputs
        return _backward(ctx, grad_out)


def _forward(
    ctx: Any,
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
    with_entropy: bool,
    chunk: int,
) -> torch.Tensor:
    """:meth:`FusedHeadLogprob.forward`: the log-probs, chunk by chunk."""
    device = hidden.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
    ctx.save_for_backward(hidden, weight, targets)
    ctx.args = (temperature, top_k, top_p, with_entropy, chunk, dtype)
    out = []
    for start in range(0, hidden.shape[0], chunk):
        h, t = hidden[start : start + chunk], targets[start : start + chunk]
        cd = _matmul_dtype(dtype, h)
        scores = _scores(h.to(cd) @ weight.to(cd).t(), temperature, top_k, top_p, t)
        logz = torch.logsumexp(scores, dim=-1)
        logp = scores.gather(-1, t.unsqueeze(-1)).squeeze(-1) - logz
        if with_entropy:
            probs = torch.softmax(scores, dim=-1)
            finite = scores.masked_fill(~torch.isfinite(scores), 0.0)
            logp = torch.stack((logp, logz - (probs * finite).sum(-1)), dim=-1)
        out.append(logp)
    if not out:
        return hidden.new_zeros((0, 2) if with_entropy else (0,), dtype=torch.float32)
    return torch.cat(out)


def _backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    """:meth:`FusedHeadLogprob.backward`: the hand-written gradients (module docstring)."""
    hidden, weight, targets = ctx.saved_tensors
    temperature, top_k, top_p, with_entropy, chunk, dtype = ctx.args
    grad_h = torch.empty_like(hidden)
    grad_w = torch.zeros_like(weight, dtype=torch.float32)
    for start in range(0, hidden.shape[0], chunk):
        h, t = hidden[start : start + chunk], targets[start : start + chunk]
        g = grad_out[start : start + chunk].float()
        cd = _matmul_dtype(dtype, h)
        hc, wc = h.to(cd), weight.to(cd)
        scores = _scores(hc @ wc.t(), temperature, top_k, top_p, t)
        logp_all = torch.log_softmax(scores, dim=-1)
        probs = logp_all.exp()  # 0 outside the kept set
        g_logp = g[:, 0] if with_entropy else g
        d = probs * -g_logp.unsqueeze(-1)
        d.scatter_add_(-1, t.unsqueeze(-1), g_logp.unsqueeze(-1))
        if with_entropy:
            entropy = -(probs * logp_all.masked_fill(probs == 0, 0.0)).sum(-1, keepdim=True)
            d -= g[:, 1:2] * probs * (logp_all.masked_fill(probs == 0, 0.0) + entropy)
        if temperature != 1.0:
            d = d / temperature
        d = d.to(cd)
        grad_h[start : start + chunk] = (d @ wc).to(hidden.dtype)
        grad_w += (d.t() @ hc).float()
    return grad_h, grad_w.to(weight.dtype), None, None, None, None, None, None


def fused_logprobs(
    weight: torch.Tensor,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float,
    top_k: int,
    top_p: float,
    with_entropy: bool,
    chunk_tokens: int,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logp [n], entropy [n] or None), float32: :class:`FusedHeadLogprob` over chunks."""
    out = FusedHeadLogprob.apply(
        hidden, weight, targets, temperature, top_k, top_p, with_entropy, chunk_tokens
    )
    if with_entropy:
        return out[:, 0], out[:, 1]
    return out, None
