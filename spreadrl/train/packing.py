"""Packed micro-batches: every row's real tokens back to back in one row, no padding.

A collated micro-batch (:func:`spreadrl.train.batching.collate`) right-pads its
rows to the longest, and the forward computes over the padding too. Packed
(``model.packed_sequences``), the rows' real tokens run as one sequence whose
``position_ids`` restart at 0 at each row's start and no attention mask is
given: transformers then builds a block-diagonal causal mask from the position
resets (sdpa and eager; a varlen flash kernel, where installed, takes the
sequence boundaries instead and computes no masked block at all). Each token
sees exactly the tokens it saw in its own padded row, at the same positions,
so the log-probs are the padded path's (the tests compare them); the trained
positions come out in the same order, so the caller scatters them back into
the padded [B, T-1] layout unchanged. A batch with shared-prefix rows is not
packed (it has its own layout).
"""

from __future__ import annotations

import torch


def pack(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, loss_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids [1, N], position_ids [1, N], trained positions [1, N-1] as bool) of a right-padded
    batch (ids/attention [B, T], loss mask [B, T-1]); N is the count of real tokens."""
    ids, positions, trained = [], [], []
    for row in range(input_ids.shape[0]):
        n = int(attention_mask[row].sum())
        ids.append(input_ids[row, :n])
        positions.append(torch.arange(n, device=input_ids.device))
        mask = loss_mask[row, : max(n - 1, 0)] > 0
        # the row's last token would predict the next row's first: never trained
        trained.append(torch.cat([mask, mask.new_zeros(1 if n else 0)]))
    packed_trained = torch.cat(trained)[:-1] if trained else torch.zeros(0, dtype=torch.bool)
    return (
        torch.cat(ids).unsqueeze(0),
        torch.cat(positions).unsqueeze(0),
        packed_trained.unsqueeze(0),
    )
