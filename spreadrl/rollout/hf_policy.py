"""The transformers rollout backend: batched sampling on CPU or GPU.

Many episodes advance together: each call generates one turn for every active
episode, left-padding their contexts into one batch; finished episodes simply
stop being passed in. Log-probs are those of the sampling distribution
(logits / temperature), which is what the trainer recomputes, so the hf
backend needs no importance-sampling correction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spreadrl.rollout.types import PolicyTurn, SamplingParams


class HFPolicy:
    """Generate assistant turns with a transformers causal LM."""

    token_level = True

    def __init__(self, model: Any, tokenizer: Any, *, max_batch_size: int = 64) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.stop_ids = stop_token_ids(tokenizer)
        self.pad_id = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_ids[0]
        )

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device

    def act(self, contexts: Sequence[Sequence[int]], params: SamplingParams) -> list[PolicyTurn]:
        """One turn for each context (a full token history ending in the assistant header)."""
        turns: list[PolicyTurn] = []
        for start in range(0, len(contexts), self.max_batch_size):
            turns.extend(self._generate(contexts[start : start + self.max_batch_size], params))
        return turns

    def _generate(
        self, contexts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[PolicyTurn]:
        import torch

        if not contexts:
            return []
        width = max(len(c) for c in contexts)
        input_ids = torch.full((len(contexts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(contexts), width), dtype=torch.long)
        for row, ctx in enumerate(contexts):
            input_ids[row, width - len(ctx) :] = torch.tensor(list(ctx), dtype=torch.long)
            attention[row, width - len(ctx) :] = 1
        if params.seed is not None:
            torch.manual_seed(params.seed)
        sample = not params.greedy
        kwargs: dict[str, Any] = {
            "do_sample": sample,
            "max_new_tokens": params.max_new_tokens,
            "eos_token_id": self.stop_ids,
            "pad_token_id": self.pad_id,
            "return_dict_in_generate": True,
            "output_logits": True,
        }
        if sample:
            kwargs.update(
                temperature=params.temperature, top_p=params.top_p, top_k=params.top_k or None
            )
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        was_training = self.model.training
        self.model.eval()
        with torch.no_grad():
            out = self.model.generate(
                input_ids=input_ids.to(self.device),
                attention_mask=attention.to(self.device),
                **kwargs,
            )
        if was_training:
            self.model.train()
        new_tokens = out.sequences[:, width:].cpu()
        logits = torch.stack(out.logits, dim=1).float().cpu()  # [batch, steps, vocab]
        scale = params.temperature if sample else 1.0
        logprobs = torch.log_softmax(logits / scale, dim=-1)
        sampled_lp = logprobs.gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
        turns = []
        stop = set(self.stop_ids)
        for row in range(len(contexts)):
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


def stop_token_ids(tokenizer: Any) -> list[int]:
    """End-of-turn ids: the chat template's turn end (Qwen's ``<|im_end|>``), then the eos."""
    from spreadrl.rollout.chat import chat_format

    return list(chat_format(tokenizer).stop_ids)
