"""The sampling distribution, defined once for the rollout and the trainer.

A token is drawn from the logits divided by the temperature, then cut to the
top-k, then to the top-p nucleus, renormalised over what is kept
(transformers' own warpers, in the order its ``generate`` and vLLM apply
them). The log-prob a rollout reports is the sampled token's log-prob under
this processed distribution (vLLM's ``processed_logprobs``), and the trainer
recomputes the same quantity (:mod:`spreadrl.train.logprobs`), so ratios and
truncated importance weights compare like with like on every backend.
"""

from __future__ import annotations

import torch
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper


def process_logits(
    scores: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """Float32 logits of the sampling distribution: / temperature, top-k, top-p (-inf outside).

    ``scores`` is [..., vocab]; temperature <= 0 (greedy) counts as 1.
    """
    shape = scores.shape
    scores = scores.float().reshape(-1, shape[-1])  # the warpers work on [rows, vocab]
    if temperature > 0 and temperature != 1.0:
        scores = scores / temperature
    if top_k and top_k > 0:
        scores = TopKLogitsWarper(top_k)(None, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(top_p)(None, scores)
    return scores.reshape(shape)


class SampledLogprobs:
    """A ``generate`` logits processor: applies the sampling distribution and records log-probs.

    It must be the last processor (``generate`` is then called with
    temperature 1, top-k 0, top-p 1 so it adds no warper of its own). Each
    step keeps the processed log-softmax of one step only ([batch, vocab]);
    at the next step, whose ``input_ids`` end with the token just sampled, it
    keeps that token's log-prob and drops the rest. So generation memory does
    not grow with steps x vocabulary.
    """

    def __init__(self, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> None:
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        self.previous: torch.Tensor | None = None  # [batch, vocab] log-probs of the last step
        self.values: list[torch.Tensor] = []  # [batch] log-prob of each sampled token, in order

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        if self.previous is not None:
            self.values.append(self.previous.gather(-1, input_ids[:, -1:]).squeeze(-1))
        scores = process_logits(scores, self.temperature, self.top_k, self.top_p)
        self.previous = torch.log_softmax(scores, dim=-1)
        return scores

    def logprobs(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """[batch, steps] log-probs of ``new_tokens`` ([batch, steps], the generated ids)."""
        steps = new_tokens.shape[1]
        values = self.values[:steps]  # generate may have run (and undone) extra steps
        if len(values) < steps and self.previous is not None:
            last = new_tokens[:, len(values) : len(values) + 1].to(self.previous.device)
            values.append(self.previous.gather(-1, last).squeeze(-1))
        if not values:
            return torch.zeros(new_tokens.shape, dtype=torch.float32)
        return torch.stack(values, dim=1).float().cpu()
